package ctrl

// Deaths and aborts: what a rank learns of a dead rank or a failed
// collective, how it floods that along the tree, and the errors a
// collective returns then.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
	"sync/atomic"
	"time"

	"github.com/ddstore/ddstore/fault"
)

// ExitGrace is how long a rank waits, once a connection broke (closed
// without goodbye, reset; not a timeout) or a send on it failed, before
// its collectives fail with the peer's death: long enough for a signal
// that the launcher forwards to every rank (Ctrl-C, scancel's SIGTERM) to
// reach this one too, so that an interrupted job ends by its signal. As
// engine/mesh's ExitGrace.
var ExitGrace = 500 * time.Millisecond

// exitGrace sleeps ExitGrace after a failed send or a lost link unless err
// is a timeout (or the control plane closes meanwhile).
func (c *Ctrl) exitGrace(err error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return
	}
	t := time.NewTimer(ExitGrace)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.stop:
	}
}

// grace is exitGrace once per collective: an agent that sends the
// result down to its local ranks after one died finds the others that
// failed on it (and exited) dead too, and must not wait ExitGrace for
// each (make test-slurm under tree: 11 waits, the agent failed 5.5 s
// after the kill).
func (k *coll) grace(err error) {
	if k.graced.CompareAndSwap(false, true) {
		k.c.exitGrace(err)
	}
}

// gone is the error that stops every collective: a known death or an
// abort; nil while none.
func (c *Ctrl) gone(op string) error { return c.goneAt(op, math.MaxUint64) }

// goneAt is the error that stops collective seq: a death that it needs
// (DeathApplies) or an abort; nil while none. A rank that had done its
// part of seq (and of every collective before it) when it died or left
// does not stop seq, as under engine/mesh, whose collectives fail on a
// dead rank only while its part has not arrived: a rank that exits after
// its last collective, without Close, is no failure of the others still
// finishing that collective. Every collective after seq fails on it.
func (c *Ctrl) goneAt(op string, seq uint64) error {
	c.deadMu.Lock()
	defer c.deadMu.Unlock()
	if c.deadN > 0 && DeathApplies(c.minDone, seq) {
		var need []int
		for i, r := range c.deadList {
			if DeathApplies(c.deadDone[i], seq) {
				need = append(need, r)
			}
		}
		if len(need) == 0 { // beyond the list's 64
			need = c.deadList
		}
		e := c.deadErr(op, need)
		e.Err = c.deadCause
		return e
	}
	if c.aborted != nil {
		return c.aborted
	}
	return nil
}

// DeathApplies reports whether a rank that died with its part of every
// collective up to done delivered stops collective seq: seq needs it
// unless done ≥ seq (seq 0, the bootstrap, always needs it).
func DeathApplies(done, seq uint64) bool { return seq == 0 || done < seq }

func (c *Ctrl) deadErr(op string, ranks []int) *fault.Error {
	r := append([]int(nil), ranks...)
	sort.Ints(r)
	if len(r) > 64 {
		r = r[:64]
	}
	return &fault.Error{Op: op, Ranks: r, Side: fault.Remote, Kind: fault.ErrPeerDead,
		Detail: fmt.Sprintf("%s dead", fault.RankList(r))}
}

func (c *Ctrl) nodeIsDead(node int) bool {
	c.deadMu.Lock()
	defer c.deadMu.Unlock()
	return c.nodeDead.has(node)
}

// nodeGone: node's agent is dead or has left.
func (c *Ctrl) nodeGone(node int) bool {
	c.deadMu.Lock()
	defer c.deadMu.Unlock()
	return c.nodeDead.has(node) || c.nodeLeft.has(node)
}

// Dead reports whether rank is known dead.
func (c *Ctrl) Dead(rank int) bool {
	c.deadMu.Lock()
	defer c.deadMu.Unlock()
	return c.dead.has(rank)
}

