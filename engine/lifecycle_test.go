package engine

// Lifecycle edge cases on a single in-process rank: overflowing sizes and
// offsets, a shard that does not fit its tmpfs, Free and Close while calls
// are in flight, and the peer watcher's fallback when poll fails.

import (
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ddstore/ddstore/engine/bootstrap"
	"github.com/ddstore/ddstore/engine/placement"
	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/telemetry"

	"golang.org/x/sys/unix"
)

// openLifecycleStore opens a one-rank store; edit adjusts the options.
func openLifecycleStore(t *testing.T, edit func(*Options)) (*Store, string) {
	t.Helper()
	return openSingleJob(t, "life", edit)
}

// lifeAddRows adds variable name of n pattern rows of rowBytes (Uint8).
func lifeAddRows(t *testing.T, s *Store, name string, n, rowBytes int64) uint64 {
	t.Helper()
	salt := uint64(len(name))*0x9e3779b97f4a7c15 + 7
	local := make([]byte, n*rowBytes)
	for i := int64(0); i < n; i++ {
		fillRow(local[i*rowBytes:(i+1)*rowBytes], salt, i)
	}
	if err := s.Add(name, Uint8, int(rowBytes), local); err != nil {
		t.Fatal(err)
	}
	return salt
}

func lifeSeq(lo, hi int64) []int64 {
	idx := make([]int64, 0, hi-lo)
	for g := lo; g < hi; g++ {
		idx = append(idx, g)
	}
	return idx
}

func TestLifecycleUpdateOffsets(t *testing.T) {
	s, job := openLifecycleStore(t, nil)
	defer checkNoShardFiles(t, job)
	defer s.Close()
	const rb = 16
	if err := s.Init("u", Uint8, rb, 10); err != nil {
		t.Fatal(err)
	}
	row := make([]byte, rb)
	two := make([]byte, 2*rb)
	for _, c := range []struct {
		rows []byte
		off  int64
	}{
		{row, math.MaxInt64 - 1}, {row, math.MaxInt64}, {two, math.MaxInt64 - 1},
		{row, -1}, {row, math.MinInt64}, {two, 9}, {row, 10},
	} {
		err := s.Update("u", c.rows, c.off)
		if !errors.Is(err, ErrIndex) || !strings.Contains(err.Error(), `"u"`) {
			t.Errorf("Update of %d rows at %d: %v, want ErrIndex naming \"u\"", len(c.rows)/rb, c.off, err)
		}
	}
	// The last row and an empty update at the end are in range.
	salt := uint64(99)
	fillRow(row, salt, 9)
	if err := s.Update("u", row, 9); err != nil {
		t.Fatal(err)
	}
	if err := s.Update("u", nil, 10); err != nil {
		t.Errorf("empty Update at the end: %v", err)
	}
	got := make([]byte, rb)
	if err := s.Get("u", 9, 1, got); err != nil {
		t.Fatal(err)
	}
	if err := checkRows(got, rb, salt, []int64{9}); err != nil {
		t.Error(err)
	}
}

func TestLifecycleInitOverflow(t *testing.T) {
	s, job := openLifecycleStore(t, nil)
	defer checkNoShardFiles(t, job)
	defer s.Close()
	for _, n := range []int64{math.MaxInt64/8 + 1, math.MaxInt64} {
		err := s.Init("big", Int64, 1, n)
		if !errors.Is(err, ErrIndex) || !strings.Contains(err.Error(), `"big"`) {
			t.Errorf("Init of %d int64 rows: %v, want ErrIndex naming \"big\"", n, err)
		}
	}
	if err := s.Init("wide", Float64, math.MaxInt64/4, 1); !errors.Is(err, ErrDType) {
		t.Errorf("Init of %d float64 per row: %v, want ErrDType", math.MaxInt64/4, err)
	}
	// The store still works, and the name is free.
	salt := lifeAddRows(t, s, "big", 5, 8)
	got := make([]byte, 5*8)
	if err := s.Get("big", 0, 5, got); err != nil {
		t.Fatal(err)
	}
	if err := checkRows(got, 8, salt, lifeSeq(0, 5)); err != nil {
		t.Error(err)
	}
}

