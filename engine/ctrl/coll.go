package ctrl

// Collectives: reduce inside the node at the agent, run the agents'
// algorithm (recursive doubling, or halving and doubling for large
// all-reduces, with the excess nodes folded), and hand the result down.
// Every sum has one fixed order, so every rank gets the same bits.

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/bits"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ddstore/ddstore/fault"
)

// Steps of a collective (mailbox keys).
const (
	stUp     = 3
	stDown   = 4
	stFold   = 5
	stUnfold = 6
	stDouble = 16 // + log2(mask)
	stHalve  = 48 // + log2(mask)
	stSpread = 80 // + log2(mask)
)

type coll struct {
	c        *Ctrl
	op       string
	seq      uint64
	tag      uint32
	deadline time.Time
	timeout  time.Duration
	hops     uint8
	graced   atomic.Bool // a failed send already waited ExitGrace
}

func tagOf(op, tag string, n int) uint32 {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s\x00%s\x00%d", op, tag, n)
	return h.Sum32()
}

// begin starts a collective (collMu held).
func (c *Ctrl) begin(op, tag string, n int, timeout time.Duration) (*coll, error) {
	name := fmt.Sprintf("%s %q", op, tag)
	if c.closing.Load() || c.killed.Load() {
		return nil, &fault.Error{Op: name, Kind: fault.ErrClosed, Detail: "control plane closed"}
	}
	if c.broken != nil {
		return nil, &fault.Error{Op: name, Kind: fault.ErrClosed, Side: fault.SideOf(c.broken), Ranks: fault.RanksOf(c.broken),
			Detail: "collectives broken by an earlier failure", Err: c.broken}
	}
	c.seq++
	c.began.Store(c.seq)
	if err := c.goneAt(name, c.seq); err != nil {
		c.deadMu.Lock()
		note, aborted, dead := c.abortNote, c.aborted != nil, c.deadN > 0 && DeathApplies(c.minDone, c.seq)
		// Every death after its part of a collective (minDone > 0): some
		// ranks may have learnt it with a later collective than this one
		// (each agent that saw an agent's connection end says its own) and
		// wait here for this rank.
		late := c.minDone > 0
		c.deadMu.Unlock()
		if aborted && !dead && note.origin >= 0 && note.seq > 0 {
			err = gaveUp(name, c.seq, note) // this rank comes late: say who gave up, and when
		}
		c.broken = err
		if dead && (late || c.marked.Load()) {
			c.abort(c.seq, err) // the others may not know (MarkDead) or go on
		}
		return nil, err
	}
	if timeout <= 0 {
		timeout = c.o.Timeout
	}
	return &coll{c: c, op: name, seq: c.seq, tag: tagOf(op, tag, n), deadline: time.Now().Add(timeout), timeout: timeout}, nil
}

// waitUntil is the deadline of a receive: the collective's for an agent
// waiting on its local ranks, later by one slack for an agent waiting on
// another agent and by two for a plain rank waiting on its agent. The
// rank that waits on a late rank itself thus gives up first, and its
// abort notice, naming the late rank, reaches the others before their
// own deadlines (which would name only the rank they wait on).
func (k *coll) waitUntil(local bool) time.Time {
	slack := min(k.timeout/4, 2*time.Second)
	switch {
	case local && k.c.o.agent():
		return k.deadline
	case !local:
		return k.deadline.Add(slack)
	}
	return k.deadline.Add(2 * slack)
}

// end records the collective's outcome: a failure breaks the control
// plane and, unless every rank learns it anyway (a death, an abort), is
// told to every rank.
func (k *coll) end(err error) error {
	c := k.c
	if err == nil {
		c.rounds.Store(int32(k.hops))
		return nil
	}
	if c.broken == nil {
		c.broken = err
		if c.goneAt(k.op, k.seq) == nil {
			c.abort(k.seq, err)
		}
	}
	return err
}

func (k *coll) sendAgent(node, step int, body []byte) error {
	k.hops++ // a step takes a round, whatever arrives
	return k.sendAgentHops(node, step, body, k.hops)
}

