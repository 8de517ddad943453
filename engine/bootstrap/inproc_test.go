package bootstrap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ddstore/ddstore/engine/auth"
	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/internal/testkit"
)

// clearLauncherEnv unsets every variable Connect's defaults read.
func clearLauncherEnv(t *testing.T) {
	for _, k := range []string{"PMI_FD", "MASTER_ADDR", "MASTER_PORT", "DDSTORE_BOOTSTRAP_DIR", "DDSTORE_JOB_TOKEN", "DDSTORE_BOOTSTRAP_ADDR", "PMI_JOBID",
		"SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID",
		"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
}

// connectAll connects world ranks in this process (one goroutine each).
func connectAll(t *testing.T, o Options, world int) []Exchanger {
	t.Helper()
	xs := make([]Exchanger, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			oo := o
			oo.Env = Env{Rank: r, World: world, Launcher: "test", Job: "inproc"}
			xs[r], errs[r] = Connect(oo)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return xs
}

// gatherChecked runs gatherAll and requires every rank to get every
// rank's blob, exactly.
func gatherChecked(t *testing.T, xs []Exchanger, tag string, timeout time.Duration, blob func(r int) []byte) {
	t.Helper()
	res, errs := gatherAll(xs, tag, timeout, blob)
	for r := range xs {
		if errs[r] != nil {
			t.Fatalf("%s: rank %d: %v", tag, r, errs[r])
		}
		if len(res[r]) != len(xs) {
			t.Fatalf("%s: rank %d got %d blobs, want %d", tag, r, len(res[r]), len(xs))
		}
		for p, b := range res[r] {
			if !bytes.Equal(b, blob(p)) {
				t.Fatalf("%s: rank %d got a wrong blob of rank %d (%d bytes)", tag, r, p, len(b))
			}
		}
	}
}

// gatherAll runs one AllGather on every exchanger concurrently, each with
// deadline timeout.
func gatherAll(xs []Exchanger, tag string, timeout time.Duration, blob func(r int) []byte) ([][][]byte, []error) {
	res := make([][][]byte, len(xs))
	errs := make([]error, len(xs))
	var wg sync.WaitGroup
	for r, x := range xs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[r], errs[r] = x.AllGather(tag, blob(r), timeout)
		}()
	}
	wg.Wait()
	return res, errs
}

// dialUntil dials addr until it answers or within has passed.
func dialUntil(addr string, within time.Duration) (net.Conn, error) {
	deadline := time.Now().Add(within)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// drain reads c until it fails (rank 0 closed it) or until within has
// passed, and returns what it read and why it stopped.
func drain(c net.Conn, within time.Duration) ([]byte, error) {
	c.SetReadDeadline(time.Now().Add(within))
	var got []byte
	buf := make([]byte, 512)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			return got, err
		}
	}
}