// TestLifecycleShardNoSpace fills a 1 MiB tmpfs: the shard that does not
// fit must fail its Init with an error naming the directory and variable
// (not SIGBUS the process at the first write).
func TestLifecycleShardNoSpace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shm")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		skipOrRequire(t, "DDSTORE_REQUIRE_ROOT", "cannot mount a 1 MiB tmpfs on %s (needs root/CAP_SYS_ADMIN): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	s, _ := openLifecycleStore(t, func(o *Options) { o.ShardDir = dir })
	defer s.Close()
	const rb = 4096
	err := s.Init("huge", Uint8, rb, 1024) // 4 MiB
	if err == nil {
		t.Fatal("Init of 4 MiB in a 1 MiB tmpfs succeeded")
	}
	for _, want := range []string{`"huge"`, dir, "4194304"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("error %v is not ENOSPC", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("failed Init left %d files in %s", len(left), dir)
	}
	// A shard that fits works, and its rows read back.
	if err := s.Init("small", Uint8, rb, 64); err != nil {
		t.Fatal(err)
	}
	rows := make([]byte, 64*rb)
	for i := int64(0); i < 64; i++ {
		fillRow(rows[i*rb:(i+1)*rb], 5, i)
	}
	if err := s.Update("small", rows, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(rows))
	if err := s.Get("small", 0, 64, got); err != nil {
		t.Fatal(err)
	}
	if err := checkRows(got, rb, 5, lifeSeq(0, 64)); err != nil {
		t.Error(err)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}

// lifeHold counts a call in flight on v, as Get does while it copies.
func lifeHold(t *testing.T, v *Var) {
	t.Helper()
	if err := v.enter("test"); err != nil {
		t.Fatal(err)
	}
}

func TestLifecycleFreeInFlight(t *testing.T) {
	s, job := openLifecycleStore(t, func(o *Options) { o.Timeout = 200 * time.Millisecond })
	defer checkNoShardFiles(t, job)
	const rb, n = 64, 100
	salt := lifeAddRows(t, s, "x", n, rb)
	v, err := s.Var("x")
	if err != nil {
		t.Fatal(err)
	}
	lifeHold(t, v)
	t0 := time.Now()
	err = s.Free("x")
	if el := time.Since(t0); el > 5*time.Second {
		t.Errorf("Free took %v with a 200ms timeout", el)
	}
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), `"x"`) || !strings.Contains(err.Error(), "1 calls") {
		t.Fatalf("Free with a call in flight: %v, want ErrTimeout naming \"x\" and 1 call", err)
	}
	// The held call still reads the mapped rows (a SIGSEGV here means they
	// were unmapped under it); new calls fail.
	got := make([]byte, n*rb)
	copy(got, v.src[0])
	if err := checkRows(got, rb, salt, lifeSeq(0, n)); err != nil {
		t.Fatal(err)
	}
	if err := v.Get(0, 1, got); !errors.Is(err, ErrUnknownVar) {
		t.Errorf("Get on the freed handle: %v", err)
	}
	if _, err := s.Var("x"); !errors.Is(err, ErrUnknownVar) {
		t.Errorf("Var after Free: %v", err)
	}
	// The name is free again while the old one lingers.
	salt2 := lifeAddRows(t, s, "x", 3, rb)
	if err := s.Get("x", 0, 3, got[:3*rb]); err != nil {
		t.Fatal(err)
	}
	if err := checkRows(got[:3*rb], rb, salt2, lifeSeq(0, 3)); err != nil {
		t.Error(err)
	}
	v.inflight.Add(-1) // the call returns
	select {
	case <-v.released:
	case <-time.After(30 * time.Second):
		t.Fatal("variable not released 30s after its last call returned")
	}
	if v.own.mem != nil || v.src[0] != nil {
		t.Error("released variable still mapped")
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}

