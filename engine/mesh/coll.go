package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ddstore/ddstore/fault"
)

// PieceBytes is the unit of the all-reduce pipeline (a variable for the
// benchmark that chose it): a ring step forwards
// each piece as soon as it has been reduced.
var PieceBytes = 256 << 10

// begin starts a collective: it checks that the mesh is usable and that no
// member is known dead, and returns its sequence number and deadline.
func (m *Mesh) begin(op string, timeout time.Duration) (uint64, time.Time, error) {
	if m.closing.Load() {
		return 0, time.Time{}, &fault.Error{Op: op, Kind: fault.ErrClosed, Detail: "mesh closed"}
	}
	if m.broken != nil {
		return 0, time.Time{}, &fault.Error{Op: op, Kind: fault.ErrClosed, Side: fault.SideOf(m.broken), Ranks: fault.RanksOf(m.broken),
			Detail: "collectives broken by an earlier failure", Err: m.broken}
	}
	m.seq++
	if err := m.goneMembers(op, nil); err != nil {
		return 0, time.Time{}, m.fail(err)
	}
	if timeout <= 0 {
		timeout = m.o.Timeout
	}
	return m.seq, time.Now().Add(timeout), nil
}

// Broken is the failure that broke the mesh's collectives (every peer
// still connected was told of it), nil while they work.
func (m *Mesh) Broken() error {
	m.collMu.Lock()
	defer m.collMu.Unlock()
	return m.broken
}

// fail breaks the mesh with its first failure and tells every peer still
// there (an abort frame of the current collective), so that none of them
// waits out its deadline for this rank.
func (m *Mesh) fail(err error) error {
	if m.broken != nil {
		return err
	}
	m.broken = err
	kind, ranks, detail := fault.Parts(err)
	body := abortBody(kind, ranks, time.Now(), detail)
	for _, p := range m.peers {
		if p == nil || p.dead.Load() || p.left.Load() {
			continue
		}
		m.aborts.Add(1)
		go func() {
			defer m.aborts.Done()
			p.wmu.Lock()
			defer p.wmu.Unlock()
			var h [hdrLen]byte
			binary.LittleEndian.PutUint32(h[:], uint32(hdrLen-4+len(body)))
			h[4] = tAbort
			binary.LittleEndian.PutUint64(h[5:], m.seq)
			p.conn.SetWriteDeadline(time.Now().Add(time.Second))
			bufs := net.Buffers{h[:], body}
			bufs.WriteTo(p.conn)
		}()
	}
	return err
}

var abortKinds = []error{nil, fault.ErrTimeout, fault.ErrPeerDead, fault.ErrMismatch, fault.ErrClosed, fault.ErrToken}

// abortBody is an abort frame's body: the kind's code, the ranks, when the
// sender gave up (Unix ns), and the detail.
func abortBody(kind error, ranks []int, at time.Time, detail string) []byte {
	code := byte(0)
	for i, k := range abortKinds {
		if k != nil && errors.Is(kind, k) {
			code = byte(i)
			break
		}
	}
	b := []byte{code}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ranks)))
	for _, r := range ranks {
		b = binary.LittleEndian.AppendUint32(b, uint32(r))
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(at.UnixNano()))
	return append(b, detail...)
}

// abortErr is the error that rank from reported in an abort frame.
func abortErr(op string, from int, body []byte) error {
	e, _, detail := parseAbort(op, from, body)
	e.Detail = fmt.Sprintf("rank %d reports: %s", from, detail)
	return e
}

// parseAbort reads an abort frame's body into an error (its Detail left
// to the caller), the time the sender gave up and the sender's detail.
func parseAbort(op string, from int, body []byte) (*fault.Error, time.Time, string) {
	e := &fault.Error{Op: op, Side: fault.Remote, Kind: fault.ErrPeerDead, Ranks: []int{from}}
	if len(body) < 5 {
		return e, time.Time{}, fmt.Sprintf("rank %d aborted the collective", from)
	}
	if int(body[0]) < len(abortKinds) && body[0] > 0 {
		e.Kind = abortKinds[body[0]]
	}
	n := int(binary.LittleEndian.Uint32(body[1:]))
	rest := body[5:]
	if n > len(rest)/4 {
		n = len(rest) / 4
	}
	if n > 0 {
		e.Ranks = make([]int, n)
		for i := range e.Ranks {
			e.Ranks[i] = int(binary.LittleEndian.Uint32(rest[4*i:]))
		}
	}
	rest = rest[4*n:]
	var at time.Time
	if len(rest) >= 8 {
		at, rest = time.Unix(0, int64(binary.LittleEndian.Uint64(rest))), rest[8:]
	}
	return e, at, string(rest)
}

