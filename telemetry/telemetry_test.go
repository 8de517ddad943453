package telemetry

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func newTestWriter(t testing.TB, o WriterOptions) *Writer {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	w, err := Create(o)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func openTest(t testing.TB, path string) *Segment {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open %s: %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// snapshot is s.Snapshot(), failing the test on an error.
func snapshot(t testing.TB, s *Segment) *Snapshot {
	t.Helper()
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot %s: %v", s.Path(), err)
	}
	return snap
}

// patternCall fills c with a call whose every field derives from rows, so
// a reader can check a record for tearing: see checkPatternRecord.
func patternCall(c *Call, v, r int32, rows, rowBytes int64) {
	*c = Call{Var: v, Reader: r, Rows: rows, Bytes: rows * rowBytes,
		LocalRows: rows / 3, RemoteRows: rows - rows/3,
		Err: rows%11 == 0, MRRegs: rows % 5, Failovers: rows % 7}
	c.Targets.Add(0, rows-rows/2)
	c.Targets.Add(int(rows%64), rows/2)
	for p := range c.Phases {
		c.Phases[p] = rows * int64(p+1) * 100
	}
}

func checkPatternRecord(rec *Record, rowBytes int64) string {
	var want Call
	patternCall(&want, rec.Var, rec.Reader, rec.Rows, rowBytes)
	got := Call{Var: rec.Var, Reader: rec.Reader, Rows: rec.Rows, Bytes: rec.Bytes, LocalRows: rec.LocalRows,
		RemoteRows: rec.RemoteRows, Phases: rec.Phases, Err: rec.Err, MRRegs: rec.MRRegs, Targets: want.Targets, Failovers: want.Failovers}
	if rec.Rows < 1 || got != want || rec.Targets != want.Targets.Mask() || rec.NTargets != want.Targets.Len() {
		return "torn or wrong record: " + fmtAny(rec)
	}
	for i := 0; i < MaxCallTargets; i++ {
		w := int32(-1)
		if i < want.Targets.Named() {
			w = int32(want.Targets.Rank(i))
		}
		if rec.FirstTargets[i] != w {
			return "wrong targets in record: " + fmtAny(rec)
		}
	}
	return ""
}

// checkRecordOf is checkPatternRecord for the record of call want, whose
// Reader is the stripe it was recorded on: the record must hold want's
// var, stripe and rows (from which checkPatternRecord checks the rest).
func checkRecordOf(rec *Record, want *Call, rowBytes int64) string {
	if rec.Var != want.Var || rec.Reader != want.Reader || rec.Rows != want.Rows {
		return fmt.Sprintf("record of another call: var %d, reader %d, rows %d; want %d, %d, %d",
			rec.Var, rec.Reader, rec.Rows, want.Var, want.Reader, want.Rows)
	}
	return checkPatternRecord(rec, rowBytes)
}

// recordAtOnce starts n goroutines that each record per calls on w, call
// i of goroutine g filled by fill(c, g, i), yielding the processor every
// yieldEvery calls; each then hands the counters its calls add up to,
// under a lock, to done(g, sum). The channel closes when all have.
func recordAtOnce(w *Writer, n, per, yieldEvery int, fill func(c *Call, g, i int), done func(g int, sum Counters)) <-chan struct{} {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sum Counters
			var c Call
			for i := range per {
				fill(&c, g, i)
				w.Record(&c)
				addCall(&sum, &c)
				if i%yieldEvery == 0 {
					runtime.Gosched()
				}
			}
			mu.Lock()
			done(g, sum)
			mu.Unlock()
		}()
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	return all
}

func addCall(c *Counters, call *Call) {
	c.Calls++
	c.Rows += call.Rows
	c.Bytes += call.Bytes
	c.LocalRows += call.LocalRows
	c.RemoteRows += call.RemoteRows
	if call.Err {
		c.Errors++
	}
	c.MRRegs += call.MRRegs
	c.Failovers += call.Failovers
	for p, v := range call.Phases {
		c.PhaseNs[p] += v
	}
	tot := call.Total()
	c.CallHist[BucketIndex(tot)]++
	if call.Rows > 0 {
		c.RowHist[BucketIndex(tot/call.Rows)]++
	}
}

