package bootstrap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/ddstore/ddstore/fault"
)

// Frame types of the tcp method. A frame is a little-endian uint32 body
// length followed by the body; the body starts with its type byte.
const (
	fHello  = 1 // magic u32, version u16, rank u32, world u32, token, job, host
	fAccept = 2 // -
	fReject = 3 // kind u8, ranks, detail
	fReady  = 4 // -
	fGather = 5 // seq u64, tag, blob
	fResult = 6 // seq u64, count u32, blobs
	fAbort  = 7 // kind u8, ranks, detail
	fBye    = 8 // -
)

const (
	wireMagic   = 0x44445342 // "DDSB"
	wireVersion = 1
	// maxFrame bounds a frame body: MaxMessage of blobs plus framing.
	maxFrame = MaxMessage + 1<<20
)

var errShortFrame = errors.New("truncated frame")

type enc struct{ b []byte }

func newEnc(typ byte) *enc    { return &enc{b: []byte{0, 0, 0, 0, typ}} }
func (e *enc) u8(v uint8)     { e.b = append(e.b, v) }
func (e *enc) u16(v uint16)   { e.b = binary.LittleEndian.AppendUint16(e.b, v) }
func (e *enc) u32(v uint32)   { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64)   { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) bytes(v []byte) { e.u32(uint32(len(v))); e.b = append(e.b, v...) }
func (e *enc) str(v string)   { e.u32(uint32(len(v))); e.b = append(e.b, v...) }
func (e *enc) ranks(rs []int) {
	e.u32(uint32(len(rs)))
	for _, r := range rs {
		e.u32(uint32(r))
	}
}
func (e *enc) frame() []byte {
	binary.LittleEndian.PutUint32(e.b, uint32(len(e.b)-4))
	return e.b
}

type dec struct {
	b   []byte
	err error
}

func (d *dec) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.err = errShortFrame
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}
func (d *dec) u8() uint8 {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}
func (d *dec) u16() uint16 {
	if v := d.take(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}
func (d *dec) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}
func (d *dec) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}
func (d *dec) bytes() []byte { return d.take(int(d.u32())) }
func (d *dec) str() string   { return string(d.bytes()) }
func (d *dec) ranks() []int {
	n := int(d.u32())
	if n > len(d.b)/4 {
		d.err = errShortFrame
		return nil
	}
	rs := make([]int, n)
	for i := range rs {
		rs[i] = int(d.u32())
	}
	return rs
}

// maxHandshake bounds frames read before a peer has proved it belongs to
// the job (a stray client must not make rank 0 allocate a gigabyte).
const maxHandshake = 64 << 10

// readFrame reads one frame of at most maxFrame bytes and returns its type
// and a decoder of the rest.
func readFrame(r io.Reader) (byte, *dec, error) { return readFrameMax(r, maxFrame) }

func readFrameMax(r io.Reader, max uint32) (byte, *dec, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n == 0 || n > max {
		return 0, nil, fmt.Errorf("%w: frame of %d bytes (limit %d)", fault.ErrTooLarge, n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return body[0], &dec{b: body[1:]}, nil
}

// hello is the first frame a non-root rank sends to rank 0.
type hello struct {
	rank, world int
	token, job  string
	host        string
	pid         int
}

func (h hello) frame() []byte {
	e := newEnc(fHello)
	e.u32(wireMagic)
	e.u16(wireVersion)
	e.u32(uint32(h.rank))
	e.u32(uint32(h.world))
	e.str(h.token)
	e.str(h.job)
	e.str(h.host)
	e.u32(uint32(h.pid))
	return e.frame()
}

func parseHello(d *dec) (hello, error) {
	if m := d.u32(); d.err == nil && m != wireMagic {
		return hello{}, fmt.Errorf("not a ddstore bootstrap peer (magic %#x)", m)
	}
	if v := d.u16(); d.err == nil && v != wireVersion {
		return hello{}, fmt.Errorf("peer speaks bootstrap protocol version %d, this build %d", v, wireVersion)
	}
	h := hello{rank: int(d.u32()), world: int(d.u32()), token: d.str(), job: d.str(), host: d.str(), pid: int(d.u32())}
	return h, d.end()
}
