package fabric

import (
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procTasks calls line for each line of file (stat, schedstat, status) of
// every thread of process pid still alive.
func procTasks(pid int, file string, line func(string)) {
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/" + file)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // thread gone
		}
		for _, l := range strings.Split(string(b), "\n") {
			line(l)
		}
	}
}

// procCPU is the CPU time all threads of process pid have used
// (/proc/<pid>/task/*/schedstat: nanoseconds on the CPU).
func procCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	var ns int64
	procTasks(pid, "schedstat", func(l string) {
		if f := strings.Fields(l); len(f) > 0 {
			if v, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				ns += v
			}
		}
	})
	return time.Duration(ns)
}

// procSleeps is how often the threads of process pid went to sleep
// (voluntary context switches, /proc/<pid>/task/*/status): a target's
// progress thread sleeps once per wakeup.
func procSleeps(pid int) int64 {
	var n int64
	procTasks(pid, "status", func(l string) {
		if v, ok := strings.CutPrefix(l, "voluntary_ctxt_switches:"); ok {
			if x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				n += x
			}
		}
	})
	return n
}

// BenchmarkSingleGet measures one 3 KB read at a time (nothing else in
// flight) over tcp;ofi_rxm on lo, against a target process whose progress
// thread runs in each mode (progress=sleep|adaptive|spin; the reader's own
// progress thread keeps the default, as it serves no one), and the plain C
// reference: a C fi_read loop with one read in flight (dd_baseline) against
// a busy-polling target (progress=spin). It reports the target's CPU time
// per served read (all its threads, from /proc schedstat) and how often
// its threads went to sleep per read (target-sleeps/read: an adaptive
// target that stays awake while reads keep coming makes ~0).
//
//	flock /work/bench.lock go test ./fabric -run '^$' -bench BenchmarkSingleGet -benchtime=20000x -count=5
func BenchmarkSingleGet(b *testing.B) {
	const row = 3072
	for _, mode := range []string{"sleep", "adaptive", "spin", "c-baseline"} {
		b.Run("progress="+mode, func(b *testing.B) {
			o := Options{Provider: "tcp;ofi_rxm", Domain: "lo", Timeout: 10 * time.Second, Progress: mode}
			if mode == "c-baseline" {
				o.Progress = "spin"
			}
			ro := o
			ro.Progress = "" // the reader's own target serves no one: the default, asleep
			f := openOrSkip(b, ro)
			tg := startTarget(b, o, 64<<20, false)
			r, p := readerOf(b, f, tg)
			if mode == "c-baseline" { // one deadline for the whole C loop
				r.SetTimeout(o.Timeout + time.Duration(b.N)*time.Millisecond)
			}
			rows := uint64(tg.size / row)
			offs := make([]uint64, b.N)
			rng := rand.New(rand.NewSource(1))
			for i := range offs {
				offs[i] = uint64(rng.Int63n(int64(rows))) * row
			}
			dst, err := Alloc(row)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { dst.Free() })
			for i := 0; i < 200; i++ { // connect and warm up
				if _, err := r.Read(ReadOp{Dst: dst.Bytes(), Peer: p, Addr: tg.base + offs[i%len(offs)], Key: tg.key}); err != nil {
					b.Fatal(err)
				}
			}
			time.Sleep(20 * time.Millisecond) // let the target settle (adaptive: asleep again)
			cpu0, sl0 := procCPU(b, tg.cmd.Process.Pid), procSleeps(tg.cmd.Process.Pid)
			b.SetBytes(row)
			b.ReportAllocs()
			b.ResetTimer()
			if mode == "c-baseline" {
				if _, err := r.baselineRead(p, dst.Bytes(), row, offs, tg.base, tg.key, 1); err != nil {
					b.Fatal(err)
				}
			} else {
				op := ReadOp{Dst: dst.Bytes(), Peer: p, Key: tg.key}
				for i := 0; i < b.N; i++ {
					op.Addr = tg.base + offs[i]
					if _, err := r.Read(op); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			cpu := procCPU(b, tg.cmd.Process.Pid) - cpu0
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "target-cpu-ns/read")
			b.ReportMetric(float64(procSleeps(tg.cmd.Process.Pid)-sl0)/float64(b.N), "target-sleeps/read")
			if err := checkPattern(dst.Bytes(), offs[b.N-1]); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// TestAdaptiveSleepsWhenIdle: after serving reads, an adaptive target
// polls for its window only, then sleeps on its wait fd: over tcp it makes
// no wakeup at all while idle, and its progress thread uses (almost) no CPU.
func TestAdaptiveSleepsWhenIdle(t *testing.T) {
	o := Options{Provider: "tcp;ofi_rxm", Domain: "lo", Timeout: 5 * time.Second, Progress: "adaptive"}
	f, e, r, p, _ := selfExportWith(t, o, 1<<20, func(f *Fabric) {})
	requireWaitFD(t, f)
	dst := make([]byte, 3072)
	for i := 0; i < 200; i++ {
		if _, err := r.Read(ReadOp{Dst: dst, Peer: p, Addr: e.Base() + uint64(i)*3072, Key: e.Key()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkPattern(dst, 199*3072); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // past the window, however loaded
	w0, c0 := f.ProgressWakeups(), f.ProgressCPU()
	time.Sleep(300 * time.Millisecond)
	w, c := f.ProgressWakeups()-w0, f.ProgressCPU()-c0
	t.Logf("idle after serving: %d wakeups, %v progress CPU in 300ms", w, c)
	if w != 0 || c > 5*time.Millisecond {
		t.Fatalf("idle adaptive target: %d wakeups and %v CPU in 300ms, want 0 and ~0", w, c)
	}
}

// requireWaitFD fails the test when f, opened on tcp;ofi_rxm, has no CQ
// wait fd (a skip unless requireFabricEnv=1, as for a missing provider):
// libfabric's tcp provider supports FI_WAIT_FD CQs (shm does not), so an
// adaptive target over tcp must sleep on one, not poll with back-off.
func requireWaitFD(t *testing.T, f *Fabric) {
	t.Helper()
	if !f.Info().WaitFD {
		skipOrRequire(t, "%s on %s: no CQ wait fd, though the tcp provider has one", f.Info().Provider, f.Info().Domain)
	}
}

// TestStepServed: a polling step that read no completion counts as a
// served read when it took between DD_STEP_SERVE_NS and
// DD_STEP_PREEMPT_NS of wall time.
func TestStepServed(t *testing.T) {
	for _, c := range []struct {
		ns   int64
		want bool
	}{{0, false}, {1000, false}, {1999, false}, {2000, true}, {15000, true}, {999999, true}, {1000000, false}, {5e9, false}} {
		if got := ddStepServed(cInt64T(c.ns)) != 0; got != c.want {
			t.Errorf("step of %dns served: %v, want %v", c.ns, got, c.want)
		}
	}
}

// TestAdaptiveAwakeWhileReading: an adaptive target whose reads leave no
// completion (one-sided fi_read over tcp) still counts each served read as
// activity, so while a lone reader keeps reading it stays awake: far
// fewer wakeups than one per window (each window would end in a sleep and
// a wakeup if only wakeups and completions counted: 40 and more in 400 ms).
func TestAdaptiveAwakeWhileReading(t *testing.T) {
	const window = 10 * time.Millisecond
	o := Options{Provider: "tcp;ofi_rxm", Domain: "lo", Timeout: 5 * time.Second, Progress: "adaptive", ProgressWindow: window}
	f, e, r, p, _ := selfExportWith(t, o, 1<<20, func(f *Fabric) {})
	requireWaitFD(t, f)
	dst := make([]byte, 3072)
	read := func(i int) {
		off := uint64(i%300) * 3072
		if _, err := r.Read(ReadOp{Dst: dst, Peer: p, Addr: e.Base() + off, Key: e.Key()}); err != nil {
			t.Fatal(err)
		}
		if err := checkPattern(dst, off); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ { // connect
		read(i)
	}
	w0, t0 := f.ProgressWakeups(), time.Now()
	n := 0
	for ; n < 500 || time.Since(t0) < 40*window; n++ {
		read(n)
	}
	el, w := time.Since(t0), f.ProgressWakeups()-w0
	t.Logf("%d reads in %v: %d wakeups (window %v)", n, el, w, window)
	// Without counting served reads it wakes about once per window (or
	// per read, if slower); a reader descheduled for a window on a loaded
	// machine costs a wakeup either way (a quarter of the windows at load
	// 115 on 2 vCPUs).
	if limit := uint64(el / window / 2); w > limit {
		t.Fatalf("%d wakeups in %v of back-to-back reads, want at most %d (half of one per %v window)", w, el, limit, window)
	}
}