// gaveUp is the error of a rank that reached collective seq after rank
// from had given up on it, or on the earlier collective aseq that this
// rank then completed late: from's abort frame is queued behind the
// frames this rank used.
func gaveUp(op string, from int, seq, aseq uint64, body []byte) error {
	e, at, detail := parseAbort(op, from, body)
	what := "this collective"
	if aseq != seq {
		what = fmt.Sprintf("the collective before it (#%d), which this rank completed late", aseq)
	}
	when := ""
	if !at.IsZero() {
		when = fmt.Sprintf(" at %s, %v before this rank got there", at.Format("15:04:05.000"), time.Since(at).Round(time.Millisecond))
	}
	e.Detail = fmt.Sprintf("rank %d gave up on %s%s: %s", from, what, when, detail)
	return e
}

// abandoned is gaveUp's error when rank r has queued an abort frame of
// collective seq or an earlier one, else nil.
func (m *Mesh) abandoned(op string, r int, seq uint64) error {
	aseq, body, ok := m.peers[r].in.findAbort(seq)
	if !ok {
		return nil
	}
	return m.fail(gaveUp(op, r, seq, aseq, body))
}

// recv waits for the next data frame of collective seq from rank r. It
// fails at once when any member dies or leaves meanwhile (a stalled
// collective would otherwise wait out its deadline), and on timeout names
// every rank in waitingFor whose frame has not arrived.
func (m *Mesh) recv(op string, r int, seq uint64, timer <-chan time.Time, timeout time.Duration, waitingFor []int) (frame, error) {
	p := m.peers[r]
	for {
		if err := m.goneMembers(op, waitingFor); err != nil {
			return frame{}, m.fail(err)
		}
		f, err, st := p.in.pop(timer, m.death)
		switch st {
		case popDeath:
			continue
		case popTimeout:
			missing := []int{r}
			for _, q := range waitingFor {
				if q != r && !m.peers[q].in.ready() {
					missing = append(missing, q)
				}
			}
			sort.Ints(missing)
			return frame{}, m.fail(&fault.Error{Op: op, Ranks: missing, Side: fault.Remote, Kind: fault.ErrTimeout,
				Detail: fmt.Sprintf("%s did not arrive within %v", fault.RankList(missing), timeout.Round(time.Millisecond))})
		}
		if err != nil {
			var fe *fault.Error
			if errors.As(err, &fe) {
				e := *fe
				e.Op = op
				return frame{}, m.fail(&e)
			}
			return frame{}, m.fail(err)
		}
		if f.abort {
			if f.seq < seq {
				// r gave up on a collective that this rank completed
				// late (collectives stop after this rank's own failure).
				return frame{}, m.fail(gaveUp(op, r, seq, f.seq, f.body))
			}
			return frame{}, m.fail(abortErr(op, r, f.body))
		}
		if f.seq != seq {
			return frame{}, m.fail(&fault.Error{Op: op, Ranks: []int{r}, Side: fault.Remote, Kind: fault.ErrMismatch,
				Detail: fmt.Sprintf("rank %d sent data of collective #%d during #%d (collectives called in another order)", r, f.seq, seq)})
		}
		// r sent its part, then gave up waiting for the others (this rank).
		if err := m.abandoned(op, r, seq); err != nil {
			return frame{}, err
		}
		return f, nil
	}
}

// goneMembers is an error naming the peers of need (all when nil) that
// died (ErrPeerDead) or left (ErrClosed) with nothing more queued from
// them; nil when the collective can go on. (Peers that a collective does
// not wait for directly, as in the ring, are covered by the abort frame
// that a rank which waits for them sends.)
func (m *Mesh) goneMembers(op string, need []int) error {
	var dead, left []int
	check := func(p *peer) {
		switch {
		case p == nil || p.in.hasFrames():
		case p.dead.Load():
			dead = append(dead, p.rank)
		case p.left.Load():
			left = append(left, p.rank)
		}
	}
	if need == nil {
		for _, p := range m.peers {
			check(p)
		}
	} else {
		for _, r := range need {
			check(m.peers[r])
		}
	}
	switch {
	case len(dead) > 0:
		e := &fault.Error{Op: op, Ranks: dead, Side: fault.Remote, Kind: fault.ErrPeerDead,
			Detail: fmt.Sprintf("%s of this collective dead", fault.RankList(dead))}
		if p := m.peers[dead[0]]; p != nil {
			p.in.mu.Lock()
			e.Err = p.in.err
			p.in.mu.Unlock()
		}
		return e
	case len(left) > 0:
		return &fault.Error{Op: op, Ranks: left, Side: fault.Remote, Kind: fault.ErrClosed,
			Detail: fmt.Sprintf("%s closed the store before this collective", fault.RankList(left))}
	}
	return nil
}

