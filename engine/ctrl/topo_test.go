package ctrl

import (
	"math/bits"
	"slices"
	"testing"
)

func TestTreeCoversEveryNodeOnce(t *testing.T) {
	for _, k := range []int{1, 2, 3, 16, 32} {
		for _, n := range []int{1, 2, 5, 33, 100, 1025, 1250} {
			seen := make([]int, n)
			for p := 0; p < n; p++ {
				lo, hi := TreeChildren(p, k, n)
				for c := lo; c < hi; c++ {
					seen[c]++
					if TreeParent(c, k) != p {
						t.Fatalf("k=%d n=%d: child %d of %d has parent %d", k, n, c, p, TreeParent(c, k))
					}
					if TreeDepth(c, k) != TreeDepth(p, k)+1 || !TreeSubtree(c, p, k) {
						t.Fatalf("k=%d n=%d: depth or subtree of %d under %d wrong", k, n, c, p)
					}
				}
			}
			for c := 1; c < n; c++ {
				if seen[c] != 1 {
					t.Fatalf("k=%d n=%d: node %d is the child of %d parents", k, n, c, seen[c])
				}
				if TreeDepth(c, k) > TreeHeight(n, k) {
					t.Fatalf("k=%d n=%d: node %d deeper than the height", k, n, c)
				}
			}
			if seen[0] != 0 || TreeParent(0, k) != -1 {
				t.Fatalf("root has a parent")
			}
		}
	}
	if h := TreeHeight(32768+1056+1, 32); h != 3 {
		t.Fatalf("a 32-ary tree of 33 825 nodes has height %d, want 3", h)
	}
}

func TestRingSkipsDead(t *testing.T) {
	dead := map[int]bool{3: true, 4: true, 0: true}
	isDead := func(n int) bool { return dead[n] }
	cases := []struct{ node, next, prev int }{{2, 5, 1}, {5, 6, 2}, {7, 1, 6}, {1, 2, 7}}
	for _, c := range cases {
		if got := RingNext(c.node, 8, isDead); got != c.next {
			t.Errorf("RingNext(%d) = %d, want %d", c.node, got, c.next)
		}
		if got := RingPrev(c.node, 8, isDead); got != c.prev {
			t.Errorf("RingPrev(%d) = %d, want %d", c.node, got, c.prev)
		}
	}
	if RingNext(0, 1, nil) != -1 || RingNext(1, 2, func(n int) bool { return n == 0 }) != -1 {
		t.Fatal("a lone node has a ring neighbour")
	}
}

// TestDoublingModel runs the fold / doubling / unfold exchange of sets over
// every node count up to 300 and checks that every node ends with every
// node's contribution, in Rounds(n) rounds, with symmetric partners.
func TestDoublingModel(t *testing.T) {
	for n := 1; n <= 300; n++ {
		p, r := Fold(n)
		if p+r != n || p&(p-1) != 0 || r >= p {
			t.Fatalf("Fold(%d) = %d, %d", n, p, r)
		}
		have := make([]map[int]bool, n)
		for i := range have {
			have[i] = map[int]bool{i: true}
			if v := Virtual(i, n); v >= 0 && Real(v, n) != i {
				t.Fatalf("n=%d: Real(Virtual(%d)) = %d", n, i, Real(v, n))
			}
		}
		rounds := 0
		merge := func(dst, src int) {
			for x := range have[src] {
				have[dst][x] = true
			}
		}
		if r > 0 {
			rounds++
			for i := 0; i < 2*r; i += 2 {
				merge(i+1, i)
			}
		}
		for m := 1; m < p; m <<= 1 {
			rounds++
			next := make([]map[int]bool, n)
			for v := 0; v < p; v++ {
				a, b := Real(v, n), Real(v^m, n)
				next[a] = map[int]bool{}
				for x := range have[a] {
					next[a][x] = true
				}
				for x := range have[b] {
					next[a][x] = true
				}
			}
			for v := 0; v < p; v++ {
				have[Real(v, n)] = next[Real(v, n)]
			}
		}
		if r > 0 {
			rounds++
			for i := 0; i < 2*r; i += 2 {
				merge(i, i+1)
			}
		}
		for i := range have {
			if len(have[i]) != n {
				t.Fatalf("n=%d: node %d ends with %d of %d contributions", n, i, len(have[i]), n)
			}
		}
		if rounds != Rounds(n) || Rounds(n) > CeilLog2(n)+2 {
			t.Fatalf("n=%d: %d rounds, Rounds says %d, bound %d", n, rounds, Rounds(n), CeilLog2(n)+2)
		}
		for a := 0; a < n; a++ {
			for _, b := range Partners(a, n) {
				found := false
				for _, x := range Partners(b, n) {
					found = found || x == a
				}
				if !found {
					t.Fatalf("n=%d: %d lists partner %d but not the reverse", n, a, b)
				}
			}
		}
	}
}

