package telemetry

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// The tests below re-execute the test binary as a helper process selected
// by an environment variable; the helper "tests" skip otherwise.
const (
	envWatch = "DDSTORE_TEL_TEST_WATCH" // path of the segment to watch
	envHold  = "DDSTORE_TEL_TEST_HOLD"  // dir in which to create and hold a segment
)

var watchRowBytes = [2]int64{16, 4}

// watchReaders is MaxReaders of the watched segment: stripes 0..2 are
// owned (one writer each), stripe 3 is the shared last stripe.
const watchReaders = 4

type watchResult struct {
	Vars      [][]Counters
	BadReader int64
	Accepted  uint64
	Dropped   uint64
	Torn      uint64
	Head      uint64
	Snapshots int
	Partial   int // snapshots taken while calls were still being recorded
}

func helperCmd(t *testing.T, run, env string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, stdin, bufio.NewReader(stdout)
}

// readLine reads one line from a helper with a deadline.
func readLine(t *testing.T, r *bufio.Reader, timeout time.Duration) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		s, _ := r.ReadString('\n')
		ch <- s
	}()
	select {
	case s := <-ch:
		return s
	case <-time.After(timeout):
		t.Fatalf("helper said nothing for %v", timeout)
		return ""
	}
}

// TestConcurrentRecordWithWatcherProcess: goroutines record known work
// while another process maps the segment read-only, snapshots it over and
// over and reads the ring. Each owned reader id has exactly one writer
// goroutine (the single-writer rule of Record: variable 0 takes the even
// ids, variable 1 the odd), all at once; the
// shared last stripe has two writers per variable, one with its own id
// and one with an id >= MaxReaders folded into it. Final totals must
// match exactly; no accepted ring record may be torn; every ring position
// is either read or counted as dropped.
func TestConcurrentRecordWithWatcherProcess(t *testing.T) {
	const perWorker = 100000
	type job struct{ v, reader, stripe int32 }
	var jobs []job
	for v := range int32(2) {
		for r := range int32(watchReaders - 1) {
			if r%2 == v { // owned: one goroutine per reader id (its stripes and peer lane)
				jobs = append(jobs, job{v, r, r})
			}
		}
		last := int32(watchReaders - 1)
		jobs = append(jobs, job{v, last, last}, job{v, watchReaders + 5*v, last}) // shared
	}
	w := newTestWriter(t, WriterOptions{Job: "watch", MaxVars: 2, MaxReaders: watchReaders, RingSize: 64})
	for v, rb := range watchRowBytes {
		if id, err := w.AddVar(fmt.Sprintf("v%d", v), "bytes", rb, 1<<20, 1<<18); err != nil || id != v {
			t.Fatalf("AddVar: %d %v", id, err)
		}
	}
	cmd, stdin, stdout := helperCmd(t, "TestHelperWatcher", envWatch+"="+w.Path())
	if line := readLine(t, stdout, 30*time.Second); line != "ready\n" {
		t.Fatalf("watcher: %q", line)
	}

	var want [2][watchReaders]Counters
	<-recordAtOnce(w, len(jobs), perWorker, 64, func(c *Call, g, i int) {
		j := jobs[g]
		patternCall(c, j.v, j.reader, 1+int64(i*7+g)%13, watchRowBytes[j.v])
	}, func(g int, sum Counters) {
		j := jobs[g]
		want[j.v][j.stripe] = want[j.v][j.stripe].Add(sum)
	})
	stdin.Close()
	line := readLine(t, stdout, 60*time.Second)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watcher failed: %v (%s)", err, line)
	}
	var res watchResult
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		t.Fatalf("watcher output %q: %v", line, err)
	}
	t.Logf("watcher: %d snapshots (%d during writes), ring: %d read, %d dropped (%d torn), head %d",
		res.Snapshots, res.Partial, res.Accepted, res.Dropped, res.Torn, res.Head)
	for v := range 2 {
		for r := range watchReaders {
			if got := res.Vars[v][r]; got != want[v][r] {
				t.Errorf("var %d reader %d: watcher saw\n %+v\nwant\n %+v", v, r, got, want[v][r])
			}
		}
	}
	if total := uint64(len(jobs) * perWorker); res.Head != total || res.Accepted+res.Dropped != res.Head {
		t.Errorf("ring: head %d, read %d + dropped %d; want head %d = read + dropped", res.Head, res.Accepted, res.Dropped, total)
	}
	if res.BadReader != 2*perWorker {
		t.Errorf("bad reader calls %d, want %d (the folded writers)", res.BadReader, 2*perWorker)
	}
	if res.Accepted == 0 || res.Snapshots < 2 {
		t.Errorf("watcher read nothing: %+v", res)
	}
}

