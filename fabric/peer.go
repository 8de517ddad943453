package fabric

// The target side of a two-process read measurement, shared by the
// package's tests and benchmarks and by engine/doctor: a process exports a
// region filled with PatternWord, prints where it is on one line, and
// serves reads until its input closes. StartTarget starts one and reads
// that line; Stop ends it.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"time"
)

// PatternWord is the 8 bytes at offset 8*w of every target region.
func PatternWord(w uint64) uint64 {
	z := w + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// saltedWord is word w of a region filled with salt (the package's tests
// salt each target with its rank, so that a read served by another target
// fails its check): PatternWord of w with salt in the bits above any word
// index (regions below 2^51 bytes), so no two (w, salt) pairs share a
// word. Salt 0 is PatternWord itself.
func saltedWord(w, salt uint64) uint64 { return PatternWord(w ^ salt<<48) }

// FillPattern fills b as a target region (PatternWord per 8 bytes).
func FillPattern(b []byte) { fillSalted(b, 0) }

func fillSalted(b []byte, salt uint64) {
	for w := 0; w+8 <= len(b); w += 8 {
		binary.LittleEndian.PutUint64(b[w:], saltedWord(uint64(w/8), salt))
	}
}

// CheckPattern reports the first byte of dst that differs from a target
// region at offset off (a multiple of 8), a last partial word included.
func CheckPattern(dst []byte, off uint64) error { return checkSalted(dst, off, 0) }

func checkSalted(dst []byte, off, salt uint64) error {
	var w [8]byte
	for i := 0; i < len(dst); i += 8 {
		binary.LittleEndian.PutUint64(w[:], saltedWord((off+uint64(i))/8, salt))
		n := min(8, len(dst)-i)
		if !bytes.Equal(dst[i:i+n], w[:n]) {
			return fmt.Errorf("offset %d (+%d in row): got %x want %x", off+uint64(i), i, dst[i:i+n], w[:n])
		}
	}
	return nil
}

// TargetInfo is what a target says on its READY line: where to read.
type TargetInfo struct {
	Addr      []byte // fabric address (Reader.AddPeer)
	Key, Base uint64 // ReadOp.Key; ReadOp.Addr of offset 0
	Size      int
}

// ParseTargetReady reads a target's READY line.
func ParseTargetReady(line string) (TargetInfo, error) {
	var t TargetInfo
	var hexAddr string
	if _, err := fmt.Sscanf(line, "READY %s %d %d %d", &hexAddr, &t.Key, &t.Base, &t.Size); err != nil {
		return t, fmt.Errorf("target said %q: %v", line, err)
	}
	if _, err := fmt.Sscanf(hexAddr, "%x", &t.Addr); err != nil {
		return t, fmt.Errorf("target address %q: %v", hexAddr, err)
	}
	return t, nil
}

// TargetProcess is a started process whose body is ServeTarget, and what
// its READY line said.
type TargetProcess struct {
	TargetInfo
	Cmd   *exec.Cmd
	stdin io.WriteCloser
}

// StartTarget starts cmd (a process that runs ServeTarget; its stdin and
// stdout must be unset) and waits for its READY line until ctx is done.
// On an error the process is stopped; otherwise Stop ends it.
func StartTarget(ctx context.Context, cmd *exec.Cmd) (*TargetProcess, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start target %s: %w", cmd.Path, err)
	}
	tg := &TargetProcess{Cmd: cmd, stdin: stdin}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
		io.Copy(io.Discard, stdout) // a full pipe would block the target
	}()
	select {
	case s := <-line:
		if s == "" {
			tg.Stop()
			return nil, fmt.Errorf("target process exited before it was ready (%s)", cmd.ProcessState)
		}
		if tg.TargetInfo, err = ParseTargetReady(s); err != nil {
			tg.Stop()
			return nil, err
		}
		return tg, nil
	case <-ctx.Done():
		tg.Kill()
		return nil, fmt.Errorf("target process not ready: %w", context.Cause(ctx))
	}
}

// Stop closes the target's input and waits for it to exit, killing it
// after 5s (see Kill).
func (tg *TargetProcess) Stop() {
	tg.stdin.Close()
	done := make(chan struct{})
	go func() { tg.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		tg.Cmd.Process.Kill()
		<-done
		removeShmRegions(tg.Cmd.Process.Pid)
	}
}

// Kill kills the target now and waits for it.
func (tg *TargetProcess) Kill() {
	tg.Cmd.Process.Kill()
	tg.Cmd.Wait()
	removeShmRegions(tg.Cmd.Process.Pid)
}

// removeShmRegions removes what the shm provider of a killed process left:
// its regions are named /dev/shm/<pid>:<n>:<m>, 16 MiB each.
func removeShmRegions(pid int) {
	left, _ := filepath.Glob(fmt.Sprintf("/dev/shm/%d:*", pid))
	for _, f := range left {
		os.Remove(f)
	}
}

// ServeTarget is a target process's body: it opens o, exports size bytes
// filled with the pattern, writes its READY line to out and serves reads
// until in reaches EOF. With busy, two goroutines compute meanwhile
// without calling the package (only the progress goroutine serves).
func ServeTarget(o Options, size int, busy bool, in io.Reader, out io.Writer) error {
	return serveTarget(o, size, 0, busy, in, out)
}

// serveTarget is ServeTarget with the region filled with salt (saltedWord).
func serveTarget(o Options, size int, salt uint64, busy bool, in io.Reader, out io.Writer) error {
	f, err := Open(o)
	if err != nil {
		return err
	}
	defer f.Close()
	mem, err := Alloc(size)
	if err != nil {
		return err
	}
	defer mem.Free()
	fillSalted(mem.Bytes(), salt)
	ex, err := f.Export(mem.Bytes())
	if err != nil {
		return err
	}
	defer ex.Close()
	var stop atomic.Bool
	if busy {
		for i := 0; i < 2; i++ {
			go func() {
				x := uint64(1)
				for !stop.Load() {
					for j := 0; j < 1000; j++ {
						x = x*6364136223846793005 + 1442695040888963407
					}
				}
				_ = x
			}()
		}
	}
	if _, err := fmt.Fprintf(out, "READY %x %d %d %d\n", f.Address(), ex.Key(), ex.Base(), size); err != nil {
		return err
	}
	io.Copy(io.Discard, in)
	stop.Store(true)
	return nil
}