// MarkDead declares rank dead from outside (a failure only the caller
// saw): collectives fail naming it and OnDead runs. It is not spread, but
// the next collective that fails on it tells every rank (an abort, as
// engine/mesh's begin does), so that the ranks already waiting in that
// collective for this one fail naming rank too, not this rank's absence
// or another collective's part (make test-netns-tree, step 2).
//
// A rank already known dead, having done its part of the collective in
// progress, would let that collective go on (goneAt); marked, it fails
// every collective from now on here, with the same abort: this rank gave
// up on it (a read failed) and calls no more of the others' collectives.
// Otherwise its next one (Close's barrier, say) would take the dead
// rank's place in the sequence and the others would blame this rank for
// a collective mismatch (make test-slurm under tree).
func (c *Ctrl) MarkDead(rank int, cause error) {
	if rank < 0 || rank >= c.o.World || rank == c.o.Rank {
		return
	}
	if len(c.learnDeadLocal([]int{rank}, 0, fmt.Sprintf("rank %d marked dead: %v", rank, cause))) > 0 || c.giveUpOn(rank) {
		c.marked.Store(true)
	}
}

// giveUpOn makes a known death apply to every collective from now on
// (its done back to 0); false unless rank is known dead.
func (c *Ctrl) giveUpOn(rank int) bool {
	c.deadMu.Lock()
	defer c.deadMu.Unlock()
	if !c.dead.has(rank) {
		return false
	}
	for i, r := range c.deadList {
		if r == rank {
			c.deadDone[i] = 0
		}
	}
	c.minDone = 0
	return true
}

// learnDead records ranks as dead, tells OnDead, wakes collectives and,
// on an agent, spreads the news to every link but via. done is the last
// collective for which the ranks had done their part (0: none known):
// collectives up to it go on (goneAt).
func (c *Ctrl) learnDead(ranks []int, done uint64, via *link, detail string) {
	c.noteDead(ranks, done, detail, func(fresh []int) {
		if c.o.agent() {
			c.flood(header{typ: tDead}, deadBody(fresh, done, detail), via)
		}
	})
}

// learnDeadLocal records ranks as dead here only (MarkDead).
func (c *Ctrl) learnDeadLocal(ranks []int, done uint64, detail string) []int {
	return c.noteDead(ranks, done, detail, nil)
}

// beforeSpread, when set (tests), runs before a rank spreads news it
// learnt: a descheduled goroutine there is what it stands for.
var beforeSpread atomic.Pointer[func(c *Ctrl)]

func (c *Ctrl) pauseBeforeSpread() {
	if f := beforeSpread.Load(); f != nil {
		(*f)(c)
	}
}

// noteDead records the fresh ones of ranks as dead and returns them.
// spread, when given, is queued before any collective of this rank can
// see the deaths: an agent that fails on a death and closes at once
// (Close waits for what is queued, then says goodbye) has told its local
// ranks first, which then fail naming the dead rank, not their agent's
// goodbye (make test-slurm, once in CI).
func (c *Ctrl) noteDead(ranks []int, done uint64, detail string, spread func(fresh []int)) []int {
	c.deadMu.Lock()
	var fresh []int
	for _, r := range ranks {
		if r >= 0 && r < c.o.World && !c.dead.has(r) && r != c.o.Rank {
			c.dead.set(r)
			fresh = append(fresh, r)
			if c.table != nil && c.table.Local(r) == 0 {
				c.nodeDead.set(c.table.Node(r))
			}
		}
	}
	c.deadMu.Unlock()
	if len(fresh) == 0 {
		return nil
	}
	if spread != nil {
		c.pauseBeforeSpread()
		spread(fresh)
	}
	c.firstDead.CompareAndSwap(0, time.Now().UnixNano())
	// OnDead before collectives see the death (deadN, which gone reads): a
	// collective that fails with it finds it recorded where its caller
	// looks (the store's health).
	c.tellDead(fresh, detail)
	c.deadMu.Lock()
	if c.deadN == 0 || done < c.minDone {
		c.minDone = done
	}
	c.deadN += len(fresh)
	for _, r := range fresh {
		if len(c.deadList) < 64 {
			c.deadList = append(c.deadList, r)
			c.deadDone = append(c.deadDone, done)
		}
	}
	if c.deadCause == nil {
		c.deadCause = errors.New(detail)
	}
	c.deadMu.Unlock()
	c.signal()
	return fresh
}