func (m *Mesh) sendErr(op string, r int, err error) error {
	if gone := m.abandoned(op, r, m.seq); gone != nil {
		return gone // r left after giving up on this rank: that is the cause
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		time.Sleep(ExitGrace) // r's connection broke: see ExitGrace
	}
	return m.fail(&fault.Error{Op: op, Ranks: []int{r}, Side: fault.Remote, Kind: fault.ErrPeerDead,
		Detail: fmt.Sprintf("sending to rank %d failed", r), Err: err})
}

// AllGather returns every rank's blob in rank order (result[Rank()] is a
// copy of mine). Every rank sends its blob straight to every other rank.
// The tag is checked: a rank that passes another gets ErrMismatch naming
// it. timeout ≤ 0 means Options.Timeout.
func (m *Mesh) AllGather(tag string, mine []byte, timeout time.Duration) ([][]byte, error) {
	m.collMu.Lock()
	defer m.collMu.Unlock()
	return m.allGather(tag, mine, timeout)
}

func (m *Mesh) allGather(tag string, mine []byte, timeout time.Duration) ([][]byte, error) {
	op := fmt.Sprintf("allgather %q", tag)
	seq, deadline, err := m.begin(op, timeout)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = m.o.Timeout
	}
	payload := make([]byte, 0, 4+len(tag)+len(mine))
	payload = binary.LittleEndian.AppendUint32(payload, uint32(len(tag)))
	payload = append(payload, tag...)
	payload = append(payload, mine...)
	// Send in ring order from the right neighbour on, so that the ranks
	// do not all queue on rank 0 first.
	n := m.o.World
	for i := 1; i < n; i++ {
		r := (m.o.Rank + i) % n
		if err := m.send(m.peers[r], seq, payload, deadline); err != nil {
			return nil, m.sendErr(op, r, err)
		}
	}
	out := make([][]byte, n)
	out[m.o.Rank] = append([]byte{}, mine...)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var others []int
	for r := range n {
		if r != m.o.Rank {
			others = append(others, r)
		}
	}
	for i, r := range others {
		f, err := m.recv(op, r, seq, timer.C, timeout, others[i:])
		if err != nil {
			return nil, err
		}
		b := f.body
		tl := 0
		if len(b) >= 4 {
			tl = int(binary.LittleEndian.Uint32(b))
		}
		if len(b) < 4 || tl > len(b)-4 {
			return nil, m.fail(&fault.Error{Op: op, Ranks: []int{r}, Side: fault.Remote, Kind: fault.ErrMismatch,
				Detail: fmt.Sprintf("rank %d sent a malformed all-gather frame", r)})
		}
		if rt := string(b[4 : 4+tl]); rt != tag {
			return nil, m.fail(&fault.Error{Op: op, Ranks: []int{r}, Side: fault.Remote, Kind: fault.ErrMismatch,
				Detail: fmt.Sprintf("collective mismatch: rank %d called %q, rank %d called %q", r, rt, m.o.Rank, tag)})
		}
		out[r] = append([]byte{}, b[4+tl:]...)
		m.peers[r].in.recycle(f.body)
	}
	return out, nil
}

// Barrier returns once every rank has entered it.
func (m *Mesh) Barrier(tag string, timeout time.Duration) error {
	_, err := m.AllGather(tag, nil, timeout)
	return err
}

// segment is the range [lo, hi) of segment c (modulo world) of a vector
// of length l.
func segment(c, world, l int) (int, int) {
	c = ((c % world) + world) % world
	return c * l / world, (c + 1) * l / world
}

// SumStart is the rank whose value comes first in AllReduceFloat32's sum
// of element i of a vector of length l over world ranks: element i of
// the result is ((x_c + x_{c+1}) + …) + x_{c−1}, ranks modulo world, with
// c = SumStart(i, world, l). Tests use it to check the exact bits.
func SumStart(i, world, l int) int {
	c := i * world / l
	for c > 0 && i < c*l/world {
		c--
	}
	for c < world-1 && i >= (c+1)*l/world {
		c++
	}
	return c
}

// littleEndian: float32 slices go on the wire as their memory.
var littleEndian = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 1 }()

func f32bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

