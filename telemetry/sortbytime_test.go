package telemetry

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortByTime: sortByTime gives the order of the standard library's
// stable sort, for runs of random, repeated and already sorted times, and
// allocates nothing once its keys have room.
func TestSortByTime(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var order []recordTime
	for trial := range 3000 {
		n := rng.IntN(200)
		recs := make([]Record, n)
		for i := range recs {
			switch trial % 3 {
			case 0:
				recs[i].TimeNs = rng.Int64N(1 << 40)
			case 1:
				recs[i].TimeNs = rng.Int64N(8) // many equal times
			default:
				recs[i].TimeNs = int64(i / 3) // sorted
			}
			recs[i].Seq = uint64(i) // the original place, to check stability
		}
		want := slices.Clone(recs)
		slices.SortStableFunc(want, func(a, b Record) int { return cmp.Compare(a.TimeNs, b.TimeNs) })
		order = sortByTime(recs, order)
		for i := range recs {
			if recs[i] != want[i] {
				t.Fatalf("trial %d, %d records: place %d holds seq %d (time %d), want seq %d (time %d)",
					trial, n, i, recs[i].Seq, recs[i].TimeNs, want[i].Seq, want[i].TimeNs)
			}
		}
	}
	recs := make([]Record, 64)
	for i := range recs {
		recs[i].TimeNs = int64(64 - i)
	}
	order = sortByTime(recs, order)
	if a := testing.AllocsPerRun(20, func() {
		for i := range recs {
			recs[i].TimeNs = int64(64 - i)
		}
		order = sortByTime(recs, order)
	}); a != 0 {
		t.Fatalf("sortByTime allocates %v times a call", a)
	}
}

// BenchmarkSortByTime: what ReadRings sorts on ddtop's detail page, the
// records of 16 lane rings, 20 each, every ring in time order and the
// rings interleaved in time; stable is the sort of the records
// themselves that sortByTime replaced.
func BenchmarkSortByTime(b *testing.B) {
	const lanes, per = 16, 20
	src := make([]Record, 0, lanes*per)
	for l := range lanes {
		for k := range per {
			src = append(src, Record{TimeNs: int64(k*lanes + (l*7)%lanes), Seq: uint64(len(src))})
		}
	}
	recs := make([]Record, len(src))
	b.Run("keys", func(b *testing.B) {
		var order []recordTime
		b.ReportAllocs()
		for b.Loop() {
			copy(recs, src)
			order = sortByTime(recs, order)
		}
	})
	b.Run("stable", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			copy(recs, src)
			slices.SortStableFunc(recs, func(a, b Record) int { return cmp.Compare(a.TimeNs, b.TimeNs) })
		}
	})
}