// Strangers at rank 0's rendezvous, each sending at least an auth hello's
// worth of bytes (38), so that the gate reads and refuses every one at
// once: an HTTP request, bytes announcing a 1 GiB frame, plain junk, and a
// well-formed hello without the secret. Then a client that knows the
// secret announces a 1 GiB rendezvous frame: refused at the handshake
// cap (64 KiB) without allocating. The gate counts exactly the strangers
// and that client; the job's ranks meet anyway and their collectives are
// intact.
func TestTCPStrayClients(t *testing.T) {
	clearLauncherEnv(t)
	addr := "127.0.0.1:" + freePort(t)
	secret := []byte("the-job-secret-0123456789")
	within := 10 * time.Second * testkit.RaceScale
	strangers := [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\nUser-Agent: stray/1.0\r\n\r\n"),
		append([]byte("\xff\xff\xff\x3f\x01"), bytes.Repeat([]byte{0}, auth.HelloLen)...),
		bytes.Repeat([]byte{0xa5}, 3*auth.HelloLen),
		auth.Hello{Version: auth.Version}.Encode(), // no secret
	}
	for i, b := range strangers {
		if len(b) < auth.HelloLen {
			t.Fatalf("stranger %d sends %d bytes, fewer than an auth hello (%d)", i, len(b), auth.HelloLen)
		}
	}
	type stray struct {
		got []byte
		err error
	}
	strays := make(chan stray, len(strangers)+1)
	go func() {
		for i, junk := range strangers {
			c, err := dialUntil(addr, within)
			if err != nil {
				strays <- stray{err: err}
				continue
			}
			c.Write(junk)
			got, err := drain(c, within)
			c.Close()
			if i == len(strangers)-1 && len(got) == auth.HelloLen {
				got = nil // a well-formed hello gets rank 0's hello, then the refusal
			}
			strays <- stray{got, err}
		}
		// A client with the secret, announcing a 1 GiB hello frame.
		c, err := dialUntil(addr, within)
		if err == nil {
			if err = auth.Handshake(c, secret, true, time.Now().Add(within)); err == nil {
				c.Write([]byte{0, 0, 0, 0x40, fHello})
				var got []byte
				got, err = drain(c, within)
				if len(got) > 0 {
					err = fmt.Errorf("rank 0 answered a 1 GiB hello with %q", got)
				}
			} else {
				err = fmt.Errorf("handshake with the secret: %w", err)
			}
			c.Close()
		}
		strays <- stray{err: err}
	}()
	xs := connectAll(t, Options{Method: "tcp", Addr: addr, Token: "t", Secret: secret, Timeout: within}, 3)
	defer func() {
		for _, x := range xs {
			x.Close()
		}
	}()
	for i := range len(strangers) + 1 {
		s := <-strays
		var ne net.Error
		switch {
		case s.err == nil:
			t.Errorf("stray %d: no error", i)
		case errors.As(s.err, &ne) && ne.Timeout():
			t.Errorf("stray %d: rank 0 did not close the connection within %v", i, within)
		case len(s.got) > 0:
			t.Errorf("stray %d got an answer from rank 0: %q", i, s.got)
		case i == len(strangers) && strings.Contains(s.err.Error(), "handshake with the secret"):
			t.Errorf("stray %d: %v", i, s.err)
		}
	}
	root := xs[0].(*tcpEx)
	// The gate counts a refusal just after closing the connection: wait
	// for the count, then require it exact.
	want := int64(len(strangers)) + 1
	for deadline := time.Now().Add(within); root.gate.Refused() < want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := root.gate.Refused(); got != want {
		t.Errorf("rank 0's gate refused %d connections, want the %d strangers and the 1 GiB hello", got, want-1)
	}
	if got := root.gate.Admitted(); got != int64(len(xs)-1)+1 {
		t.Errorf("rank 0's gate admitted %d, want the %d other ranks and the client with the secret", got, len(xs)-1)
	}
	root.mu.Lock()
	notes := strings.Join(root.notes, "\n")
	root.mu.Unlock()
	if !strings.Contains(notes, "bad handshake") || !strings.Contains(notes, fmt.Sprintf("frame of %d bytes (limit %d)", 1<<30, maxHandshake)) {
		t.Errorf("rank 0 did not refuse the 1 GiB hello at the handshake cap; notes:\n%s", notes)
	}
	blob := func(r int) []byte { return bytes.Repeat([]byte{byte(r + 1)}, 1000*r) }
	gatherChecked(t, xs, "after-strays", 30*time.Second, blob)
}

func TestTCPBrokenAfterFailure(t *testing.T) {
	clearLauncherEnv(t)
	xs := connectAll(t, Options{Method: "tcp", Addr: "127.0.0.1:" + freePort(t), Token: "t", Timeout: 5 * time.Second}, 2)
	defer xs[0].Close()
	xs[1].Close() // leaves: the next collective of rank 0 names it
	_, err := xs[0].AllGather("a", []byte("x"), time.Second)
	if !errors.Is(err, fault.ErrPeerDead) || len(fault.RanksOf(err)) != 1 || fault.RanksOf(err)[0] != 1 ||
		!strings.Contains(err.Error(), "rank 1 closed its exchanger") {
		t.Fatalf("err = %v", err)
	}
	err = xs[0].Barrier("b", time.Second)
	if !errors.Is(err, fault.ErrClosed) || !errors.Is(err, fault.ErrPeerDead) {
		t.Fatalf("after a failure: %v, want fault.ErrClosed wrapping fault.ErrPeerDead", err)
	}
	if _, err := xs[1].AllGather("c", nil, time.Second); !errors.Is(err, fault.ErrClosed) {
		t.Fatalf("closed exchanger: %v", err)
	}
}

