package engine

// The store's control plane: the connections that carry its collectives
// and find dead ranks once the launcher's exchange has bootstrapped. Two
// exist, chosen by Options.Control (config store.control, env
// DDSTORE_CONTROL): "tree" (engine/ctrl, the default: node agents in a
// k-ary tree; a plain rank holds one connection, to its agent) and "mesh"
// (engine/mesh: every rank holds a connection to every other).

import (
	"cmp"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/ddstore/ddstore/configs"
	"github.com/ddstore/ddstore/engine/auth"
	"github.com/ddstore/ddstore/engine/bootstrap"
	"github.com/ddstore/ddstore/engine/ctrl"
	"github.com/ddstore/ddstore/engine/mesh"
)

// Control planes (Options.Control); DefaultControl is that of "".
const (
	ControlMesh    = configs.ControlMesh
	ControlTree    = configs.ControlTree
	DefaultControl = configs.DefaultControl
)

// controlPlane is what the store asks of its control plane after Open.
type controlPlane interface {
	bootstrap.Exchanger
	AllReduceFloat32(tag string, x []float32, timeout time.Duration) error
	Broken() error
	MarkDead(rank int, cause error)
}

// treeListen opens the TCP listener that this rank offers as its node's
// agent (round 1 of Open publishes it; ranks that turn out not to be an
// agent close it) and returns it with its port. Its connections are
// authenticated from the start, while the launcher's round still runs:
// a stranger is refused at once, not left in the backlog.
func treeListen(secret []byte, rank int) (net.Listener, int, error) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, 0, err
	}
	return newGatedListener(ln, secret, fmt.Sprintf("control plane of rank %d", rank)), ln.Addr().(*net.TCPAddr).Port, nil
}

// gatedListener runs auth's gate (the job secret, a bounded number of
// handshakes at once) on every connection as it arrives; Accept returns
// the admitted ones, marked so that the control plane's own handshake
// does not run twice on them.
type gatedListener struct {
	ln   net.Listener
	gate *auth.Gate
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

// admitted is a connection whose peer proved the secret (gatedListener).
type admitted struct{ net.Conn }

// NetConn is the connection underneath (for socket options).
func (a admitted) NetConn() net.Conn { return a.Conn }

func newGatedListener(ln net.Listener, secret []byte, name string) *gatedListener {
	g := &gatedListener{ln: ln, gate: auth.NewGate(name, secret, 0, 0), ch: make(chan net.Conn, 64), done: make(chan struct{})}
	go g.loop()
	return g
}

func (g *gatedListener) loop() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return // closed
		}
		g.gate.Go(c, func(c net.Conn) {
			t := time.NewTimer(auth.DefaultGateTimeout)
			defer t.Stop()
			select {
			case g.ch <- admitted{c}:
			case <-g.done:
				c.Close()
			case <-t.C:
				c.Close() // not taken in time: the peer's dial retries
			}
		})
	}
}

func (g *gatedListener) Accept() (net.Conn, error) {
	select {
	case c := <-g.ch:
		return c, nil
	case <-g.done:
		return nil, net.ErrClosed
	}
}

func (g *gatedListener) Close() error {
	g.once.Do(func() { close(g.done) })
	return g.ln.Close()
}

func (g *gatedListener) Addr() net.Addr { return g.ln.Addr() }

// treeLayout is the tree's view of the world, from round 1's records:
// node of every rank (numbered in order of each node's lowest rank),
// local rank of every rank, and each node's agent (its lowest rank).
type treeLayout struct {
	node, local []int
	agents      []int // rank of each node's agent
	size        []int // ranks per node
}

// layoutOf derives the tree's nodes from the node identities (one
// string per rank; equal means the same node).
func layoutOf(ids []string) treeLayout {
	l := treeLayout{node: make([]int, len(ids)), local: make([]int, len(ids))}
	index := map[string]int{}
	for r, id := range ids {
		n, ok := index[id]
		if !ok {
			n = len(l.agents)
			index[id] = n
			l.agents = append(l.agents, r)
			l.size = append(l.size, 0)
		}
		l.node[r], l.local[r] = n, l.size[n]
		l.size[n]++
	}
	return l
}

