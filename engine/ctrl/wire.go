package ctrl

// The wire: a fixed header (length, type, hops, step, sequence, sender,
// tag) and a body, on TCP between agents and on unix sockets inside a
// node; the hello that pairs two ends of one job.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ddstore/ddstore/fault"
)

// Frame types.
const (
	tHello    = 1  // hello body (see helloBody)
	tAck      = 2  // hello accepted
	tRefuse   = 3  // hello refused; body: the reason
	tHB       = 4  // a plain rank lives
	tPing     = 5  // seq: ping number
	tPong     = 6  // answer to tPing, same seq
	tProbe    = 7  // from: the suspect node; please ping it for me
	tProbeAck = 8  // from: the suspect node, which answered the prober
	tDead     = 9  // body: u32 ranks found dead; detail after them
	tAbort    = 10 // body: see abortBody
	tColl     = 11 // a collective's data: seq, step, tag
	tGather   = 12 // bootstrap: a subtree's records, up
	tTable    = 13 // bootstrap: the table, down (to a local rank: as a memfd)
	tBye      = 14 // the sender closes cleanly
)

const (
	magic    = 0x44444354 // "DDCT"
	version  = 1
	hdrLen   = 24
	maxBody  = 1<<30 + 64
	maxHello = 64 << 10
	maxBlob  = 32 << 10
)

type header struct {
	typ  byte
	hops uint8
	step uint16
	seq  uint64
	from uint32
	tag  uint32
}

func (h header) put(b []byte, bodyLen int) {
	binary.LittleEndian.PutUint32(b, uint32(hdrLen-4+bodyLen))
	b[4], b[5] = h.typ, h.hops
	binary.LittleEndian.PutUint16(b[6:], h.step)
	binary.LittleEndian.PutUint64(b[8:], h.seq)
	binary.LittleEndian.PutUint32(b[16:], h.from)
	binary.LittleEndian.PutUint32(b[20:], h.tag)
}

func parseHeader(b []byte) (header, int) {
	n := int(binary.LittleEndian.Uint32(b)) - (hdrLen - 4)
	return header{typ: b[4], hops: b[5], step: binary.LittleEndian.Uint16(b[6:]), seq: binary.LittleEndian.Uint64(b[8:]),
		from: binary.LittleEndian.Uint32(b[16:]), tag: binary.LittleEndian.Uint32(b[20:])}, n
}

// link is one control connection: to an agent (peer is its node) or
// between a local rank and its agent (peer is the rank).
type link struct {
	conn  net.Conn
	br    *bufio.Reader
	wmu   sync.Mutex
	peer  int
	local bool
	left  atomic.Bool
	ended atomic.Bool // its read loop ended (readLoop)
	// A local rank's link at its agent: the last collective whose part
	// came up from it, and the last whose result the agent has for it.
	upSeq, downSeq atomic.Uint64
	// Under wmu: the frame being written (no allocation per frame: an
	// idle control plane allocates nothing).
	whdr [hdrLen]byte
	wvec [2][]byte
	bufs net.Buffers
	rhdr [hdrLen]byte // the read loop's header
}

func newLink(c net.Conn, peer int, local bool) *link {
	return &link{conn: c, br: bufio.NewReaderSize(c, 2<<10), peer: peer, local: local}
}

// done is the last collective in which a local rank had done its part
// (its part up, or its result ready to go down): dead or gone after it, it
// stops no collective up to it (goneAt).
func (l *link) done() uint64 { return max(l.upSeq.Load(), l.downSeq.Load()) }

// send writes one frame (one writev) by deadline.
func (l *link) send(h header, body []byte, deadline time.Time) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.write(h, body, deadline)
}

// write writes one frame (wmu held).
func (l *link) write(h header, body []byte, deadline time.Time) error {
	h.put(l.whdr[:], len(body))
	l.conn.SetWriteDeadline(deadline)
	if len(body) == 0 {
		_, err := l.conn.Write(l.whdr[:])
		return err
	}
	l.wvec[0], l.wvec[1] = l.whdr[:], body
	l.bufs = l.wvec[:]
	_, err := l.bufs.WriteTo(l.conn)
	l.wvec[1], l.bufs = nil, nil
	return err
}

// trySend sends like send unless another send holds the link (then the
// link is busy, and false).
func (l *link) trySend(h header, body []byte, deadline time.Time) bool {
	if !l.wmu.TryLock() {
		return false
	}
	l.write(h, body, deadline)
	l.wmu.Unlock()
	return true
}

// readFrame reads one frame of at most max body bytes.
func readFrame(r io.Reader, max int) (header, []byte, error) {
	var b [hdrLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return header{}, nil, err
	}
	h, n := parseHeader(b[:])
	if n < 0 || n > max {
		return header{}, nil, fmt.Errorf("ctrl: frame of %d bytes (limit %d)", n, max)
	}
	body := make([]byte, n)
	_, err := io.ReadFull(r, body)
	return h, body, err
}

