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

// procCPU is the CPU time all threads of process pid have used
// (/proc/<pid>/task/*/schedstat: nanoseconds on the CPU).
func procCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/schedstat")
	var ns int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // thread gone
		}
		if v, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64); err == nil {
			ns += v
		}
	}
	return time.Duration(ns)
}

// BenchmarkSingleGet measures one 3 KB read at a time (nothing else in
// flight) over tcp;ofi_rxm on lo, against a target process whose progress
// thread runs in each mode (progress=sleep|adaptive|spin), and the plain C
// reference: a C fi_read loop with one read in flight (dd_baseline) against
// a busy-polling target (progress=spin). It reports the target's CPU time
// per served read (all its threads, from /proc schedstat).
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
			f := openOrSkip(b, o)
			tg := startTarget(b, o, 64<<20, false)
			r, p := readerOf(b, f, tg)
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
			cpu0 := procCPU(b, tg.cmd.Process.Pid)
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
	f, e, r, p, _ := selfExport(t, 1<<20, func(f *Fabric) {})
	if f.opts.Progress != "adaptive" || !f.Info().WaitFD {
		t.Skipf("progress %q, wait fd %v", f.opts.Progress, f.Info().WaitFD)
	}
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