func TestTCPRootGone(t *testing.T) {
	clearLauncherEnv(t)
	xs := connectAll(t, Options{Method: "tcp", Addr: "127.0.0.1:" + freePort(t), Token: "t", Timeout: 5 * time.Second}, 2)
	xs[0].Close()
	_, err := xs[1].AllGather("a", []byte("x"), time.Second)
	if !errors.Is(err, fault.ErrPeerDead) || fault.RanksOf(err)[0] != 0 {
		t.Fatalf("err = %v", err)
	}
}

func TestSingle(t *testing.T) {
	clearLauncherEnv(t)
	x, err := Connect(Options{Env: Env{Rank: 0, World: 1, Job: "one"}})
	if err != nil {
		t.Fatal(err)
	}
	mine := []byte("abc")
	all, err := x.AllGather("t", mine, 0)
	if err != nil || len(all) != 1 || string(all[0]) != "abc" || &all[0][0] == &mine[0] {
		t.Fatalf("%q %v", all, err)
	}
	x.Close()
	if err := x.Barrier("b", 0); !errors.Is(err, fault.ErrClosed) {
		t.Fatal(err)
	}
}

func TestConnectNoMethod(t *testing.T) {
	clearLauncherEnv(t)
	_, err := Connect(Options{Env: Env{Rank: 0, World: 2, Launcher: "slurm", Job: "j"}})
	if !errors.Is(err, fault.ErrEnv) || !strings.Contains(err.Error(), "MASTER_ADDR") || !strings.Contains(err.Error(), "DDSTORE_BOOTSTRAP_DIR") {
		t.Fatalf("err = %v", err)
	}
	t.Setenv("MASTER_ADDR", "127.0.0.1")
	_, err = Connect(Options{Env: Env{Rank: 0, World: 2, Job: "j"}})
	if !errors.Is(err, fault.ErrEnv) || !strings.Contains(err.Error(), "MASTER_PORT") {
		t.Fatalf("err = %v", err)
	}
	_, err = Connect(Options{Method: "pmi", Env: Env{Rank: 0, World: 2, Job: "j"}})
	if !errors.Is(err, fault.ErrEnv) || !strings.Contains(err.Error(), "PMI_FD") {
		t.Fatalf("err = %v", err)
	}
}

func TestTCPPortInUse(t *testing.T) {
	clearLauncherEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("DDSTORE_BOOTSTRAP_ADDR", l.Addr().String())
	_, err = Connect(Options{Env: Env{Rank: 0, World: 2, Job: "j"}, Timeout: time.Second})
	if !errors.Is(err, fault.ErrEnv) || !strings.Contains(err.Error(), "cannot listen on "+l.Addr().String()) {
		t.Fatalf("err = %v", err)
	}
}

func TestFrameLimit(t *testing.T) {
	_, _, err := readFrameMax(strings.NewReader("\x01\x00\x01\x00rest"), maxHandshake)
	if !errors.Is(err, fault.ErrTooLarge) {
		t.Fatalf("err = %v", err)
	}
	typ, d, err := readFrame(bytes.NewReader(hello{rank: 3, world: 4, token: "tok", job: "j"}.frame()))
	if err != nil || typ != fHello {
		t.Fatal(typ, err)
	}
	h, err := parseHello(d)
	if err != nil || h.rank != 3 || h.world != 4 || h.token != "tok" || h.job != "j" {
		t.Fatalf("%+v %v", h, err)
	}
	// Truncated bodies are errors, never panics.
	f := hello{rank: 1, world: 2, token: "x"}.frame()
	for n := 5; n < len(f); n++ {
		if _, err := parseHello(&dec{b: f[5:n]}); err == nil {
			t.Fatalf("truncated at %d: no error", n)
		}
	}
}

