package telemetry

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestV2SegmentStillReads opens a segment written by the version 2 writer
// (testdata/v2-segment.tel: job v2job, rank 1 of 3, variable x of 8-byte
// rows, six pattern calls of 1..6 rows on readers i%3, reader 0's
// Concurrent, call 5 failed on rank 2, a failover from rank 2 to 0, ring
// of 4, one loader batch) and requires exactly what the version 2 reader
// (commit 85c38d3) read from it: testdata/v2-segment.json.
func TestV2SegmentStillReads(t *testing.T) {
	s := openTest(t, filepath.Join("testdata", "v2-segment.tel"))
	snap := snapshot(t, s)
	if snap.Version != 2 || snap.Job != "v2job" || snap.MaxPeers != 3 || snap.PeerLanes != 1 {
		t.Fatalf("header %+v", snap.Header)
	}
	recs := make([]Record, 8)
	n, next, dropped, err := s.ReadRing(0, recs)
	if err != nil {
		t.Fatal(err)
	}
	got := v2View(snap, recs[:n], next, dropped)
	want, err := os.ReadFile(filepath.Join("testdata", "v2-segment.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("v2 segment read differently:\n%s\nwant\n%s", got, want)
	}
}

// v2View is the JSON the version 2 reader's output was saved as.
func v2View(snap *Snapshot, ring []Record, next, dropped uint64) []byte {
	out := struct {
		Version       int
		Vars          []VarSnapshot
		Peers         []PeerCounters
		Loader        LoaderCounters
		Proc          [NumProc]int64
		Ring          []Record
		Next, Dropped uint64
	}{snap.Version, snap.Vars, snap.Peers, snap.Loader, snap.Proc, ring, next, dropped}
	b, _ := json.MarshalIndent(out, "", " ")
	return append(b, '\n')
}

// laneCall is call i of a lanes test: targets, errors and sizes vary with
// i so that every peer field moves.
func laneCall(c *Call, v, r int32, i int64) {
	patternCall(c, v, r, 1+i%9, 16)
	c.Targets.Add(int(i%5), 1+i%3)
	c.Err = i%7 == 0
	c.ErrPeer = int32(i%4) + 1
	if i%3 == 0 {
		c.Targets.Served(int(i%5), 100+i)
	}
}

// TestPeerLanesInvisible: the same calls recorded into a segment of one
// peer lane (every count an atomic add in lane 0, as in version 2) and
// into one of five lanes (owned readers in their own lanes, shared calls
// in lane 0) read back as the same peer table. The lanes-used mark covers
// exactly the lanes written.
func TestPeerLanesInvisible(t *testing.T) {
	one := newTestWriter(t, WriterOptions{World: 6, MaxVars: 1, MaxReaders: 4, RingSize: 8, PeerLanes: 1})
	five := newTestWriter(t, WriterOptions{World: 6, MaxVars: 1, MaxReaders: 4, RingSize: 8})
	if five.g.peerLanes != 5 {
		t.Fatalf("default lanes for 4 readers: %d, want 5", five.g.peerLanes)
	}
	var c Call
	for _, w := range []*Writer{one, five} {
		id, _ := w.AddVar("x", "uint8", 16, 100, 100)
		for i := int64(0); i < 60; i++ {
			switch i % 4 {
			case 0:
				laneCall(&c, int32(id), 0, i) // lane 1
			case 1:
				laneCall(&c, int32(id), 1, i) // shared: lane 0
				c.Concurrent = true
			case 2:
				laneCall(&c, int32(id), 2, i) // lane 3
			default:
				laneCall(&c, int32(id), 3, i) // the last stripe: lane 0
			}
			w.Record(&c)
		}
		w.Failover(4, 1, 7)
	}
	if got := five.m.load(hLanesUsed); got != 1<<0|1<<1|1<<3 {
		t.Errorf("lanesUsed %b, want lanes 0, 1 and 3 written", got)
	}
	a, b := snapshot(t, openTest(t, one.Path())), snapshot(t, openTest(t, five.Path()))
	if b.PeerLanes != 5 || len(a.Peers) != 6 || len(a.Peers) != len(b.Peers) {
		t.Fatalf("lanes %d, peers %+v and %+v", b.PeerLanes, a.Peers, b.Peers)
	}
	for i := range a.Peers {
		if a.Peers[i] != b.Peers[i] {
			t.Errorf("peer %d: one lane %+v\nfive lanes %+v", i, a.Peers[i], b.Peers[i])
		}
	}
	if a.Peers[4].FailedFrom != 7 || a.Peers[1].ServedFor != 7 {
		t.Errorf("failover counts %+v %+v", a.Peers[4], a.Peers[1])
	}
}

// TestPeerLanesConcurrent: owned readers (in their lanes, and one beyond
// the lanes, in lane 0), shared calls from two goroutines and failovers
// all record at once while a reader snapshots: no peer counter goes
// backwards, and the final table equals the same calls recorded one at a
// time into a one-lane segment.
func TestPeerLanesConcurrent(t *testing.T) {
	const per = 20000
	o := WriterOptions{World: 5, MaxVars: 1, MaxReaders: 8, RingSize: 64, PeerLanes: 3}
	w := newTestWriter(t, o)
	id, _ := w.AddVar("x", "uint8", 16, 100, 100)
	s := openTest(t, w.Path())
	type job struct {
		reader     int32
		concurrent bool
	}
	jobs := []job{{0, false}, {1, false}, {4, false}, {6, true}, {6, true}, {7, false}, {7, false}}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c Call
			for i := int64(0); i < per; i++ {
				laneCall(&c, int32(id), j.reader, i*int64(len(jobs))+int64(g))
				c.Concurrent = j.concurrent
				w.Record(&c)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range per {
			w.Failover(i%5, (i+1)%5, 1)
		}
	}()
	watched := make(chan error, 1)
	go func() {
		var prev [5]PeerCounters
		for {
			select {
			case <-stop:
				watched <- nil
				return
			default:
			}
			snap, err := s.Snapshot()
			if err != nil {
				watched <- err
				return
			}
			for _, p := range snap.Peers {
				q := prev[p.Rank]
				if p.Calls < q.Calls || p.Rows < q.Rows || p.Bytes < q.Bytes || p.Ns < q.Ns || p.Errors < q.Errors ||
					p.FailedFrom < q.FailedFrom || p.ServedFor < q.ServedFor {
					watched <- errors.New("peer counters went backwards")
					return
				}
				prev[p.Rank] = p
			}
		}
	}()
	wg.Wait()
	close(stop)
	if err := <-watched; err != nil {
		t.Fatal(err)
	}

	o.PeerLanes = 1
	model := newTestWriter(t, o)
	mid, _ := model.AddVar("x", "uint8", 16, 100, 100)
	var c Call
	for g, j := range jobs {
		for i := int64(0); i < per; i++ {
			laneCall(&c, int32(mid), j.reader, i*int64(len(jobs))+int64(g))
			c.Concurrent = true
			model.Record(&c)
		}
	}
	for i := range per {
		model.Failover(i%5, (i+1)%5, 1)
	}
	got, want := snapshot(t, s).Peers, snapshot(t, openTest(t, model.Path())).Peers
	if len(got) != len(want) {
		t.Fatalf("peers %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("peer %d: got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// TestPeerLaneDefaults: one lane per reader id up to DefaultPeerLanes-1
// plus the shared lane, fewer in big worlds (the table stays within
// DefaultPeerLaneBytes), never none.
func TestPeerLaneDefaults(t *testing.T) {
	for _, c := range []struct{ world, readers, lanes int }{
		{4, 0, DefaultPeerLanes}, {4, 2, 3}, {1365, 0, 16}, {2000, 0, 10}, {1 << 16, 0, 1},
	} {
		o := WriterOptions{World: c.world, MaxReaders: c.readers}.withDefaults()
		if o.PeerLanes != c.lanes {
			t.Errorf("world %d readers %d: %d lanes, want %d", c.world, c.readers, o.PeerLanes, c.lanes)
		}
		if c.lanes > 1 && o.PeerLanes*o.MaxPeers*peerSlotBytes > DefaultPeerLaneBytes {
			t.Errorf("world %d: %d lanes pass the budget", c.world, o.PeerLanes)
		}
	}
	for _, n := range []int{-1, maxPeerLanes + 1} {
		if err := (WriterOptions{PeerLanes: n}).Validate(); !errors.Is(err, ErrOptions) {
			t.Errorf("PeerLanes %d: %v", n, err)
		}
	}
}

// TestBadPeerLanes: a version 3 header whose lane count is out of range,
// or does not match the file's layout, is refused as corrupt.
func TestBadPeerLanes(t *testing.T) {
	good := validSegmentBytes(t)
	dir := t.TempDir()
	for name, b := range map[string][]byte{
		"zero lanes":     put(good, hPeerLanes, 0),
		"too many lanes": put(good, hPeerLanes, maxPeerLanes+1),
		"other lanes":    put(good, hPeerLanes, 2),
	} {
		path := filepath.Join(dir, "ddstore-bad-0.tel")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(path); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

// TestPeerBucketPerRow: the division-free bucket of ns/rows against the
// bucket of the quotient, at the edges of every power of two and at random.
func TestPeerBucketPerRow(t *testing.T) {
	model := func(ns, rows uint64) int {
		if rows > 0 {
			ns /= rows
		}
		return min((bits.Len64(ns)+1)/2, NumPeerBuckets-1)
	}
	var vals []uint64
	for b := 0; b < 64; b++ {
		p := uint64(1) << b
		vals = append(vals, p-1, p, p+1, 3*p/2)
	}
	vals = append(vals, 0, math.MaxUint64, 1000, 999, 12345)
	check := func(ns, rows uint64) {
		if got, want := peerBucketPerRow(ns, rows), model(ns, rows); got != want {
			t.Fatalf("ns %d rows %d: bucket %d, want %d", ns, rows, got, want)
		}
	}
	for _, ns := range vals {
		for _, rows := range vals {
			check(ns, rows)
			if rows > 0 {
				check(ns, ns/rows)          // quotients near ns's divisors
				check(rows*(ns%97+1), rows) // exact multiples
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		ns := rng.Uint64() >> rng.UintN(64)
		check(ns, rng.Uint64()>>rng.UintN(64))
	}
}

// TestPeerMarks: each peer slot written is marked in its lane's words
// (ranks at or above MaxPeers in the last slot's bit), a snapshot reads
// the marked slots only, and it finds the same table as a full scan (a
// reader that ignores the scan-marks feature).
func TestPeerMarks(t *testing.T) {
	w := newTestWriter(t, WriterOptions{World: 200, MaxVars: 1, MaxReaders: 4, RingSize: 8})
	id, _ := w.AddVar("x", "uint8", 16, 100, 100)
	c := Call{Var: int32(id), Reader: 1, Rows: 4, Bytes: 64}
	c.Targets.Add(3, 1)
	c.Targets.Add(130, 2)
	c.Targets.Add(500, 1) // slot 199
	c.Phases[PhaseCopy] = 4000
	w.Record(&c)
	w.Failover(64, 65, 1) // lane 0
	g := &w.g
	want := map[[2]int64]bool{{2, 3}: true, {2, 130}: true, {2, 199}: true, {0, 64}: true, {0, 65}: true}
	for l := int64(0); l < g.peerLanes; l++ {
		for r := int64(0); r < g.maxPeers; r++ {
			off, bit := g.mark(l, r)
			if got := w.m.load(off)&bit != 0; got != want[[2]int64{l, r}] {
				t.Errorf("lane %d rank %d marked %v", l, r, got)
			}
		}
	}
	b, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	full := filepath.Join(dir, "ddstore-full-0.tel")
	if err := os.WriteFile(full, put(b, hFeatures, 0), 0o600); err != nil {
		t.Fatal(err)
	}
	got, scan := snapshot(t, openTest(t, w.Path())).Peers, snapshot(t, openTest(t, full)).Peers
	ranks := []int{3, 64, 65, 130, 199}
	if len(got) != len(ranks) || len(scan) != len(got) {
		t.Fatalf("peers %+v, full scan %+v", got, scan)
	}
	for i := range got {
		if got[i].Rank != ranks[i] || got[i] != scan[i] {
			t.Errorf("peer %d: %+v, full scan %+v", i, got[i], scan[i])
		}
	}
}