// sendAgentHops is sendAgent with the hop count given: it reads nothing
// of k that changes (a sender goroutine's, beside the receiving one).
func (k *coll) sendAgentHops(node, step int, body []byte, hops uint8) error {
	c := k.c
	l, err := c.linkTo(node, k.deadline, false)
	if err != nil {
		return err
	}
	c.nAgentMsg.Add(1)
	if err := l.send(header{typ: tColl, hops: hops, step: uint16(step), seq: k.seq, from: uint32(c.o.Node), tag: k.tag}, body, k.deadline); err != nil {
		k.grace(err)
		return &fault.Error{Op: k.op, Ranks: []int{c.agentRank(node)}, Side: fault.Remote, Kind: fault.ErrPeerDead,
			Detail: fmt.Sprintf("sending to node %d's agent failed", node), Err: err}
	}
	return nil
}

func (k *coll) recv(from int, local bool, step int) ([]byte, error) {
	c := k.c
	who := from
	if !local {
		who = c.agentRank(from)
	}
	m, err := c.awaitTag(k.op, mkey{seq: k.seq, step: uint16(step), from: int32(from), local: local}, k.tag, k.waitUntil(local), []int{who})
	if err != nil {
		var fe *fault.Error
		if errors.As(err, &fe) && fe.Kind == fault.ErrTimeout && len(fe.Ranks) > 0 && c.gone("") == nil {
			fe.Detail = fmt.Sprintf("%s did not arrive within %v", fault.RankList(fe.Ranks), k.timeout.Round(time.Millisecond))
		}
		return nil, err
	}
	if m.hops > k.hops {
		k.hops = m.hops
	}
	return m.body, nil
}

// recvAgent receives from node's agent; the higher of the two dials the
// link on first use, whichever sends.
func (k *coll) recvAgent(node, step int) ([]byte, error) {
	if Dials(k.c.o.Node, node) {
		if _, err := k.c.linkTo(node, k.deadline, false); err != nil {
			return nil, err
		}
	}
	return k.recv(node, false, step)
}

func (k *coll) sendLocal(l *link, step int, body []byte) error {
	k.c.nLocalMsg.Add(1)
	if err := l.send(header{typ: tColl, hops: k.hops, step: uint16(step), seq: k.seq, from: uint32(k.c.o.Rank), tag: k.tag}, body, k.deadline); err != nil {
		k.grace(err)
		return &fault.Error{Op: k.op, Ranks: []int{l.peer}, Side: fault.Remote, Kind: fault.ErrPeerDead,
			Detail: fmt.Sprintf("sending to rank %d failed", l.peer), Err: err}
	}
	return nil
}

// localRanks are the agent's local ranks, ascending.
func (c *Ctrl) localRanks() []*link {
	c.mu.Lock()
	ls := make([]*link, 0, len(c.locals))
	for _, l := range c.locals {
		ls = append(ls, l)
	}
	c.mu.Unlock()
	sort.Slice(ls, func(i, j int) bool { return ls[i].peer < ls[j].peer })
	return ls
}

// awaitTag is await that also fails when a message of this collective
// with another tag is queued (ranks that called another collective, tag
// or length).
func (c *Ctrl) awaitTag(op string, k mkey, tag uint32, deadline time.Time, who []int) (msg, error) {
	m, err := c.awaitTagged(op, k, tag, deadline, who)
	if err == nil && m.tag != tag {
		return msg{}, c.mismatch(op, k.from, k.local)
	}
	return m, err
}

func (c *Ctrl) mismatch(op string, from int32, local bool) error {
	r := int(from)
	if !local {
		r = c.agentRank(r)
	}
	return &fault.Error{Op: op, Ranks: []int{r}, Side: fault.Remote, Kind: fault.ErrMismatch,
		Detail: fmt.Sprintf("collective mismatch: rank %d called another collective, tag or length than rank %d", r, c.o.Rank)}
}

