package telemetry

import (
	"path/filepath"
	"testing"
)

// TestV1SegmentStillReads opens a segment written by the version 1 writer
// (testdata/v1-segment.tel: job v1job, rank 1 of 3, variable x of 8-byte
// rows, six pattern calls of 1..6 rows on readers i%2, ring of 4, one
// loader batch) and checks every counter against the calls that made it.
func TestV1SegmentStillReads(t *testing.T) {
	s := openTest(t, filepath.Join("testdata", "v1-segment.tel"))
	snap := snapshot(t, s)
	if snap.Version != 1 || snap.Job != "v1job" || snap.Rank != 1 || snap.World != 3 || snap.MaxPeers != 0 || snap.Peers != nil {
		t.Fatalf("header %+v peers %v", snap.Header, snap.Peers)
	}
	x := snap.Var("x")
	if x == nil || len(x.Readers) != 2 {
		t.Fatalf("vars %+v", snap.Vars)
	}
	var want [2]Counters
	var c Call
	for i := int64(1); i <= 6; i++ {
		patternCall(&c, int32(x.ID), int32(i%2), i, 8)
		c.MRRegs, c.Failovers = 0, 0 // not in v1
		addCall(&want[i%2], &c)
	}
	for r := range want {
		if x.Readers[r] != want[r] {
			t.Errorf("reader %d: got %+v\nwant %+v", r, x.Readers[r], want[r])
		}
	}
	if snap.Loader.Batches != 1 || snap.Loader.WaitNs != 10 || snap.Loader.StepNs != 1000 || snap.Loader.Config != (LoaderConfig{}) {
		t.Errorf("loader %+v", snap.Loader)
	}
	recs := make([]Record, 8)
	n, next, dropped, err := s.ReadRing(0, recs)
	if err != nil || n != 4 || next != 6 || dropped != 2 {
		t.Fatalf("ReadRing: n %d next %d dropped %d err %v", n, next, dropped, err)
	}
	for i, rec := range recs[:n] {
		rows := int64(i + 3)
		mask := uint64(1)<<uint(rows%64) | 1
		if rec.Rows != rows || rec.Targets != mask || rec.NTargets != 2 || rec.FirstTargets[0] != 0 ||
			rec.FirstTargets[1] != int32(rows) || rec.FirstTargets[2] != -1 || rec.MRRegs != 0 {
			t.Errorf("record %d: %+v", i, rec)
		}
	}
}

func TestTargetSet(t *testing.T) {
	var s TargetSet
	if s.Len() != 0 || s.Named() != 0 || s.Mask() != 0 {
		t.Fatal("zero set not empty")
	}
	// Runs of rows, repeats, ranks above 64 and 1024, more than MaxCallTargets.
	adds := []struct {
		rank int
		rows int64
	}{{3, 1}, {3, 2}, {70, 5}, {3, 1}, {0, 4}, {2000, 1}, {70, 1}, {2000, 2}}
	for _, a := range adds {
		s.Add(a.rank, a.rows)
	}
	s.Add(-1, 100) // ignored
	if s.Len() != 4 || s.Named() != 4 || s.Mask() != 1<<3|1 || s.OtherRows() != 0 {
		t.Fatalf("set %+v", s)
	}
	wantRank, wantRows := []int{3, 70, 0, 2000}, []int64{4, 6, 4, 3}
	for i := range wantRank {
		if s.Rank(i) != wantRank[i] || s.Rows(i) != wantRows[i] {
			t.Errorf("target %d: rank %d rows %d, want %d %d", i, s.Rank(i), s.Rows(i), wantRank[i], wantRows[i])
		}
	}
	// 20 distinct ranks below 1024, each added twice: counted exactly,
	// the first 12 named, the rest in OtherRows.
	var b TargetSet
	for k := 0; k < 2; k++ {
		for r := 100; r < 120; r++ {
			b.Add(r, 1)
		}
	}
	if b.Len() != 20 || b.Named() != MaxCallTargets || b.OtherRows() != 16 || b.Rows(0) != 2 || b.Rank(11) != 111 {
		t.Fatalf("big set: len %d named %d other %d", b.Len(), b.Named(), b.OtherRows())
	}
}

