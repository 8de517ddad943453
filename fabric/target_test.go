package fabric

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The test binary re-executes itself as a target process: it exports a
// region filled with pattern(offset), prints where it is, and serves reads
// until its stdin closes.

const (
	envTarget = "DDSTORE_FABRIC_TEST_TARGET" // "provider|domain|size|busy"
	targetMiB = 256
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(envTarget); spec != "" {
		os.Exit(runTarget(spec))
	}
	os.Exit(m.Run())
}

// patternWord is the 8 bytes at offset 8*w of every target region.
func patternWord(w uint64) uint64 {
	z := w + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func fillPattern(b []byte) {
	for w := 0; w+8 <= len(b); w += 8 {
		binary.LittleEndian.PutUint64(b[w:], patternWord(uint64(w/8)))
	}
}

// checkPattern reports the first byte of dst that differs from the region
// at offset off (off and len(dst) multiples of 8).
func checkPattern(dst []byte, off uint64) error {
	for i := 0; i+8 <= len(dst); i += 8 {
		want := patternWord((off + uint64(i)) / 8)
		if got := binary.LittleEndian.Uint64(dst[i:]); got != want {
			return fmt.Errorf("offset %d (+%d in row): got %#x want %#x", off+uint64(i), i, got, want)
		}
	}
	return nil
}

func runTarget(spec string) int {
	parts := strings.Split(spec, "|")
	if len(parts) != 4 && len(parts) != 5 {
		fmt.Fprintf(os.Stderr, "bad target spec %q\n", spec)
		return 2
	}
	size, _ := strconv.Atoi(parts[2])
	o := Options{Provider: parts[0], Domain: parts[1]}
	if len(parts) == 5 {
		o.Progress = parts[4]
	}
	f, err := Open(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "target:", err)
		return 1
	}
	mem, err := Alloc(size)
	if err != nil {
		fmt.Fprintln(os.Stderr, "target:", err)
		return 1
	}
	fillPattern(mem.Bytes())
	ex, err := f.Export(mem.Bytes())
	if err != nil {
		fmt.Fprintln(os.Stderr, "target:", err)
		return 1
	}
	var stop atomic.Bool
	if parts[3] == "busy" {
		// Compute without ever calling the package: only the progress
		// goroutine can serve reads.
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
	fmt.Printf("READY %x %d %d %d\n", f.Address(), ex.Key(), ex.Base(), size)
	io.Copy(io.Discard, os.Stdin)
	stop.Store(true)
	ex.Close()
	f.Close()
	mem.Free()
	return 0
}

type target struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  []byte
	key   uint64
	base  uint64
	size  int
}

func (tg *target) stop() {
	if tg.cmd.Process == nil {
		return
	}
	tg.stdin.Close()
	done := make(chan struct{})
	go func() { tg.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		tg.cmd.Process.Kill()
		<-done
		removeShmRegions(tg.cmd.Process.Pid)
	}
}

func (tg *target) kill() {
	tg.cmd.Process.Kill()
	tg.cmd.Wait()
	removeShmRegions(tg.cmd.Process.Pid)
}

// removeShmRegions removes what the shm provider of a killed process left:
// its regions are named /dev/shm/<pid>:<n>:<m>, 16 MiB each.
func removeShmRegions(pid int) {
	left, _ := filepath.Glob(fmt.Sprintf("/dev/shm/%d:*", pid))
	for _, f := range left {
		os.Remove(f)
	}
}

func startTarget(tb testing.TB, o Options, size int, busy bool) *target {
	tb.Helper()
	mode := "idle"
	if busy {
		mode = "busy"
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d|%s|%s", envTarget, o.Provider, o.Domain, size, mode, o.Progress))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tg := &target{cmd: cmd, stdin: stdin, size: size}
	tb.Cleanup(tg.stop)
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
		io.Copy(io.Discard, stdout)
	}()
	select {
	case s := <-line:
		var hexAddr string
		var sz int
		if _, err := fmt.Sscanf(s, "READY %s %d %d %d", &hexAddr, &tg.key, &tg.base, &sz); err != nil {
			tb.Fatalf("target said %q: %v", s, err)
		}
		fmt.Sscanf(hexAddr, "%x", &tg.addr)
	case <-time.After(20 * time.Second * raceScale):
		tg.kill()
		tb.Fatalf("target did not report within %v", 20*time.Second*raceScale)
	}
	return tg
}

type provCase struct {
	name string
	opts Options
}

var provCases = []provCase{
	{"tcp", Options{Provider: "tcp;ofi_rxm", Domain: "lo"}},
	{"shm", Options{Provider: "shm"}},
}

// requireFabricEnv set to 1 (the Makefile's test target sets it) turns the
// skips for a missing provider (tcp;ofi_rxm on lo, shm) into failures, so CI
// cannot pass without exercising the fabric.
const requireFabricEnv = "DDSTORE_REQUIRE_FABRIC"

// skipOrRequire skips the test, or fails it when requireFabricEnv=1.
func skipOrRequire(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if os.Getenv(requireFabricEnv) == "1" {
		tb.Fatalf(requireFabricEnv+"=1: "+format, args...)
	}
	tb.Skipf(format, args...)
}

// requireRootEnv set to 1 (make test) says the tests run as root where
// namespaces and mounts work: a test that needs them fails instead of
// skipping.
const requireRootEnv = "DDSTORE_REQUIRE_ROOT"

// skipOrRequireRoot skips the test, or fails it when requireRootEnv=1.
func skipOrRequireRoot(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if os.Getenv(requireRootEnv) == "1" {
		tb.Fatalf(requireRootEnv+"=1: "+format, args...)
	}
	tb.Skipf(format, args...)
}

func openOrSkip(tb testing.TB, o Options) *Fabric {
	tb.Helper()
	f, err := Open(o)
	if err != nil {
		if isNoProvider(err) {
			skipOrRequire(tb, "provider not here: %v", err)
		}
		tb.Fatalf("Open(%+v): %v", o, err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}
