package ctrl

// Reading a link's frames: the read loop with its silence deadline, the
// recycled frame bodies, the dispatch of each frame, and the mailbox that
// collectives await (with the deadline and the ranks they wait for).

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/ddstore/ddstore/fault"
)

func (c *Ctrl) readLoop(l *link) {
	defer c.wg.Done()
	localWatch := l.local && c.o.agent()
	for {
		// A local rank heartbeats once Start returned: its silence counts
		// from the table on (the bootstrap may wait long for a late rank).
		watch := localWatch && c.tabled.Load()
		if watch {
			l.conn.SetReadDeadline(time.Now().Add(c.localSilence()))
		}
		h, body, err := c.readFrameLive(l, watch)
		if err != nil {
			l.ended.Store(true) // every frame read is in the mailbox (goneSource)
			c.signal()
			c.linkLost(l, err)
			return
		}
		c.pause.RLock()
		done := c.handle(l, h, body)
		c.pause.RUnlock()
		if done {
			return
		}
	}
}

// localSilence is how long an agent waits on a silent local rank (one
// whose socket is still open: a frozen or hung process; a dead one's EOF
// is immediate). See LocalTiming.
func (c *Ctrl) localSilence() time.Duration {
	_, silence := LocalTiming(c.o.Period, c.o.LocalDeadAfter)
	return silence
}

// LocalTiming is how often a plain rank tells its agent that it lives,
// and how long its agent waits on its silence before declaring it dead:
// every min(Period, deadAfter/8), and deadAfter plus that, for deadAfter
// = Options.LocalDeadAfter. As with the agents' ring, a rank is declared
// dead no earlier than deadAfter after it froze (so that a shorter stop
// is not taken for a death) and no later than deadAfter and one beat:
// 3.6–4.05 s with ctrl's defaults, 10–11 s with the store's (liveness
// 10 s, Period 1 s).
func LocalTiming(period, deadAfter time.Duration) (beat, silence time.Duration) {
	beat = min(period, deadAfter/8)
	return beat, deadAfter + beat
}

// readFrameLive reads one frame; when watch, the silence deadline is
// renewed per 64 KiB of a long body (a slow sender is not a dead one).
func (c *Ctrl) readFrameLive(l *link, watch bool) (header, []byte, error) {
	if _, err := io.ReadFull(l.br, l.rhdr[:]); err != nil {
		return header{}, nil, err
	}
	h, n := parseHeader(l.rhdr[:])
	if n < 0 || n > maxBody {
		return header{}, nil, fmt.Errorf("ctrl: frame of %d bytes (limit %d)", n, maxBody)
	}
	var body []byte
	if n > 0 {
		body = c.takeBody(n)
	}
	for off := 0; off < n; {
		m := min(n-off, 64<<10)
		if watch {
			l.conn.SetReadDeadline(time.Now().Add(c.localSilence()))
		} else if !l.local {
			c.heard(l.peer) // any traffic is a sign of life
		}
		if _, err := io.ReadFull(l.br, body[off:off+m]); err != nil {
			return header{}, nil, err
		}
		off += m
	}
	return h, body, nil
}

// maxFree bounds the recycled bodies kept (recycle).
const maxFree = 64

// takeBody is a frame body of n bytes: a recycled one when one is large
// enough, else a new one.
func (c *Ctrl) takeBody(n int) []byte {
	if n >= 4<<10 {
		c.freeMu.Lock()
		for i := len(c.free) - 1; i >= 0; i-- {
			if b := c.free[i]; cap(b) >= n {
				c.free[i] = c.free[len(c.free)-1]
				c.free[len(c.free)-1] = nil
				c.free = c.free[:len(c.free)-1]
				c.freeMu.Unlock()
				return b[:n]
			}
		}
		c.freeMu.Unlock()
	}
	return make([]byte, n)
}

// recycle gives back a body that its receiver no longer uses (a ring
// piece, once summed).
func (c *Ctrl) recycle(b []byte) {
	if cap(b) < 4<<10 {
		return
	}
	c.freeMu.Lock()
	if c.free == nil {
		c.free = make([][]byte, 0, maxFree)
	}
	if len(c.free) < maxFree {
		c.free = append(c.free, b)
	}
	c.freeMu.Unlock()
}

