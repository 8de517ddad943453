package mesh

// The mesh's wire: the hello that pairs two ranks of one job, and the
// frames (type, sequence, body) that carry collectives and heartbeats.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/ddstore/ddstore/fault"
)

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
		timeout := errors.As(err, &ne) && ne.Timeout()
		detail := fmt.Sprintf("connection to rank %d on %s lost", p.rank, p.host)
		switch {
		case timeout:
			detail = fmt.Sprintf("rank %d on %s silent for %v (no heartbeat)", p.rank, p.host, m.o.Liveness)
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			detail = fmt.Sprintf("rank %d on %s closed the connection without leaving (exited?)", p.rank, p.host)
		}
		gone := &fault.Error{Op: "mesh", Ranks: []int{p.rank}, Side: fault.Remote, Kind: fault.ErrPeerDead, Detail: detail, Err: err}
		if !timeout {
			// A launcher passes a Ctrl-C on to the ranks one after the
			// other: the peer that got it first may be gone before this
			// rank gets its own. Reads avoid the peer at once (OnDead),
			// but collectives fail only after ExitGrace, so that the job
			// ends as interrupted, not with this rank's error.
			m.reportDead(p, gone)
			time.Sleep(ExitGrace)
		}
		m.peerGone(p, gone, true)
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