func TestCreateRecordSnapshot(t *testing.T) {
	dir := t.TempDir()
	w := newTestWriter(t, WriterOptions{Dir: dir, Job: "job/1 x", Rank: 2, World: 4, Host: localHost(),
		Provider: "tcp;ofi_rxm", ReaderMode: "thread", Method: "tcp", MaxVars: 4, MaxReaders: 3, RingSize: 16,
		PeerLanes: 1}) // one lane: every call in the shared ring (lane rings: TestLaneRings)
	wantPath := filepath.Join(dir, "ddstore-job_1_x-2.tel")
	if w.Path() != wantPath {
		t.Fatalf("path %q, want %q", w.Path(), wantPath)
	}
	st, err := os.Stat(wantPath)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}
	x, err := w.AddVar("x", "float32", 16, 1000, 250)
	if err != nil {
		t.Fatal(err)
	}
	y, err := w.AddVar("labels", "int64", 8, 1000, 250)
	if err != nil {
		t.Fatal(err)
	}
	var want [2][3]Counters
	var c Call
	var ring []Call                   // the call each ring position holds, Reader its stripe
	for i := int64(1); i <= 50; i++ { // position i-1: rows i
		v, rb := int32(x), int64(16)
		if i%3 == 0 {
			v, rb = int32(y), 8
		}
		r := int32(i % 3)
		patternCall(&c, v, r, i, rb)
		w.Record(&c)
		addCall(&want[v][r], &c)
		ring = append(ring, c)
	}
	// reader id out of range → last stripe; unknown var → BadVarCalls only.
	patternCall(&c, int32(x), 99, 7, 16)
	w.Record(&c)
	addCall(&want[x][2], &c)
	ring = append(ring, c)
	ring[50].Reader = 2
	patternCall(&c, 3, 0, 7, 16)
	w.Record(&c)
	patternCall(&c, -1, 0, 7, 16)
	w.Record(&c)
	w.RecordLoader(1500, 100000)
	w.RecordLoader(0, 3000)

	s := openTest(t, wantPath)
	snap := snapshot(t, s)
	h := snap.Header
	if h.Job != "job/1 x" || h.Rank != 2 || h.World != 4 || h.Pid != os.Getpid() || h.Host != localHost() ||
		h.Provider != "tcp;ofi_rxm" || h.ReaderMode != "thread" || h.Method != "tcp" || h.Version != Version ||
		h.MaxVars != 4 || h.MaxReaders != 3 || h.RingSize != 16 {
		t.Fatalf("header %+v", h)
	}
	if heads := ringHeads(t, s); h.BadVarCalls != 2 || h.BadReaderCalls != 1 || heads != 51 {
		t.Fatalf("bad var %d, bad reader %d, ring heads %d; want 2, 1, 51", h.BadVarCalls, h.BadReaderCalls, heads)
	}
	if snap.State != StateLive || !snap.Alive {
		t.Fatalf("state %s alive %v", snap.State, snap.Alive)
	}
	if len(snap.Vars) != 2 || snap.Vars[0].Name != "x" || snap.Vars[1].Name != "labels" ||
		snap.Vars[0].DType != "float32" || snap.Vars[1].RowBytes != 8 || snap.Vars[0].GlobalRows != 1000 || snap.Vars[0].LocalRows != 250 {
		t.Fatalf("vars %+v", snap.Vars)
	}
	for v := range 2 {
		vs := snap.Vars[v]
		for r := range 3 {
			var got Counters
			if r < len(vs.Readers) {
				got = vs.Readers[r]
			}
			if got != want[v][r] {
				t.Errorf("var %d reader %d:\n got %+v\nwant %+v", v, r, got, want[v][r])
			}
		}
	}
	wantTotal := want[0][0].Add(want[0][1]).Add(want[0][2]).Add(want[1][0]).Add(want[1][1]).Add(want[1][2])
	if got := snap.Total(); got != wantTotal {
		t.Errorf("total %+v, want %+v", got, wantTotal)
	}
	if got := wantTotal.Sub(want[0][0]).Sub(want[0][1]).Sub(want[0][2]); got != snap.Var("labels").Total() {
		t.Errorf("Sub: %+v", got)
	}
	l := snap.Loader
	if l.Batches != 2 || l.WaitNs != 1500 || l.StepNs != 103000 || l.WaitHist[0] != 1 || l.WaitHist[BucketIndex(1500)] != 1 ||
		l.StepHist[BucketIndex(100000)] != 1 || l.StepHist[BucketIndex(3000)] != 1 {
		t.Fatalf("loader %+v", l)
	}

	// Ring: 51 claimed, 16 slots: positions 35..50 remain.
	dst := make([]Record, 64)
	n, next, dropped, err := s.ReadRing(0, dst)
	if err != nil || n != 16 || next != 51 || dropped != 35 {
		t.Fatalf("ReadRing(0) = %d, %d, %d, %v; want 16, 51, 35", n, next, dropped, err)
	}
	for i, rec := range dst[:n] {
		if rec.Seq != uint64(35+i) {
			t.Fatalf("record %d has seq %d", i, rec.Seq)
		}
		rb := int64(16)
		if rec.Var == int32(y) {
			rb = 8
		}
		if msg := checkRecordOf(&rec, &ring[rec.Seq], rb); msg != "" {
			t.Fatalf("position %d: %s", rec.Seq, msg)
		}
		if time.Since(rec.Time()) > time.Minute || time.Since(rec.Time()) < 0 {
			t.Fatalf("record time %v", rec.Time())
		}
	}
	if dst[15].Reader != 2 || dst[15].Rows != 7 { // the out-of-range reader, clamped
		t.Fatalf("last record %+v", dst[15])
	}
	n, next, dropped, _ = s.ReadRing(51, dst)
	if n != 0 || next != 51 || dropped != 0 {
		t.Fatalf("ReadRing at head = %d, %d, %d", n, next, dropped)
	}
	// small dst: resumes where it stopped
	n, next, _, _ = s.ReadRing(40, dst[:3])
	if n != 3 || next != 43 || dst[0].Seq != 40 {
		t.Fatalf("ReadRing(40, 3) = %d, %d, seq %d", n, next, dst[0].Seq)
	}

	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(wantPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("segment not removed on Close: %v", err)
	}
	w.Record(&c) // ignored after Close, must not fault
	w.Heartbeat()
	w.RecordLoader(1, 1)
	// The reader's mapping stays valid after the writer removed the file.
	if snap2, err := s.Snapshot(); err != nil || snap2.Total() != wantTotal || snap2.State != StateStale && snap2.State != StateLive {
		t.Fatalf("snapshot after writer close: %v", err)
	}
}