func (c *Ctrl) handle(l *link, h header, body []byte) bool {
	if !l.local && c.o.agent() {
		c.heard(l.peer)
	}
	switch h.typ {
	case tHB:
	case tPing:
		c.nHB.Add(1)
		l.send(header{typ: tPong, seq: h.seq, from: uint32(c.o.Node)}, nil, time.Now().Add(c.o.Period))
	case tPong:
		c.gotPong(l.peer, l)
	case tProbe:
		from := int(h.from)
		c.goBg(func() { c.probeFor(from, l) })
	case tProbeAck:
		c.gotIndirect(int(h.from))
	case tDead:
		ranks, done, detail := parseDead(body)
		c.learnDead(ranks, done, l, detail)
	case tAbort:
		c.learnAbort(body, l)
	case tColl, tGather, tTable:
		if h.typ == tColl && l.local && c.o.agent() && h.seq > l.upSeq.Load() {
			l.upSeq.Store(h.seq) // (this loop is its only writer)
		}
		c.put(mkey{seq: h.seq, step: h.step, from: int32(l.peer), local: l.local}, msg{body: body, hops: h.hops, tag: h.tag})
	case tBye:
		l.left.Store(true)
		defer c.signal() // collectives waiting for it fail (leftPeer)
		if !l.local {
			c.deadMu.Lock()
			c.nodeLeft.set(l.peer)
			c.deadMu.Unlock()
		}
		if l.local && !c.o.agent() {
			// The agent left: collectives need it.
			c.learnAbort(abortBody(l.peer, 0, time.Time{}, fault.ErrClosed, []int{l.peer}, fmt.Sprintf("rank %d (this node's agent) closed", l.peer)), nil)
		}
		return true
	}
	return false
}

// linkLost: a connection ended without goodbye: its far end died.
func (c *Ctrl) linkLost(l *link, err error) {
	if c.closing.Load() || c.killed.Load() || l.left.Load() {
		return
	}
	var ne net.Error
	silent := errors.As(err, &ne) && ne.Timeout()
	rank, detail := c.lostRank(l, silent)
	if rank < 0 {
		return
	}
	if !silent {
		// A launcher passes a signal on to the ranks one after another:
		// the far end may have ended by it before this rank gets its own.
		// Reads avoid the rank at once (OnDead, for it alone: the ranks of
		// its node are alive if only its process ended), but its death
		// counts for collectives after ExitGrace, so that the job ends by
		// its signal, not with this rank's error (engine/mesh does the
		// same; make test-life, SIGTERM under srun, once in CI).
		c.tellOnce(rank, detail)
		c.exitGrace(err)
		if c.closing.Load() || c.killed.Load() || l.left.Load() {
			return
		}
	}
	var done uint64
	switch {
	case l.local && c.o.agent():
		done = l.done()
	case !l.local:
		// An agent whose connection ended (its process exited; a silent
		// one is SWIM's) may have sent its every part of the collectives
		// up to the one this rank is in: those go on unless they wait for
		// it (goneSource), and every later one fails.
		done = c.began.Load()
	}
	c.learnDead([]int{rank}, done, nil, detail)
}

// lostRank is the rank whose death a lost link l means, and why; -1 if
// none (an agent link of a node not in the table).
func (c *Ctrl) lostRank(l *link, silent bool) (int, string) {
	switch {
	case l.local && c.o.agent():
		if silent {
			return l.peer, fmt.Sprintf("rank %d (node %d) silent for %v", l.peer, c.o.Node, c.localSilence())
		}
		return l.peer, fmt.Sprintf("rank %d (node %d) closed its control connection without leaving", l.peer, c.o.Node)
	case l.local:
		return l.peer, fmt.Sprintf("rank %d (this node's agent) closed the connection", l.peer)
	}
	r := c.agentRank(l.peer)
	return r, fmt.Sprintf("rank %d (agent of node %d) closed its connection without leaving", r, l.peer)
}

func (c *Ctrl) put(k mkey, m msg) {
	c.mbMu.Lock()
	c.mb[k] = m
	c.mbMu.Unlock()
	c.signal()
}

func (c *Ctrl) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// await takes message k, failing at once on a death or abort, and at the
// deadline with an error naming who (the ranks awaited).
func (c *Ctrl) await(op string, k mkey, deadline time.Time, who []int) (msg, error) {
	return c.awaitTagged(op, k, 0, deadline, who)
}

