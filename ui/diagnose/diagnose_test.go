package diagnose

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ddstore/ddstore/internal/segtest"
	"github.com/ddstore/ddstore/telemetry"
	"github.com/ddstore/ddstore/ui/data"
)

// job is a directory of synthetic segments: real telemetry writers, one
// per rank, that a data.Poller reads twice around a recorded workload.
type job struct {
	t    *testing.T
	dir  string
	ws   []*telemetry.Writer
	ids  []int
	now  time.Time
	poll *data.Poller
	// first is newJob's first snapshot, taken before any workload.
	first *data.Frame
}

func host() string { h, _ := os.Hostname(); return h }

func newJob(t *testing.T, world, present int, rowBytes int64) *job {
	j := newJobUnpolled(t, world, present, rowBytes)
	j.first = j.frame() // the first snapshot
	return j
}

// newJobUnpolled is newJob without the first snapshot: the workload run
// before the first j.frame() is all that frame sees.
func newJobUnpolled(t *testing.T, world, present int, rowBytes int64) *job {
	j := &job{t: t, dir: t.TempDir(), now: time.Unix(1_700_000_000, 0)}
	for r := 0; r < present; r++ {
		// Lane rings with room for a test's calls between two polls (the
		// default 64 slots would report ring drops beside the finding tested).
		w, err := telemetry.Create(telemetry.WriterOptions{Dir: j.dir, Job: "train", Rank: r, World: world, Host: host(),
			LaneRingSize: 1024})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		id, err := w.AddVar("x", "float32", rowBytes, 1<<20, 1<<18)
		if err != nil {
			t.Fatal(err)
		}
		j.ws, j.ids = append(j.ws, w), append(j.ids, id)
	}
	p, err := data.NewPoller(data.Options{Dir: j.dir, Now: func() time.Time { return j.now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	j.poll = p
	return j
}

// frame polls after a second of (fake) time.
func (j *job) frame() *data.Frame {
	j.t.Helper()
	j.now = j.now.Add(time.Second)
	f, err := j.poll.Poll()
	if err != nil {
		j.t.Fatal(err)
	}
	return f
}

// workload shapes one rank's calls.
type workload struct {
	calls, rows    int
	reader         int32
	nsPerRow       int64         // cq_wait per row
	phase          map[int]int64 // extra ns per call, by phase
	slowTarget     int           // reads from this rank cost slowFactor× (-1: none)
	slowFactor     int64         // default 1
	regs           int64         // registrations per call
	errEvery       int           // every n-th call fails on its target (0: none)
	batches        int           // loader batches
	waitNs, stepNs int64         // per batch
	config         telemetry.LoaderConfig
}

func healthy() workload {
	return workload{calls: 100, rows: 32, reader: 1, nsPerRow: 1000, slowTarget: -1, batches: 50,
		waitNs: 10_000, stepNs: 2_000_000, config: telemetry.LoaderConfig{Workers: 2, Prefetch: 4, Readers: telemetry.LoaderReadersThread, BatchRows: 32}}
}

// run records the workload on rank r: call k reads all its rows from one
// other rank, round robin, so every target gets calls of its own.
func (j *job) run(r int, wl workload) {
	w := j.ws[r]
	world := len(j.ws)
	for k := 0; k < wl.calls; k++ {
		tgt := (r + 1 + k%(world-1)) % world
		rows := int64(wl.rows)
		c := telemetry.Call{Var: int32(j.ids[r]), Reader: wl.reader, Rows: rows, Bytes: rows * 64, RemoteRows: rows,
			Concurrent: wl.reader == 0, MRRegs: wl.regs}
		c.Targets.Add(tgt, rows)
		per := wl.nsPerRow
		if tgt == wl.slowTarget {
			per *= wl.slowFactor
		}
		c.Phases[telemetry.PhaseCQWait] = per * rows
		c.Phases[telemetry.PhaseCopy] = 50 * rows
		for ph, ns := range wl.phase {
			c.Phases[ph] += ns
		}
		if wl.errEvery > 0 && k%wl.errEvery == 0 {
			c.Err, c.ErrPeer = true, int32(tgt)+1
		}
		w.Record(&c)
	}
	w.SetLoaderConfig(wl.config)
	for b := 0; b < wl.batches; b++ {
		w.RecordLoader(wl.waitNs, wl.stepNs)
	}
}

// diagnose polls after the recorded calls and runs every rule with the
// default thresholds.
func (j *job) diagnose() []Finding {
	j.t.Helper()
	return Diagnose(j.frame(), Thresholds{})
}

// runOne is a new job of world ranks, rows of rowBytes, in which rank r
// alone records wl.
func runOne(t *testing.T, world int, rowBytes int64, r int, wl workload) *job {
	j := newJob(t, world, world, rowBytes)
	j.run(r, wl)
	return j
}

// none fails unless fs is empty.
func none(t *testing.T, what string, fs []Finding) {
	t.Helper()
	if len(fs) != 0 {
		t.Fatalf("%s: %v", what, fs)
	}
}

func rules(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Rule)
	}
	return out
}

func one(t *testing.T, fs []Finding, rule string) Finding {
	t.Helper()
	var hit []Finding
	for _, f := range fs {
		if f.Rule == rule {
			hit = append(hit, f)
		}
	}
	if len(hit) != 1 || len(fs) != 1 {
		t.Fatalf("want one %s finding, got %v: %v", rule, rules(fs), fs)
	}
	return hit[0]
}

func contains(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s %q lacks %q", what, s, sub)
		}
	}
}