// hello is what a dialler says first.
type hello struct {
	local             bool
	world, rank, node int
	localRank         int
	token             string
	blob              []byte
}

func (h *hello) encode() []byte {
	b := binary.LittleEndian.AppendUint32(nil, magic)
	b = binary.LittleEndian.AppendUint16(b, version)
	l := byte(0)
	if h.local {
		l = 1
	}
	b = append(b, l)
	for _, v := range []int{h.world, h.rank, h.node, h.localRank} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(h.token)))
	b = append(b, h.token...)
	return append(b, h.blob...)
}

func decodeHello(b []byte) (*hello, error) {
	if len(b) < 25 || binary.LittleEndian.Uint32(b) != magic {
		return nil, errors.New("not a ddstore control peer")
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != version {
		return nil, fmt.Errorf("control protocol version %d, this rank speaks %d", v, version)
	}
	h := &hello{local: b[6] == 1}
	h.world = int(binary.LittleEndian.Uint32(b[7:]))
	h.rank = int(binary.LittleEndian.Uint32(b[11:]))
	h.node = int(binary.LittleEndian.Uint32(b[15:]))
	h.localRank = int(binary.LittleEndian.Uint32(b[19:]))
	tl := int(binary.LittleEndian.Uint16(b[23:]))
	if 25+tl > len(b) {
		return nil, errors.New("truncated hello")
	}
	h.token = string(b[25 : 25+tl])
	h.blob = b[25+tl:]
	return h, nil
}

// dialHello runs the handshake hook and the hello on a fresh connection
// and waits for the answer.
func (c *Ctrl) dialHello(conn net.Conn, local bool, deadline time.Time) error {
	conn.SetDeadline(deadline)
	defer conn.SetDeadline(time.Time{})
	if c.o.Handshake != nil {
		if err := c.o.Handshake(conn, true); err != nil {
			return &fault.Error{Op: "ctrl connect", Side: fault.Remote, Kind: fault.ErrToken, Detail: "handshake failed", Err: err}
		}
	}
	h := hello{local: local, world: c.o.World, rank: c.o.Rank, node: c.o.Node, localRank: c.o.LocalRank, token: c.o.Token}
	if local {
		h.blob = c.o.Blob
	}
	l := &link{conn: conn}
	if err := l.send(header{typ: tHello}, h.encode(), deadline); err != nil {
		return err
	}
	rh, body, err := readFrame(conn, maxHello)
	if err != nil {
		return err
	}
	switch rh.typ {
	case tAck:
		return nil
	case tRefuse:
		return &fault.Error{Op: "ctrl connect", Side: fault.Remote, Kind: fault.ErrToken, Detail: "refused: " + string(body)}
	}
	return fmt.Errorf("ctrl: unexpected frame type %d after hello", rh.typ)
}

// acceptHello runs the hook and checks a dialler's hello; it acks it.
func (c *Ctrl) acceptHello(conn net.Conn) (*hello, error) {
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	defer conn.SetDeadline(time.Time{})
	if c.o.Handshake != nil {
		if err := c.o.Handshake(conn, false); err != nil {
			return nil, err
		}
	}
	hh, body, err := readFrame(conn, maxHello)
	if err != nil {
		return nil, err
	}
	if hh.typ != tHello {
		return nil, errors.New("not a ddstore control peer")
	}
	h, err := decodeHello(body)
	l := &link{conn: conn}
	refuse := func(why string) (*hello, error) {
		l.send(header{typ: tRefuse}, []byte(why), time.Now().Add(time.Second))
		return nil, errors.New(why)
	}
	switch {
	case err != nil:
		return refuse(err.Error())
	case h.token != c.o.Token:
		return refuse("job token mismatch (another job at this address?)")
	case h.world != c.o.World:
		return refuse(fmt.Sprintf("world size %d, this rank has %d", h.world, c.o.World))
	case h.local && (h.node != c.o.Node || h.localRank <= 0 || h.localRank >= c.o.LocalSize || h.rank >= c.o.World):
		return refuse(fmt.Sprintf("rank %d (local %d of node %d) is not a local rank of node %d", h.rank, h.localRank, h.node, c.o.Node))
	case !h.local && (h.node < 0 || h.node >= c.o.Nodes || h.node == c.o.Node):
		return refuse(fmt.Sprintf("node %d is not another node of %d", h.node, c.o.Nodes))
	}
	if err := l.send(header{typ: tAck}, nil, time.Now().Add(10*time.Second)); err != nil {
		return nil, err
	}
	return h, nil
}