func TestRemoveVarReuse(t *testing.T) {
	w := newTestWriter(t, WriterOptions{MaxVars: 2, MaxReaders: 2, RingSize: 4})
	a, _ := w.AddVar("a", "uint8", 1, 10, 10)
	b, _ := w.AddVar("b", "uint8", 1, 10, 10)
	if _, err := w.AddVar("c", "uint8", 1, 10, 10); !errors.Is(err, ErrFull) {
		t.Fatalf("third AddVar: %v, want ErrFull", err)
	}
	var c Call
	patternCall(&c, int32(a), 0, 5, 1)
	w.Record(&c)
	s := openTest(t, w.Path())
	s1, _ := s.Snapshot()
	w.RemoveVar(a)
	w.Record(&c)
	s2, _ := s.Snapshot()
	if len(s2.Vars) != 1 || s2.Vars[0].Name != "b" || s2.BadVarCalls != 1 {
		t.Fatalf("after remove: vars %+v bad %d", s2.Vars, s2.BadVarCalls)
	}
	a2, err := w.AddVar("a2", "int32", 4, 10, 10)
	if err != nil || a2 != a {
		t.Fatalf("re-add: %d %v", a2, err)
	}
	s3, _ := s.Snapshot()
	v := s3.Var("a2")
	if v == nil || v.Generation == s1.Var("a").Generation || !v.Total().IsZero() || v.RowBytes != 4 {
		t.Fatalf("re-added var %+v (old gen %d)", v, s1.Var("a").Generation)
	}
	_ = b
}

func TestRecordAllocs(t *testing.T) {
	w := newTestWriter(t, WriterOptions{MaxVars: 2, MaxReaders: 2, RingSize: 64})
	id, _ := w.AddVar("x", "float32", 16, 100, 100)
	var c Call
	patternCall(&c, int32(id), 1, 9, 16)
	if n := testing.AllocsPerRun(1000, func() { w.Record(&c) }); n != 0 {
		t.Fatalf("Record allocates %v per call", n)
	}
	if n := testing.AllocsPerRun(1000, func() { w.RecordLoader(100, 2000) }); n != 0 {
		t.Fatalf("RecordLoader allocates %v per call", n)
	}
	if n := testing.AllocsPerRun(1000, func() { w.Heartbeat() }); n != 0 {
		t.Fatalf("Heartbeat allocates %v per call", n)
	}
	var nilW *Writer
	nilW.Record(&c) // a nil writer (telemetry off) is a no-op
}

