package ctrl

// Topology: pure functions of (node, number of nodes, arity) that say which
// agents talk to which. Nodes are numbered 0..nodes-1; node 0's agent is the
// tree's root. Nothing here touches a socket.

import "math/bits"

// TreeParent is node's parent in the k-ary tree, -1 for the root.
func TreeParent(node, k int) int {
	if node <= 0 {
		return -1
	}
	return (node - 1) / k
}

// TreeChildren is the range [lo, hi) of node's children among nodes.
func TreeChildren(node, k, nodes int) (lo, hi int) {
	lo = node*k + 1
	hi = min(lo+k, nodes)
	if lo > nodes {
		lo = nodes
	}
	return lo, max(lo, hi)
}

// TreeDepth is node's distance from the root.
func TreeDepth(node, k int) int {
	d := 0
	for node > 0 {
		node = (node - 1) / k
		d++
	}
	return d
}

// TreeHeight is the largest depth of any of nodes.
func TreeHeight(nodes, k int) int {
	if nodes <= 1 {
		return 0
	}
	return TreeDepth(nodes-1, k)
}

// TreeSubtree reports whether node lies in the subtree rooted at top.
func TreeSubtree(node, top, k int) bool {
	for node > top {
		node = (node - 1) / k
	}
	return node == top
}

// RingNext is the first node after node (cyclically) that is not dead,
// -1 when there is none other than node. dead may be nil.
func RingNext(node, nodes int, dead func(int) bool) int {
	for i := 1; i < nodes; i++ {
		n := (node + i) % nodes
		if dead == nil || !dead(n) {
			return n
		}
	}
	return -1
}

// RingPrev is the first node before node (cyclically) that is not dead,
// -1 when there is none other than node.
func RingPrev(node, nodes int, dead func(int) bool) int {
	for i := 1; i < nodes; i++ {
		n := (node - i + nodes) % nodes
		if dead == nil || !dead(n) {
			return n
		}
	}
	return -1
}

// Fold splits nodes for recursive doubling: p is the largest power of two
// not above nodes, and r = nodes − p excess nodes are folded away: of the
// first 2r nodes, each even one hands its data to the odd one after it
// before the doubling and gets the result back after it (MPICH's scheme).
func Fold(nodes int) (p, r int) {
	if nodes < 1 {
		return 0, 0
	}
	p = 1 << (bits.Len(uint(nodes)) - 1)
	return p, nodes - p
}

// Virtual is node's index among the p nodes that take part in the doubling,
// or -1 for a folded-away node (then its partner is node+1).
func Virtual(node, nodes int) int {
	_, r := Fold(nodes)
	switch {
	case node < 2*r && node%2 == 0:
		return -1
	case node < 2*r:
		return node / 2
	}
	return node - r
}

// Real is the node of virtual index v (inverse of Virtual).
func Real(v, nodes int) int {
	_, r := Fold(nodes)
	if v < r {
		return 2*v + 1
	}
	return v + r
}

// Partners lists the nodes that node exchanges with in a recursive
// doubling over nodes, in step order: the fold partner (if any) first,
// then one partner per doubling step (masks 1, 2, 4, …). The links of
// every collective are among these, connected on first use.
func Partners(node, nodes int) []int {
	p, r := Fold(nodes)
	var out []int
	if node < 2*r {
		if node%2 == 0 {
			return []int{node + 1}
		}
		out = append(out, node-1)
	}
	v := Virtual(node, nodes)
	for m := 1; m < p; m <<= 1 {
		out = append(out, Real(v^m, nodes))
	}
	return out
}

// Rounds is the number of communication rounds of a recursive doubling
// over nodes on its critical path: log2 p, plus the fold and the unfold
// when nodes is not a power of two.
func Rounds(nodes int) int {
	p, r := Fold(nodes)
	n := bits.Len(uint(p)) - 1
	if r > 0 {
		n += 2
	}
	return n
}

// CeilLog2 is ⌈log2 n⌉ (0 for n ≤ 1).
func CeilLog2(n int) int {
	if n <= 1 {
		return 0
	}
	return bits.Len(uint(n - 1))
}

// HalvingRange is the range [lo, hi) of a vector of length l that virtual
// index v keeps after the reduce-scatter steps with masks above and equal
// to mask (recursive halving from p/2 down to mask): at each step the
// node whose bit is clear keeps the lower half.
func HalvingRange(v, p, mask, l int) (lo, hi int) {
	lo, hi = 0, l
	for m := p / 2; m >= mask && m >= 1; m >>= 1 {
		mid := lo + (hi-lo)/2
		if v&m == 0 {
			hi = mid
		} else {
			lo = mid
		}
	}
	return lo, hi
}

// BcastHolds reports whether virtual index v holds a broadcast's data
// after the doubling steps with masks below limit, when vroot held it
// first: data spreads from holder v to v^m at step m.
func BcastHolds(v, vroot, limit int) bool {
	return v&^(limit-1) == vroot&^(limit-1)
}

// ControlLinks lists the agents that node keeps a link to for the job's
// lifetime, besides its partners: tree parent, children, ring neighbours.
func ControlLinks(node, nodes, k int) []int {
	var out []int
	add := func(n int) {
		if n < 0 || n == node {
			return
		}
		for _, x := range out {
			if x == n {
				return
			}
		}
		out = append(out, n)
	}
	add(TreeParent(node, k))
	lo, hi := TreeChildren(node, k, nodes)
	for c := lo; c < hi; c++ {
		add(c)
	}
	if nodes > 1 {
		add(RingNext(node, nodes, nil))
		add(RingPrev(node, nodes, nil))
	}
	return out
}

// AgentLinks is every agent that node may hold a link to: ControlLinks
// and Partners together, without repeats.
func AgentLinks(node, nodes, k int) []int {
	out := ControlLinks(node, nodes, k)
	for _, n := range Partners(node, nodes) {
		dup := n == node
		for _, x := range out {
			dup = dup || x == n
		}
		if !dup {
			out = append(out, n)
		}
	}
	return out
}

// Dials reports whether node dials the link to peer (else it accepts it):
// the higher node dials, so a child dials its parent.
func Dials(node, peer int) bool { return node > peer }