// doubling combines every node's acc (combine(lower, higher)) by recursive
// doubling with the excess nodes folded; every agent ends with the result.
func (k *coll) doubling(acc []byte, combine func(lo, hi []byte) ([]byte, error)) ([]byte, error) {
	node, n := k.c.o.Node, k.c.o.Nodes
	p, r := Fold(n)
	if node < 2*r && node%2 == 0 {
		if err := k.sendAgent(node+1, stFold, acc); err != nil {
			return nil, err
		}
		return k.recvAgent(node+1, stUnfold)
	}
	if node < 2*r {
		in, err := k.recvAgent(node-1, stFold)
		if err != nil {
			return nil, err
		}
		if acc, err = combine(in, acc); err != nil {
			return nil, err
		}
	}
	v := Virtual(node, n)
	for mask, i := 1, 0; mask < p; mask, i = mask<<1, i+1 {
		peer := Real(v^mask, n)
		if err := k.sendAgent(peer, stDouble+i, acc); err != nil {
			return nil, err
		}
		in, err := k.recvAgent(peer, stDouble+i)
		if err != nil {
			return nil, err
		}
		if v < v^mask {
			acc, err = combine(acc, in)
		} else {
			acc, err = combine(in, acc)
		}
		if err != nil {
			return nil, err
		}
	}
	if node < 2*r {
		if err := k.sendAgent(node-1, stUnfold, acc); err != nil {
			return nil, err
		}
	}
	return acc, nil
}