// BenchmarkRecord is the common case: a reader recording on its own
// (single-writer) stripe.
func BenchmarkRecord(b *testing.B) {
	benchmarkRecord(b, 0)
}

// BenchmarkRecordSharedStripe records on the last stripe (reader id
// MaxReaders-1, shared with ids >= MaxReaders), which uses atomic adds.
func BenchmarkRecordSharedStripe(b *testing.B) {
	benchmarkRecord(b, 1)
}

func benchmarkRecord(b *testing.B, reader int32) {
	w := newTestWriter(b, WriterOptions{MaxVars: 2, MaxReaders: 2})
	id, _ := w.AddVar("x", "float32", 16, 100, 100)
	var c Call
	patternCall(&c, int32(id), reader, 9, 16)
	b.ReportAllocs()
	for b.Loop() {
		w.Record(&c)
	}
}

func BenchmarkRecordParallel(b *testing.B) {
	w := newTestWriter(b, WriterOptions{MaxVars: 2, MaxReaders: 64})
	id, _ := w.AddVar("x", "float32", 16, 100, 100)
	var next int32
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var c Call
		patternCall(&c, int32(id), 0, 9, 16)
		c.Reader = atomicAdd32(&next)
		for pb.Next() {
			w.Record(&c)
		}
	})
}

func TestHistogram(t *testing.T) {
	for _, v := range []int64{-5, 0, 1, 2, 3, 4, 7, 8, 1000, 1 << 30, 1<<38 - 1, 1 << 38, math.MaxInt64} {
		i := BucketIndex(v)
		if want := histBucket(v); i != want { // the documented rule (fuzz_model_test.go)
			t.Errorf("value %d in bucket %d, NumBuckets' rule puts it in %d", v, i, want)
		}
		lo, hi := BucketBounds(i)
		if v >= 0 && (v < lo || v >= hi) && !(v == math.MaxInt64 && i == NumBuckets-1) {
			t.Errorf("value %d in bucket %d [%d, %d)", v, i, lo, hi)
		}
		if bucketU(uint64(max(v, 0))) != i {
			t.Errorf("bucketU(%d) != BucketIndex", v)
		}
	}
	for i := 1; i < NumBuckets; i++ {
		_, prevHi := BucketBounds(i - 1)
		lo, _ := BucketBounds(i)
		if lo != prevHi {
			t.Errorf("bucket %d starts at %d, previous ends at %d", i, lo, prevHi)
		}
	}
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 {
		t.Fatal("empty histogram quantile/mean not 0")
	}
	// 90 values of 1000 ns, 10 of 1e6 ns.
	for range 90 {
		h[BucketIndex(1000)]++
	}
	for range 10 {
		h[BucketIndex(1_000_000)]++
	}
	p50, p99 := Quantile(h, 0.5), h.Quantile(0.99)
	if p50 < 512 || p50 >= 1024 {
		t.Errorf("p50 %v, want in [512, 1024)", p50)
	}
	if p99 < 1<<19 || p99 >= 1<<20 {
		t.Errorf("p99 %v, want in [2^19, 2^20)", p99)
	}
	if h.Quantile(0) > h.Quantile(0.5) || h.Quantile(0.5) > h.Quantile(1) || h.Quantile(2) != h.Quantile(1) || h.Quantile(math.NaN()) != h.Quantile(0) {
		t.Error("quantile not monotonic or not clamped")
	}
	if h.Count() != 100 || h.Add(h).Count() != 200 || h.Add(h).Sub(h) != h {
		t.Error("Count/Add/Sub")
	}
	if m := h.Mean(); m < 0.9*768+0.1*(1<<19) || m > 0.9*1024+0.1*(1<<20) {
		t.Errorf("mean %v", m)
	}
	if PhaseNames[PhaseCQWait] != "cq_wait" || len(PhaseNames) != NumPhases {
		t.Error("PhaseNames")
	}
}

