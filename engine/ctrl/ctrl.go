package ctrl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ddstore/ddstore/fault"
)

// Ctrl is one rank's control plane.
type Ctrl struct {
	o     Options
	start time.Time

	tcpLn  net.Listener
	unixLn *net.UnixListener

	mu      sync.Mutex
	agents  map[int]*link // primary link per node
	extra   []*link       // further links (a probe's, a crossed dial)
	locals  map[int]*link // by rank
	linkCh  chan struct{} // closed and replaced when a link registers
	dialing map[int]bool
	up      *link // a plain rank's link to its agent
	table   *Table
	agentOf atomic.Pointer[[]int32] // agent rank by node (agents, once the table is there)
	tabled  atomic.Bool             // the table is there (an agent watches its ranks' silence from then on)

	mbMu sync.Mutex
	mb   map[mkey]msg
	wake chan struct{}

	deadMu    sync.Mutex
	dead      bitset // ranks
	nodeDead  bitset // nodes whose agent is dead
	nodeLeft  bitset // nodes whose agent closed cleanly
	deadN     int
	deadList  []int
	deadCause error
	aborted   error
	abortNote abortNote // the first abort learnt (aborted)
	abortSeen map[int]bool
	firstDead atomic.Int64 // unix ns when this rank first learned of a death

	collMu sync.Mutex
	seq    uint64
	broken error

	live liveState

	scratch  *scratch  // the node's shared all-reduce memory (ring.go); nil if none
	ringAcc  []float32 // an agent's ring all-reduce result, reused (collMu)
	blocks   []int     // blockBounds' answer (once the table is there)
	blocksOK sync.Once
	freeMu   sync.Mutex
	free     [][]byte // recycled frame bodies (recycle)

	nHB, nAgentMsg, nLocalMsg atomic.Uint64
	rounds                    atomic.Int32

	closing atomic.Bool
	killed  atomic.Bool
	stop    chan struct{}
	wg      sync.WaitGroup
	bg      sync.WaitGroup // floods and aborts in flight (started by goBg)
	bgMu    sync.Mutex     // orders goBg's Add before Close's Wait
	bgShut  bool           // Close began: goBg starts nothing more
	pause   sync.RWMutex
}

type mkey struct {
	seq   uint64
	step  uint16
	from  int32
	local bool
}

type msg struct {
	body []byte
	hops uint8
	tag  uint32
}

type bitset []uint64

func newBitset(n int) bitset    { return make(bitset, (n+63)/64) }
func (b bitset) has(i int) bool { return i >= 0 && i/64 < len(b) && b[i/64]&(1<<(i%64)) != 0 }
func (b bitset) set(i int)      { b[i/64] |= 1 << (i % 64) }

// Bootstrap steps (mailbox keys of sequence 0).
const (
	stGather = 1
	stTable  = 2
)