// startTree joins the tree control plane after round 1 (s.peers filled;
// ln is this rank's listener, published as s.peers[r].Ctrl); blob is this
// rank's entry in the table that the start gathers (round 2's record).
func (s *Store) startTree(ln net.Listener, blob []byte) (*ctrl.Ctrl, error) {
	ids := make([]string, s.world)
	for r := range ids {
		ids[r] = s.peers[r].Node
	}
	lay := layoutOf(ids)
	me := s.rank
	node := lay.node[me]
	agents := make([]string, len(lay.agents))
	for n, a := range lay.agents {
		p := s.peers[a]
		host := "127.0.0.1"
		if !sameMachine(p, s.peers[me]) {
			if len(p.CtrlIPs) == 0 {
				return nil, errf(ErrInvalid, "Open", "", "rank %d (agent of node %d) published no address", a, n)
			}
			host = p.CtrlIPs[0]
		}
		agents[n] = net.JoinHostPort(host, strconv.Itoa(p.CtrlPort))
	}
	if lay.local[me] != 0 || len(lay.agents) == 1 {
		ln.Close()
		ln = nil
	}
	secret := bootstrap.SecretOf(s.boot)
	o := s.opts
	period, suspect, dead, local := treeTiming(o.Liveness, o.CtrlPeriod, o.CtrlSuspectAfter, o.CtrlDeadAfter)
	c, err := ctrl.Start(ctrl.Options{
		Rank: me, World: s.world, Node: node, Nodes: len(lay.agents), LocalRank: lay.local[me], LocalSize: lay.size[node],
		// The agent's port makes the node-local socket's name unique among
		// the stores of one job on a machine.
		Job: fmt.Sprintf("%s-%d", s.job, s.peers[lay.agents[node]].CtrlPort), Token: s.job,
		Agents: agents, Listener: ln, Timeout: o.Timeout, Blob: blob,
		Period: period, SuspectAfter: suspect, DeadAfter: dead, LocalDeadAfter: local,
		OnDead: s.onDead,
		Handshake: func(c net.Conn, initiator bool) error {
			if _, ok := c.(admitted); ok && !initiator {
				return nil // the gate checked it (treeListen)
			}
			return auth.Handshake(c, secret, initiator, time.Now().Add(auth.DefaultGateTimeout))
		},
	})
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, err
	}
	return c, nil
}

// treeTiming is the tree's liveness timing: the agents' ring (period,
// suspect, dead; zeros take ctrl's defaults, 1 s, 2 s, 3.6 s) and how
// long an agent bears a silent plain rank (local). The Ctrl* fields set
// the ring when any is set; else the ring takes ctrl's defaults, or, for
// a Liveness under 3.6 s, dead after it with the same proportions. A
// plain rank gets Liveness: a silent node is confirmed through other
// agents' probes before it is declared dead, a silent rank only by its
// agent, so it keeps the store's longer deadline.
func treeTiming(liveness, period, suspect, dead time.Duration) (ringPeriod, ringSuspect, ringDead, local time.Duration) {
	local = cmp.Or(liveness, DefaultLiveness)
	switch {
	case period != 0 || suspect != 0 || dead != 0:
		return period, suspect, dead, local
	case local >= ctrl.DefaultDeadAfter:
		return 0, 0, 0, local
	}
	p := local * 5 / 18
	return p, 2 * p, local, local
}

// ctrlIPs are the addresses a would-be agent offers, best first.
func ctrlIPs() []string { return mesh.LocalIPs() }

// treeAllReduce is AllReduceFloat32 over the tree (collMu held): the
// mesh ring's summation order (ctrl.AllReduceRingOrder), so that both
// control planes give the same bits; x is unchanged on error (as
// AllReduceRingOrder leaves it: no copy of x per call).
func (s *Store) treeAllReduce(what, tag string, x []float32) error {
	if err := s.tree.AllReduceRingOrder(tag, x, s.opts.Timeout); err != nil {
		return wrapBootstrap(what, err)
	}
	return nil
}

// ControlInfo describes the store's control plane.
type ControlInfo struct {
	Kind  string // ControlMesh, ControlTree, or "" (one rank: none)
	Conns int    // control connections this rank holds
	Agent bool   // tree: this rank is its node's agent
}

// Control describes the store's control plane (nil-safe before Open ends).
func (s *Store) Control() ControlInfo {
	switch {
	case s.tree != nil:
		return ControlInfo{Kind: ControlTree, Conns: s.tree.Stats().Conns, Agent: s.tree.Agent()}
	case s.mesh != nil:
		return ControlInfo{Kind: ControlMesh, Conns: s.world - 1}
	}
	return ControlInfo{}
}