func TestOptionsValidate(t *testing.T) {
	bad := []WriterOptions{
		{Rank: 1, World: 1}, {Rank: -1}, {RingSize: 3}, {RingSize: 1 << 21}, {MaxVars: -1},
		{MaxVars: maxMaxVars + 1}, {MaxReaders: maxMaxReaders + 1}, {Pid: -2},
	}
	for _, o := range bad {
		if err := o.Validate(); !errors.Is(err, ErrOptions) {
			t.Errorf("%+v: Validate = %v, want ErrOptions", o, err)
		}
		o.Dir = t.TempDir()
		if _, err := Create(o); !errors.Is(err, ErrOptions) {
			t.Errorf("%+v: Create = %v, want ErrOptions", o, err)
		}
	}
	if err := (WriterOptions{}).Validate(); err != nil {
		t.Errorf("zero options: %v", err)
	}
	// A missing directory is made (TestCreateMakesTheDirectory); one that
	// cannot be made is an error naming it.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(WriterOptions{Dir: filepath.Join(file, "missing")}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Create in a directory that cannot be made: %v", err)
	}
}

func TestSecondWriterSameRankRefused(t *testing.T) {
	dir := t.TempDir()
	w := newTestWriter(t, WriterOptions{Dir: dir, Job: "j", MaxVars: 1, MaxReaders: 1, RingSize: 1})
	if _, err := Create(WriterOptions{Dir: dir, Job: "j", MaxVars: 1, MaxReaders: 1, RingSize: 1}); !errors.Is(err, ErrInUse) {
		t.Fatalf("second Create: %v, want ErrInUse", err)
	}
	if _, err := os.Stat(w.Path()); err != nil {
		t.Fatalf("first segment gone: %v", err)
	}
}

func TestStaleAndOtherHost(t *testing.T) {
	dir := t.TempDir()
	w := newTestWriter(t, WriterOptions{Dir: dir, Job: "a", MaxVars: 1, MaxReaders: 1, RingSize: 1})
	w.m.store(hHeartbeat, uint64(time.Now().Add(-time.Minute).UnixNano()))
	o := newTestWriter(t, WriterOptions{Dir: dir, Job: "b", Host: "elsewhere", MaxVars: 1, MaxReaders: 1, RingSize: 1})
	infos, err := Discover(dir)
	if err != nil || len(infos) != 2 {
		t.Fatalf("Discover: %v %+v", err, infos)
	}
	if infos[0].Job != "a" || infos[0].State != StateStale || !infos[0].Alive || infos[0].HeartbeatAge < 50*time.Second {
		t.Errorf("stale writer: %+v", infos[0])
	}
	if infos[1].Job != "b" || infos[1].State != StateLive || !infos[1].Alive || infos[1].Host != "elsewhere" {
		t.Errorf("other-host writer: %+v", infos[1])
	}
	// A stale writer on another host cannot be checked by pid: replaceable.
	o.m.store(hHeartbeat, uint64(time.Now().Add(-time.Minute).UnixNano()))
	info, _ := inspect(o.Path())
	if info.State != StateStale || info.Alive {
		t.Errorf("stale other-host writer: %+v", info)
	}
	o2, err := Create(WriterOptions{Dir: dir, Job: "b", MaxVars: 1, MaxReaders: 1, RingSize: 1})
	if err != nil {
		t.Fatalf("replace stale other-host segment: %v", err)
	}
	o2.Close()
	w.Heartbeat()
	if info, _ := inspect(w.Path()); info.State != StateLive {
		t.Errorf("after Heartbeat: %+v", info)
	}
	w.StartHeartbeat(10 * time.Millisecond)
	w.m.store(hHeartbeat, 0)
	// The beat comes within a few periods; a loaded machine may delay it,
	// so wait for it (a writer that never beats fails at the deadline).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		info, _ := inspect(w.Path())
		if info.State == StateLive && info.HeartbeatAge < StaleAfter {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("StartHeartbeat did not beat in 30s: %+v", info)
		}
	}
}