// tellDead runs OnDead for each of dead and, for a dead agent, for the
// other ranks of its node: with their agent gone they can take part in no
// collective, and when the node itself died (a cut host) nothing else
// would name them, so that reads in flight to them would wait for the
// fabric's deadline. Their deaths are not the collectives' (those name
// the agent, and stop when it does). OnDead runs once per rank (a lost
// link tells it of its peer alone at once, then of the death here after
// ExitGrace: linkLost); the ranks of dead are told first, with their own
// cause.
func (c *Ctrl) tellDead(dead []int, detail string) {
	if c.o.OnDead == nil {
		return
	}
	for _, a := range dead {
		c.tellOnce(a, detail)
	}
	c.deadMu.Lock()
	t := c.table
	c.deadMu.Unlock()
	if t == nil {
		return
	}
	for _, a := range dead {
		if t.Local(a) != 0 {
			continue
		}
		node := t.Node(a)
		for r := range c.o.World {
			if r != a && r != c.o.Rank && t.Node(r) == node {
				c.tellOnce(r, fmt.Sprintf("rank %d: its node's agent, rank %d, died (node %d is out of the job): %s", r, a, node, detail))
			}
		}
	}
}

// tellOnce runs OnDead (when set) for rank unless it ran for it before.
// tellMu is held across the call, so that a second caller for the same
// rank returns only once OnDead has: noteDead's promise (OnDead before
// collectives see the death) holds when a lost link told it first. OnDead
// must not call back into this Ctrl.
func (c *Ctrl) tellOnce(rank int, detail string) {
	if c.o.OnDead == nil {
		return
	}
	c.tellMu.Lock()
	defer c.tellMu.Unlock()
	if c.told.has(rank) {
		return
	}
	c.told.set(rank)
	c.o.OnDead(rank, &fault.Error{Op: "ctrl", Ranks: []int{rank}, Side: fault.Remote, Kind: fault.ErrPeerDead, Detail: detail})
}

// FirstDeath is when this rank first learned of a death (zero if never).
func (c *Ctrl) FirstDeath() time.Time {
	if ns := c.firstDead.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// deadBody: u32 count, u64 done, the ranks (u32 each), detail.
func deadBody(ranks []int, done uint64, detail string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(ranks)))
	b = binary.LittleEndian.AppendUint64(b, done)
	for _, r := range ranks {
		b = binary.LittleEndian.AppendUint32(b, uint32(r))
	}
	return append(b, detail...)
}

func parseDead(b []byte) (ranks []int, done uint64, detail string) {
	if len(b) < 12 {
		return nil, 0, ""
	}
	done = binary.LittleEndian.Uint64(b[4:])
	n := min(int(binary.LittleEndian.Uint32(b)), (len(b)-12)/4)
	out := make([]int, n)
	for i := range out {
		out[i] = int(binary.LittleEndian.Uint32(b[12+4*i:]))
	}
	return out, done, string(b[12+4*n:])
}

// flood sends a notice to every agent link and local link but via, in the
// background (a stalled peer must not stall the caller).
func (c *Ctrl) flood(h header, body []byte, via *link) {
	c.mu.Lock()
	ls := make([]*link, 0, len(c.agents)+len(c.locals)+len(c.extra))
	for _, l := range c.agents {
		ls = append(ls, l)
	}
	for _, l := range c.locals {
		ls = append(ls, l)
	}
	if c.up != nil {
		ls = append(ls, c.up)
	}
	c.mu.Unlock()
	for _, l := range ls {
		if l == via || l.left.Load() || (via != nil && !via.local && !l.local && l.peer == via.peer) {
			continue
		}
		c.goBg(func() { l.send(h, body, time.Now().Add(time.Second)) })
	}
}

var abortKinds = []error{nil, fault.ErrTimeout, fault.ErrPeerDead, fault.ErrMismatch, fault.ErrClosed, fault.ErrToken}

// abortBody: origin rank, kind code, ranks, the collective's sequence
// number and when the origin gave up (Unix ns), detail.
func abortBody(origin int, seq uint64, at time.Time, kind error, ranks []int, detail string) []byte {
	code := byte(0)
	for i, k := range abortKinds {
		if k != nil && errors.Is(kind, k) {
			code = byte(i)
			break
		}
	}
	b := binary.LittleEndian.AppendUint32(nil, uint32(origin))
	b = append(b, code)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ranks)))
	for _, r := range ranks {
		b = binary.LittleEndian.AppendUint32(b, uint32(r))
	}
	b = binary.LittleEndian.AppendUint64(b, seq)
	b = binary.LittleEndian.AppendUint64(b, uint64(at.UnixNano()))
	return append(b, detail...)
}