// TestPeerTable records calls with known targets and checks the peer
// slots: a single-target call is timed exactly, a call over several
// targets is split by rows, errors go to Call.ErrPeer's rank, ranks at or
// above MaxPeers share the last slot.
func TestPeerTable(t *testing.T) {
	w := newTestWriter(t, WriterOptions{Dir: t.TempDir(), Rank: 0, World: 4, MaxVars: 1, MaxReaders: 2, RingSize: 8})
	id, _ := w.AddVar("x", "uint8", 10, 100, 25)
	var c Call
	// Call 1: 4 rows from rank 1 only, 4000 ns of which 1000 lock wait.
	c = Call{Var: int32(id), Reader: 1, Rows: 4, Bytes: 40}
	c.Targets.Add(1, 4)
	c.Phases[PhaseLockWait], c.Phases[PhaseCQWait] = 1000, 3000
	w.Record(&c)
	// Call 2: 1 row from rank 2, 3 from rank 3, 8000 ns; failed on rank 3.
	c = Call{Var: int32(id), Reader: 1, Rows: 4, Bytes: 40, Err: true, ErrPeer: 4}
	c.Targets.Add(2, 1)
	c.Targets.Add(3, 3)
	c.Phases[PhasePost] = 8000
	w.Record(&c)
	// Call 3: rank 9 (>= MaxPeers 4) lands in slot 3.
	c = Call{Var: int32(id), Reader: 0, Rows: 2, Bytes: 20, Concurrent: true, MRRegs: 3}
	c.Targets.Add(9, 2)
	c.Phases[PhaseMR] = 600
	w.Record(&c)
	w.SetLoaderConfig(LoaderConfig{Workers: 4, Prefetch: 8, Readers: LoaderReadersShared, BatchRows: 64})
	w.AddProc(ProcQuarantinedReaders, 2)
	w.AddProc(ProcLeakedBuffers, 1)
	w.AddProc(NumProc, 1) // ignored

	s := openTest(t, w.Path())
	snap := snapshot(t, s)
	if snap.Version != Version || snap.MaxPeers != 4 {
		t.Fatalf("version %d maxPeers %d", snap.Version, snap.MaxPeers)
	}
	want := []PeerCounters{
		{Rank: 1, Calls: 1, Rows: 4, Bytes: 40, Ns: 3000},
		{Rank: 2, Calls: 1, Rows: 1, Bytes: 10, Ns: 2000},
		{Rank: 3, Calls: 2, Rows: 5, Bytes: 50, Ns: 6000 + 600, Errors: 1},
	}
	want[0].Hist[PeerBucketIndex(750)]++
	want[1].Hist[PeerBucketIndex(2000)]++
	want[2].Hist[PeerBucketIndex(2000)]++
	want[2].Hist[PeerBucketIndex(300)]++
	if len(snap.Peers) != len(want) {
		t.Fatalf("peers %+v", snap.Peers)
	}
	for i := range want {
		if snap.Peers[i] != want[i] {
			t.Errorf("peer %d: got %+v\nwant %+v", i, snap.Peers[i], want[i])
		}
	}
	if p := snap.Peer(3); p == nil || p.Calls != 2 {
		t.Errorf("Peer(3) = %+v", p)
	}
	tot := snap.Total()
	if tot.MRRegs != 3 || tot.Calls != 3 {
		t.Errorf("total %+v", tot)
	}
	if snap.Loader.Config != (LoaderConfig{Workers: 4, Prefetch: 8, Readers: LoaderReadersShared, BatchRows: 64}) {
		t.Errorf("loader config %+v", snap.Loader.Config)
	}
	if snap.Proc[ProcQuarantinedReaders] != 2 || snap.Proc[ProcLeakedBuffers] != 1 || snap.Proc[2] != 0 {
		t.Errorf("proc %v", snap.Proc)
	}
	recs := make([]Record, 4)
	n, _, _, _ := s.ReadRing(0, recs)
	if n != 3 || recs[1].NTargets != 2 || recs[1].FirstTargets[0] != 2 || recs[1].FirstTargets[1] != 3 ||
		recs[1].FirstTargets[2] != -1 || recs[2].FirstTargets[0] != 9 || recs[2].MRRegs != 3 || recs[2].Targets != 1<<9 {
		t.Errorf("ring %+v", recs[:n])
	}
	// A call over many targets stays allocation-free.
	var big Call
	big.Var, big.Reader, big.Rows = int32(id), 1, 64
	for r := 0; r < 64; r++ {
		big.Targets.Add(r, 1)
	}
	if a := testing.AllocsPerRun(500, func() { w.Record(&big) }); a != 0 {
		t.Errorf("Record with 64 targets: %v allocs", a)
	}
}

func TestPeerBuckets(t *testing.T) {
	for _, v := range []int64{0, 1, 3, 4, 15, 16, 1000, 1 << 27, 1 << 28, 1 << 40} {
		i := PeerBucketIndex(v)
		lo, hi := PeerBucketBounds(i)
		if v < lo || v >= hi {
			t.Errorf("%d in bucket %d [%d,%d)", v, i, lo, hi)
		}
	}
	var h PeerHistogram
	h[PeerBucketIndex(1000)] = 10
	if q := h.Quantile(0.5); q < 256 || q >= 1024 {
		t.Errorf("median %v", q)
	}
}

// TestPeerServedTimes: targets with a measured service time get it; the
// rest of the call is split by rows among the others.
func TestPeerServedTimes(t *testing.T) {
	w := newTestWriter(t, WriterOptions{Dir: t.TempDir(), Rank: 0, World: 4, MaxVars: 1, MaxReaders: 2, RingSize: 8})
	id, _ := w.AddVar("x", "uint8", 10, 100, 25)
	c := Call{Var: int32(id), Reader: 1, Rows: 8, Bytes: 80}
	c.Targets.Add(1, 2)
	c.Targets.Add(2, 2)
	c.Targets.Add(0, 4) // local, not measured
	c.Targets.Add(1, 0)
	c.Targets.Served(1, 9000)
	c.Targets.Served(1, 4000) // the latest completion counts
	c.Targets.Served(2, 1000)
	c.Targets.Served(3, 5000) // not a target: ignored
	c.Phases[PhaseCQWait], c.Phases[PhaseCopy] = 10000, 2000
	w.Record(&c)
	snap := snapshot(t, openTest(t, w.Path()))
	want := map[int]int64{0: 2000, 1: 9000, 2: 1000}
	if len(snap.Peers) != 3 {
		t.Fatalf("peers %+v", snap.Peers)
	}
	for _, p := range snap.Peers {
		if p.Ns != want[p.Rank] || p.Calls != 1 {
			t.Errorf("peer %d: ns %d, want %d", p.Rank, p.Ns, want[p.Rank])
		}
	}
	if c.Targets.ServedNs(0) != 9000 || c.Targets.ServedNs(2) != 0 {
		t.Errorf("ServedNs %d %d", c.Targets.ServedNs(0), c.Targets.ServedNs(2))
	}
}