// Start joins the job: it connects this rank (an agent to its tree
// parent, a plain rank to its agent), takes part in the table's gather and
// broadcast, and starts liveness. It returns once this rank holds the
// table, or an error naming the ranks missing at the deadline.
func Start(o Options) (*Ctrl, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	c := &Ctrl{o: o, start: time.Now(), agents: map[int]*link{}, locals: map[int]*link{}, linkCh: make(chan struct{}),
		dialing: map[int]bool{}, mb: map[mkey]msg{}, wake: make(chan struct{}, 1), dead: newBitset(o.World),
		nodeDead: newBitset(o.Nodes), nodeLeft: newBitset(o.Nodes), abortSeen: map[int]bool{}, stop: make(chan struct{})}
	c.live.target, c.live.probes = -1, map[int][]*link{}
	deadline := c.start.Add(o.Timeout)
	var err error
	if o.agent() {
		err = c.startAgent(deadline)
	} else {
		err = c.startPlain(deadline)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	if o.agent() {
		c.wg.Add(1)
		go c.watch()
	} else {
		c.wg.Add(1)
		go c.heartbeat()
	}
	return c, nil
}

// Table is the job's table (every rank's blob).
func (c *Ctrl) Table() *Table { return c.table }

// Rank is this rank.
func (c *Ctrl) Rank() int { return c.o.Rank }

// Size is the number of ranks.
func (c *Ctrl) Size() int { return c.o.World }

// Agent reports whether this rank is its node's agent.
func (c *Ctrl) Agent() bool { return c.o.agent() }

func (c *Ctrl) startAgent(deadline time.Time) error {
	o := &c.o
	var err error
	if o.Nodes > 1 {
		c.tcpLn = o.Listener
		if c.tcpLn == nil {
			if c.tcpLn, err = net.Listen("tcp", o.Agents[o.Node]); err != nil {
				return &fault.Error{Op: "ctrl listen", Side: fault.Local, Kind: fault.ErrInvalid,
					Detail: fmt.Sprintf("agent of node %d cannot listen on %s", o.Node, o.Agents[o.Node]), Err: err}
			}
		}
	}
	if o.LocalSize > 1 {
		if c.unixLn, err = net.ListenUnix("unix", &net.UnixAddr{Name: o.unixName(o.Node), Net: "unix"}); err != nil {
			return &fault.Error{Op: "ctrl listen", Side: fault.Local, Kind: fault.ErrInvalid,
				Detail: fmt.Sprintf("agent of node %d cannot listen on unix socket %q", o.Node, o.unixName(o.Node)), Err: err}
		}
	}
	sem := make(chan struct{}, o.MaxAccepts)
	for _, ln := range []net.Listener{c.tcpLn, c.unixLn} {
		if ln != nil && !(ln == net.Listener(c.unixLn) && c.unixLn == nil) {
			c.wg.Add(1)
			go c.acceptLoop(ln, sem)
		}
	}
	k := o.Arity
	parent := TreeParent(o.Node, k)
	if parent >= 0 {
		if _, err := c.linkTo(parent, deadline, true); err != nil {
			return err
		}
	}
	// Gather: the local ranks' hellos and the children's subtrees, by a
	// deadline that leaves the levels above time to report.
	h := TreeHeight(o.Nodes, k)
	d := TreeDepth(o.Node, k)
	sub := c.start.Add(o.Timeout * time.Duration(h-d+2) / time.Duration(h+3))
	up := appendRecord(nil, record{rank: o.Rank, node: o.Node, local: 0, blob: o.Blob})
	for lr := 1; lr < o.LocalSize; lr++ {
		m, err := c.await("ctrl bootstrap", mkey{step: stGather, from: int32(lr), local: true}, sub, nil)
		if err != nil {
			if errors.Is(err, fault.ErrTimeout) && c.gone("") == nil {
				continue // report what arrived; the root names the missing
			}
			return err
		}
		up = append(up, m.body...)
	}
	lo, hi := TreeChildren(o.Node, k, o.Nodes)
	for ch := lo; ch < hi; ch++ {
		m, err := c.await("ctrl bootstrap", mkey{step: stGather, from: int32(ch)}, sub, nil)
		if err != nil {
			if errors.Is(err, fault.ErrTimeout) && c.gone("") == nil {
				continue
			}
			return err
		}
		up = append(up, m.body...)
	}
	var tab []byte
	if parent >= 0 {
		if err := c.agents[parent].send(header{typ: tGather, step: stGather, from: uint32(o.Node)}, up, deadline); err != nil {
			return &fault.Error{Op: "ctrl bootstrap", Side: fault.Remote, Kind: fault.ErrPeerDead,
				Detail: fmt.Sprintf("sending the gather to node %d's agent failed", parent), Err: err}
		}
		up = nil
		m, err := c.await("ctrl bootstrap", mkey{step: stTable, from: int32(parent)}, deadline, nil)
		if err != nil {
			if errors.Is(err, fault.ErrTimeout) && c.gone("") == nil {
				return &fault.Error{Op: "ctrl bootstrap", Ranks: []int{o.Rank}, Side: fault.Remote, Kind: fault.ErrTimeout,
					Detail: fmt.Sprintf("the table did not come down from node %d's agent within %v", parent, o.Timeout)}
			}
			return err
		}
		if err := checkTable(m.body, o.World); err != nil {
			return fault.New(fault.ErrCorrupt, "ctrl bootstrap", "node %d's agent sent a bad table: %v", parent, err)
		}
		tab = m.body
	} else {
		var missing []int
		var err error
		tab, missing, err = buildTable(o.World, up)
		if err != nil {
			return fault.New(fault.ErrCorrupt, "ctrl bootstrap", "malformed gather: %v", err)
		}
		if len(missing) > 0 {
			e := &fault.Error{Op: "ctrl bootstrap", Ranks: missing, Side: fault.Remote, Kind: fault.ErrTimeout,
				Detail: fmt.Sprintf("%s did not reach the root within %v", fault.RankList(missing), o.Timeout)}
			c.abort(0, e)
			c.bg.Wait()
			return e
		}
	}
	t, fd, err := memfdTable(tab)
	if err != nil {
		return &fault.Error{Op: "ctrl bootstrap", Side: fault.Local, Kind: fault.ErrInvalid, Detail: "cannot map the table", Err: err}
	}
	agentOf := make([]int32, o.Nodes)
	for r := 0; r < o.World; r++ {
		if t.Local(r) == 0 {
			agentOf[t.Node(r)] = int32(r)
		}
	}
	c.deadMu.Lock()
	c.table = t
	c.deadMu.Unlock()
	c.agentOf.Store(&agentOf)
	c.tabled.Store(true)
	defer unix.Close(fd)
	var wg sync.WaitGroup
	for ch := lo; ch < hi; ch++ {
		if l := c.agentLink(ch); l != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.send(header{typ: tTable, step: stTable, from: uint32(o.Node)}, t.mem, deadline)
			}()
		}
	}
	c.mu.Lock()
	locals := make([]*link, 0, len(c.locals))
	for _, l := range c.locals {
		locals = append(locals, l)
	}
	c.mu.Unlock()
	var h2 [hdrLen]byte
	header{typ: tTable, step: stTable, seq: uint64(t.Bytes())}.put(h2[:], 0)
	rights := unix.UnixRights(fd)
	if o.LocalSize > 1 {
		// The shared scratch of AllReduceRingOrder goes along.
		if sfd, err := c.newScratch(); err == nil {
			defer unix.Close(sfd)
			rights = unix.UnixRights(fd, sfd)
		}
	}
	for _, l := range locals {
		l.wmu.Lock()
		l.conn.SetWriteDeadline(deadline)
		l.conn.(*net.UnixConn).WriteMsgUnix(h2[:], rights, nil)
		l.wmu.Unlock()
	}
	wg.Wait()
	return nil
}

