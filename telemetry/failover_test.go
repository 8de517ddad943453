package telemetry

import "testing"

// Writer.Failover counts moved reads in the owner's and the replica's
// peer slots; a slot with only failovers is listed; a closed writer and
// bad ranks count nothing; Sub subtracts them.
func TestFailoverPeerCounters(t *testing.T) {
	w := newTestWriter(t, WriterOptions{Dir: t.TempDir(), Rank: 0, World: 4, MaxVars: 1, MaxReaders: 2, RingSize: 8})
	w.Failover(1, 3, 7)
	w.Failover(1, 3, 5)
	w.Failover(0, 2, 4)
	w.Failover(-1, 2, 9)
	w.Failover(9, 2, 1) // rank 9 >= MaxPeers 4: counted in the last slot
	s := openTest(t, w.Path())
	snap := snapshot(t, s)
	want := map[int][2]int64{0: {4, 0}, 1: {12, 0}, 2: {0, 5}, 3: {1, 12}}
	if len(snap.Peers) != len(want) {
		t.Fatalf("peers %+v", snap.Peers)
	}
	for _, p := range snap.Peers {
		if got := [2]int64{p.FailedFrom, p.ServedFor}; got != want[p.Rank] || p.Calls != 0 {
			t.Errorf("rank %d: failedFrom, servedFor = %v, want %v (%+v)", p.Rank, got, want[p.Rank], p)
		}
	}
	d := snap.Peers[1].Sub(PeerCounters{Rank: 1, FailedFrom: 10})
	if d.FailedFrom != 2 {
		t.Errorf("Sub: %+v", d)
	}
	w.Close()
	w.Failover(1, 3, 100) // after Close: nothing
}