// run is the frame of every collective: a plain rank sends up (when it
// has something to send) and waits for the result; an agent gathers its
// local ranks' parts in rank order, runs agents, and sends the result down.
func (k *coll) run(up []byte, sendUp bool, gather func(from int, b []byte) error, agents func() ([]byte, error), down func(rank int) bool) ([]byte, error) {
	c := k.c
	if !c.o.agent() {
		if sendUp {
			if err := k.sendLocal(c.up, stUp, up); err != nil {
				return nil, err
			}
		}
		if !down(c.o.Rank) {
			return nil, nil
		}
		return k.recv(c.up.peer, true, stDown)
	}
	locals := c.localRanks()
	if gather != nil {
		for _, l := range locals {
			b, err := k.recv(l.peer, true, stUp)
			if err != nil {
				return nil, err
			}
			if err := gather(l.peer, b); err != nil {
				return nil, err
			}
		}
	}
	res, err := agents()
	if err != nil {
		return nil, err
	}
	// Large results go down to the local ranks in parallel. Each one's
	// result is ready before it goes: a rank that gets it and exits has
	// done its part (link.done).
	for _, l := range locals {
		if down(l.peer) {
			l.downSeq.Store(k.seq)
		}
	}
	errs := make([]error, len(locals))
	var wg sync.WaitGroup
	for i, l := range locals {
		if !down(l.peer) {
			continue
		}
		if len(res) < 64<<10 {
			errs[i] = k.sendLocal(l, stDown, res)
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = k.sendLocal(l, stDown, res) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return res, nil
}

func all(int) bool { return true }

// Barrier returns once every rank has entered it.
func (c *Ctrl) Barrier(tag string, timeout time.Duration) error {
	c.collMu.Lock()
	defer c.collMu.Unlock()
	k, err := c.begin("barrier", tag, 0, timeout)
	if err != nil {
		return err
	}
	none := func(lo, hi []byte) ([]byte, error) { return nil, nil }
	_, err = k.run(nil, true, func(int, []byte) error { return nil },
		func() ([]byte, error) { return k.doubling(nil, none) }, all)
	return k.end(err)
}

// AllGather returns every rank's blob in rank order.
func (c *Ctrl) AllGather(tag string, mine []byte, timeout time.Duration) ([][]byte, error) {
	c.collMu.Lock()
	defer c.collMu.Unlock()
	k, err := c.begin("allgather", tag, 0, timeout)
	if err != nil {
		return nil, err
	}
	acc := appendRecord(nil, record{rank: c.o.Rank, node: c.o.Node, local: c.o.LocalRank, blob: mine})
	concat := func(lo, hi []byte) ([]byte, error) {
		return append(append(make([]byte, 0, len(lo)+len(hi)), lo...), hi...), nil
	}
	res, err := k.run(acc, true, func(_ int, b []byte) error { acc = append(acc, b...); return nil },
		func() ([]byte, error) { return k.doubling(acc, concat) }, all)
	if err != nil {
		return nil, k.end(err)
	}
	out := make([][]byte, c.o.World)
	seen := 0
	err = eachRecord(res, func(r record) {
		if r.rank >= 0 && r.rank < len(out) && out[r.rank] == nil {
			out[r.rank] = append([]byte{}, r.blob...)
			seen++
		}
	})
	if err == nil && seen != c.o.World {
		err = fmt.Errorf("%d of %d ranks' parts", seen, c.o.World)
	}
	if err != nil {
		return nil, k.end(fault.New(fault.ErrCorrupt, k.op, "malformed all-gather result: %v", err))
	}
	return out, k.end(nil)
}

// Broadcast returns root's data on every rank (data is read on root only).
func (c *Ctrl) Broadcast(tag string, root int, data []byte, timeout time.Duration) ([]byte, error) {
	c.collMu.Lock()
	defer c.collMu.Unlock()
	k, err := c.begin("broadcast", tag, root, timeout)
	if err != nil {
		return nil, err
	}
	if root < 0 || root >= c.o.World {
		return nil, k.end(fault.New(fault.ErrInvalid, k.op, "root %d of %d ranks", root, c.o.World))
	}
	me := c.o.Rank
	rootNode := c.table.Node(root)
	var gather func(int, []byte) error
	if rootNode == c.o.Node && c.table.Local(root) != 0 {
		gather = func(from int, b []byte) error { data = b; return nil }
		if c.o.agent() {
			// only the root sends up: receive from it alone
			b, err := k.recv(root, true, stUp)
			if err != nil {
				return nil, k.end(err)
			}
			data, gather = b, nil
		}
	}
	res, err := k.run(data, me == root, gather, func() ([]byte, error) { return k.bcast(rootNode, data) },
		func(r int) bool { return r != root })
	if me == root {
		res = append([]byte{}, data...)
	}
	return res, k.end(err)
}

// bcast spreads data from rootNode's agent to every agent over the
// doubling partners.
func (k *coll) bcast(rootNode int, data []byte) ([]byte, error) {
	node, n := k.c.o.Node, k.c.o.Nodes
	p, r := Fold(n)
	vroot := Virtual(rootNode, n)
	var err error
	if vroot < 0 { // a folded node: its partner holds it first
		vroot = Virtual(rootNode+1, n)
		if node == rootNode {
			if err := k.sendAgent(node+1, stFold, data); err != nil {
				return nil, err
			}
		}
		if node == rootNode+1 {
			if data, err = k.recvAgent(rootNode, stFold); err != nil {
				return nil, err
			}
		}
	}
	v := Virtual(node, n)
	if v < 0 {
		if node == rootNode {
			return data, nil
		}
		return k.recvAgent(node+1, stUnfold)
	}
	for mask, i := 1, 0; mask < p; mask, i = mask<<1, i+1 {
		peer := Real(v^mask, n)
		switch {
		case BcastHolds(v, vroot, mask):
			err = k.sendAgent(peer, stDouble+i, data)
		case BcastHolds(v^mask, vroot, mask):
			data, err = k.recvAgent(peer, stDouble+i)
		}
		if err != nil {
			return nil, err
		}
	}
	if node < 2*r && node-1 != rootNode {
		if err := k.sendAgent(node-1, stUnfold, data); err != nil {
			return nil, err
		}
	}
	return data, nil
}

// AllReduceFloat32 replaces x on every rank by the element-wise sum of
// every rank's x: summed at each agent in local-rank order, then among the
// agents by recursive doubling (up to SmallBytes) or by recursive halving
// and doubling (Rabenseifner), with the excess nodes folded. Each element
// is summed in one fixed tree, so every rank gets the same bits. Every rank
// must pass the same tag and length, else ErrMismatch names a rank that
// did not; on error x is unspecified.
func (c *Ctrl) AllReduceFloat32(tag string, x []float32, timeout time.Duration) error {
	c.collMu.Lock()
	defer c.collMu.Unlock()
	k, err := c.begin("allreduce-f32", tag, len(x), timeout)
	if err != nil {
		return err
	}
	acc := x
	if c.o.agent() {
		acc = append([]float32(nil), x...)
	}
	res, err := k.run(f32bytes(x), true, func(from int, b []byte) error {
		if len(b) != 4*len(acc) {
			return c.mismatch(k.op, int32(from), true)
		}
		addInto(acc, b, false)
		return nil
	}, func() ([]byte, error) {
		if 4*len(acc) <= c.o.SmallBytes || c.o.Nodes < 2 {
			return k.doubling(f32bytes(acc), func(lo, hi []byte) ([]byte, error) {
				if len(lo) != len(hi) {
					return nil, fault.New(fault.ErrMismatch, k.op, "parts of %d and %d bytes", len(lo), len(hi))
				}
				out := make([]float32, len(lo)/4)
				copy(f32bytes(out), lo)
				addInto(out, hi, false)
				return f32bytes(out), nil
			})
		}
		return f32bytes(acc), k.halving(acc)
	}, all)
	if err == nil && len(res) != 4*len(x) {
		err = fault.New(fault.ErrMismatch, k.op, "result of %d bytes for %d float32", len(res), len(x))
	}
	if err == nil {
		copy(f32bytes(x), res)
	}
	return k.end(err)
}

// halving is the large all-reduce among agents: fold, reduce-scatter by
// recursive halving, all-gather by recursive doubling, unfold.
func (k *coll) halving(acc []float32) error {
	node, n := k.c.o.Node, k.c.o.Nodes
	l := len(acc)
	p, r := Fold(n)
	if node < 2*r && node%2 == 0 {
		if err := k.sendAgent(node+1, stFold, f32bytes(acc)); err != nil {
			return err
		}
		b, err := k.recvAgent(node+1, stUnfold)
		if err == nil && len(b) != 4*l {
			err = k.c.mismatch(k.op, int32(node+1), false)
		}
		if err != nil {
			return err
		}
		copy(f32bytes(acc), b)
		return nil
	}
	if node < 2*r {
		b, err := k.recvAgent(node-1, stFold)
		if err == nil && len(b) != 4*l {
			err = k.c.mismatch(k.op, int32(node-1), false)
		}
		if err != nil {
			return err
		}
		addInto(acc, b, true)
	}
	v := Virtual(node, n)
	for mask := p / 2; mask >= 1; mask >>= 1 {
		peer, i := Real(v^mask, n), bits.Len(uint(mask))-1
		klo, khi := HalvingRange(v, p, mask, l)
		olo, ohi := HalvingRange(v^mask, p, mask, l)
		if err := k.sendAgent(peer, stHalve+i, f32bytes(acc[olo:ohi])); err != nil {
			return err
		}
		b, err := k.recvAgent(peer, stHalve+i)
		if err == nil && len(b) != 4*(khi-klo) {
			err = k.c.mismatch(k.op, int32(peer), false)
		}
		if err != nil {
			return err
		}
		addInto(acc[klo:khi], b, v > v^mask)
	}
	for mask := 1; mask < p; mask <<= 1 {
		peer, i := Real(v^mask, n), bits.Len(uint(mask))-1
		mlo, mhi := HalvingRange(v, p, mask, l)
		tlo, thi := HalvingRange(v^mask, p, mask, l)
		if err := k.sendAgent(peer, stSpread+i, f32bytes(acc[mlo:mhi])); err != nil {
			return err
		}
		b, err := k.recvAgent(peer, stSpread+i)
		if err == nil && len(b) != 4*(thi-tlo) {
			err = k.c.mismatch(k.op, int32(peer), false)
		}
		if err != nil {
			return err
		}
		copy(f32bytes(acc[tlo:thi]), b)
	}
	if node < 2*r {
		return k.sendAgent(node-1, stUnfold, f32bytes(acc))
	}
	return nil
}

// Broken is the failure that broke the collectives, nil while they work.
func (c *Ctrl) Broken() error {
	c.collMu.Lock()
	defer c.collMu.Unlock()
	return c.broken
}