func (c *Ctrl) startPlain(deadline time.Time) error {
	o := &c.o
	name := o.unixName(o.Node)
	var conn *net.UnixConn
	var last error
	delay := 5 * time.Millisecond
	for conn == nil {
		if time.Now().After(deadline) {
			return &fault.Error{Op: "ctrl connect", Ranks: []int{o.Rank}, Side: fault.Remote, Kind: fault.ErrTimeout,
				Detail: fmt.Sprintf("rank %d found no agent for node %d at %q within %v", o.Rank, o.Node, name, o.Timeout), Err: last}
		}
		uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: name, Net: "unix"})
		if err != nil {
			last = err
			time.Sleep(delay)
			delay = min(2*delay, 200*time.Millisecond)
			continue
		}
		if err := c.dialHello(uc, true, deadline); err != nil {
			uc.Close()
			var fe *fault.Error
			if errors.As(err, &fe) {
				return err
			}
			last = err
			continue
		}
		conn = uc
	}
	// The table comes as a memfd, or an abort instead; deaths found
	// meanwhile come before it.
	conn.SetReadDeadline(deadline)
	var h header
	fd := -1
	for {
		var hb [hdrLen]byte
		oob := make([]byte, unix.CmsgSpace(8))
		got := 0
		for got < hdrLen {
			n, oobn, _, _, err := conn.ReadMsgUnix(hb[got:], oob)
			if err != nil {
				byeClose(conn)
				return &fault.Error{Op: "ctrl bootstrap", Side: fault.Remote, Kind: fault.ErrTimeout,
					Detail: fmt.Sprintf("rank %d got no table from node %d's agent within %v", o.Rank, o.Node, o.Timeout), Err: err}
			}
			if oobn > 0 && fd < 0 {
				if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) > 0 {
					if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) > 0 {
						fd = fds[0]
						if len(fds) > 1 {
							c.mapScratch(fds[1]) // without it, AllReduceRingOrder gathers
							unix.Close(fds[1])
						}
					}
				}
			}
			got += n
		}
		var n int
		h, n = parseHeader(hb[:])
		if h.typ == tTable {
			break
		}
		if n < 0 || n > maxHello {
			byeClose(conn)
			return fault.New(fault.ErrCorrupt, "ctrl bootstrap", "rank %d's agent sent a frame of %d bytes", o.Rank, n)
		}
		body := make([]byte, n)
		io.ReadFull(conn, body)
		switch h.typ {
		case tAbort:
			byeClose(conn)
			_, e := parseAbort("ctrl bootstrap", body)
			return e
		case tDead:
			ranks, detail := parseDead(body)
			c.learnDeadLocal(ranks, detail, false)
		}
	}
	conn.SetReadDeadline(time.Time{})
	if h.typ != tTable || fd < 0 {
		byeClose(conn)
		return fault.New(fault.ErrCorrupt, "ctrl bootstrap", "rank %d's agent sent frame type %d instead of the table", o.Rank, h.typ)
	}
	t, err := mapTable(fd, int(h.seq))
	unix.Close(fd)
	if err == nil {
		err = checkTable(t.mem, o.World)
	}
	if err != nil {
		byeClose(conn)
		return fault.New(fault.ErrCorrupt, "ctrl bootstrap", "rank %d cannot map its agent's table: %v", o.Rank, err)
	}
	c.deadMu.Lock()
	c.table = t
	c.deadMu.Unlock()
	agent := -1
	for r := 0; r < o.World && agent < 0; r++ {
		if t.Node(r) == o.Node && t.Local(r) == 0 {
			agent = r
		}
	}
	if agent < 0 {
		t.close()
		byeClose(conn)
		return fault.New(fault.ErrCorrupt, "ctrl bootstrap", "the table has no agent for node %d", o.Node)
	}
	c.up = newLink(conn, agent, true)
	c.wg.Add(1)
	go c.readLoop(c.up)
	return nil
}

