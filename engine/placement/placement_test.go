package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// world is a random job as the model sees it: groups of width consecutive
// ranks from rank first (storage-only ranks when first > 0 and self is a
// trainer below first), shard sizes, and each rank's state.
type world struct {
	groups, width, first, self, home int
	rows                             []int64 // rows of shard o (the same in every group)
	rowBytes                         int64
	replicas                         bool  // the layout may fail over
	state                            []int // by rank: 0 alive, 1 suspect, 2 dead
	mapped                           []bool
	now                              int64
}

func randomWorld(rng *rand.Rand) *world {
	w := &world{groups: 1 + rng.IntN(4), width: 1 + rng.IntN(6), rowBytes: 1 + rng.Int64N(17), now: 1000}
	if rng.IntN(4) == 0 {
		w.first = 1 + rng.IntN(5) // storage-only ranks after first trainers
	}
	n := w.first + w.groups*w.width
	w.home = rng.IntN(w.groups)
	if w.first > 0 {
		w.self = rng.IntN(w.first)
	} else {
		w.self = w.home*w.width + rng.IntN(w.width)
	}
	w.replicas = w.groups > 1 && rng.IntN(5) != 0
	w.rows = make([]int64, w.width)
	for o := range w.rows {
		switch rng.IntN(5) {
		case 0:
			w.rows[o] = 0 // empty shards: boundaries that coincide
		case 1:
			w.rows[o] = 1
		default:
			w.rows[o] = 1 + rng.Int64N(40)
		}
	}
	w.state = make([]int, n)
	w.mapped = make([]bool, n)
	deadP, suspectP := rng.IntN(4), rng.IntN(4)
	for r := range w.state {
		switch {
		case rng.IntN(8) < deadP:
			w.state[r] = 2
		case rng.IntN(8) < suspectP:
			w.state[r] = 1
		}
		w.mapped[r] = rng.IntN(2) == 0
	}
	w.mapped[w.self] = w.first == 0 // a trainer's own shard is mapped; storage ranks hold none of its own
	return w
}

func (w *world) rank(g, o int) int { return w.first + g*w.width + o }

func (w *world) layout(h *Health) *Layout {
	l := &Layout{RowBytes: w.rowBytes, Offsets: make([]int64, w.width+1), Home: make([]int, w.width), Mapped: w.mapped, Self: w.self}
	for o := 0; o < w.width; o++ {
		l.Offsets[o+1] = l.Offsets[o] + w.rows[o]
		l.Home[o] = w.rank(w.home, o)
	}
	if w.replicas {
		l.Alt = make([][]int, w.width)
		for o := range l.Alt {
			l.Alt[o] = FailoverOrder(w.groups, w.width, w.first, w.home, o, func(r int) bool { return w.mapped[r] })
		}
	}
	for r, s := range w.state {
		switch s {
		case 1:
			h.Suspect(r, w.now+1)
		case 2:
			h.MarkDead(r)
		}
	}
	return l
}

// modelShard finds the shard and offset of global byte b by a linear walk.
func (w *world) modelShard(b int64) (o int, off int64) {
	var start int64
	for o := 0; o < w.width; o++ {
		end := start + w.rows[o]*w.rowBytes
		if b >= start && b < end {
			return o, b - start
		}
		start = end
	}
	panic("byte outside the rows")
}

// modelServe picks the serving rank of shard o as a ranking: every holder
// gets a tier (0: usable, 1: suspect, 2: dead) and the lowest tier wins,
// ties to the earlier holder in failover order; the home owner is always
// tier 0 when it is this rank, and suspicion is ignored without replicas.
// Tier 2 for the winner means no rank can serve.
func (w *world) modelServe(o int) (rank int, dead, failover bool) {
	holders := []int{w.rank(w.home, o)}
	if w.replicas {
		// failover order, by brute force: sort all other groups by
		// (not on this node, group distance, group index)
		type cand struct{ r, key int }
		var cs []cand
		for g := 0; g < w.groups; g++ {
			if g == w.home {
				continue
			}
			r := w.rank(g, o)
			d := g - w.home
			if d < 0 {
				d = -d
			}
			k := d*100 + g
			if !w.mapped[r] {
				k += 10000
			}
			cs = append(cs, cand{r, k})
		}
		for i := range cs { // selection sort, independent of sort.SliceStable
			for j := i + 1; j < len(cs); j++ {
				if cs[j].key < cs[i].key {
					cs[i], cs[j] = cs[j], cs[i]
				}
			}
		}
		for _, c := range cs {
			holders = append(holders, c.r)
		}
	}
	best, bestTier := -1, 3
	for _, r := range holders {
		t := w.state[r]
		if r == w.self {
			t = 0
		}
		if t == 1 && !w.replicas {
			t = 0
		}
		if t < bestTier {
			best, bestTier = r, t
		}
	}
	if bestTier == 2 {
		return holders[0], true, false
	}
	return best, false, best != holders[0]
}

