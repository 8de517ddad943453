package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ddstore/ddstore/engine/auth"
	"github.com/ddstore/ddstore/fault"
)

// tcpEx is the tcp method. Rank 0 listens and is the hub of every
// collective; the other ranks hold one connection to it.
type tcpEx struct {
	collective
	addr  string
	token string
	job   string

	// non-root
	conn net.Conn

	// root
	gate    *auth.Gate // authenticates newcomers, a bounded number at a time
	ln      net.Listener
	done    chan struct{}
	inbox   chan inFrame
	arrived chan int
	mu      sync.Mutex // guards the fields below (admission runs on handshake goroutines)
	phase   int        // phaseJoining, phaseRunning, phaseOver
	peers   []net.Conn // by rank; peers[0] is nil
	notes   []string   // connections refused while joining
	tokenNo bool       // a refusal was a token mismatch

	// Frames the root received from and sent to the other ranks: the
	// fan-in at the root is a constant number of frames per rank and
	// collective (TestTCPRendezvous1024).
	rootIn, rootOut atomic.Int64
}

const (
	phaseJoining = iota
	phaseRunning
	phaseOver
)

type inFrame struct {
	rank int
	typ  byte
	d    *dec
	err  error
}

// grace is how much longer a non-root rank waits than its own deadline, so
// that rank 0's verdict (which names the missing ranks) arrives first.
func grace(timeout time.Duration) time.Duration { return time.Second + timeout/10 }

func connectTCP(r resolved) (*tcpEx, error) {
	x := &tcpEx{
		collective: r.newCollective("tcp"),
		addr:       r.Addr, token: r.Token, job: r.Env.Job,
	}
	deadline := time.Now().Add(r.Timeout)
	var err error
	if x.rank == 0 {
		err = x.serve(deadline)
	} else {
		err = x.join(deadline)
	}
	if err != nil {
		x.Close()
		return nil, err
	}
	return x, nil
}

// ---- root ----

func (x *tcpEx) serve(deadline time.Time) error {
	ln, err := net.Listen("tcp", x.addr)
	if err != nil {
		// MASTER_ADDR may name this node by an address it cannot bind
		// (a NAT or a service name): fall back to every interface.
		if _, port, perr := net.SplitHostPort(x.addr); perr == nil && !errors.Is(err, syscall.EADDRINUSE) {
			ln, err = net.Listen("tcp", ":"+port)
		}
	}
	if err != nil {
		return &fault.Error{Op: "tcp connect", Kind: fault.ErrEnv, Side: fault.Local,
			Detail: fmt.Sprintf("rank 0 cannot listen on %s (from Options.Addr, DDSTORE_BOOTSTRAP_ADDR or MASTER_ADDR:MASTER_PORT; "+
				"under torchrun MASTER_PORT is torch's own: set DDSTORE_BOOTSTRAP_ADDR=host:otherport)", x.addr), Err: err}
	}
	x.ln = ln
	x.gate = auth.NewGate("tcp rendezvous "+ln.Addr().String(), x.secret, 0, 0)
	x.gate.OnRefuse = func(a net.Addr, err error) { x.note(errors.Is(err, fault.ErrToken), "%v: %v", a, err) }
	x.done = make(chan struct{})
	x.inbox = make(chan inFrame, 2*x.world)
	x.arrived = make(chan int, x.world)
	x.peers = make([]net.Conn, x.world)
	go x.acceptLoop()

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for n := 1; n < x.world; {
		select {
		case <-x.arrived:
			n++
		case <-timer.C:
			x.mu.Lock()
			x.phase = phaseOver
			var missing []int
			for r := 1; r < x.world; r++ {
				if x.peers[r] == nil {
					missing = append(missing, r)
				}
			}
			detail := fmt.Sprintf("%s did not connect to %s within %v", fault.RankList(missing), x.addr, x.timeout)
			var cause error
			if len(x.notes) > 0 {
				cause = errors.New("refused: " + strings.Join(x.notes, "; "))
				if x.tokenNo {
					cause = fmt.Errorf("%w: %v", fault.ErrToken, cause)
				}
			}
			x.mu.Unlock()
			e := &fault.Error{Op: "tcp connect", Kind: fault.ErrTimeout, Side: fault.Remote, Ranks: missing, Detail: detail, Err: cause}
			x.broadcast(verdictFrame(fAbort, fault.ErrTimeout, missing, detail))
			return e
		}
	}
	x.mu.Lock()
	x.phase = phaseRunning
	x.mu.Unlock()
	var lost []int
	for r := 1; r < x.world; r++ {
		x.rootOut.Add(1)
		if err := writeFrame(x.peers[r], newEnc(fReady).frame(), deadline.Add(grace(x.timeout))); err != nil {
			lost = append(lost, r)
		}
	}
	if lost != nil {
		detail := fmt.Sprintf("%s dropped before the start", fault.RankList(lost))
		x.broadcast(verdictFrame(fAbort, fault.ErrPeerDead, lost, detail))
		return &fault.Error{Op: "tcp connect", Kind: fault.ErrPeerDead, Side: fault.Remote, Ranks: lost, Detail: detail}
	}
	for r := 1; r < x.world; r++ {
		go x.readLoop(r, x.peers[r])
	}
	return nil
}