func TestLifecycleCloseInFlight(t *testing.T) {
	var teldir string
	s, job := openLifecycleStore(t, func(o *Options) {
		o.Timeout = 200 * time.Millisecond
		teldir = o.TelemetryDir
	})
	defer checkNoShardFiles(t, job)
	const rb = 32
	saltY := lifeAddRows(t, s, "y", 10, rb)
	lifeAddRows(t, s, "z", 4, rb)
	vy, _ := s.Var("y")
	vz, _ := s.Var("z")
	lifeHold(t, vy)
	lifeHold(t, vz)
	if err := s.Free("z"); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Free with a call in flight: %v", err)
	}
	tel, _ := filepath.Glob(filepath.Join(teldir, "*.tel"))
	if len(tel) != 1 {
		t.Fatalf("telemetry segments in %s: %v", teldir, tel)
	}
	t0 := time.Now()
	err := s.Close()
	if el := time.Since(t0); el > 5*time.Second {
		t.Errorf("Close took %v with a 200ms timeout", el)
	}
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), `variable "y"`) ||
		!strings.Contains(err.Error(), `freed variable "z"`) {
		t.Fatalf("Close with calls in flight: %v, want ErrTimeout naming \"y\" and \"z\"", err)
	}
	if err := s.Get("y", 0, 1, make([]byte, rb)); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
	// Still mapped, telemetry still open, for the calls in flight.
	got := make([]byte, 10*rb)
	copy(got, vy.src[0])
	if err := checkRows(got, rb, saltY, lifeSeq(0, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tel[0]); err != nil {
		t.Errorf("telemetry segment closed under calls in flight: %v", err)
	}
	vy.inflight.Add(-1)
	time.Sleep(50 * time.Millisecond)
	if _, err := os.Stat(tel[0]); err != nil {
		t.Errorf("telemetry segment closed while freed \"z\" has a call in flight: %v", err)
	}
	vz.inflight.Add(-1)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(tel[0]); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("store not released 30s after the last call returned")
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-vz.released
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

// TestLifecyclePeerWatcherPoll: a watcher whose poll fails keeps checking
// (every watchRecheck) and still marks the dead peer; EINTR just retries.
func TestLifecyclePeerWatcherPoll(t *testing.T) {
	for _, c := range []struct {
		name string
		poll func(calls *atomic.Int32) func([]unix.PollFd, int) (int, error)
	}{
		{"error", func(calls *atomic.Int32) func([]unix.PollFd, int) (int, error) {
			return func([]unix.PollFd, int) (int, error) { calls.Add(1); return -1, unix.EINVAL }
		}},
		{"eintr", func(calls *atomic.Int32) func([]unix.PollFd, int) (int, error) {
			return func(fds []unix.PollFd, ms int) (int, error) {
				if calls.Add(1) <= 3 {
					return -1, unix.EINTR
				}
				return unix.Poll(fds, ms)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command("sleep", "30")
			if err := cmd.Start(); err != nil {
				t.Skipf("cannot start a peer process: %v", err)
			}
			defer cmd.Process.Kill()
			if fd, err := unix.PidfdOpen(cmd.Process.Pid, 0); err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Skipf("no pidfd on this kernel: %v", err)
			} else {
				unix.Close(fd)
			}
			dead := placement.NewHealth(4, telemetry.Nanotime)
			var calls atomic.Int32
			w, err := startWatcher(dead, []int{2}, []int{cmd.Process.Pid}, c.poll(&calls))
			if err != nil {
				t.Fatal(err)
			}
			defer w.stop()
			time.Sleep(3 * watchRecheck / 2)
			if dead.Dead(2) {
				t.Fatal("live peer marked dead")
			}
			cmd.Process.Kill()
			cmd.Wait() // reaped, as a launcher reaps its ranks
			deadline := time.Now().Add(30 * time.Second)
			for !dead.Dead(2) {
				if time.Now().After(deadline) {
					t.Fatalf("dead peer not marked within 30s (poll called %d times)", calls.Load())
				}
				time.Sleep(5 * time.Millisecond)
			}
			if dead.Dead(0) || dead.Dead(1) || dead.Dead(3) {
				t.Error("other ranks marked dead")
			}
			stopped := make(chan struct{})
			go func() { w.stop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(30 * time.Second):
				t.Fatal("watcher did not stop")
			}
			if c.name == "eintr" && calls.Load() < 4 {
				t.Errorf("poll called %d times, want retries after EINTR", calls.Load())
			}
		})
	}
}

// TestErrorFields: every error the store returns is one *Error naming the
// operation and the variable, with its class for errors.Is.
func TestErrorFields(t *testing.T) {
	s, job := openLifecycleStore(t, nil)
	defer checkNoShardFiles(t, job)
	defer s.Close()
	if err := s.Init("e", Uint8, 8, 4); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 64)
	for _, c := range []struct {
		err      error
		kind     error
		op, name string
	}{
		{s.GetBatch("e", []int64{4}, dst), ErrIndex, "GetBatch", "e"},
		{s.Get("e", 3, 2, dst), ErrIndex, "Get", "e"},
		{s.GetBatch("e", []int64{0, 1}, dst[:15]), ErrShortBuffer, "GetBatch", "e"},
		{s.GetBatch("none", []int64{0}, dst), ErrUnknownVar, "GetBatch", "none"},
		{s.Update("e", dst[:3], 0), ErrDType, "Update", "e"},
		{s.Init("e", Uint8, 8, 4), ErrExists, "Init", "e"},
	} {
		var e *Error
		if !errors.As(c.err, &e) || !errors.Is(c.err, c.kind) || e.Op != c.op || e.Var != c.name {
			t.Errorf("%v: want an *Error of class %v with Op %q and Var %q", c.err, c.kind, c.op, c.name)
		}
	}
}