func TestDirRecordCorrupt(t *testing.T) {
	x := &dirEx{collective: collective{rank: 1, world: 2, seq: 4}, token: "t"}
	b := x.encode("tag", []byte("blob"))
	rec, err := decodeDirFile(b)
	if err != nil || rec.seq != 4 || rec.tag != "tag" || string(rec.blob) != "blob" || rec.rank != 1 || rec.world != 2 {
		t.Fatalf("%+v %v", rec, err)
	}
	// bytes between the blob and a checksum that covers them
	long := binary.LittleEndian.AppendUint32(append(b[:len(b)-4:len(b)-4], "xx"...), 0)
	binary.LittleEndian.PutUint32(long[len(long)-4:], crc32.ChecksumIEEE(long[:len(long)-4]))
	if _, err := decodeDirFile(long); !errors.Is(err, errTrailing) {
		t.Fatalf("a record with 2 bytes after its fields: %v, want %v", err, errTrailing)
	}
	b[len(b)-6] ^= 1
	if _, err := decodeDirFile(b); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("corrupt file: %v, want a checksum mismatch", err)
	}
}

// A rank that is connected but never calls the collective: rank 0 names it
// at its deadline, the others hear it from rank 0.
func TestTCPAllGatherTimeout(t *testing.T) {
	clearLauncherEnv(t)
	xs := connectAll(t, Options{Method: "tcp", Addr: "127.0.0.1:" + freePort(t), Token: "t", Timeout: 5 * time.Second}, 3)
	defer func() {
		for _, x := range xs {
			x.Close()
		}
	}()
	start := time.Now()
	_, errs := gatherAll(xs[:2], "step", 3*time.Second, func(r int) []byte { return []byte{byte(r)} }) // rank 2 absent
	if d := time.Since(start); d < 3*time.Second || d > 30*time.Second {
		t.Errorf("took %v with a 3s timeout", d)
	}
	for r, want := range []string{"rank 2 did not arrive within 3s", "rank 0 reports: rank 2 did not arrive within 3s"} {
		if err := errs[r]; !errors.Is(err, fault.ErrTimeout) || fmt.Sprint(fault.RanksOf(err)) != "[2]" || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: %v, want fault.ErrTimeout naming rank 2 (%q)", r, err, want)
		}
	}
	// The late rank finds the verdict waiting.
	if _, err := xs[2].AllGather("step", nil, time.Second); !errors.Is(err, fault.ErrTimeout) || fmt.Sprint(fault.RanksOf(err)) != "[2]" {
		t.Errorf("late rank 2: %v", err)
	}
}

func TestDirBadJob(t *testing.T) {
	clearLauncherEnv(t)
	dir := t.TempDir()
	for _, job := range []string{"", "..", "a/b"} {
		_, err := Connect(Options{Method: "dir", Dir: dir, Env: Env{Rank: 0, World: 2, Job: job}, Timeout: time.Second})
		if !errors.Is(err, fault.ErrEnv) || !strings.Contains(err.Error(), "DDSTORE_JOB") {
			t.Errorf("job %q: %v", job, err)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}

// TestTCPRendezvous1024 runs the real tcp hub with 1024 ranks (goroutines
// of this process, one TCP connection each to rank 0): connect, an
// all-gather and a barrier. The root handles a constant number of frames
// per rank: in, one hello and one frame per collective; out, accept,
// ready and one result per collective.
func TestTCPRendezvous1024(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	clearLauncherEnv(t)
	const world = 1024
	start := time.Now()
	xs := connectAll(t, Options{Method: "tcp", Addr: "127.0.0.1:" + freePort(t), Token: "sim", Timeout: 2 * time.Minute}, world)
	connected := time.Since(start)
	gatherChecked(t, xs, "addr", 30*time.Second, func(r int) []byte { return []byte(fmt.Sprint("rank-", r)) })
	var wg sync.WaitGroup
	for _, x := range xs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := x.Barrier("end", 2*time.Minute); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	total := time.Since(start)
	root := xs[0].(*tcpEx)
	in, out := root.rootIn.Load(), root.rootOut.Load()
	const collectives = 2
	t.Logf("1024 ranks: connect %v, connect+allgather+barrier %v; root frames in %d (%.2f per rank), out %d (%.2f per rank)",
		connected.Round(time.Millisecond), total.Round(time.Millisecond), in, float64(in)/(world-1), out, float64(out)/(world-1))
	if in != (world-1)*(1+collectives) || out != (world-1)*(2+collectives) {
		t.Errorf("root frames in %d, out %d; want %d and %d (O(1) per rank)", in, out, (world-1)*(1+collectives), (world-1)*(2+collectives))
	}
	if total > 90*time.Second {
		t.Errorf("1024-rank rendezvous took %v", total)
	}
	for _, x := range xs {
		x.Close()
	}
}