func (x *tcpEx) acceptLoop() {
	for {
		c, err := x.ln.Accept()
		if err != nil {
			select {
			case <-x.done:
				return
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return
		}
		x.gate.Go(c, x.handshake)
	}
}

// handshake reads the hello of a newcomer that proved the job's secret
// (auth.Gate) and admits or refuses it.
func (x *tcpEx) handshake(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	typ, d, err := readFrameMax(c, maxHandshake)
	x.rootIn.Add(1)
	var h hello
	if err == nil && typ != fHello {
		err = fmt.Errorf("first frame has type %d, want hello", typ)
	}
	if err == nil {
		h, err = parseHello(d)
	}
	if err != nil {
		x.gate.Refuse(c.RemoteAddr(), fmt.Errorf("bad handshake: %w", err))
		c.Close()
		return
	}
	c.SetReadDeadline(time.Time{})
	kind, detail := x.admit(h, c)
	if kind == nil {
		return
	}
	// Refused after the handshake: counted and noted as the gate's own
	// refusals are, and told to the rank.
	who := fmt.Sprintf("rank %d, pid %d on %s, job %q", h.rank, h.pid, h.host, h.job)
	x.gate.Refuse(c.RemoteAddr(), fault.Sentinel(who+": "+detail, kind))
	writeFrame(c, verdictFrame(fReject, kind, []int{h.rank}, detail), time.Now().Add(time.Second))
	c.Close()
}

// admit decides, under x.mu, whether the rank that said hello h on c
// joins: nil, with c kept as its link and its arrival announced, or the
// kind of refusal and its detail.
func (x *tcpEx) admit(h hello, c net.Conn) (kind error, detail string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case h.token != x.token:
		return fault.ErrToken, fmt.Sprintf("job token mismatch: rank 0 belongs to job %q; check DDSTORE_JOB_TOKEN/DDSTORE_JOB", x.job)
	case h.world != x.world:
		return fault.ErrMismatch, fmt.Sprintf("world size mismatch: rank 0 has %d ranks, rank %d says %d", x.world, h.rank, h.world)
	case h.rank < 1 || h.rank >= x.world:
		return fault.ErrEnv, fmt.Sprintf("rank %d is outside [1, %d)", h.rank, x.world)
	case x.phase == phaseOver:
		return fault.ErrClosed, "rank 0 has given up (timeout or closed)"
	case x.peers[h.rank] != nil:
		return fault.ErrEnv, fmt.Sprintf("duplicate rank: rank %d is already connected from %s", h.rank, x.peers[h.rank].RemoteAddr())
	case x.phase != phaseJoining:
		return fault.ErrEnv, "all ranks have already joined"
	}
	x.rootOut.Add(1)
	if err := writeFrame(c, newEnc(fAccept).frame(), time.Now().Add(5*time.Second)); err != nil {
		c.Close()
		return nil, ""
	}
	x.peers[h.rank] = c
	x.arrived <- h.rank
	return nil, ""
}

func (x *tcpEx) note(token bool, format string, args ...any) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.notes) < 16 {
		x.notes = append(x.notes, fmt.Sprintf(format, args...))
	}
	x.tokenNo = x.tokenNo || token
}

func (x *tcpEx) readLoop(rank int, c net.Conn) {
	for {
		typ, d, err := readFrame(c)
		x.rootIn.Add(1)
		select {
		case x.inbox <- inFrame{rank: rank, typ: typ, d: d, err: err}:
		case <-x.done:
			return
		}
		if err != nil || typ == fBye {
			return
		}
	}
}

// broadcast sends frame to every connected rank, best effort, in parallel.
func (x *tcpEx) broadcast(frame []byte) {
	x.mu.Lock()
	peers := append([]net.Conn(nil), x.peers...)
	x.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range peers {
		if c == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			writeFrame(c, frame, time.Now().Add(time.Second))
		}()
	}
	wg.Wait()
}

func (x *tcpEx) rootAbort(op string, kind error, ranks []int, format string, args ...any) error {
	e := x.errf(op, kind, ranks, format, args...)
	x.broadcast(verdictFrame(fAbort, kind, ranks, e.Detail))
	return x.fail(e)
}