// TestHelperWatcher is the watcher process of the test above.
func TestHelperWatcher(t *testing.T) {
	path := os.Getenv(envWatch)
	if path == "" {
		t.Skip("helper process only")
	}
	fail := func(format string, a ...any) {
		fmt.Printf("FAIL "+format+"\n", a...)
		os.Exit(3)
	}
	s, err := Open(path)
	if err != nil {
		fail("open: %v", err)
	}
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	fmt.Println("ready")

	var res watchResult
	var prev *Snapshot
	buf := make([]Record, 256)
	check := func(snap *Snapshot) {
		if len(snap.Vars) != 2 {
			fail("snapshot has %d vars", len(snap.Vars))
		}
		for v, vs := range snap.Vars {
			rb := watchRowBytes[v]
			for r, c := range vs.Readers {
				// Calls is loaded first and bumped last: every counted call is
				// fully in the other fields (rows >= 1, phases = rows*(p+1)*100).
				if c.Rows < c.Calls || c.Bytes < c.Calls*rb || int64(c.CallHist.Count()) < c.Calls ||
					int64(c.RowHist.Count()) < c.Calls || c.LocalRows+c.RemoteRows < c.Calls {
					fail("var %d reader %d: fields behind calls: %+v", v, r, c)
				}
				for p := range NumPhases {
					if c.PhaseNs[p] < c.Calls*int64(p+1)*100 {
						fail("var %d reader %d phase %d behind calls", v, r, p)
					}
				}
				if prev != nil && r < len(prev.Vars[v].Readers) {
					d := c.Sub(prev.Vars[v].Readers[r])
					if d.Calls < 0 || d.Rows < 0 || d.Bytes < 0 || d.Errors < 0 || d.PhaseNs[PhaseOther] < 0 {
						fail("var %d reader %d went backwards: %+v", v, r, d)
					}
				}
			}
		}
	}
	var cursor RingCursor
	drain := func() {
		for {
			before := cursor
			n, dropped, err := s.ReadRings(&cursor, buf)
			if err != nil {
				fail("ReadRings: %v", err)
			}
			for i := range buf[:n] {
				rec := &buf[i]
				if rec.Var < 0 || rec.Var > 1 || rec.Reader < 0 || rec.Reader >= watchReaders || rec.Ring < 0 || rec.Ring >= s.Rings() {
					fail("record var/reader/ring: %+v", rec)
				}
				// (positions of one ring need not be in time order: shared
				// ring writers claim before they read the clock)
				if k := rec.Ring; rec.Seq < before.Pos[k] || rec.Seq >= cursor.Pos[k] {
					fail("record seq %d of ring %d outside the read (cursor %d..%d)", rec.Seq, k, before.Pos[k], cursor.Pos[k])
				}
				if i > 0 && rec.TimeNs < buf[i-1].TimeNs {
					fail("records not in time order: %d after %d", rec.TimeNs, buf[i-1].TimeNs)
				}
				if msg := checkPatternRecord(rec, watchRowBytes[rec.Var]); msg != "" {
					fail("%s", msg)
				}
			}
			res.Accepted += uint64(n)
			res.Dropped += dropped
			if moved := ringSum(&cursor) - ringSum(&before); moved != uint64(n)+dropped {
				fail("ReadRings moved the cursor by %d with %d read, %d dropped", moved, n, dropped)
			}
			if n < len(buf) {
				return
			}
		}
	}
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		snap, err := s.Snapshot()
		if err != nil {
			fail("snapshot: %v", err)
		}
		check(snap)
		res.Snapshots++
		if !finished {
			if tot := snap.Total().Calls; tot > 0 {
				res.Partial++
			}
		}
		prev = snap
		drain()
		time.Sleep(200 * time.Microsecond)
	}
	// Writers are done: drain to the head.
	deadline := time.Now().Add(10 * time.Second)
	var heads RingCursor
	if err := s.TailRings(&heads, 0); err != nil {
		fail("TailRings: %v", err)
	}
	for ringSum(&cursor) < ringSum(&heads) {
		if time.Now().After(deadline) {
			fail("rings stuck at %v, heads %v", cursor.Pos[:s.Rings()], heads.Pos[:s.Rings()])
		}
		drain()
	}
	res.Head = ringSum(&heads)
	res.Torn = s.Torn()
	res.BadReader = prev.BadReaderCalls
	for _, vs := range prev.Vars {
		rs := make([]Counters, watchReaders)
		copy(rs, vs.Readers)
		res.Vars = append(res.Vars, rs)
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	os.Exit(0)
}