// abortNote is a parsed abort notice.
type abortNote struct {
	origin int
	seq    uint64
	at     time.Time
	detail string // the origin's own
	err    *fault.Error
}

func parseAbort(op string, b []byte) (int, *fault.Error) {
	n := parseAbortNote(op, b)
	return n.origin, n.err
}

func parseAbortNote(op string, b []byte) abortNote {
	e := &fault.Error{Op: op, Side: fault.Remote, Kind: fault.ErrPeerDead}
	if len(b) < 9 {
		e.Detail = "malformed abort notice"
		return abortNote{origin: -1, err: e}
	}
	origin := int(binary.LittleEndian.Uint32(b))
	if int(b[4]) < len(abortKinds) && b[4] > 0 {
		e.Kind = abortKinds[b[4]]
	}
	n := min(int(binary.LittleEndian.Uint32(b[5:])), (len(b)-9)/4)
	for i := 0; i < n; i++ {
		e.Ranks = append(e.Ranks, int(binary.LittleEndian.Uint32(b[9+4*i:])))
	}
	if len(e.Ranks) == 0 {
		e.Ranks = []int{origin}
	}
	rest := b[9+4*n:]
	note := abortNote{origin: origin, err: e}
	if len(rest) >= 16 {
		note.seq = binary.LittleEndian.Uint64(rest)
		note.at = time.Unix(0, int64(binary.LittleEndian.Uint64(rest[8:])))
		rest = rest[16:]
	}
	note.detail = string(rest)
	e.Detail = fmt.Sprintf("rank %d reports: %s", origin, rest)
	return note
}

// gaveUp is the error of a rank that begins collective seq after another
// rank gave up on it (or on an earlier one that this rank completed
// late): it names who gave up, when, and why.
func gaveUp(op string, seq uint64, n abortNote) error {
	e := *n.err
	e.Op = op
	what := "this collective"
	if n.seq < seq {
		what = fmt.Sprintf("the collective before it (#%d), which this rank completed late", n.seq)
	}
	when := ""
	if !n.at.IsZero() {
		when = fmt.Sprintf(" at %s, %v before this rank got there", n.at.Format("15:04:05.000"), time.Since(n.at).Round(time.Millisecond))
	}
	e.Detail = fmt.Sprintf("rank %d gave up on %s%s: %s", n.origin, what, when, n.detail)
	return &e
}

// learnAbort records another rank's failure; collectives fail with it.
func (c *Ctrl) learnAbort(body []byte, via *link) {
	note := parseAbortNote("ctrl", body)
	origin := note.origin
	c.deadMu.Lock()
	if c.abortSeen[origin] {
		c.deadMu.Unlock()
		return
	}
	c.abortSeen[origin] = true
	// One abort per collective is enough for every rank to fail it: an
	// agent floods the first (many ranks may give up on one collective).
	first := note.seq == 0 || !c.abortFlooded[note.seq]
	if note.seq != 0 {
		c.abortFlooded[note.seq] = true
	}
	c.deadMu.Unlock()
	// Spread before this rank's collectives see it (noteDead says why).
	c.pauseBeforeSpread()
	if c.o.agent() {
		if first {
			c.flood(header{typ: tAbort}, body, via)
		}
	} else if via == nil && c.up != nil {
		c.goBg(func() { c.up.send(header{typ: tAbort}, body, time.Now().Add(time.Second)) })
	}
	c.deadMu.Lock()
	if c.aborted == nil {
		c.aborted = note.err
		c.abortNote = note
	}
	c.deadMu.Unlock()
	c.signal()
}

// abort tells every rank of this rank's failure (of collective seq).
func (c *Ctrl) abort(seq uint64, err error) {
	kind, ranks, detail := fault.Parts(err)
	body := abortBody(c.o.Rank, seq, time.Now(), kind, ranks, detail)
	c.deadMu.Lock()
	c.abortSeen[c.o.Rank] = true
	c.abortFlooded[seq] = true
	c.deadMu.Unlock()
	if c.o.agent() {
		c.flood(header{typ: tAbort}, body, nil)
	} else if c.up != nil {
		c.goBg(func() { c.up.send(header{typ: tAbort}, body, time.Now().Add(time.Second)) })
	}
}
