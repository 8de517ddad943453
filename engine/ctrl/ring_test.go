package ctrl

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/ddstore/ddstore/fault"
)

// ringWant is the ring all-reduce's sum of element i: segment c's
// elements summed from rank c on, ranks modulo world (written from the
// definition, element by element).
func ringWant(world, l, i int) float32 {
	c := 0
	for i >= (c+1)*l/world {
		c++
	}
	s := fracValueOf(c, i)
	for k := 1; k < world; k++ {
		s += fracValueOf((c+k)%world, i)
	}
	return s
}

// TestAllReduceRingOrder: on one node (shared memory) and across nodes
// (gather, or the agents' ring: forced with small pieces for every n, so
// that segments are empty, one piece or many), every rank gets the ring
// order's bits; a length mismatch fails on every rank naming a rank, and
// the next collective works.
func TestAllReduceRingOrder(t *testing.T) {
	for _, c := range []struct{ world, ppn int }{{4, 4}, {5, 5}, {4, 1}, {7, 3}, {9, 4}, {6, 2}, {3, 1}} {
		for _, n := range []int{3, 1000, 50000} {
			for _, ring := range []bool{false, true} {
				if ring && c.world == c.ppn {
					continue
				}
				t.Run(fmt.Sprintf("world=%d,ppn=%d,n=%d,ring=%v", c.world, c.ppn, n, ring), func(t *testing.T) {
					if ring {
						oldG, oldA, oldP := GatherBytes, GatherAlwaysBytes, RingPieceBytes
						GatherBytes, GatherAlwaysBytes, RingPieceBytes = 0, 0, 1000
						t.Cleanup(func() { GatherBytes, GatherAlwaysBytes, RingPieceBytes = oldG, oldA, oldP })
					}
					testRingOrder(t, c.world, c.ppn, n)
				})
			}
		}
	}
}

func testRingOrder(t *testing.T, world, ppn, n int) {
	c := struct{ world, ppn int }{world, ppn}
	{
		{
			{
				cl, errs := startCluster(t, c.world, c.ppn, fast, nil)
				if err := firstErr(errs); err != nil {
					t.Fatal(err)
				}
				if c.world == c.ppn && cl.rank(1).scratch == nil {
					t.Fatal("one node, but rank 1 has no shared scratch")
				}
				res := make([][]float32, c.world)
				orderMatters := 0
				for round := range 2 { // twice: the scratch is reused
					err := firstErr(cl.each(func(k *Ctrl) error {
						x := make([]float32, n)
						for i := range x {
							x[i] = fracValueOf(k.Rank(), i)
						}
						res[k.Rank()] = x
						return k.AllReduceRingOrder(fmt.Sprint("r", round), x, 0)
					}))
					if err != nil {
						t.Fatal(err)
					}
					for i := 0; i < n; i++ {
						want := ringWant(c.world, n, i)
						var rev float32
						for r := c.world - 1; r >= 0; r-- {
							rev += fracValueOf(r, i)
						}
						if rev != want {
							orderMatters++
						}
						for r := range res {
							if math.Float32bits(res[r][i]) != math.Float32bits(want) {
								t.Fatalf("rank %d element %d: %x, want the ring order's %x", r, i, math.Float32bits(res[r][i]), math.Float32bits(want))
							}
						}
					}
				}
				if n >= 1000 && orderMatters == 0 {
					t.Fatal("inputs do not tell the orders apart")
				}
				errs = cl.each(func(k *Ctrl) error {
					x := make([]float32, n)
					if k.Rank() == 1 {
						x = append(x, 0)
					}
					return k.AllReduceRingOrder("bad", x, 0)
				})
				for r, err := range errs {
					if !errors.Is(err, fault.ErrMismatch) || !strings.Contains(err.Error(), "rank ") {
						t.Fatalf("rank %d with rank 1 passing another length: %v, want ErrMismatch", r, err)
					}
				}
				if err := firstErr(cl.each(func(k *Ctrl) error { return k.Barrier("after", 0) })); err != nil {
					t.Fatalf("barrier after a length mismatch: %v", err)
				}
			}
		}
	}
}

// TestAllReduceRingOrderLarge: past ExactBytes across nodes, the tree's
// order: still the same bits on every rank.
func TestAllReduceRingOrderLarge(t *testing.T) {
	old := ExactBytes
	ExactBytes = 1 << 10
	defer func() { ExactBytes = old }()
	cl, errs := startCluster(t, 6, 2, fast, nil)
	if err := firstErr(errs); err != nil {
		t.Fatal(err)
	}
	const n = 5000
	res := make([][]float32, 6)
	if err := firstErr(cl.each(func(k *Ctrl) error {
		x := make([]float32, n)
		for i := range x {
			x[i] = fracValueOf(k.Rank(), i)
		}
		res[k.Rank()] = x
		return k.AllReduceRingOrder("big", x, 0)
	})); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		var s float64
		for r := range 6 {
			s += float64(fracValueOf(r, i))
		}
		if math.Abs(float64(res[0][i])-s) > 1e-2 {
			t.Fatalf("element %d: %v, float64 sum %v", i, res[0][i], s)
		}
		for r := 1; r < 6; r++ {
			if math.Float32bits(res[r][i]) != math.Float32bits(res[0][i]) {
				t.Fatalf("element %d: rank %d differs from rank 0", i, r)
			}
		}
	}
}