func TestHalvingRangePartitions(t *testing.T) {
	for _, p := range []int{1, 2, 4, 8, 64} {
		for _, l := range []int{0, 1, 7, 100, 200000} {
			for mask := p / 2; mask >= 1; mask >>= 1 {
				for v := 0; v < p; v++ {
					lo, hi := HalvingRange(v, p, mask, l)
					plo, phi := HalvingRange(v, p, mask*2, l)
					w := v ^ mask
					olo, ohi := HalvingRange(w, p, mask, l)
					// v and its partner split their common parent range.
					if plo2, phi2 := HalvingRange(w, p, mask*2, l); plo2 != plo || phi2 != phi {
						t.Fatalf("p=%d mask=%d: partners %d, %d differ before the step", p, mask, v, w)
					}
					if !(lo == plo && hi == olo && ohi == phi) && !(olo == plo && ohi == lo && hi == phi) {
						t.Fatalf("p=%d l=%d mask=%d v=%d: [%d,%d) and [%d,%d) do not split [%d,%d)", p, l, mask, v, lo, hi, olo, ohi, plo, phi)
					}
				}
			}
			// After the last step the p ranges tile [0, l).
			cover := make([]int, l)
			for v := 0; v < p; v++ {
				lo, hi := HalvingRange(v, p, 1, l)
				for i := lo; i < hi; i++ {
					cover[i]++
				}
			}
			for i, c := range cover {
				if c != 1 && p > 1 {
					t.Fatalf("p=%d l=%d: element %d kept by %d nodes", p, l, i, c)
				}
			}
		}
	}
}

func TestBcastReachesAll(t *testing.T) {
	for _, p := range []int{1, 2, 8, 64} {
		for root := 0; root < p; root++ {
			holds := make([]bool, p)
			holds[root] = true
			for m := 1; m < p; m <<= 1 {
				next := append([]bool(nil), holds...)
				for v := 0; v < p; v++ {
					if BcastHolds(v, root, m) != holds[v] {
						t.Fatalf("p=%d root=%d mask=%d: BcastHolds(%d) = %v, model %v", p, root, m, v, !holds[v], holds[v])
					}
					if holds[v] {
						next[v^m] = true
					}
				}
				holds = next
			}
			for v := 0; v < p; v++ {
				if !holds[v] || !BcastHolds(v, root, p) {
					t.Fatalf("p=%d root=%d: %d never gets the data", p, root, v)
				}
			}
		}
	}
}

// TestConnectionBound: at every size of the issue, 1 to 16 ranks per
// node, no agent holds more links (agents plus its local ranks) than a
// tree parent, k children, two ring neighbours, a fold partner and one
// partner per doubling step; at 8 per node up to 10 000 ranks, no more
// than the goal of 40. Every link is to another node in range, listed
// once, and both of its ends list it.
func TestConnectionBound(t *testing.T) {
	k := DefaultArity
	for _, world := range []int{256, 1024, 4096, 10000, 100000} {
		for _, ppn := range []int{1, 2, 4, 8, 16} {
			nodes := (world + ppn - 1) / ppn
			steps := bits.Len(uint(nodes - 1)) // ⌈log2 nodes⌉
			bound := 1 + k + 2 + 1 + steps + ppn - 1
			links := make([][]int, nodes)
			worst, at := 0, 0
			for n := range links {
				links[n] = AgentLinks(n, nodes, k)
				if c := len(links[n]) + ppn - 1; c > worst {
					worst, at = c, n
				}
				if c := len(links[n]) + ppn - 1; c > bound {
					t.Fatalf("world %d, %d per node: agent %d holds %d links, bound %d", world, ppn, n, c, bound)
				}
			}
			if ppn == 8 && world <= 10000 && worst > 40 {
				t.Errorf("world %d, %d per node: agent %d holds %d links, goal 40", world, ppn, at, worst)
			}
			if world == 10000 && ppn == 8 && worst != 36 {
				t.Errorf("10 000 ranks, 8 per node: %d links at most, want the 36 that DefaultArity's comment states", worst)
			}
			if nodes <= 10000 {
				for n, ls := range links {
					for i, m := range ls {
						if m < 0 || m >= nodes || m == n || slices.Contains(ls[:i], m) {
							t.Fatalf("%d nodes: agent %d links %v", nodes, n, ls)
						}
						if !slices.Contains(links[m], n) {
							t.Fatalf("%d nodes: agent %d links %d, but %d does not link %d", nodes, n, m, m, n)
						}
					}
				}
			}
			t.Logf("world %6d, %2d per node, %5d nodes: at most %2d links (node %d)", world, ppn, nodes, worst, at)
		}
	}
}