func TestHealthyHasNoFinding(t *testing.T) {
	j := newJob(t, 4, 4, 64)
	none(t, "empty first snapshot", Diagnose(j.first, Thresholds{}))
	for r := range 4 {
		j.run(r, healthy())
	}
	none(t, "healthy job", j.diagnose())
	if fs := Diagnose(nil, Thresholds{}); fs != nil {
		t.Fatal(fs)
	}

	// The first snapshot of a job that already did its work: no interval
	// yet (Delta is zero), so the rules judge the cumulative counters.
	first := func(unbatched int) []Finding {
		t.Helper()
		j := newJobUnpolled(t, 4, 4, 64)
		for r := range 4 {
			wl := healthy()
			if r == unbatched {
				wl.rows = 1
			}
			j.run(r, wl)
		}
		f := j.frame()
		if len(f.Ranks) != 4 {
			t.Fatalf("first frame has %d ranks, want 4", len(f.Ranks))
		}
		for _, r := range f.Ranks {
			if r.Delta.Calls != 0 || r.Total.Calls != 100 {
				t.Fatalf("rank %d: delta %d total %d calls, want a first snapshot of 100", r.Rank, r.Delta.Calls, r.Total.Calls)
			}
		}
		return Diagnose(f, Thresholds{})
	}
	none(t, "healthy first frame", first(-1))
	// The same first frame with one rank reading a row per call is
	// diagnosed: the first frame is judged, not skipped.
	if f := one(t, first(2), RuleUnbatched); f.Rank != 2 {
		t.Fatalf("unbatched on the first frame: %+v", f)
	}
}

func TestGPUSync(t *testing.T) {
	j := newJob(t, 2, 2, 64)
	wl := healthy()
	wl.phase = map[int]int64{telemetry.PhaseGPUSync: 200_000} // 200 µs a call vs 33.6 µs of reading
	j.run(0, healthy())
	j.run(1, wl)
	f := one(t, j.diagnose(), RuleGPUSync)
	if f.Rank != 1 || f.Key != "gpu.sync: stream" || f.Env != "DDSTORE_GPU_SYNC=stream" {
		t.Fatalf("%+v", f)
	}
	contains(t, "evidence", f.Evidence, "gpu_sync is 86% of call time (threshold 25%)", "2 loader workers")
	// Without loader workers the same share is not this pathology.
	wl.config.Workers = 0
	none(t, "no workers", runOne(t, 2, 64, 1, wl).diagnose())
}

func TestLockWait(t *testing.T) {
	wl := healthy()
	wl.reader = 0
	wl.phase = map[int]int64{telemetry.PhaseLockWait: 40_000}
	f := one(t, runOne(t, 3, 64, 2, wl).diagnose(), RuleLockWait)
	if f.Rank != 2 || f.Var != "x" || f.Reader != 0 || f.Env != "DDSTORE_THREAD_READERS=1" || f.Key != "reads.thread_readers: true" {
		t.Fatalf("%+v", f)
	}
	contains(t, "evidence", f.Evidence, "lock_wait is 54%", "threshold 20%", "over 100 calls")
	// Lock wait on a Reader's own stripe is not judged (readers never lock).
	wl.reader = 3
	none(t, "reader stripe", runOne(t, 3, 64, 2, wl).diagnose())
}

