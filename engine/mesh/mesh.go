// Package mesh owns the store's own TCP connections among the ranks of one
// job. The launcher's exchange (PMI, the tcp rendezvous, a directory) runs
// once, to tell every rank where the others listen; from then on every
// collective of the store (all-gather, barrier, all-reduce) runs over these
// connections, and heartbeats on them find ranks that died or became
// unreachable.
//
// Use: Listen, publish Addr through the launcher's exchange, then Connect
// with every rank's Addr. Every rank holds one connection to every other
// (a full mesh: world−1 sockets per rank); rank i dials the ranks below it
// and accepts the ranks above it.
//
// Collectives are serialised; every rank must call the same ones with the
// same tags in the same order. Each one has a deadline; a failure names the
// ranks concerned (a *fault.Error with Side Remote: ErrTimeout for ranks
// that did not arrive, ErrPeerDead for dead ones, ErrMismatch for ranks
// that called another collective or passed another length) and breaks the
// mesh: later collectives fail at once, wrapping the first failure.
//
// Liveness: every connection carries a heartbeat every Liveness/5; a peer
// whose connection closes, resets or stays silent for Liveness is dead: the
// OnDead callback runs once for it, and collectives waiting for it fail at
// once naming it. A peer that closes its mesh cleanly (Close) is not dead;
// collectives that still need it fail with ErrClosed naming it.
package mesh

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ddstore/ddstore/engine/auth"
	"github.com/ddstore/ddstore/fault"
)

// Defaults.
const (
	DefaultTimeout  = 60 * time.Second
	DefaultLiveness = 10 * time.Second
)

// ExitGrace is how long a rank waits, once a peer's connection broke
// (closed without leaving, reset), before its collectives fail with the
// peer's death (OnDead runs at once): long enough for a signal that the
// launcher forwards to every rank (Ctrl-C) to reach this one too.
var ExitGrace = 500 * time.Millisecond

// Options configures a mesh.
type Options struct {
	Rank, World int
	// Token must be equal on all ranks; a connection with another is refused.
	Token string
	// Secret is the job's secret (bootstrap.SecretOf): every connection
	// starts with auth.Handshake over it, both ways, before any frame is
	// read. nil only for a job that runs without one (bootstrap's Insecure).
	Secret []byte
	// AuthTimeout bounds each handshake of a connecting peer; at most
	// AuthPending of them wait at once (defaults auth.DefaultGateTimeout,
	// auth.DefaultGateMax). Strangers beyond that are closed at once.
	AuthTimeout time.Duration
	AuthPending int
	// Timeout is the deadline of Connect and the default of every collective.
	Timeout time.Duration
	// Liveness: a peer silent for this long is dead (default 10s, minimum
	// 100ms); heartbeats go out every Liveness/5.
	Liveness time.Duration
	// OnDead is called once per peer found dead, from a mesh goroutine.
	OnDead func(rank int, cause error)
	// Bind is the local IP to listen on; "" listens on every interface.
	Bind string
	// Advertise lists the addresses this rank offers to the others, best
	// first; nil means Bind, else the non-loopback addresses of the up
	// interfaces (loopback last).
	Advertise []string
}

// Addr is what a rank publishes so that the others can reach it.
type Addr struct {
	Host string   `json:"host"` // hostname, for messages
	Node string   `json:"node"` // machine identity; equal means the same machine
	IPs  []string `json:"ips"`  // addresses to try, best first
	Port int      `json:"port"`
}

// Frame types.
const (
	tHello = 1 // magic u32, version u16, rank u32, world u32, token
	tAck   = 2
	tHB    = 3
	tBye   = 4
	tData  = 5 // payload
	tAbort = 6 // kind u8, ranks (u32 count, u32 each), detail: the sender failed collective seq
)

const (
	magic    = 0x4444534d // "DDSM"
	version  = 1
	hdrLen   = 4 + 1 + 8  // length u32 (of what follows), type u8, seq u64
	maxBody  = 1<<30 + 64 // largest frame body
	maxHello = 64 << 10
)

// Mesh is one rank's set of connections.
type Mesh struct {
	o     Options
	ln    net.Listener
	addr  Addr
	peers []*peer // by rank; peers[Rank] is nil

	collMu sync.Mutex // serialises collectives
	seq    uint64
	broken error

	closing atomic.Bool
	death   chan struct{} // signalled when a peer dies or leaves (wakes a waiting collective)
	hbStop  chan struct{}
	wg      sync.WaitGroup
	aborts  sync.WaitGroup // abort frames being sent (fail)
	// The listener's side (Listen to the end of Connect): every connection
	// passes the gate (the secret, a bounded number at a time), then the
	// mesh's hello; the ranks above that did arrive on accepted.
	gate       *auth.Gate
	accepted   chan result
	acceptDone chan struct{}
}