// TestFabricErrorFields: a failed fabric read is one *Error naming the
// variable and the peer, with the cause's side and the class.
func TestFabricErrorFields(t *testing.T) {
	v := &Var{name: "x", s: &Store{health: placement.NewHealth(8, telemetry.Nanotime)}}
	cause := &fault.Error{Op: "fi_cq_readerr", Ranks: []int{5}, Side: fault.Remote, Kind: fault.ErrTimeout}
	err := v.fabricError(&readCtx{}, cause)
	var e *Error
	if !errors.As(err, &e) || e.Op != "read" || e.Var != "x" || fault.RankOf(err) != 5 || !fault.IsRemote(err) ||
		!errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "read from rank 5") {
		t.Fatalf("fabricError: %v (%+v)", err, e)
	}
}

// TestUnknownVariableNamesTheKnownOnes: a name the store does not have is
// ErrUnknownVar saying the call and the names it has.
func TestUnknownVariableNamesTheKnownOnes(t *testing.T) {
	s := openSingle(t, "unknown")
	want := `ddstore: query variable "nope": no such variable; the store has none yet (Add or Init creates one)`
	if _, err := s.Query("nope"); !errors.Is(err, ErrUnknownVar) || err.Error() != want {
		t.Fatalf("Query of an empty store:\n got %v\nwant %s", err, want)
	}
	for _, name := range []string{"label", "image"} {
		if err := s.Add(name, Int64, 1, make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
	}
	for op, call := range map[string]func() error{
		"query":    func() error { _, err := s.Query("nope"); return err },
		"lookup":   func() error { _, err := s.Var("nope"); return err },
		"GetBatch": func() error { return s.GetBatch("nope", []int64{0}, make([]byte, 8)) },
	} {
		want := `ddstore: ` + op + ` variable "nope": no such variable; the store has ["image" "label"]`
		if err := call(); !errors.Is(err, ErrUnknownVar) || err.Error() != want {
			t.Errorf("%s:\n got %v\nwant %s", op, err, want)
		}
	}
}

// TestOpenTelemetryDir: Open creates a telemetry directory that does not
// exist yet (mode 0700), and when it cannot, its error says so once, with
// the cause (issue 31: "telemetry: telemetry: create segment in …").
func TestOpenTelemetryDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "tel")
	openSingle(t, "teldir", func(o *Options) { o.TelemetryDir = dir })
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("telemetry directory %s: %v, want created 0700", dir, err)
	}
	file := filepath.Join(t.TempDir(), "afile")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.TelemetryDir = filepath.Join(file, "sub")
	o.Bootstrap.Method = "single"
	o.Bootstrap.Env = bootstrap.Env{Rank: 0, World: 1, LocalWorld: 1, Launcher: "none", Job: testJob("teldir-bad")}
	s2, err := Open(o)
	if err == nil {
		s2.Close()
		t.Fatal("Open with a telemetry directory under a file succeeded")
	}
	msg := err.Error()
	if strings.Count(msg, "telemetry:") != 1 || !strings.Contains(msg, "create segment directory "+o.TelemetryDir) || !strings.Contains(msg, "not a directory") {
		t.Fatalf("Open's error: %q, want one \"telemetry:\", the directory and the cause", msg)
	}
}