func TestUnbatched(t *testing.T) {
	wl := healthy()
	wl.rows = 1
	f := one(t, runOne(t, 2, 64, 0, wl).diagnose(), RuleUnbatched)
	if f.Rank != 0 || f.Var != "x" || f.Env != "DDSTORE_BATCH_GET=1" {
		t.Fatalf("%+v", f)
	}
	contains(t, "evidence", f.Evidence, "1.00 rows per call (threshold 1.5) of 64-byte rows over 100 calls")
	// Big rows read one per call are not this pathology.
	none(t, "big rows", runOne(t, 2, 1<<20, 0, wl).diagnose())
}

func TestMRChurn(t *testing.T) {
	wl := healthy()
	wl.regs = 1
	f := one(t, runOne(t, 2, 64, 1, wl).diagnose(), RuleMR)
	contains(t, "evidence", f.Evidence, "1.00 registrations per call (threshold 0.10)")
	wl.regs = 0
	wl.phase = map[int]int64{telemetry.PhaseMR: 20_000}
	f = one(t, runOne(t, 2, 64, 1, wl).diagnose(), RuleMR)
	contains(t, "evidence", f.Evidence, "mr is 37% of call time (threshold 10%)")
	if f.Rank != 1 || f.Env != "DDSTORE_FAST_COLLATE=1" {
		t.Fatalf("%+v", f)
	}
}

func TestStraggler(t *testing.T) {
	j := newJob(t, 4, 4, 64)
	for r := range 4 {
		wl := healthy()
		wl.slowTarget, wl.slowFactor = 2, 10
		j.run(r, wl)
	}
	f := one(t, j.diagnose(), RuleStraggler)
	if f.Rank != 2 || f.Host != host() || f.Job != "train" {
		t.Fatalf("%+v", f)
	}
	contains(t, "evidence", f.Evidence, "reads from rank 2", "take 10.1 µs/row over 3200 rows; 3 of 3 readers see it 9.6× slower (median) than their other targets' 1.1 µs/row (threshold 3.0×)")
	contains(t, "fix", f.Fix, "rank 2 on "+host())
}

// A reader that is itself slow sees all its targets slow: no straggler.
func TestSlowReaderIsNoStraggler(t *testing.T) {
	j := newJob(t, 4, 4, 64)
	for r := range 4 {
		wl := healthy()
		if r == 3 {
			wl.nsPerRow *= 20
		}
		j.run(r, wl)
	}
	none(t, "slow reader", j.diagnose())
}

func TestLoaderWait(t *testing.T) {
	wl := healthy()
	wl.config = telemetry.LoaderConfig{Workers: 0, Readers: telemetry.LoaderReadersShared, BatchRows: 32}
	wl.waitNs, wl.stepNs = 600_000, 2_000_000 // 30% of the step waiting
	f := one(t, runOne(t, 2, 64, 0, wl).diagnose(), RuleLoaderWait)
	contains(t, "evidence", f.Evidence, "consumer waits 30% of step time (threshold 5%)", "600.0 µs/batch wait vs 2.0 ms/batch step over 50 batches", "workers 0, prefetch 0")
	// fetch 0.6 ms, compute 1.4 ms: one worker keeps up, want 2 (at least 2).
	if f.Env != "DDSTORE_LOADER_WORKERS=2 DDSTORE_LOADER_PREFETCH=4" || f.Key != "loader.workers: 2, loader.prefetch: 4" {
		t.Fatalf("%+v", f)
	}
	// With 2 workers still waiting 50%: each fetch took ~2 steps (4 ms) vs
	// 1 ms compute: 5 workers would keep up; at most double at once: 4.
	wl.config.Workers, wl.config.Prefetch = 2, 2
	wl.waitNs = 1_000_000
	f = one(t, runOne(t, 2, 64, 0, wl).diagnose(), RuleLoaderWait)
	if f.Env != "DDSTORE_LOADER_WORKERS=4 DDSTORE_LOADER_PREFETCH=8" || !strings.HasSuffix(f.Fix, "each with its own reader (DDSTORE_THREAD_READERS=1)") {
		t.Fatalf("%+v", f)
	}
	// Prefetch auto below its bound deepens the prefetch itself: the
	// finding names the workers only.
	wl.config.Prefetch, wl.config.PrefetchMax = 5, 16
	f = one(t, runOne(t, 2, 64, 0, wl).diagnose(), RuleLoaderWait)
	contains(t, "evidence", f.Evidence, "workers 2, prefetch 5 (auto, at most 16)")
	if f.Env != "DDSTORE_LOADER_WORKERS=4" || f.Key != "loader.workers: 4" || strings.Contains(f.Fix, "prefetch to") {
		t.Fatalf("auto below its bound: %+v", f)
	}
	// At its bound auto cannot go deeper: the prefetch key is named.
	wl.config.Prefetch = 16
	f = one(t, runOne(t, 2, 64, 0, wl).diagnose(), RuleLoaderWait)
	if f.Env != "DDSTORE_LOADER_WORKERS=4 DDSTORE_LOADER_PREFETCH=17" || f.Key != "loader.workers: 4, loader.prefetch: 17" {
		t.Fatalf("auto at its bound: %+v", f)
	}
}