// byeClose leaves a connection cleanly (a goodbye, so that the far end
// does not take this rank for dead), then closes it.
func byeClose(conn net.Conn) {
	l := &link{conn: conn}
	l.send(header{typ: tBye}, nil, time.Now().Add(time.Second))
	conn.Close()
}

// acceptLoop accepts connections, at most cap(sem) in handshake at once.
func (c *Ctrl) acceptLoop(ln net.Listener, sem chan struct{}) {
	defer c.wg.Done()
	for {
		sem <- struct{}{}
		conn, err := ln.Accept()
		if err != nil {
			<-sem
			if c.closing.Load() || c.killed.Load() {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		go func() {
			defer func() { <-sem }()
			h, err := c.acceptHello(conn)
			if err != nil || c.killed.Load() {
				conn.Close()
				return
			}
			if h.local {
				c.register(newLink(conn, h.rank, true))
				c.put(mkey{step: stGather, from: int32(h.localRank), local: true},
					msg{body: appendRecord(nil, record{rank: h.rank, node: h.node, local: h.localRank, blob: h.blob})})
				return
			}
			setTCP(conn, c.o.DeadAfter)
			c.register(newLink(conn, h.node, false))
		}()
	}
}

func (c *Ctrl) register(l *link) {
	c.mu.Lock()
	if c.closing.Load() || c.killed.Load() {
		c.mu.Unlock()
		l.conn.Close()
		return
	}
	c.wg.Add(1)
	switch {
	case l.local:
		c.locals[l.peer] = l
	case c.agents[l.peer] == nil:
		c.agents[l.peer] = l
	default:
		c.extra = append(c.extra, l)
	}
	close(c.linkCh)
	c.linkCh = make(chan struct{})
	c.mu.Unlock()
	go c.readLoop(l)
}

func (c *Ctrl) agentLink(node int) *link {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.agents[node]
}

// linkTo returns the link to node's agent: it dials when this node is the
// higher one (or force), else waits for the peer to dial, until deadline.
func (c *Ctrl) linkTo(node int, deadline time.Time, force bool) (*link, error) {
	for {
		c.mu.Lock()
		l, ch := c.agents[node], c.linkCh
		dial := (force || Dials(c.o.Node, node)) && !c.dialing[node]
		if l == nil && dial {
			c.dialing[node] = true
		}
		c.mu.Unlock()
		if l != nil {
			return l, nil
		}
		if dial {
			conn, err := c.dialAgent(node, deadline)
			c.mu.Lock()
			delete(c.dialing, node)
			c.mu.Unlock()
			if err != nil {
				return nil, err
			}
			c.register(newLink(conn, node, false))
			continue
		}
		if c.nodeIsDead(node) {
			return nil, c.deadErr("ctrl connect", []int{c.agentRank(node)})
		}
		if !force {
			if err := c.gone("ctrl connect"); err != nil {
				return nil, err
			}
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-ch:
		case <-c.wake:
			c.signal() // not ours: pass it on
			time.Sleep(time.Millisecond)
		case <-t.C:
			return nil, &fault.Error{Op: "ctrl connect", Ranks: []int{c.agentRank(node)}, Side: fault.Remote, Kind: fault.ErrTimeout,
				Detail: fmt.Sprintf("node %d's agent did not connect within the deadline", node)}
		case <-c.stop:
			t.Stop()
			return nil, &fault.Error{Op: "ctrl connect", Kind: fault.ErrClosed, Detail: "control plane closed"}
		}
		t.Stop()
	}
}

func (c *Ctrl) dialAgent(node int, deadline time.Time) (net.Conn, error) {
	addr := c.o.Agents[node]
	var last error
	delay := 5 * time.Millisecond
	for time.Now().Before(deadline) && !c.closing.Load() && !c.killed.Load() {
		conn, err := net.DialTimeout("tcp", addr, min(2*time.Second, time.Until(deadline)))
		if err == nil {
			setTCP(conn, c.o.DeadAfter)
			if err = c.dialHello(conn, false, deadline); err == nil {
				return conn, nil
			}
			conn.Close()
			var fe *fault.Error
			if errors.As(err, &fe) {
				fe.Ranks = []int{c.agentRank(node)}
				return nil, err
			}
		}
		last = err
		time.Sleep(delay)
		delay = min(2*delay, 200*time.Millisecond)
	}
	return nil, &fault.Error{Op: "ctrl connect", Ranks: []int{c.agentRank(node)}, Side: fault.Remote, Kind: fault.ErrTimeout,
		Detail: fmt.Sprintf("node %d's agent did not answer at %s", node, addr), Err: last}
}

// setTCP: no delay, and TCP_USER_TIMEOUT so that unacknowledged data to a
// dead host fails the connection after d, not after the kernel's minutes.
func setTCP(conn net.Conn, d time.Duration) {
	if w, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = w.NetConn() // a wrapper (an authenticating listener's)
	}
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return
	}
	tc.SetNoDelay(true)
	if rc, err := tc.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
		})
	}
}