// TestBlockBounds: ranks numbered node by node give each node's first
// rank; any other numbering (cyclic, local ranks out of order, nodes out
// of order, a node missing) gives nil.
func TestBlockBounds(t *testing.T) {
	for _, c := range []struct {
		name        string
		node, local []int
		nodes       int
		want        []int
	}{
		{"blocks", []int{0, 0, 0, 1, 1, 2}, []int{0, 1, 2, 0, 1, 0}, 3, []int{0, 3, 5, 6}},
		{"one rank per node", []int{0, 1, 2}, []int{0, 0, 0}, 3, []int{0, 1, 2, 3}},
		{"cyclic", []int{0, 1, 0, 1}, []int{0, 0, 1, 1}, 2, nil},
		{"local order", []int{0, 0, 1}, []int{1, 0, 0}, 2, nil},
		{"nodes out of order", []int{1, 0}, []int{0, 0}, 2, nil},
		{"node missing", []int{0, 0}, []int{0, 1}, 2, nil},
	} {
		got := BlockBounds(len(c.node), c.nodes, func(r int) int { return c.node[r] }, func(r int) int { return c.local[r] })
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestAllReduceRingOrderWithoutScratch: a rank that could not map its
// node's scratch says so in the length check; its node then moves the
// vectors as messages (one node: the gather; across nodes: to and from
// the agent around the ring), with the same bits.
func TestAllReduceRingOrderWithoutScratch(t *testing.T) {
	for _, c := range []struct{ world, ppn, without int }{{4, 4, 2}, {6, 3, 4}, {6, 3, 3}} {
		t.Run(fmt.Sprintf("world=%d,ppn=%d,without=%d", c.world, c.ppn, c.without), func(t *testing.T) {
			cl, errs := startCluster(t, c.world, c.ppn, fast, nil)
			if err := firstErr(errs); err != nil {
				t.Fatal(err)
			}
			sc := cl.rank(c.without).scratch
			if sc == nil {
				t.Fatalf("rank %d has no scratch to take away", c.without)
			}
			cl.rank(c.without).scratch = nil
			t.Cleanup(sc.close)
			const n = 50000
			res := make([][]float32, c.world)
			if err := firstErr(cl.each(func(k *Ctrl) error {
				x := make([]float32, n)
				for i := range x {
					x[i] = fracValueOf(k.Rank(), i)
				}
				res[k.Rank()] = x
				return k.AllReduceRingOrder("no-scratch", x, 0)
			})); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n; i++ {
				want := ringWant(c.world, n, i)
				for r := range res {
					if math.Float32bits(res[r][i]) != math.Float32bits(want) {
						t.Fatalf("rank %d element %d: %x, want the ring order's %x", r, i, math.Float32bits(res[r][i]), math.Float32bits(want))
					}
				}
			}
		})
	}
}

// TestGatherRingOrder: which all-reduces gather every rank's vector in
// their length check (one collective) instead of the node's shared
// memory or the agents' ring.
func TestGatherRingOrder(t *testing.T) {
	for _, c := range []struct {
		l, w, nodes int
		blocks      bool
		want        bool
	}{
		{2, 4, 1, true, false},          // one node: shared memory
		{2, 10000, 1250, true, true},    // 8 bytes at 10 000 ranks: 80 KB gathered, not 2 499 hops
		{16, 10000, 1250, true, true},   // GatherAlwaysBytes
		{17, 10000, 1250, true, false},  // past it, and past GatherBytes: the ring
		{200000, 4, 4, true, false},     // 800 KB: the ring
		{100, 16, 2, true, true},        // 6.4 KB in all
		{20000, 16, 4, false, true},     // not node by node: gathered up to ExactBytes
		{10 << 20, 16, 4, false, false}, // past ExactBytes: AllReduceFloat32
		{0, 16, 4, true, false},         // nothing to sum
		{5, 1, 1, true, false},          // alone
	} {
		if got := gatherRingOrder(c.l, c.w, c.nodes, c.blocks); got != c.want {
			t.Errorf("gatherRingOrder(l %d, world %d, nodes %d, blocks %v) = %v, want %v", c.l, c.w, c.nodes, c.blocks, got, c.want)
		}
	}
}

// TestSmallAllReduceOneCollective: an 8-byte all-reduce across nodes is one
// collective (the length check carries the vectors), with the ring
// order's bits on every rank.
func TestSmallAllReduceOneCollective(t *testing.T) {
	const world, ppn, n = 8, 2, 2
	cl, errs := startCluster(t, world, ppn, fast, nil)
	if err := firstErr(errs); err != nil {
		t.Fatal(err)
	}
	before := cl.rank(3).seq
	res := make([][]float32, world)
	if err := firstErr(cl.each(func(k *Ctrl) error {
		x := []float32{fracValueOf(k.Rank(), 0), fracValueOf(k.Rank(), 1)}
		res[k.Rank()] = x
		return k.AllReduceRingOrder("small", x, 0)
	})); err != nil {
		t.Fatal(err)
	}
	if d := cl.rank(3).seq - before; d != 1 {
		t.Fatalf("an 8-byte all-reduce across %d nodes ran %d collectives, want 1", world/ppn, d)
	}
	for i := range n {
		want := ringWant(world, n, i)
		for r := range res {
			if math.Float32bits(res[r][i]) != math.Float32bits(want) {
				t.Fatalf("rank %d element %d: %x, want the ring order's %x", r, i, math.Float32bits(res[r][i]), math.Float32bits(want))
			}
		}
	}
}