// awaitTagged is await that, for tag ≠ 0, also fails when a message of
// the same collective with another tag is queued (a rank that called
// another collective, tag or length, whose message reached this rank at
// another step).
func (c *Ctrl) awaitTagged(op string, k mkey, tag uint32, deadline time.Time, who []int) (msg, error) {
	var timer *time.Timer
	for {
		// Both before the mailbox: a frame put before the end (a death, a
		// goodbye) is seen. (leftPeer after it once failed a rank whose
		// part and goodbye both arrived in between: TestOpenErrors under
		// -race.)
		src, left := c.goneSource(k), c.leftPeer(k)
		c.mbMu.Lock()
		m, ok := c.mb[k]
		if ok {
			delete(c.mb, k)
		}
		var odd *mkey
		if !ok && tag != 0 {
			for ok2, m2 := range c.mb {
				if ok2.seq == k.seq && m2.tag != tag {
					odd = &ok2
					break
				}
			}
		}
		c.mbMu.Unlock()
		if odd != nil {
			return msg{}, c.mismatch(op, odd.from, odd.local)
		}
		if ok {
			if timer != nil {
				timer.Stop()
			}
			return m, nil
		}
		if err := c.goneAt(op, k.seq); err != nil {
			return msg{}, err
		}
		if src >= 0 {
			return msg{}, &fault.Error{Op: op, Ranks: []int{src}, Side: fault.Remote, Kind: fault.ErrPeerDead,
				Detail: fmt.Sprintf("rank %d (agent of node %d) died before its part of this collective arrived", src, k.from)}
		}
		if left >= 0 {
			return msg{}, &fault.Error{Op: op, Ranks: []int{left}, Side: fault.Remote, Kind: fault.ErrClosed,
				Detail: fmt.Sprintf("rank %d closed the store before this collective", left)}
		}
		if timer == nil {
			timer = time.NewTimer(time.Until(deadline))
			defer timer.Stop()
		}
		select {
		case <-c.wake:
		case <-timer.C:
			if who == nil {
				return msg{}, fault.New(fault.ErrTimeout, op, "step %d from %d did not arrive in time", k.step, k.from)
			}
			return msg{}, &fault.Error{Op: op, Ranks: who, Side: fault.Remote, Kind: fault.ErrTimeout,
				Detail: fmt.Sprintf("%s did not arrive in time", fault.RankList(who))}
		case <-c.stop:
			return msg{}, &fault.Error{Op: op, Kind: fault.ErrClosed, Detail: "control plane closed"}
		}
	}
}

// leftPeer is the rank that message k is to come from when that rank has
// closed its control plane (said goodbye on the link k comes over), else
// -1. The bootstrap's messages are not concerned.
func (c *Ctrl) leftPeer(k mkey) int {
	if k.seq == 0 {
		return -1
	}
	if !k.local {
		node := int(k.from)
		c.deadMu.Lock()
		left := c.nodeLeft.has(node)
		c.deadMu.Unlock()
		if !left {
			return -1
		}
		// Every link to that node has said goodbye (or ended): a frame
		// sent before the goodbye on another link than the one that
		// carried it first has arrived.
		c.mu.Lock()
		defer c.mu.Unlock()
		if l := c.agents[node]; l != nil && !l.left.Load() && !l.ended.Load() {
			return -1
		}
		for _, l := range c.extra {
			if l.peer == node && !l.left.Load() && !l.ended.Load() {
				return -1
			}
		}
		return c.agentRank(node)
	}
	c.mu.Lock()
	l := c.locals[int(k.from)]
	if !c.o.agent() {
		l = c.up
	}
	c.mu.Unlock()
	if l != nil && l.left.Load() {
		return l.peer
	}
	return -1
}

// goneSource is the agent rank that message k is to come from when that
// agent is dead and no frame of it can come any more (every connection
// from its node has ended, or there is none), else -1: a collective that
// waits for it fails, even when the death lets the collective go on
// (DeathApplies: the agent exited after its part of an earlier step).
func (c *Ctrl) goneSource(k mkey) int {
	if k.local || k.seq == 0 || !c.nodeIsDead(int(k.from)) {
		return -1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.agents[int(k.from)]; l != nil && !l.ended.Load() {
		return -1
	}
	for _, l := range c.extra {
		if l.peer == int(k.from) && !l.ended.Load() {
			return -1
		}
	}
	return c.agentRank(int(k.from))
}