func TestPlaceAgainstModel(t *testing.T) {
	cases := 100_000
	if testing.Short() {
		cases = 10_000
	}
	rng := rand.New(rand.NewPCG(1, 26))
	checked := 0
	for c := 0; c < cases; c++ {
		w := randomWorld(rng)
		n := w.first + w.groups*w.width
		clock := w.now
		h := NewHealth(n, func() int64 { return clock })
		l := w.layout(h)
		total := l.Rows() * w.rowBytes
		if total == 0 {
			continue
		}
		// A ragged run: any byte start, any length, often at a boundary.
		var at int64
		switch rng.IntN(3) {
		case 0:
			at = rng.Int64N(total)
		case 1: // a shard's first row
			o := rng.IntN(w.width)
			at = min(l.Offsets[o]*w.rowBytes, total-1)
		default: // a shard's last row
			o := rng.IntN(w.width)
			at = max(l.Offsets[o+1]*w.rowBytes-w.rowBytes, 0)
			at = min(at, total-1)
		}
		length := 1 + rng.Int64N(total-at)
		maxBytes := 1 + rng.Int64N(3*w.rowBytes+8)
		if rng.IntN(2) == 0 {
			maxBytes = 1 << 40
		}
		desc := func() string {
			return fmt.Sprintf("case %d: %+v at %d len %d max %d", c, *w, at, length, maxBytes)
		}
		for b, end := at, at+length; b < end; {
			p := l.Place(h, b/w.rowBytes, b%w.rowBytes, end-b, maxBytes)
			if p.Len <= 0 || p.Len > maxBytes || b+p.Len > end {
				t.Fatalf("%s: piece at %d has length %d", desc(), b, p.Len)
			}
			o, off := w.modelShard(b)
			lastO, _ := w.modelShard(b + p.Len - 1)
			if int(p.Shard) != o || p.Off != off || lastO != o {
				t.Fatalf("%s: byte %d: piece shard %d off %d (ends in shard %d), model shard %d off %d", desc(), b, p.Shard, p.Off, lastO, o, off)
			}
			// Maximal: it ends at the run's end, the shard's end, or max.
			shardEnd := l.Offsets[o+1] * w.rowBytes
			if b+p.Len != end && b+p.Len != shardEnd && p.Len != maxBytes {
				t.Fatalf("%s: piece [%d,%d) stops short (shard ends at %d)", desc(), b, b+p.Len, shardEnd)
			}
			rank, dead, failover := w.modelServe(o)
			if dead != (p.Kind == Dead) || int(p.Rank) != rank || p.Failover != failover {
				t.Fatalf("%s: shard %d: got rank %d kind %v failover %v, model rank %d dead %v failover %v (states %v)",
					desc(), o, p.Rank, p.Kind, p.Failover, rank, dead, failover, w.state)
			}
			if !dead && (p.Kind == Local) != w.mapped[rank] {
				t.Fatalf("%s: rank %d mapped %v but kind %v", desc(), rank, w.mapped[rank], p.Kind)
			}
			b += p.Len
			checked++
		}
		// Suspicion expires: once the clock passes it, no rank is suspect.
		clock = w.now + 2
		for r := 0; r < n; r++ {
			if h.Suspected(r) {
				t.Fatalf("%s: rank %d still suspect after its time", desc(), r)
			}
		}
	}
	t.Logf("%d cases, %d pieces checked against the model", cases, checked)
}

// TestPlaceNoAlloc: the read path's decision allocates nothing.
func TestPlaceNoAlloc(t *testing.T) {
	h := NewHealth(8, func() int64 { return 0 })
	l := &Layout{RowBytes: 16, Offsets: []int64{0, 10, 20, 30, 40}, Home: []int{0, 1, 2, 3},
		Alt: [][]int{{4}, {5}, {6}, {7}}, Mapped: make([]bool, 8), Self: 0}
	h.MarkDead(2)
	h.Suspect(3, 100)
	allocs := testing.AllocsPerRun(100, func() {
		for g := int64(0); g < 40; g++ {
			_ = l.Place(h, g, 0, 16, 16)
		}
	})
	if allocs != 0 {
		t.Fatalf("Place allocates %v times per 40 rows", allocs)
	}
}

func TestGatherBatch(t *testing.T) {
	for _, c := range []struct {
		min         int
		auto        bool
		nops, maxOp int
		want        bool
	}{
		{0, false, 100, 10, false}, // never
		{2, false, 1, 10, false},   // too few
		{2, false, 2, 1 << 30, true},
		{16, true, 16, 64 << 10, true},
		{16, true, 16, 64<<10 + 1, false}, // a read too large for auto
		{16, true, 15, 10, false},
	} {
		if got := GatherBatch(c.min, c.auto, c.nops, c.maxOp, 64<<10); got != c.want {
			t.Errorf("GatherBatch(%d, %v, %d, %d) = %v, want %v", c.min, c.auto, c.nops, c.maxOp, got, c.want)
		}
	}
}

// TestOnDead: the hook hears each rank dead before it was set, then each
// newly dead rank once (a second MarkDead of the same rank is silent), and
// the ranks beyond the first word of the bitmap too.
func TestOnDead(t *testing.T) {
	h := NewHealth(130, func() int64 { return 0 })
	h.MarkDead(3)
	h.MarkDead(64)
	var heard []int
	h.OnDead(func(r int) { heard = append(heard, r) })
	h.MarkDead(129)
	h.MarkDead(3)
	h.MarkDead(7)
	h.MarkDead(129)
	if want := []int{3, 64, 129, 7}; !slices.Equal(heard, want) {
		t.Fatalf("OnDead heard %v, want %v", heard, want)
	}
	for r := range 130 {
		if dead := slices.Contains(heard, r); h.Dead(r) != dead {
			t.Fatalf("rank %d: Dead %v, heard %v", r, h.Dead(r), dead)
		}
	}
}

func BenchmarkPlace(b *testing.B) {
	h := NewHealth(64, func() int64 { return 0 })
	l := &Layout{RowBytes: 3072, Offsets: make([]int64, 33), Home: make([]int, 32), Mapped: make([]bool, 64), Self: 0}
	for o := range l.Home {
		l.Offsets[o+1] = l.Offsets[o] + 1000
		l.Home[o] = o
	}
	b.ReportAllocs()
	var sink int
	for i := 0; b.Loop(); i++ {
		p := l.Place(h, int64(i*7919)%32000, 0, 3072, 3072)
		sink += int(p.Rank)
	}
	_ = sink
}