// result is a connection to rank, or why there is none.
type result struct {
	rank int
	c    net.Conn
	err  error
}

// acceptLoop admits the ranks above until the listener closes.
func (m *Mesh) acceptLoop() {
	defer close(m.acceptDone)
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return // closed at the end of Connect, or by Close
		}
		m.gate.Go(c, func(c net.Conn) {
			r, err := m.serverHello(c, time.Now().Add(10*time.Second))
			if err != nil {
				c.Close()
				m.gate.Refuse(c.RemoteAddr(), err)
				return
			}
			select {
			case m.accepted <- result{rank: r, c: c}:
			default:
				c.Close()
			}
		})
	}
}

type peer struct {
	rank int
	conn net.Conn
	br   *bufio.Reader
	wmu  sync.Mutex
	in   inbox
	dead atomic.Bool
	told atomic.Bool // OnDead ran for it (see reportDead)
	left atomic.Bool // said goodbye (Close): not dead, just gone
	host string
}

type frame struct {
	seq   uint64
	body  []byte
	abort bool
}

// Listen opens this rank's listener and returns the mesh and the address to
// publish to the other ranks.
func Listen(o Options) (*Mesh, Addr, error) {
	if o.World < 1 || o.Rank < 0 || o.Rank >= o.World {
		return nil, Addr{}, fault.New(fault.ErrInvalid, "mesh listen", "rank %d of world %d", o.Rank, o.World)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Liveness == 0 {
		o.Liveness = DefaultLiveness
	}
	if o.Liveness < 100*time.Millisecond {
		return nil, Addr{}, fault.New(fault.ErrInvalid, "mesh listen", "liveness deadline %v is below 100ms", o.Liveness)
	}
	m := &Mesh{o: o, peers: make([]*peer, o.World), hbStop: make(chan struct{}), death: make(chan struct{}, 1)}
	host, _ := os.Hostname()
	m.addr.Host = host
	if o.World == 1 {
		return m, m.addr, nil
	}
	raiseNoFile(2*o.World + 256)
	ln, err := net.Listen("tcp", net.JoinHostPort(o.Bind, "0"))
	if err != nil {
		return nil, Addr{}, &fault.Error{Op: "mesh listen", Side: fault.Local, Kind: fault.ErrInvalid,
			Detail: fmt.Sprintf("rank %d cannot listen on %q", o.Rank, o.Bind), Err: err}
	}
	m.ln = ln
	m.addr.Port = ln.Addr().(*net.TCPAddr).Port
	// Accept from now on, so that a stranger is refused at once even while
	// this rank still waits for the launcher's exchange.
	m.gate = auth.NewGate(fmt.Sprintf("mesh of rank %d", o.Rank), o.Secret, o.AuthTimeout, o.AuthPending)
	m.accepted = make(chan result, 2*o.World)
	m.acceptDone = make(chan struct{})
	go m.acceptLoop()
	switch {
	case len(o.Advertise) > 0:
		m.addr.IPs = append([]string(nil), o.Advertise...)
	case o.Bind != "" && !net.ParseIP(o.Bind).IsUnspecified():
		m.addr.IPs = []string{o.Bind}
	default:
		m.addr.IPs = LocalIPs()
	}
	return m, m.addr, nil
}

// SetNode records this rank's machine identity in the published address
// (ranks with equal Node connect over loopback first).
func (m *Mesh) SetNode(node string) { m.addr.Node = node }

// Rank is this rank.
func (m *Mesh) Rank() int { return m.o.Rank }

// Size is the number of ranks.
func (m *Mesh) Size() int { return m.o.World }

// Refused is the number of connections Connect refused (strangers that did
// not prove the secret, or another job's or world's ranks).
func (m *Mesh) Refused() int64 {
	if m.gate == nil {
		return 0
	}
	return m.gate.Refused()
}

// Liveness is the dead-peer deadline in use.
func (m *Mesh) Liveness() time.Duration { return m.o.Liveness }

// Connect connects to every other rank (addrs by rank, as published by
// Listen) and starts the readers and heartbeats. It returns once every
// connection is up, or an error naming the ranks that could not be reached
// (ErrTimeout) or that refused (ErrToken, ErrMismatch) by the deadline.
func (m *Mesh) Connect(addrs []Addr) error {
	if len(addrs) != m.o.World {
		return fault.New(fault.ErrInvalid, "mesh connect", "%d addresses for %d ranks", len(addrs), m.o.World)
	}
	if m.o.World == 1 {
		return nil
	}
	deadline := time.Now().Add(m.o.Timeout)
	results := make(chan result, m.o.World)
	// Dial the ranks below.
	for r := 0; r < m.o.Rank; r++ {
		go func() {
			c, err := m.dial(r, addrs[r], deadline)
			results <- result{rank: r, c: c, err: err}
		}()
	}
	conns := make([]net.Conn, m.o.World)
	var errs []error
	var failed []int
	take := func(res result) bool {
		switch {
		case res.err != nil:
			failed = append(failed, res.rank)
			errs = append(errs, res.err)
		case conns[res.rank] != nil:
			res.c.Close() // a second connection for one rank: keep the first
			return false
		default:
			conns[res.rank] = res.c
		}
		return true
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
wait:
	for n := 0; n < m.o.World-1; {
		select {
		case res := <-results:
			if take(res) {
				n++
			}
		case res := <-m.accepted:
			if take(res) {
				n++
			}
		case <-timer.C:
			break wait
		}
	}
	m.ln.Close() // ends the accept loop
	<-m.acceptDone
	// Dialers and acceptances that have not reported yet.
	for {
		select {
		case res := <-results:
			take(res)
			continue
		case res := <-m.accepted:
			take(res)
			continue
		default:
		}
		break
	}
	var missing []int
	for r := range conns {
		if r != m.o.Rank && conns[r] == nil {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		sort.Ints(missing)
		kind := fault.ErrTimeout
		var cause error
		if len(errs) > 0 {
			cause = errors.Join(errs...)
			var fe *fault.Error
			if errors.As(errs[0], &fe) && fe.Kind != nil {
				kind = fe.Kind
			}
		}
		return &fault.Error{Op: "mesh connect", Ranks: missing, Side: fault.Remote, Kind: kind,
			Detail: fmt.Sprintf("rank %d could not connect to %s within %v", m.o.Rank, fault.RankList(missing), m.o.Timeout),
			Err:    cause}
	}
	for r, c := range conns {
		if c == nil {
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		p := &peer{rank: r, conn: c, br: bufio.NewReaderSize(c, 16<<10), host: addrs[r].Host}
		p.in.wake = make(chan struct{}, 1)
		p.in.frames = make([]frame, 0, 16)
		p.in.free = make([][]byte, 0, maxFree)
		m.peers[r] = p
	}
	for _, p := range m.peers {
		if p != nil {
			m.wg.Add(1)
			go m.readLoop(p)
		}
	}
	m.wg.Add(1)
	go m.heartbeats()
	return nil
}

// dial connects to rank r, trying its addresses (loopback first on the
// same machine) until the deadline.
func (m *Mesh) dial(r int, a Addr, deadline time.Time) (net.Conn, error) {
	ips := a.IPs
	if a.Node != "" && a.Node == m.addr.Node {
		ips = append([]string{"127.0.0.1"}, ips...)
	}
	if len(ips) == 0 || a.Port == 0 {
		return nil, &fault.Error{Op: "mesh connect", Ranks: []int{r}, Side: fault.Remote, Kind: fault.ErrInvalid,
			Detail: fmt.Sprintf("rank %d published no address", r)}
	}
	var last error
	delay := 10 * time.Millisecond
	for time.Now().Before(deadline) {
		for _, ip := range ips {
			t := time.Until(deadline)
			if t > 2*time.Second {
				t = 2 * time.Second
			}
			if t <= 0 {
				break
			}
			c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, strconv.Itoa(a.Port)), t)
			if err != nil {
				last = err
				continue
			}
			adl := time.Now().Add(auth.DefaultGateTimeout)
			if m.o.AuthTimeout > 0 {
				adl = time.Now().Add(m.o.AuthTimeout)
			}
			if adl.After(deadline) {
				adl = deadline
			}
			if err := auth.Handshake(c, m.o.Secret, true, adl); err != nil {
				c.Close()
				if errors.Is(err, fault.ErrToken) {
					return nil, &fault.Error{Op: "mesh connect", Ranks: []int{r}, Side: fault.Remote, Kind: fault.ErrToken,
						Detail: fmt.Sprintf("rank %d at %s does not share this job's secret", r, c.RemoteAddr()), Err: err}
				}
				last = err // not our peer yet, or its gate is full: retry
				continue
			}
			if err := m.clientHello(c, r, deadline); err != nil {
				c.Close()
				var fe *fault.Error
				if errors.As(err, &fe) {
					return nil, err // refused: another job or world
				}
				last = err
				continue
			}
			return c, nil
		}
		if d := time.Until(deadline); d < delay {
			delay = d
		}
		if delay > 0 {
			time.Sleep(delay)
		}
		if delay < 200*time.Millisecond {
			delay *= 2
		}
	}
	return nil, &fault.Error{Op: "mesh connect", Ranks: []int{r}, Side: fault.Remote, Kind: fault.ErrTimeout,
		Detail: fmt.Sprintf("rank %d on %s did not answer at %v port %d", r, a.Host, ips, a.Port), Err: last}
}

// peerGone records that p is gone (dead, or left cleanly).
func (m *Mesh) peerGone(p *peer, err error, dead bool) {
	if dead {
		p.dead.Store(true)
		m.reportDead(p, err)
	}
	p.in.fail(err)
	select {
	case m.death <- struct{}{}:
	default:
	}
}

// reportDead runs OnDead for p, once.
func (m *Mesh) reportDead(p *peer, err error) {
	if !p.told.Swap(true) && m.o.OnDead != nil {
		m.o.OnDead(p.rank, err)
	}
}

// MarkDead declares rank dead from outside (for example after a fabric
// failure that only the caller saw): collectives waiting for it fail at
// once, and OnDead runs if it has not yet.
func (m *Mesh) MarkDead(rank int, cause error) {
	if rank < 0 || rank >= len(m.peers) || m.peers[rank] == nil {
		return
	}
	err := &fault.Error{Op: "mesh", Ranks: []int{rank}, Side: fault.Remote, Kind: fault.ErrPeerDead,
		Detail: fmt.Sprintf("rank %d marked dead", rank), Err: cause}
	m.peerGone(m.peers[rank], err, true)
}

// Dead reports whether rank is known dead.
func (m *Mesh) Dead(rank int) bool {
	return rank >= 0 && rank < len(m.peers) && m.peers[rank] != nil && m.peers[rank].dead.Load()
}

func (m *Mesh) heartbeats() {
	defer m.wg.Done()
	period := m.o.Liveness / 5
	t := time.NewTicker(period)
	defer t.Stop()
	hb := make([]byte, hdrLen)
	hb[4] = tHB
	binary.LittleEndian.PutUint32(hb, hdrLen-4)
	for {
		select {
		case <-m.hbStop:
			return
		case <-t.C:
		}
		for _, p := range m.peers {
			if p == nil || p.dead.Load() || p.left.Load() {
				continue
			}
			// A peer that we are sending data to sees traffic anyway.
			if !p.wmu.TryLock() {
				continue
			}
			p.conn.SetWriteDeadline(time.Now().Add(m.o.Liveness))
			_, err := p.conn.Write(hb)
			p.wmu.Unlock()
			if err != nil && !m.closing.Load() && !p.left.Load() {
				m.peerGone(p, &fault.Error{Op: "mesh heartbeat", Ranks: []int{p.rank}, Side: fault.Remote, Kind: fault.ErrPeerDead,
					Detail: fmt.Sprintf("rank %d on %s: heartbeat not delivered within %v", p.rank, p.host, m.o.Liveness), Err: err}, true)
			}
		}
	}
}

// Close tells the peers that this rank leaves, closes every connection and
// stops the goroutines.
func (m *Mesh) Close() error {
	if m.closing.Swap(true) {
		return nil
	}
	if m.ln != nil {
		m.ln.Close()
		<-m.acceptDone
		for len(m.accepted) > 0 { // admitted, but Connect never took them
			(<-m.accepted).c.Close()
		}
	}
	m.aborts.Wait() // a failure's abort frames go out before the goodbye
	bye := make([]byte, hdrLen)
	bye[4] = tBye
	binary.LittleEndian.PutUint32(bye, hdrLen-4)
	for _, p := range m.peers {
		if p == nil {
			continue
		}
		p.wmu.Lock()
		p.conn.SetWriteDeadline(time.Now().Add(time.Second))
		p.conn.Write(bye)
		p.wmu.Unlock()
	}
	for _, p := range m.peers {
		if p != nil {
			p.conn.Close()
		}
	}
	close(m.hbStop)
	m.wg.Wait()
	return nil
}