func TestRankStateAndMissing(t *testing.T) {
	// World 4, ranks 0 and 1 present; rank 1's process has exited.
	dir := t.TempDir()
	for r, pid := range []int{os.Getpid(), segtest.ExitedPid(t)} {
		w, err := telemetry.Create(telemetry.WriterOptions{Dir: dir, Job: "train", Rank: r, World: 4, Host: host(), Pid: pid})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
	}
	p, _ := data.NewPoller(data.Options{Dir: dir})
	defer p.Close()
	f, err := p.Poll()
	if err != nil {
		t.Fatal(err)
	}
	fs := Diagnose(f, Thresholds{})
	if got := strings.Join(rules(fs), ","); got != "rank_state,missing_ranks" {
		t.Fatalf("findings %v", fs)
	}
	contains(t, "missing", fs[1].Evidence, "world size 4 but 2 ranks have segments; missing ranks: 2, 3")
	if fs[0].Rank != 1 {
		t.Fatalf("%+v", fs[0])
	}
	contains(t, "state", fs[0].Evidence, "rank is exited")
}

func TestErrorsDropsProcess(t *testing.T) {
	wl := healthy()
	wl.errEvery = 10
	f := one(t, runOne(t, 2, 64, 0, wl).diagnose(), RuleErrors)
	contains(t, "evidence", f.Evidence, "10 of 100 calls failed", "by target rank 1: 10")

	j2 := newJob(t, 2, 2, 64)
	j2.ws[1].AddProc(telemetry.ProcLeakedBuffers, 2)
	f = one(t, j2.diagnose(), RuleProcess)
	contains(t, "evidence", f.Evidence, "leaked_buffers = 2")

	// Gather requests with another key: named, explained, with the fix.
	j3 := newJob(t, 2, 2, 64)
	j3.ws[0].AddProc(telemetry.ProcGatherStrangers, 5)
	f = one(t, j3.diagnose(), RuleProcess)
	contains(t, "strangers", f.Evidence, "gather_strangers = 5", "without the job's key", "dropped unanswered")
	contains(t, "strangers fix", f.Fix, "no data left this rank", "same secret")
	if f.Rank != 0 {
		t.Fatalf("strangers finding on rank %d, want 0", f.Rank)
	}

	// A small ring overrun between two polls drops records.
	dir := t.TempDir()
	w, err := telemetry.Create(telemetry.WriterOptions{Dir: dir, Job: "train", World: 1, RingSize: 8, LaneRingSize: 8, Host: host()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	id, _ := w.AddVar("x", "float32", 64, 100, 100)
	p, _ := data.NewPoller(data.Options{Dir: dir})
	defer p.Close()
	p.Poll()
	for k := 0; k < 40; k++ {
		c := telemetry.Call{Var: int32(id), Reader: 1, Rows: 8, Bytes: 512, LocalRows: 8}
		c.Phases[telemetry.PhaseCopy] = 800
		w.Record(&c)
	}
	fr, _ := p.Poll()
	f = one(t, Diagnose(fr, Thresholds{}), RuleRingDrops)
	contains(t, "evidence", f.Evidence, "32 ring records lost")
}

// Findings sort worst first.
func TestOrder(t *testing.T) {
	j := newJob(t, 3, 3, 64)
	a := healthy()
	a.rows = 1 // unbatched: severity ~0.25
	b := healthy()
	b.reader = 0
	b.phase = map[int]int64{telemetry.PhaseLockWait: 400_000} // lock wait ~92%
	j.run(0, a)
	j.run(1, b)
	fs := j.diagnose()
	if got := strings.Join(rules(fs), ","); got != "lock_wait,unbatched" {
		t.Fatalf("order %v", fs)
	}
	if s := fs[0].String(); !strings.HasPrefix(s, "lock_wait rank 1 ("+host()+") var x reader 0: ") || !strings.Contains(s, "→ give every worker its own reader") {
		t.Fatalf("String %q", s)
	}
}
