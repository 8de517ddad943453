package telemetry

import (
	"testing"
)

// TestLaneRings: owned reader ids below PeerLanes-1 record into their own
// lane ring, everything else into the shared ring. Calls of readers 0 and
// 1 (lane rings of 4 slots) and 3 (the last stripe: shared ring of 8)
// interleaved, with end times in call order: ReadRings from the start
// must return exactly the last 4, 4 and 8 of them, merged in call order,
// each with its ring and position, and count the rest as lost; a small
// dst resumes; SkipRings counts losses without copying; TailRings keeps
// the last records of each ring.
func TestLaneRings(t *testing.T) {
	w := newTestWriter(t, WriterOptions{MaxVars: 1, MaxReaders: 4, RingSize: 8, LaneRingSize: 4})
	id, _ := w.AddVar("x", "uint8", 2, 100, 100)
	s := openTest(t, w.Path())
	if s.Rings() != 5 || snapshot(t, s).LaneRingSize != 4 { // PeerLanes min(16, MaxReaders+1)
		t.Fatalf("rings %d, lane ring size %d; want 5, 4",
			s.Rings(), snapshot(t, s).LaneRingSize)
	}
	type rec struct {
		reader int32
		rows   int64
		ring   int
		seq    uint64
	}
	var all []rec
	pos := map[int]uint64{}
	var c Call
	readers := []int32{0, 1, 3, 3, 0, 1, 0, 3}
	for i := range 40 {
		r := readers[i%len(readers)]
		patternCall(&c, int32(id), r, int64(i+1), 2)
		c.EndNano = int64(1_000_000 + i*1000)
		w.Record(&c)
		ring := int(r) + 1
		if r == 3 {
			ring = 0
		}
		all = append(all, rec{r, int64(i + 1), ring, pos[ring]})
		pos[ring]++
	}
	// What each ring still holds: its last 4 (lanes) or 8 (shared) records.
	var want []rec
	var lost uint64
	for i, a := range all {
		size := uint64(4)
		if a.ring == 0 {
			size = 8
		}
		if pos[a.ring]-a.seq <= size {
			want = append(want, all[i])
		} else {
			lost++
		}
	}
	var cur RingCursor
	got := make([]Record, 64)
	n, dropped, err := s.ReadRings(&cur, got)
	if err != nil || n != len(want) || dropped != lost {
		t.Fatalf("ReadRings = %d, %d, %v; want %d, %d", n, dropped, err, len(want), lost)
	}
	for i, g := range got[:n] {
		wr := want[i]
		if g.Reader != wr.reader || g.Rows != wr.rows || g.Ring != wr.ring || g.Seq != wr.seq {
			t.Fatalf("record %d: reader %d rows %d ring %d seq %d; want %+v", i, g.Reader, g.Rows, g.Ring, g.Seq, wr)
		}
		if msg := checkPatternRecord(&g, 2); msg != "" {
			t.Fatal(msg)
		}
	}
	if cur.Pos[0] != pos[0] || cur.Pos[1] != pos[1] || cur.Pos[2] != pos[2] || cur.Pos[3] != 0 {
		t.Fatalf("cursor %v, want %v", cur.Pos[:4], pos)
	}
	// Nothing new: nothing read, nothing lost.
	if n, d, _ := s.ReadRings(&cur, got); n != 0 || d != 0 {
		t.Fatalf("ReadRings at the heads = %d, %d", n, d)
	}
	// A small dst: a second call takes the rest.
	var small RingCursor
	if err := s.TailRings(&small, 2); err != nil {
		t.Fatal(err)
	}
	n1, d1, _ := s.ReadRings(&small, got[:3])
	n2, d2, _ := s.ReadRings(&small, got[3:])
	if n1 != 3 || n2 != 3 || d1+d2 != 0 || small != cur {
		t.Fatalf("tail 2 in two reads: %d+%d records, %d+%d lost, cursor %v", n1, n2, d1, d2, small.Pos[:4])
	}
	// SkipRings: ten more calls of reader 0 pass its 4 slots by 6.
	var skip RingCursor
	skip = cur
	for i := range 10 {
		patternCall(&c, int32(id), 0, int64(100+i), 2)
		w.Record(&c)
	}
	if d, err := s.SkipRings(&skip); err != nil || d != 6 || skip.Pos[1] != pos[1]+10 {
		t.Fatalf("SkipRings = %d, %v, cursor %v; want 6 lost", d, err, skip.Pos[:4])
	}
	if n, d, _ := s.ReadRings(&cur, got); n != 4 || d != 6 || got[3].Rows != 109 {
		t.Fatalf("ReadRings after 10 calls = %d, %d lost, last rows %d", n, d, got[max(n, 1)-1].Rows)
	}
}

// TestV3SegmentStillReads: a segment written by the version 3 writer
// (testdata/v3-segment.tel: validSegmentBytes at c126efe, six pattern
// calls of 1..6 rows on readers i%2 into its one ring of 4 slots) reads
// as one ring: the last four calls in order, two lost.
func TestV3SegmentStillReads(t *testing.T) {
	s := openTest(t, "testdata/v3-segment.tel")
	snap := snapshot(t, s)
	if snap.Version != 3 || s.Rings() != 1 || snap.LaneRingSize != 0 || snap.Total().Calls != 6 {
		t.Fatalf("version %d, %d rings, lane ring size %d, %d calls", snap.Version, s.Rings(), snap.LaneRingSize, snap.Total().Calls)
	}
	var cur RingCursor
	recs := make([]Record, 8)
	n, dropped, err := s.ReadRings(&cur, recs)
	if err != nil || n != 4 || dropped != 2 || cur.Pos[0] != 6 {
		t.Fatalf("ReadRings = %d, %d lost, %v, cursor %d; want 4, 2, 6", n, dropped, err, cur.Pos[0])
	}
	for i, r := range recs[:n] {
		if r.Seq != uint64(2+i) || r.Rows != int64(3+i) || r.Reader != int32((3+i)%2) || r.Ring != 0 {
			t.Fatalf("record %d: %+v", i, r)
		}
		if msg := checkPatternRecord(&r, 8); msg != "" {
			t.Fatal(msg)
		}
	}
}
