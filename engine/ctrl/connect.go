package ctrl

// How a rank joins the control plane: an agent dials its tree parent and
// ring neighbours and accepts its node's ranks and its children; a plain
// rank dials its agent. Links are registered, dialled on first use, and
// bounded by the accept semaphore.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ddstore/ddstore/fault"
)

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
			ranks, done, detail := parseDead(body)
			c.learnDeadLocal(ranks, done, detail)
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
		if c.nodeIsDead(node) { // no part of it can come (goneSource); nothing to dial
			if dial {
				c.mu.Lock()
				delete(c.dialing, node)
				c.mu.Unlock()
			}
			return nil, c.deadErr("ctrl connect", []int{c.agentRank(node)})
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
		if !force {
			if err := c.goneAt("ctrl connect", c.began.Load()); err != nil {
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
