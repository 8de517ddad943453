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
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ddstore/ddstore/fault"
)

// Defaults.
const (
	DefaultTimeout  = 60 * time.Second
	DefaultLiveness = 10 * time.Second
)

// Options configures a mesh.
type Options struct {
	Rank, World int
	// Token must be equal on all ranks; a connection with another is refused.
	Token string
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
}

type peer struct {
	rank int
	conn net.Conn
	br   *bufio.Reader
	wmu  sync.Mutex
	in   inbox
	dead atomic.Bool
	left atomic.Bool // said goodbye (Close): not dead, just gone
	host string
}

type frame struct {
	seq   uint64
	body  []byte
	abort bool
}

// inbox is one peer's queue of received data frames (single consumer).
// Frame bodies come from, and go back to, a small free list of the
// peer's own, so that a warm mesh receives without allocating (the
// store's hot-path allocation checks count every goroutine's mallocs).
type inbox struct {
	mu     sync.Mutex
	frames []frame // frames[head:] are queued
	head   int
	free   [][]byte
	err    error // set once the peer is gone
	wake   chan struct{}
}

const maxFree = 8

// buffer returns a body buffer of n bytes.
func (q *inbox) buffer(n int) []byte {
	q.mu.Lock()
	for i, b := range q.free {
		if cap(b) >= n {
			last := len(q.free) - 1
			q.free[i] = q.free[last]
			q.free[last] = nil
			q.free = q.free[:last]
			q.mu.Unlock()
			return b[:n]
		}
	}
	q.mu.Unlock()
	return make([]byte, n, max(n, 4<<10))
}

// recycle gives a consumed body back.
func (q *inbox) recycle(b []byte) {
	q.mu.Lock()
	if len(q.free) < maxFree && cap(b) <= 4<<20 {
		q.free = append(q.free, b)
	}
	q.mu.Unlock()
}

func (q *inbox) push(f frame) {
	q.mu.Lock()
	if q.head == len(q.frames) {
		q.frames, q.head = q.frames[:0], 0
	}
	q.frames = append(q.frames, f)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *inbox) fail(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pop returns the next frame or the peer's failure (status popOK), or
// popTimeout at timer, or popDeath when death is signalled first.
func (q *inbox) pop(timer <-chan time.Time, death <-chan struct{}) (frame, error, int) {
	for {
		q.mu.Lock()
		if q.head < len(q.frames) {
			f := q.frames[q.head]
			q.frames[q.head] = frame{}
			q.head++
			q.mu.Unlock()
			return f, nil, popOK
		}
		err := q.err
		q.mu.Unlock()
		if err != nil {
			return frame{}, err, popOK
		}
		select {
		case <-q.wake:
		case <-timer:
			return frame{}, nil, popTimeout
		case <-death:
			return frame{}, nil, popDeath
		}
	}
}

const (
	popOK = iota
	popTimeout
	popDeath
)

func (q *inbox) hasFrames() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.head < len(q.frames)
}

func (q *inbox) ready() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.head < len(q.frames) || q.err != nil
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

// LocalIPs lists the addresses of this machine's up interfaces:
// non-loopback IPv4, then non-loopback global IPv6, then loopback.
func LocalIPs() []string {
	var v4, v6, lo []string
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip := ipn.IP
			switch {
			case ip.IsLoopback():
				lo = append(lo, ip.String())
			case ip.To4() != nil:
				v4 = append(v4, ip.String())
			case ip.IsGlobalUnicast():
				v6 = append(v6, ip.String())
			}
		}
	}
	if len(lo) == 0 {
		lo = []string{"127.0.0.1"}
	}
	return append(append(v4, v6...), lo...)
}

// SetNode records this rank's machine identity in the published address
// (ranks with equal Node connect over loopback first).
func (m *Mesh) SetNode(node string) { m.addr.Node = node }

// Rank is this rank.
func (m *Mesh) Rank() int { return m.o.Rank }