func (x *tcpEx) AllGather(tag string, mine []byte, timeout time.Duration) ([][]byte, error) {
	op, deadline, err := x.begin("allgather", tag, mine, timeout)
	if err != nil {
		return nil, err
	}
	if x.rank != 0 {
		return x.gatherLeaf(op, tag, mine, deadline)
	}
	blobs := make([][]byte, x.world)
	got := make([]bool, x.world)
	blobs[0], got[0] = append([]byte{}, mine...), true
	total := len(mine)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for n := 1; n < x.world; {
		select {
		case f := <-x.inbox:
			r := f.rank
			switch {
			case f.err != nil:
				return nil, x.rootAbort(op, fault.ErrPeerDead, []int{r}, "rank %d's connection dropped: %v", r, f.err)
			case f.typ == fBye:
				return nil, x.rootAbort(op, fault.ErrPeerDead, []int{r}, "rank %d closed its exchanger", r)
			case f.typ != fGather:
				return nil, x.rootAbort(op, fault.ErrPeerDead, []int{r}, "rank %d sent an unexpected frame of type %d", r, f.typ)
			}
			seq, rtag, blob, err := parseGatherFrame(f.d)
			switch {
			case err != nil:
				return nil, x.rootAbort(op, fault.ErrPeerDead, []int{r}, "rank %d sent a malformed frame", r)
			case seq != x.seq || rtag != tag:
				return nil, x.rootAbort(op, fault.ErrMismatch, []int{r}, "%s", mismatchDetail(r, seq, rtag, 0, x.seq, tag))
			case got[r]:
				return nil, x.rootAbort(op, fault.ErrMismatch, []int{r}, "rank %d sent collective #%d twice", r, seq)
			}
			total += len(blob)
			if total > MaxMessage {
				return nil, x.rootAbort(op, fault.ErrTooLarge, nil, "gathered blobs exceed %d bytes (at rank %d)", MaxMessage, r)
			}
			blobs[r], got[r] = blob, true
			n++
		case <-timer.C:
			var missing []int
			for r, ok := range got {
				if !ok {
					missing = append(missing, r)
				}
			}
			return nil, x.rootAbort(op, fault.ErrTimeout, missing, "%s did not arrive within %v", fault.RankList(missing), timeoutOr(timeout, x.timeout))
		}
	}
	frame := resultFrame(x.seq, blobs)
	wdl := deadline
	if min := time.Now().Add(5 * time.Second); wdl.Before(min) {
		wdl = min
	}
	for r := 1; r < x.world; r++ {
		x.rootOut.Add(1)
		if err := writeFrame(x.peers[r], frame, wdl); err != nil {
			return nil, x.rootAbort(op, fault.ErrPeerDead, []int{r}, "sending the result to rank %d failed: %v", r, err)
		}
	}
	return blobs, nil
}

func timeoutOr(t, def time.Duration) time.Duration {
	if t > 0 {
		return t
	}
	return def
}

func (x *tcpEx) gatherLeaf(op, tag string, mine []byte, deadline time.Time) ([][]byte, error) {
	timeout := time.Until(deadline)
	if err := writeFrame(x.conn, gatherFrame(x.seq, tag, mine), deadline.Add(grace(timeout))); err != nil {
		return nil, x.fail(x.leafIOErr(op, err, timeout))
	}
	x.conn.SetReadDeadline(deadline.Add(grace(timeout)))
	typ, d, err := readFrame(x.conn)
	if err != nil {
		return nil, x.fail(x.leafIOErr(op, err, timeout))
	}
	switch typ {
	case fResult:
		seq, blobs, err := parseResultFrame(d)
		if err != nil {
			return nil, x.fail(x.errf(op, fault.ErrPeerDead, []int{0}, "malformed result from rank 0: %v", err))
		}
		if seq != x.seq || len(blobs) != x.world {
			return nil, x.fail(x.errf(op, fault.ErrMismatch, []int{0}, "rank 0 answered collective #%d with %d blobs, want #%d with %d", seq, len(blobs), x.seq, x.world))
		}
		return blobs, nil
	case fAbort:
		return nil, x.fail(verdictErr(x.method, op, d))
	default:
		return nil, x.fail(x.errf(op, fault.ErrPeerDead, []int{0}, "unexpected frame type %d from rank 0", typ))
	}
}

func (x *tcpEx) leafIOErr(op string, err error, timeout time.Duration) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return x.errf(op, fault.ErrTimeout, []int{0}, "rank 0 did not answer within %v", timeout.Round(time.Millisecond))
	}
	return &fault.Error{Op: opName(x.method, op), Kind: fault.ErrPeerDead, Side: fault.Remote, Ranks: []int{0}, Detail: "connection to rank 0 lost", Err: err}
}

