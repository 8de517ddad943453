package ctrl

// Liveness: an agent pings its ring successor every Period; an answer
// older than SuspectAfter makes it a suspect, probed through Probes other
// agents; past DeadAfter with no answer, direct or indirect, its node is
// declared dead. Plain ranks tell their agent they live (LocalTiming).

import (
	"fmt"
	"sync"
	"time"
)

type liveState struct {
	mu        sync.Mutex
	target    int
	oldest    time.Time // the oldest unanswered ping to target (zero: none)
	lastProbe time.Time
	since     time.Time       // when target became the target
	probes    map[int][]*link // suspects this agent probes for others
}

func (c *Ctrl) watch() {
	defer c.wg.Done()
	if c.o.Nodes < 2 {
		return
	}
	o := &c.o
	lastTick, lastPing := time.Now(), time.Time{}
	var seq uint64
	c.onTicks(o.Period/10, func(now time.Time) {
		stalled := now.Sub(lastTick) > o.Period // this rank itself was stopped
		lastTick = now
		c.ensureRing(now)
		target := RingNext(o.Node, o.Nodes, c.nodeGone)
		c.live.mu.Lock()
		if target != c.live.target {
			c.live.target, c.live.oldest, c.live.lastProbe, c.live.since = target, time.Time{}, time.Time{}, now
		}
		if stalled && !c.live.oldest.IsZero() {
			c.live.oldest = now // our own silence: give the target a new chance
		}
		var ping *link
		if target >= 0 && now.Sub(lastPing) >= o.Period {
			lastPing = now
			// The clock starts with the link: a successor still in its
			// bootstrap has not dialled yet. One that never links within
			// Timeout is dead.
			if ping = c.agentLink(target); ping != nil && c.live.oldest.IsZero() {
				c.live.oldest = now
			}
			if ping == nil && c.live.oldest.IsZero() && now.Sub(c.live.since) > o.Timeout-o.DeadAfter {
				c.live.oldest = now
			}
		}
		var suspect, dead bool
		if !c.live.oldest.IsZero() {
			age := now.Sub(c.live.oldest)
			dead = age > o.DeadAfter
			suspect = !dead && age > o.SuspectAfter && now.Sub(c.live.lastProbe) >= o.Period
			if suspect {
				c.live.lastProbe = now
			}
			if dead {
				c.live.oldest = time.Time{}
			}
		}
		c.live.mu.Unlock()
		if ping != nil {
			seq++
			if ping.trySend(header{typ: tPing, seq: seq, from: uint32(o.Node)}, nil, now.Add(o.Period/2)) {
				c.nHB.Add(1)
			} else {
				// A collective is writing to the target: its progress (and
				// TCP_USER_TIMEOUT if it stalls) stands for the answer.
				c.heard(target)
			}
		}
		if suspect {
			for _, h := range c.helpers(target) {
				c.nHB.Add(1)
				h.send(header{typ: tProbe, from: uint32(target)}, nil, now.Add(o.Period/2))
			}
		}
		if dead {
			var ranks []int
			for r := 0; r < o.World; r++ {
				if c.table.Node(r) == target {
					ranks = append(ranks, r)
				}
			}
			c.learnDead(ranks, 0, nil, fmt.Sprintf("node %d's agent (rank %d) silent for %v, and %d indirect probes got no answer",
				target, c.agentRank(target), o.DeadAfter, o.Probes))
		}
	})
}

// onTicks calls fn every d, with the pause lock read-held, until Stop.
func (c *Ctrl) onTicks(d time.Duration, fn func(now time.Time)) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
		c.pause.RLock()
		fn(time.Now())
		c.pause.RUnlock()
	}
}

// ensureRing dials the ring neighbours this agent is to dial (the higher
// node dials), in the background.
func (c *Ctrl) ensureRing(now time.Time) {
	next := RingNext(c.o.Node, c.o.Nodes, c.nodeGone)
	for _, nb := range []int{RingPrev(c.o.Node, c.o.Nodes, c.nodeGone), next} {
		// The watcher dials its successor itself when no link is there
		// (a crossed dial leaves two links, both used).
		if nb < 0 || (!Dials(c.o.Node, nb) && nb != next) {
			continue
		}
		c.mu.Lock()
		need := c.agents[nb] == nil && !c.dialing[nb]
		c.mu.Unlock()
		if need {
			c.goBg(func() { c.linkTo(nb, now.Add(c.o.DeadAfter), nb == next) })
		}
	}
}

// helpers are up to Probes connected agents other than target.
func (c *Ctrl) helpers(target int) []*link {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*link
	prefer := []int{RingPrev(c.o.Node, c.o.Nodes, nil), TreeParent(c.o.Node, c.o.Arity)}
	for _, n := range prefer {
		if l := c.agents[n]; l != nil && n != target && len(out) < c.o.Probes {
			out = append(out, l)
		}
	}
	for n, l := range c.agents {
		if len(out) >= c.o.Probes {
			break
		}
		if n != target && n != prefer[0] && n != prefer[1] {
			out = append(out, l)
		}
	}
	return out
}

// probeFor pings suspect for the agent on link req; the answer goes back
// from gotPong.
func (c *Ctrl) probeFor(suspect int, req *link) {
	if suspect < 0 || suspect >= c.o.Nodes || suspect == c.o.Node || c.nodeIsDead(suspect) {
		return
	}
	c.live.mu.Lock()
	c.live.probes[suspect] = append(c.live.probes[suspect], req)
	first := len(c.live.probes[suspect]) == 1
	c.live.mu.Unlock()
	if !first {
		return
	}
	if l, err := c.linkTo(suspect, time.Now().Add(c.o.SuspectAfter), true); err == nil {
		c.nHB.Add(1)
		l.send(header{typ: tPing, from: uint32(c.o.Node)}, nil, time.Now().Add(c.o.Period))
	}
	select {
	case <-time.After(c.o.DeadAfter):
	case <-c.stop:
	}
	c.live.mu.Lock()
	delete(c.live.probes, suspect)
	c.live.mu.Unlock()
}

// gotPong: node answered a ping (ours, or one sent for a prober).
func (c *Ctrl) gotPong(node int, _ *link) {
	c.live.mu.Lock()
	if node == c.live.target {
		c.live.oldest = time.Time{}
	}
	reqs := c.live.probes[node]
	delete(c.live.probes, node)
	c.live.mu.Unlock()
	for _, r := range reqs {
		c.nHB.Add(1)
		r.send(header{typ: tProbeAck, from: uint32(node)}, nil, time.Now().Add(c.o.Period))
	}
}

// heard: a frame came from node's agent.
func (c *Ctrl) heard(node int) { c.gotIndirect(node) }

// gotIndirect: a helper reached node.
func (c *Ctrl) gotIndirect(node int) {
	c.live.mu.Lock()
	if node == c.live.target {
		c.live.oldest = time.Time{}
	}
	c.live.mu.Unlock()
}

// heartbeat tells a plain rank's agent that it lives (LocalTiming).
func (c *Ctrl) heartbeat() {
	defer c.wg.Done()
	beat, _ := LocalTiming(c.o.Period, c.o.LocalDeadAfter)
	c.onTicks(beat, func(now time.Time) {
		c.nHB.Add(1)
		c.up.send(header{typ: tHB}, nil, now.Add(c.o.Period))
	})
}