// TestDeadWriterProcess: a segment whose writer was SIGKILLed is reported
// "exited" (even while the process is an unreaped zombie), and Create over
// it replaces it; while the writer lives, Create is refused.
func TestDeadWriterProcess(t *testing.T) {
	dir := t.TempDir()
	cmd, _, stdout := helperCmd(t, "TestHelperHolder", envHold+"="+dir)
	if line := readLine(t, stdout, 30*time.Second); line != "ready\n" {
		t.Fatalf("holder: %q", line)
	}
	infos, err := Discover(dir)
	if err != nil || len(infos) != 1 {
		t.Fatalf("Discover: %+v %v", infos, err)
	}
	in := infos[0]
	if in.State != StateLive || !in.Alive || in.Pid != cmd.Process.Pid || in.Job != "dead" || in.Rank != 3 || in.World != 4 {
		t.Fatalf("live holder: %+v", in)
	}
	if _, err := Create(WriterOptions{Dir: dir, Job: "dead", Rank: 3, World: 4}); !errors.Is(err, ErrInUse) {
		t.Fatalf("Create over a live writer: %v", err)
	}
	s := openTest(t, in.Path)
	if pidfdWorks() && s.pidfd < 0 {
		t.Fatal("pidfds work here, but the open segment does not watch its writer through one")
	}
	var check WriterCheck
	check.Check([]*Segment{s})
	if info, _ := s.Info(); info.State != StateLive {
		t.Fatalf("live holder through its pidfd: %+v", info)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Before Wait the child is a zombie: still "exited".
	deadline := time.Now().Add(10 * time.Second)
	for {
		infos, _ = Discover(dir)
		if len(infos) == 1 && infos[0].State == StateExited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("killed writer not reported exited: %+v", infos)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The open segment sees the zombie exited too, through the one poll
	// of WriterCheck (Info must not need a check of its own).
	for {
		check.Check([]*Segment{s})
		s.mu.Lock()
		exited := s.exited
		s.mu.Unlock()
		if exited || s.pidfd < 0 && !pidfdWorks() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("open segment: WriterCheck did not see the killed writer exit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if info, _ := s.Info(); info.State != StateExited || info.Alive {
		t.Fatalf("open segment of a killed writer: %+v", info)
	}
	cmd.Wait()
	infos, _ = Discover(dir)
	if len(infos) != 1 || infos[0].State != StateExited || infos[0].Alive {
		t.Fatalf("after reap: %+v", infos)
	}
	snap, err := s.Snapshot()
	if err != nil || snap.State != StateExited || snap.Total().Calls != 5 || snap.Total().Rows != 15 {
		t.Fatalf("dead writer's snapshot: %+v %v", snap, err)
	}
	w, err := Create(WriterOptions{Dir: dir, Job: "dead", Rank: 3, World: 4, MaxVars: 1, MaxReaders: 1, RingSize: 1})
	if err != nil {
		t.Fatalf("Create over a dead writer's segment: %v", err)
	}
	defer w.Close()
	infos, _ = Discover(dir)
	if len(infos) != 1 || infos[0].State != StateLive || infos[0].Pid != os.Getpid() {
		t.Fatalf("replaced segment: %+v", infos)
	}
	s2 := openTest(t, w.Path())
	if snap, _ := s2.Snapshot(); len(snap.Vars) != 0 || snap.MaxVars != 1 {
		t.Fatalf("replacement is not fresh: %+v", snap)
	}
}

// TestHelperHolder creates a segment, records 5 calls, and waits to be killed.
func TestHelperHolder(t *testing.T) {
	dir := os.Getenv(envHold)
	if dir == "" {
		t.Skip("helper process only")
	}
	w, err := Create(WriterOptions{Dir: dir, Job: "dead", Rank: 3, World: 4, MaxVars: 2, MaxReaders: 2, RingSize: 8})
	if err != nil {
		fmt.Println("FAIL", err)
		os.Exit(3)
	}
	id, _ := w.AddVar("x", "int32", 4, 100, 25)
	var c Call
	for range 5 {
		patternCall(&c, int32(id), 0, 3, 4)
		w.Record(&c)
	}
	fmt.Println("ready")
	time.Sleep(time.Minute)
	os.Exit(4)
}