// agentRank is node's agent's rank (-1 before the table).
func (c *Ctrl) agentRank(node int) int {
	if a := c.agentOf.Load(); a != nil && node >= 0 && node < len(*a) {
		return int((*a)[node])
	}
	return -1
}

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
	_, silence := LocalTiming(c.o.Period, c.o.DeadAfter)
	return silence
}

// LocalTiming is how often a plain rank tells its agent that it lives,
// and how long its agent waits on its silence before declaring it dead:
// every min(Period, DeadAfter/8), and DeadAfter plus that. As with the
// agents' ring, a rank is declared dead no earlier than DeadAfter after
// it froze (so that a shorter stop is not taken for a death) and no later
// than DeadAfter and one beat: 3.6–4.05 s with ctrl's defaults, 10–11.25 s
// with the store's (liveness 10 s).
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
		ranks, detail := parseDead(body)
		c.learnDead(ranks, l, detail)
	case tAbort:
		c.learnAbort(body, l)
	case tColl, tGather, tTable:
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
	switch {
	case l.local && c.o.agent():
		d := fmt.Sprintf("rank %d (node %d) closed its control connection without leaving", l.peer, c.o.Node)
		if silent {
			d = fmt.Sprintf("rank %d (node %d) silent for %v", l.peer, c.o.Node, c.localSilence())
		}
		c.learnDead([]int{l.peer}, nil, d)
	case l.local:
		c.learnDead([]int{l.peer}, nil, fmt.Sprintf("rank %d (this node's agent) closed the connection", l.peer))
	default:
		if r := c.agentRank(l.peer); r >= 0 {
			c.learnDead([]int{r}, nil, fmt.Sprintf("rank %d (agent of node %d) closed its connection without leaving", r, l.peer))
		}
	}
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
		if err := c.gone(op); err != nil {
			return msg{}, err
		}
		if r := c.leftPeer(k); r >= 0 {
			return msg{}, &fault.Error{Op: op, Ranks: []int{r}, Side: fault.Remote, Kind: fault.ErrClosed,
				Detail: fmt.Sprintf("rank %d closed the store before this collective", r)}
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
		c.deadMu.Lock()
		left := c.nodeLeft.has(int(k.from))
		c.deadMu.Unlock()
		if left {
			return c.agentRank(int(k.from))
		}
		return -1
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

// ExitGrace is how long a collective waits, once a send to a peer failed
// on a broken connection (closed, reset; not a timeout), before it fails
// with the peer's death: long enough for a signal that the launcher
// forwards to every rank (Ctrl-C) to reach this one too, so that an
// interrupted job ends by its signal. As engine/mesh's ExitGrace.
var ExitGrace = 500 * time.Millisecond

// sendGrace sleeps ExitGrace after a failed send unless err is a timeout
// (or the control plane closes meanwhile).
func (c *Ctrl) sendGrace(err error) {
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

// gone is the error that stops every collective: a known death or an
// abort; nil while none.
func (c *Ctrl) gone(op string) error {
	c.deadMu.Lock()
	defer c.deadMu.Unlock()
	if c.deadN > 0 {
		e := c.deadErr(op, c.deadList)
		e.Err = c.deadCause
		return e
	}
	if c.aborted != nil {
		return c.aborted
	}
	return nil
}

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
// saw): collectives fail naming it and OnDead runs; it is not spread.
func (c *Ctrl) MarkDead(rank int, cause error) {
	if rank >= 0 && rank < c.o.World && rank != c.o.Rank {
		c.learnDeadLocal([]int{rank}, fmt.Sprintf("rank %d marked dead: %v", rank, cause), false)
	}
}

// learnDead records ranks as dead, tells OnDead, wakes collectives and,
// on an agent, spreads the news to every link but via.
func (c *Ctrl) learnDead(ranks []int, via *link, detail string) {
	if fresh := c.learnDeadLocal(ranks, detail, true); len(fresh) > 0 && c.o.agent() {
		c.flood(header{typ: tDead}, deadBody(fresh, detail), via)
	}
}

func (c *Ctrl) learnDeadLocal(ranks []int, detail string, _ bool) []int {
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
	c.firstDead.CompareAndSwap(0, time.Now().UnixNano())
	// OnDead before collectives see the death (deadN, which gone reads): a
	// collective that fails with it finds it recorded where its caller
	// looks (the store's health).
	if c.o.OnDead != nil {
		for _, r := range fresh {
			c.o.OnDead(r, &fault.Error{Op: "ctrl", Ranks: []int{r}, Side: fault.Remote, Kind: fault.ErrPeerDead, Detail: detail})
		}
	}
	c.deadMu.Lock()
	c.deadN += len(fresh)
	for _, r := range fresh {
		if len(c.deadList) < 64 {
			c.deadList = append(c.deadList, r)
		}
	}
	if c.deadCause == nil {
		c.deadCause = errors.New(detail)
	}
	c.deadMu.Unlock()
	c.signal()
	return fresh
}

// FirstDeath is when this rank first learned of a death (zero if never).
func (c *Ctrl) FirstDeath() time.Time {
	if ns := c.firstDead.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

func deadBody(ranks []int, detail string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(ranks)))
	for _, r := range ranks {
		b = binary.LittleEndian.AppendUint32(b, uint32(r))
	}
	return append(b, detail...)
}

func parseDead(b []byte) ([]int, string) {
	if len(b) < 4 {
		return nil, ""
	}
	n := min(int(binary.LittleEndian.Uint32(b)), (len(b)-4)/4)
	out := make([]int, n)
	for i := range out {
		out[i] = int(binary.LittleEndian.Uint32(b[4+4*i:]))
	}
	return out, string(b[4+4*n:])
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
	if c.aborted == nil {
		c.aborted = note.err
		c.abortNote = note
	}
	c.deadMu.Unlock()
	c.signal()
	if c.o.agent() {
		c.flood(header{typ: tAbort}, body, via)
	} else if via == nil && c.up != nil {
		c.goBg(func() { c.up.send(header{typ: tAbort}, body, time.Now().Add(time.Second)) })
	}
}

// abort tells every rank of this rank's failure (of collective seq).
func (c *Ctrl) abort(seq uint64, err error) {
	var fe *fault.Error
	kind, ranks, detail := error(nil), []int(nil), err.Error()
	if errors.As(err, &fe) {
		kind, ranks = fe.Kind, fe.Ranks
		if fe.Detail != "" {
			detail = fe.Detail
		}
	}
	body := abortBody(c.o.Rank, seq, time.Now(), kind, ranks, detail)
	c.deadMu.Lock()
	c.abortSeen[c.o.Rank] = true
	c.deadMu.Unlock()
	if c.o.agent() {
		c.flood(header{typ: tAbort}, body, nil)
	} else if c.up != nil {
		c.goBg(func() { c.up.send(header{typ: tAbort}, body, time.Now().Add(time.Second)) })
	}
}

// Stats are counters of this rank's control plane.
type Stats struct {
	Conns      int    // control connections held
	HBSent     uint64 // liveness messages sent (pings, pongs, heartbeats, probes)
	AgentMsgs  uint64 // collective messages sent to other agents
	LocalMsgs  uint64 // collective messages sent inside the node
	Rounds     int    // agent-to-agent messages on the critical path of the last collective
	TableBytes int
}

// Stats returns the counters.
func (c *Ctrl) Stats() Stats {
	c.mu.Lock()
	n := len(c.agents) + len(c.extra) + len(c.locals)
	if c.up != nil {
		n++
	}
	c.mu.Unlock()
	s := Stats{Conns: n, HBSent: c.nHB.Load(), AgentMsgs: c.nAgentMsg.Load(), LocalMsgs: c.nLocalMsg.Load(), Rounds: int(c.rounds.Load())}
	if c.table != nil {
		s.TableBytes = c.table.Bytes()
	}
	return s
}

func (c *Ctrl) allLinks() []*link {
	c.mu.Lock()
	defer c.mu.Unlock()
	ls := make([]*link, 0, len(c.agents)+len(c.extra)+len(c.locals)+1)
	for _, l := range c.agents {
		ls = append(ls, l)
	}
	ls = append(ls, c.extra...)
	for _, l := range c.locals {
		ls = append(ls, l)
	}
	if c.up != nil {
		ls = append(ls, c.up)
	}
	return ls
}

// Close says goodbye on every link and stops the control plane.
func (c *Ctrl) Close() error {
	if c.closing.Swap(true) || c.killed.Load() {
		return nil
	}
	c.stopBg()
	c.bg.Wait()
	for _, l := range c.allLinks() {
		l.send(header{typ: tBye}, nil, time.Now().Add(time.Second))
	}
	c.shutdown()
	return nil
}

// kill stops this rank as a crash would: no goodbye (tests, failed Start).
func (c *Ctrl) kill() {
	if c.killed.Swap(true) {
		return
	}
	c.shutdown()
}

// goBg runs f in the background unless Close has begun: Close waits for
// what runs, and a WaitGroup Add that races its Wait is a data race.
func (c *Ctrl) goBg(f func()) {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.bgShut {
		return
	}
	c.bg.Add(1)
	go func() { defer c.bg.Done(); f() }()
}

// stopBg makes goBg start nothing more (before bg.Wait).
func (c *Ctrl) stopBg() {
	c.bgMu.Lock()
	c.bgShut = true
	c.bgMu.Unlock()
}

func (c *Ctrl) shutdown() {
	c.stopBg()
	c.mu.Lock() // no register after this (it checks the flags under mu)
	c.mu.Unlock()
	if c.tcpLn != nil {
		c.tcpLn.Close()
	}
	if c.unixLn != nil {
		c.unixLn.Close()
	}
	for _, l := range c.allLinks() {
		l.conn.Close()
	}
	close(c.stop)
	c.wg.Wait()
	c.bg.Wait()
	c.table.close()
	c.scratch.close()
}

// pauseFor stops this rank's control goroutines for d, as SIGSTOP would
// (tests).
func (c *Ctrl) pauseFor(d time.Duration) {
	c.pause.Lock()
	time.Sleep(d)
	c.pause.Unlock()
}