// Size is the number of ranks.
func (m *Mesh) Size() int { return m.o.World }

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
	type result struct {
		rank int
		c    net.Conn
		err  error
	}
	results := make(chan result, m.o.World)
	// Accept the ranks above.
	above := m.o.World - 1 - m.o.Rank
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for got := 0; got < above; {
			if tl, ok := m.ln.(*net.TCPListener); ok {
				tl.SetDeadline(deadline)
			}
			c, err := m.ln.Accept()
			if err != nil {
				results <- result{rank: -1, err: err}
				return
			}
			r, err := m.serverHello(c, deadline)
			if err != nil {
				c.Close()
				continue // a stray or foreign client; keep waiting for ours
			}
			results <- result{rank: r, c: c}
			got++
		}
	}()
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
	for n := 0; n < m.o.World-1; {
		res := <-results
		if res.rank < 0 {
			// The accept loop ended (deadline or error): the ranks above
			// that have not connected are missing.
			break
		}
		n++
		if res.err != nil {
			failed = append(failed, res.rank)
			errs = append(errs, res.err)
			continue
		}
		conns[res.rank] = res.c
		if n == m.o.World-1 {
			break
		}
	}
	m.ln.Close() // ends the accept loop if it still waits
	<-acceptDone
	// Dialers that have not reported yet.
	for {
		select {
		case res := <-results:
			if res.rank >= 0 {
				if res.err != nil {
					failed = append(failed, res.rank)
					errs = append(errs, res.err)
				} else {
					conns[res.rank] = res.c
				}
			}
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

func helloFrame(rank, world int, token string) []byte {
	b := make([]byte, hdrLen, hdrLen+14+len(token))
	b[4] = tHello
	b = binary.LittleEndian.AppendUint32(b, magic)
	b = binary.LittleEndian.AppendUint16(b, version)
	b = binary.LittleEndian.AppendUint32(b, uint32(rank))
	b = binary.LittleEndian.AppendUint32(b, uint32(world))
	b = append(b, token...)
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// clientHello introduces this rank to rank r and waits for its ack.
func (m *Mesh) clientHello(c net.Conn, r int, deadline time.Time) error {
	c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(helloFrame(m.o.Rank, m.o.World, m.o.Token)); err != nil {
		return err
	}
	typ, _, body, err := readFrame(c, maxHello)
	if err != nil {
		return err
	}
	switch typ {
	case tAck:
		return nil
	case tHello: // a refusal carries the reason as its body
		return &fault.Error{Op: "mesh connect", Ranks: []int{r}, Side: fault.Remote, Kind: fault.ErrToken,
			Detail: fmt.Sprintf("rank %d refused rank %d: %s", r, m.o.Rank, body)}
	}
	return fmt.Errorf("unexpected frame type %d", typ)
}

// serverHello checks a dialer's hello and acks it; it returns its rank.
func (m *Mesh) serverHello(c net.Conn, deadline time.Time) (int, error) {
	d := time.Now().Add(10 * time.Second)
	if deadline.Before(d) {
		d = deadline
	}
	c.SetDeadline(d)
	defer c.SetDeadline(time.Time{})
	typ, _, b, err := readFrame(c, maxHello)
	if err != nil {
		return -1, err
	}
	if typ != tHello || len(b) < 14 || binary.LittleEndian.Uint32(b) != magic {
		return -1, errors.New("not a ddstore mesh peer")
	}
	ver := binary.LittleEndian.Uint16(b[4:])
	rank := int(binary.LittleEndian.Uint32(b[6:]))
	world := int(binary.LittleEndian.Uint32(b[10:]))
	token := string(b[14:])
	refuse := func(why string) (int, error) {
		f := make([]byte, hdrLen, hdrLen+len(why))
		f[4] = tHello
		f = append(f, why...)
		binary.LittleEndian.PutUint32(f, uint32(len(f)-4))
		c.Write(f)
		return -1, errors.New(why)
	}
	switch {
	case ver != version:
		return refuse(fmt.Sprintf("mesh protocol version %d, this rank speaks %d", ver, version))
	case token != m.o.Token:
		return refuse("job token mismatch (another job at this address?)")
	case world != m.o.World:
		return refuse(fmt.Sprintf("world size %d, this rank has %d", world, m.o.World))
	case rank <= m.o.Rank || rank >= m.o.World:
		return refuse(fmt.Sprintf("rank %d may not dial rank %d", rank, m.o.Rank))
	}
	ack := make([]byte, hdrLen)
	ack[4] = tAck
	binary.LittleEndian.PutUint32(ack, hdrLen-4)
	if _, err := c.Write(ack); err != nil {
		return -1, err
	}
	return rank, nil
}

// readFrame reads one frame (header and body) of at most max body bytes.
func readFrame(r io.Reader, max int) (typ byte, seq uint64, body []byte, err error) {
	var h [hdrLen]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return
	}
	n := int(binary.LittleEndian.Uint32(h[:])) - (hdrLen - 4)
	if n < 0 || n > max {
		return 0, 0, nil, fmt.Errorf("mesh: frame of %d bytes (limit %d)", n, max)
	}
	typ, seq = h[4], binary.LittleEndian.Uint64(h[5:])
	body = make([]byte, n)
	_, err = io.ReadFull(r, body)
	return
}

// readLoop receives p's frames until the connection ends.
func (m *Mesh) readLoop(p *peer) {
	defer m.wg.Done()
	var h [hdrLen]byte
	for {
		p.conn.SetReadDeadline(time.Now().Add(m.o.Liveness))
		_, err := io.ReadFull(p.br, h[:])
		if err == nil {
			n := int(binary.LittleEndian.Uint32(h[:])) - (hdrLen - 4)
			typ, seq := h[4], binary.LittleEndian.Uint64(h[5:])
			switch {
			case n < 0 || n > maxBody:
				err = fmt.Errorf("frame of %d bytes (limit %d)", n, maxBody)
			case typ == tHB:
				continue
			case typ == tBye:
				p.left.Store(true)
				m.peerGone(p, &fault.Error{Op: "mesh", Ranks: []int{p.rank}, Side: fault.Remote, Kind: fault.ErrClosed,
					Detail: fmt.Sprintf("rank %d closed its store", p.rank)}, false)
				return
			case typ == tData || typ == tAbort:
				body := p.in.buffer(n)
				err = m.readBody(p, body)
				if err == nil {
					p.in.push(frame{seq: seq, body: body, abort: typ == tAbort})
					continue
				}
			default:
				err = fmt.Errorf("unexpected frame type %d", typ)
			}
		}
		if m.closing.Load() {
			p.in.fail(&fault.Error{Op: "mesh", Kind: fault.ErrClosed, Detail: "mesh closed"})
			return
		}
		var ne net.Error
		detail := fmt.Sprintf("connection to rank %d on %s lost", p.rank, p.host)
		if errors.As(err, &ne) && ne.Timeout() {
			detail = fmt.Sprintf("rank %d on %s silent for %v (no heartbeat)", p.rank, p.host, m.o.Liveness)
		} else if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			detail = fmt.Sprintf("rank %d on %s closed the connection without leaving (exited?)", p.rank, p.host)
		}
		m.peerGone(p, &fault.Error{Op: "mesh", Ranks: []int{p.rank}, Side: fault.Remote, Kind: fault.ErrPeerDead,
			Detail: detail, Err: err}, true)
		return
	}
}

// readBody reads a data frame's body, renewing the liveness deadline per MiB.
func (m *Mesh) readBody(p *peer, body []byte) error {
	for len(body) > 0 {
		n := min(len(body), 1<<20)
		p.conn.SetReadDeadline(time.Now().Add(m.o.Liveness))
		if _, err := io.ReadFull(p.br, body[:n]); err != nil {
			return err
		}
		body = body[n:]
	}
	return nil
}

// peerGone records that p is gone (dead, or left cleanly).
func (m *Mesh) peerGone(p *peer, err error, dead bool) {
	if dead && !p.dead.Swap(true) && m.o.OnDead != nil {
		m.o.OnDead(p.rank, err)
	}
	p.in.fail(err)
	select {
	case m.death <- struct{}{}:
	default:
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

// send writes one data frame to p (header and payload, one writev).
func (m *Mesh) send(p *peer, seq uint64, payload []byte, deadline time.Time) error {
	var h [hdrLen]byte
	binary.LittleEndian.PutUint32(h[:], uint32(hdrLen-4+len(payload)))
	h[4] = tData
	binary.LittleEndian.PutUint64(h[5:], seq)
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.conn.SetWriteDeadline(deadline)
	bufs := net.Buffers{h[:], payload}
	_, err := bufs.WriteTo(p.conn)
	return err
}

// Close tells the peers that this rank leaves, closes every connection and
// stops the goroutines.
func (m *Mesh) Close() error {
	if m.closing.Swap(true) {
		return nil
	}
	if m.ln != nil {
		m.ln.Close()
	}
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

// LocalIP is this rank's address on its connection to rank (the path the
// store's traffic to that rank takes), nil when there is none.
func (m *Mesh) LocalIP(rank int) net.IP {
	if rank < 0 || rank >= len(m.peers) || m.peers[rank] == nil {
		return nil
	}
	if a, ok := m.peers[rank].conn.LocalAddr().(*net.TCPAddr); ok {
		return a.IP
	}
	return nil
}

// InterfaceOf names the up interface that holds ip, and whether it is a
// loopback interface; "" when none does.
func InterfaceOf(ip net.IP) (name string, loopback bool) {
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(ip) {
				return ifc.Name, ifc.Flags&net.FlagLoopback != 0
			}
		}
	}
	return "", ip.IsLoopback()
}

// raiseNoFile lifts the soft limit on open files towards need (bounded by
// the hard limit): a full mesh holds world−1 sockets, beside the
// fabric's and the launcher's own.
func raiseNoFile(need int) {
	var l unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &l) != nil || l.Cur >= uint64(need) {
		return
	}
	l.Cur = min(uint64(need), l.Max)
	unix.Setrlimit(unix.RLIMIT_NOFILE, &l)
}