// AllReduceFloat32 replaces x on every rank by the element-wise sum of
// every rank's x, as a pipelined ring: a reduce-scatter, then an
// all-gather, each of world−1 steps, moving 2·(world−1)/world of x over
// each link in pieces of PieceBytes that are forwarded as soon as they are
// reduced. Segment c of x is summed in the fixed order
// ((x_c + x_{c+1}) + …) + x_{c−1} (ranks modulo the world) by the rank
// that completes it, and every other rank receives those bits: the result
// is bit-identical on every rank, whatever launcher started them. Every
// rank must pass the same tag and length, else ErrMismatch names a rank
// that did not; on any error x is unspecified.
func (m *Mesh) AllReduceFloat32(tag string, x []float32, timeout time.Duration) error {
	m.collMu.Lock()
	defer m.collMu.Unlock()
	n := m.o.World
	if n == 1 {
		if m.closing.Load() {
			return &fault.Error{Op: fmt.Sprintf("allreduce %q", tag), Kind: fault.ErrClosed, Detail: "mesh closed"}
		}
		return nil
	}
	// Agree on tag and length first (one small all-gather), so that a
	// mismatch fails on every rank instead of stalling the ring.
	var lb [8]byte
	binary.LittleEndian.PutUint64(lb[:], uint64(len(x)))
	lens, err := m.allGather("allreduce-f32 "+tag, lb[:], timeout)
	if err != nil {
		return err
	}
	op := fmt.Sprintf("allreduce-f32 %q", tag)
	for r, b := range lens {
		// Every rank sees the same lengths and fails alike: the mesh stays
		// consistent, so a length mismatch does not break it.
		if got := binary.LittleEndian.Uint64(b); got != uint64(len(x)) {
			return (&fault.Error{Op: op, Ranks: []int{r}, Side: fault.Remote, Kind: fault.ErrMismatch,
				Detail: fmt.Sprintf("rank %d passed %d float32, rank %d passed %d", r, got, m.o.Rank, len(x))})
		}
	}
	if len(x) == 0 {
		return nil
	}
	seq, deadline, err := m.begin(op, timeout)
	if err != nil {
		return err
	}
	if timeout <= 0 {
		timeout = m.o.Timeout
	}
	me := m.o.Rank
	left, right := m.peers[(me+n-1)%n], m.peers[(me+1)%n]
	seg := func(c int) (int, int) { return segment(c, n, len(x)) }
	pf := PieceBytes / 4 // floats per piece
	// The sender forwards pieces to the right neighbour in order.
	type piece struct{ lo, hi int }
	sendq := make(chan piece, 2*(len(x)/pf+n)+8)
	sendErr := make(chan error, 1)
	var stop atomic.Bool // the ring failed: drop what is queued
	var scratch []byte
	if !littleEndian {
		scratch = make([]byte, 4*pf)
	}
	go func() {
		var err error
		for pc := range sendq {
			if err != nil || stop.Load() {
				continue
			}
			b := f32bytes(x[pc.lo:pc.hi])
			if !littleEndian {
				b = scratch[:4*(pc.hi-pc.lo)]
				for i, v := range x[pc.lo:pc.hi] {
					binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
				}
			}
			err = m.send(right, seq, b, deadline)
		}
		sendErr <- err
	}()
	enqueue := func(lo, hi int) {
		for p := lo; p < hi; p += pf {
			sendq <- piece{p, min(p+pf, hi)}
		}
	}
	// Step 0 sends this rank's own segment as it is.
	enqueue(seg(me))
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var ringErr error
	steps := 2 * (n - 1)
loop:
	for t := 0; t < steps; t++ {
		// Reduce-scatter step t receives segment me−t−1; all-gather step
		// t−(n−1) receives segment me−(t−(n−1)) = me−t+n−1.
		c := me - t - 1
		if t >= n-1 {
			c = me - (t - (n - 1))
		}
		lo, hi := seg(c)
		for p := lo; p < hi; p += pf {
			q := min(p+pf, hi)
			f, err := m.recv(op, left.rank, seq, timer.C, timeout, []int{left.rank})
			if err != nil {
				ringErr = err
				break loop
			}
			if len(f.body) != 4*(q-p) {
				ringErr = m.fail(&fault.Error{Op: op, Ranks: []int{left.rank}, Side: fault.Remote, Kind: fault.ErrMismatch,
					Detail: fmt.Sprintf("rank %d sent a piece of %d bytes, want %d", left.rank, len(f.body), 4*(q-p))})
				break loop
			}
			dst := x[p:q]
			if t < n-1 {
				if littleEndian {
					src := unsafe.Slice((*float32)(unsafe.Pointer(&f.body[0])), q-p)
					for i := range dst {
						dst[i] = src[i] + dst[i]
					}
				} else {
					for i := range dst {
						dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(f.body[4*i:])) + dst[i]
					}
				}
			} else if littleEndian {
				copy(f32bytes(dst), f.body)
			} else {
				for i := range dst {
					dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(f.body[4*i:]))
				}
			}
			left.in.recycle(f.body)
			if t < steps-1 {
				sendq <- piece{p, q}
			}
		}
	}
	if ringErr != nil {
		stop.Store(true)
	}
	close(sendq)
	var serr error
	select {
	case serr = <-sendErr:
	case <-time.After(time.Until(deadline) + time.Second):
		// The sender is stuck past its own write deadline: close the link.
		right.conn.Close()
		serr = <-sendErr
	}
	if ringErr != nil {
		return ringErr
	}
	if serr != nil {
		return m.sendErr(op, right.rank, serr)
	}
	return nil
}