// TestSharedLastStripe: the last stripe (reader id MaxReaders-1) also
// counts every id >= MaxReaders, so several goroutines record there at
// once (atomic adds) while owned stripes have one writer each and an
// in-process reader snapshots concurrently. Totals must be exact, every
// snapshot must have each counted call fully included, and no field may
// go backwards.
func TestSharedLastStripe(t *testing.T) {
	const perWorker = 100000
	const readers = 3
	w := newTestWriter(t, WriterOptions{MaxVars: 1, MaxReaders: readers, RingSize: 256})
	id, _ := w.AddVar("x", "uint8", 2, 100, 100)
	s := openTest(t, w.Path())
	type job struct{ reader, stripe int32 }
	jobs := []job{{0, 0}, {1, 1}, {2, 2}, {2, 2}, {3, 2}, {1000, 2}}
	var want [readers]Counters
	done := recordAtOnce(w, len(jobs), perWorker, 256, func(c *Call, g, i int) {
		patternCall(c, int32(id), jobs[g].reader, 1+int64(i*5+g)%17, 2)
	}, func(g int, sum Counters) { want[jobs[g].stripe] = want[jobs[g].stripe].Add(sum) })
	var prev [readers]Counters
	check := func(snap *Snapshot) {
		t.Helper()
		if len(snap.Vars) != 1 {
			t.Fatalf("snapshot has %d vars", len(snap.Vars))
		}
		for r, c := range snap.Vars[0].Readers {
			if c.Rows < c.Calls || c.Bytes < 2*c.Calls || int64(c.CallHist.Count()) < c.Calls ||
				int64(c.RowHist.Count()) < c.Calls || c.PhaseNs[PhaseOther] < c.Calls*700 {
				t.Fatalf("reader %d: fields behind calls: %+v", r, c)
			}
			d := c.Sub(prev[r])
			if d.Calls < 0 || d.Rows < 0 || d.Bytes < 0 || d.Errors < 0 || d.PhaseNs[PhaseGPUSync] < 0 {
				t.Fatalf("reader %d went backwards: %+v", r, d)
			}
			prev[r] = c
		}
	}
	snaps := 0
	deadline := time.After(2 * time.Minute)
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-deadline:
			t.Fatal("writers did not finish within 2 minutes")
		default:
			time.Sleep(50 * time.Microsecond)
		}
		snap := snapshot(t, s)
		check(snap)
		snaps++
		if !running {
			for r := range readers {
				if prev[r] != want[r] {
					t.Errorf("stripe %d:\n got %+v\nwant %+v", r, prev[r], want[r])
				}
			}
			if snap.BadReaderCalls != 2*perWorker {
				t.Errorf("bad reader calls %d, want %d", snap.BadReaderCalls, 2*perWorker)
			}
			if heads := ringHeads(t, s); heads != uint64(len(jobs)*perWorker) {
				t.Errorf("ring heads %d, want %d", heads, len(jobs)*perWorker)
			}
		}
	}
	t.Logf("%d snapshots", snaps)
}

// TestRecordTime: ring records carry the wall time of Record, from a
// monotonic clock anchored at Create and re-anchored by Heartbeat (so a
// step of the wall clock is followed). No slack: the anchor (wall minus
// monotonic time) is bounded by readings of both clocks taken around the
// call that sets it, and each record's end by monotonic readings taken
// around Record (EndNano, when given, is read inside them).
func TestRecordTime(t *testing.T) {
	var w *Writer
	lo0, hi0 := anchorBounds(func() { w = newTestWriter(t, WriterOptions{MaxVars: 1, MaxReaders: 1, RingSize: 8}) })
	id, _ := w.AddVar("x", "uint8", 1, 10, 10)
	s := openTest(t, w.Path())
	var c Call
	patternCall(&c, int32(id), 0, 4, 1)
	// check records c, ending ago before Record (EndNano; 0: Record reads
	// the clock), and wants its record's time within the end's bounds
	// plus the anchor's [aLo, aHi].
	check := func(what string, ago, aLo, aHi int64) {
		t.Helper()
		head := s.RingHead()
		lo := Nanotime()
		c.EndNano = 0
		if ago != 0 {
			c.EndNano = Nanotime() - ago
		}
		w.Record(&c)
		hi := Nanotime()
		var buf [1]Record
		if n, _, _, err := s.ReadRing(head, buf[:]); n != 1 || err != nil {
			t.Fatalf("%s: ReadRing(%d) = %d, %v", what, head, n, err)
		}
		if lo, hi = lo-ago+aLo, hi-ago+aHi; buf[0].TimeNs < lo || buf[0].TimeNs > hi {
			t.Fatalf("%s: record time %d not in [%d, %d]", what, buf[0].TimeNs, lo, hi)
		}
	}
	check("after Create", 0, lo0, hi0)
	// Pretend the wall clock was stepped by an hour since the anchor.
	w.wallOffset.Add(int64(time.Hour))
	check("an hour after the anchor", 0, lo0+int64(time.Hour), hi0+int64(time.Hour))
	lo1, hi1 := anchorBounds(w.Heartbeat) // re-anchors
	check("after Heartbeat", 0, lo1, hi1)
	// A caller's end time is used as given: one second ago.
	check("EndNano a second ago", int64(time.Second), lo1, hi1)
}