// verdictErr turns a reject/abort frame into an error.
func verdictErr(method, op string, d *dec) error {
	kind, ranks, detail, err := parseVerdictFrame(d)
	if err != nil {
		return &fault.Error{Op: opName(method, op), Kind: fault.ErrPeerDead, Side: fault.Remote, Ranks: []int{0}, Detail: "malformed verdict from rank 0"}
	}
	return &fault.Error{Op: opName(method, op), Kind: kindOf(kind), Side: sideOf(kindOf(kind)), Ranks: ranks, Detail: "rank 0 reports: " + detail}
}

func (x *tcpEx) Barrier(tag string, timeout time.Duration) error {
	_, err := x.AllGather(tag, nil, timeout)
	return err
}

func (x *tcpEx) Close() error {
	defer x.releaseRendezvous()
	if x.closed {
		return nil
	}
	x.closed = true
	if x.rank != 0 {
		if x.conn != nil {
			writeFrame(x.conn, newEnc(fBye).frame(), time.Now().Add(time.Second))
			return x.conn.Close()
		}
		return nil
	}
	if x.done == nil {
		return nil
	}
	x.mu.Lock()
	x.phase = phaseOver
	peers := x.peers
	x.mu.Unlock()
	close(x.done)
	x.ln.Close()
	for _, c := range peers {
		if c != nil {
			c.Close()
		}
	}
	return nil
}

// ---- non-root ----

func (x *tcpEx) join(deadline time.Time) error {
	const op = "connect"
	h := hello{rank: x.rank, world: x.world, token: x.token, job: x.job, pid: os.Getpid()}
	h.host, _ = os.Hostname()
	delay := 10 * time.Millisecond
	var last error
	for {
		if !time.Now().Before(deadline) {
			return &fault.Error{Op: opName("tcp", op), Kind: fault.ErrTimeout, Side: fault.Remote, Ranks: []int{0},
				Detail: fmt.Sprintf("rank 0 did not answer at %s within %v", x.addr, x.timeout), Err: last}
		}
		dt := time.Until(deadline)
		if dt > 2*time.Second {
			dt = 2 * time.Second
		}
		c, err := net.DialTimeout("tcp", x.addr, dt)
		if err != nil {
			last = err
			delay = backoff(delay, 200*time.Millisecond, deadline)
			continue
		}
		adl := time.Now().Add(auth.DefaultGateTimeout)
		if adl.After(deadline) {
			adl = deadline
		}
		if err := auth.Handshake(c, x.secret, true, adl); err != nil {
			c.Close()
			if errors.Is(err, fault.ErrToken) {
				return &fault.Error{Op: opName("tcp", op), Kind: fault.ErrToken, Side: fault.Remote, Ranks: []int{0},
					Detail: fmt.Sprintf("rank 0 at %s and rank %d do not share the job secret (%s)", x.addr, x.rank, x.secretSrc), Err: err}
			}
			// Not our rank 0 yet, or its gate is full: retry.
			last = err
			delay = backoff(delay, 200*time.Millisecond, deadline)
			continue
		}
		wdl := deadline.Add(grace(x.timeout))
		err = writeFrame(c, h.frame(), wdl)
		var typ byte
		var d *dec
		if err == nil {
			c.SetReadDeadline(wdl)
			typ, d, err = readFrameMax(c, maxHandshake)
		}
		if err != nil {
			// Not our rank 0 yet (it may be restarting): retry.
			c.Close()
			last = err
			delay = backoff(delay, 200*time.Millisecond, deadline)
			continue
		}
		switch typ {
		case fAccept:
		case fReject:
			c.Close()
			e := verdictErr("tcp", op, d).(*fault.Error)
			e.Detail = fmt.Sprintf("rank 0 at %s refused rank %d: %s", x.addr, x.rank, strings.TrimPrefix(e.Detail, "rank 0 reports: "))
			return e
		default:
			c.Close()
			return x.errf(op, fault.ErrPeerDead, []int{0}, "%s answered the handshake with frame type %d", x.addr, typ)
		}
		x.conn = c
		typ, d, err = readFrameMax(c, maxHandshake)
		if err != nil {
			return x.leafIOErr(op, err, x.timeout)
		}
		switch typ {
		case fReady:
			c.SetReadDeadline(time.Time{})
			return nil
		case fAbort:
			return verdictErr("tcp", op, d)
		default:
			return x.errf(op, fault.ErrPeerDead, []int{0}, "unexpected frame type %d from rank 0", typ)
		}
	}
}

func writeFrame(c net.Conn, frame []byte, deadline time.Time) error {
	c.SetWriteDeadline(deadline)
	_, err := c.Write(frame)
	return err
}

// Job names a job whose environment names none (Env.Job "") after its
// rendezvous address, which every rank shares.
func (x *tcpEx) Job() string { return "tcp-" + x.addr }