// anchorBounds runs f, which anchors a writer's record clock (unix ns =
// Nanotime() + the wall time minus Nanotime(), both read inside f), and
// returns bounds on that offset from readings of both clocks around f.
func anchorBounds(f func()) (lo, hi int64) {
	wallBefore, monoBefore := time.Now().UnixNano(), Nanotime()
	f()
	monoAfter, wallAfter := Nanotime(), time.Now().UnixNano()
	return wallBefore - monoAfter, wallAfter - monoBefore
}

// TestConcurrentCalls: several goroutines recording Concurrent calls on
// one owned (var, reader) pair, as the store's shared path does, give
// exact totals; the Concurrent path does not allocate either.
func TestConcurrentCalls(t *testing.T) {
	const workers, perWorker = 6, 20000
	w := newTestWriter(t, WriterOptions{MaxVars: 1, MaxReaders: 4, RingSize: 256})
	id, _ := w.AddVar("x", "uint8", 3, 100, 100)
	s := openTest(t, w.Path())
	var want Counters
	<-recordAtOnce(w, workers, perWorker, 128, func(c *Call, g, i int) {
		patternCall(c, int32(id), 0, 1+int64(i*7+g)%23, 3)
		c.Concurrent = true
	}, func(_ int, sum Counters) { want = want.Add(sum) })
	snap := snapshot(t, s)
	if got := snap.Vars[0].Readers[0]; got != want {
		t.Fatalf("stripe 0 lost counts:\n got %+v\nwant %+v", got, want)
	}
	if want.Calls != workers*perWorker {
		t.Fatalf("want.Calls %d", want.Calls)
	}
	for r := 1; r < len(snap.Vars[0].Readers); r++ {
		if c := snap.Vars[0].Readers[r]; c.Calls != 0 {
			t.Fatalf("stripe %d got calls %d", r, c.Calls)
		}
	}
	var c Call
	patternCall(&c, int32(id), 1, 5, 3)
	c.Concurrent = true
	if n := testing.AllocsPerRun(1000, func() { w.Record(&c) }); n != 0 {
		t.Fatalf("Concurrent Record allocates %v per call", n)
	}
}

// DiscoverOpen describes a file still mapped from the mapping, and a file
// replaced since it was opened (a new writer for the same rank) from the
// new file.
func TestDiscoverOpen(t *testing.T) {
	dir := t.TempDir()
	w1, err := Create(WriterOptions{Dir: dir, Job: "j", Rank: 1, World: 2, Host: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	infos, err := Discover(dir)
	if err != nil || len(infos) != 1 {
		t.Fatalf("Discover: %v %v", infos, err)
	}
	seg := openTest(t, infos[0].Path)
	asked := 0
	open := func(path string) *Segment {
		asked++
		if path == seg.Path() {
			return seg
		}
		return nil
	}
	got, err := DiscoverOpen(dir, open)
	if err != nil || len(got) != 1 || asked != 1 {
		t.Fatalf("DiscoverOpen: %v %v (asked %d)", got, err, asked)
	}
	if a, b := got[0], infos[0]; a.Path != b.Path || a.Job != b.Job || a.Rank != b.Rank || a.World != b.World ||
		a.Pid != b.Pid || a.StartNs != b.StartNs || a.State != b.State {
		t.Fatalf("DiscoverOpen from the mapping %+v, Discover %+v", a, b)
	}
	first := got[0].StartNs
	w1.Close()
	time.Sleep(time.Millisecond)
	w2, err := Create(WriterOptions{Dir: dir, Job: "j", Rank: 1, World: 2, Host: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	got, err = DiscoverOpen(dir, open)
	if err != nil || len(got) != 1 {
		t.Fatalf("DiscoverOpen after replace: %v %v", got, err)
	}
	fresh, _ := Discover(dir)
	if got[0].StartNs == first || got[0].StartNs != fresh[0].StartNs {
		t.Fatalf("replaced segment: DiscoverOpen start %d, old %d, Discover %d", got[0].StartNs, first, fresh[0].StartNs)
	}
}
