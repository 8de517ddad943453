package bootstrap

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/internal/testkit"
)

// flipBytes is testkit.Mutate with cuts of 3 bytes.
func flipBytes(b, muts []byte) []byte { return testkit.Mutate(b, muts, 3) }

func randBytes(rng *rand.Rand, max int) []byte {
	b := make([]byte, rng.IntN(max+1))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// FuzzRendezvousFrames: a frame of the tcp method (hello, gather, result,
// reject or abort) built from random fields, then mutated. Read back by
// readFrameMax and the frame's decoder, it must give a clean error or
// values that encode to exactly the bytes read (the decoders accept
// exactly what the encoders write); unmutated, exactly the fields it was
// built from.
func FuzzRendezvousFrames(f *testing.F) {
	for k := range 5 {
		f.Add(uint8(k), uint64(k+1), []byte{})
	}
	f.Add(uint8(0), uint64(9), []byte{0, 0, 0xff})
	f.Add(uint8(2), uint64(9), []byte{9, 0, 1, 2})
	f.Add(uint8(4), uint64(9), []byte{13, 0, 0x80})
	f.Fuzz(func(t *testing.T, kind uint8, seed uint64, muts []byte) {
		rng := rand.New(rand.NewPCG(seed, seed>>13))
		str := func() string { return string(randBytes(rng, 24)) }
		var orig []byte
		var want string
		switch kind % 5 {
		case 0:
			h := hello{rank: rng.IntN(1 << 20), world: rng.IntN(1 << 20), token: str(), job: str(), host: str(), pid: rng.IntN(1 << 31)}
			orig, want = h.frame(), showFrame(fHello, h)
		case 1:
			g := struct {
				seq  uint64
				tag  string
				blob []byte
			}{rng.Uint64(), str(), randBytes(rng, 64)}
			orig, want = gatherFrame(g.seq, g.tag, g.blob), showFrame(fGather, g.seq, g.tag, g.blob)
		case 2:
			seq, blobs := rng.Uint64(), make([][]byte, rng.IntN(6))
			for i := range blobs {
				blobs[i] = randBytes(rng, 16)
			}
			orig, want = resultFrame(seq, blobs), showFrame(fResult, seq, blobs)
		default:
			typ := byte(fReject)
			if kind%5 == 4 {
				typ = fAbort
			}
			code, ranks, detail := uint8(rng.Uint32()), make([]int, rng.IntN(5)), str()
			for i := range ranks {
				ranks[i] = int(rng.Uint32())
			}
			orig, want = verdictCodeFrame(typ, code, ranks, detail), showFrame(typ, code, ranks, detail)
		}
		b := flipBytes(orig, muts)
		typ, d, err := readFrameMax(bytes.NewReader(b), maxHandshake)
		if err != nil {
			n := uint32(0)
			if len(b) >= 4 {
				n = binary.LittleEndian.Uint32(b)
			}
			if len(b) >= 4 && n > 0 && n <= maxHandshake && len(b)-4 >= int(n) {
				t.Fatalf("readFrameMax refused a whole frame of %d bytes: %v", n, err)
			}
			if bytes.Equal(b, orig) {
				t.Fatalf("unmutated frame refused: %v", err)
			}
			return
		}
		read := b[:4+binary.LittleEndian.Uint32(b)]
		again, got := reencode(typ, d)
		if bytes.Equal(b, orig) && got != want {
			t.Fatalf("unmutated frame of type %d decoded to %v, built from %v", typ, got, want)
		}
		if again != nil && !bytes.Equal(again, read) {
			t.Fatalf("frame of type %d decoded to %v, which encodes to %x, not the %x read", typ, got, again, read)
		}
	})
}

// pmiServer is a PMI-1 / PMI-2 server for one client rank, as a net.Conn
// whose replies are computed as each request is written (so nothing ever
// blocks: a client waiting for more than it was sent reads EOF). Its KVS
// holds the other ranks' blobs of collective 1 in the format pmi.go
// documents, written out here. muts flip bytes of the reply stream
// (flipBytes positions), a fault injection.
type pmiServer struct {
	v2         bool
	rank, size int
	valMax     int // vallen_max
	told       int // vallen_max as the client read it (a flip may change it)
	kvs        map[string]string
	in, out    []byte
	sent       int    // reply bytes produced so far
	muts       []byte // {pos u16, xor u8} over the reply stream
	flipped    bool   // a mutation changed a reply byte
	framed     bool   // past the PMI-2 init: length-prefixed messages
}

func (s *pmiServer) Read(p []byte) (int, error) {
	if len(s.out) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

func (s *pmiServer) Write(p []byte) (int, error) {
	s.in = append(s.in, p...)
	for {
		var req string
		if s.framed {
			if len(s.in) < 6 {
				break
			}
			n, _ := strconv.Atoi(strings.TrimSpace(string(s.in[:6])))
			if len(s.in) < 6+n {
				break
			}
			req, s.in = string(s.in[6:6+n]), s.in[6+n:]
		} else {
			i := bytes.IndexByte(s.in, '\n')
			if i < 0 {
				break
			}
			req, s.in = string(s.in[:i]), s.in[i+1:]
		}
		s.reply(s.answer(req))
	}
	return len(p), nil
}

func (s *pmiServer) reply(r string) {
	b := []byte(r)
	for m := s.muts; len(m) >= 3; m = m[3:] {
		if p := int(binary.LittleEndian.Uint16(m)) - s.sent; p >= 0 && p < len(b) && m[2] != 0 {
			b[p] ^= m[2]
			s.flipped = true
		}
	}
	s.sent += len(b)
	s.out = append(s.out, b...)
}

func (s *pmiServer) answer(req string) string {
	kv := map[string]string{}
	if s.framed {
		for _, f := range strings.Split(req, ";") {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		var r string
		switch kv["cmd"] {
		case "fullinit":
			r = fmt.Sprintf("cmd=fullinit-response;rc=0;rank=%d;size=%d;appnum=0;debugged=FALSE;pmiverbose=FALSE;", s.rank, s.size)
		case "kvs-put":
			s.kvs[kv["key"]] = kv["value"]
			r = "cmd=kvs-put-response;rc=0;"
		case "kvs-fence":
			r = "cmd=kvs-fence-response;rc=0;"
		case "kvs-get":
			if v, ok := s.kvs[kv["key"]]; ok {
				r = "cmd=kvs-get-response;rc=0;found=TRUE;value=" + v + ";"
			} else {
				r = "cmd=kvs-get-response;rc=0;found=FALSE;"
			}
		default:
			r = "cmd=" + kv["cmd"] + "-response;rc=1;errmsg=unknown;"
		}
		return fmt.Sprintf("%-6d%s", len(r), r)
	}
	for _, f := range strings.Fields(req) {
		k, v, _ := strings.Cut(f, "=")
		kv[k] = v
	}
	switch kv["cmd"] {
	case "init":
		if s.v2 {
			s.framed = true
			return "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n"
		}
		return "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"
	case "get_maxes":
		return fmt.Sprintf("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=%d rc=0\n", s.valMax)
	case "get_my_kvsname":
		return "cmd=my_kvsname kvsname=kvs_4242_0_1_host rc=0\n"
	case "put":
		s.kvs[kv["key"]] = kv["value"]
		return "cmd=put_result rc=0 msg=success\n"
	case "barrier_in":
		return "cmd=barrier_out rc=0\n"
	case "get":
		if v, ok := s.kvs[kv["key"]]; ok {
			return "cmd=get_result rc=0 msg=success value=" + v + "\n"
		}
		return "cmd=get_result rc=-1 msg=key_" + kv["key"] + "_not_found\n"
	}
	return "cmd=unknown rc=1\n"
}

func (s *pmiServer) Close() error                     { return nil }
func (s *pmiServer) LocalAddr() net.Addr              { return &net.UnixAddr{Name: "pmi", Net: "unix"} }
func (s *pmiServer) RemoteAddr() net.Addr             { return &net.UnixAddr{Name: "pmi", Net: "unix"} }
func (s *pmiServer) SetDeadline(time.Time) error      { return nil }
func (s *pmiServer) SetReadDeadline(time.Time) error  { return nil }
func (s *pmiServer) SetWriteDeadline(time.Time) error { return nil }

// publish and fetch are the KVS format of a blob as pmi.go documents it:
// base64url chunks "<key>/<i>" of at most valMax-8 characters and a header
// "<key>" = "<chunks>.<len>.<crc32 hex>.<extra>".
func (s *pmiServer) publish(key string, blob []byte, extra string) {
	enc := base64.RawURLEncoding.EncodeToString(blob)
	chunk, n := s.told-8, 0
	for ; n*chunk < len(enc); n++ {
		s.kvs[fmt.Sprintf("%s/%d", key, n)] = enc[n*chunk : min(len(enc), (n+1)*chunk)]
	}
	s.kvs[key] = fmt.Sprintf("%d.%d.%08x.%s", n, len(blob), crc32.ChecksumIEEE(blob), extra)
}

func (s *pmiServer) fetch(key string) (blob []byte, extra string, err error) {
	var n, size int
	var sum uint32
	h, ok := s.kvs[key]
	if !ok {
		return nil, "", fmt.Errorf("no %s", key)
	}
	f := strings.SplitN(h, ".", 4)
	if len(f) != 4 {
		return nil, "", fmt.Errorf("header %q", h)
	}
	if _, err := fmt.Sscanf(f[0]+" "+f[1]+" "+f[2], "%d %d %x", &n, &size, &sum); err != nil {
		return nil, "", fmt.Errorf("header %q: %v", h, err)
	}
	var enc strings.Builder
	for i := range n {
		c := s.kvs[fmt.Sprintf("%s/%d", key, i)]
		if len(c) > s.told-8 || (i < n-1 && len(c) != s.told-8) {
			return nil, "", fmt.Errorf("chunk %d of %s has %d characters (vallen_max %d)", i, key, len(c), s.told)
		}
		enc.WriteString(c)
	}
	blob, err = base64.RawURLEncoding.DecodeString(enc.String())
	if err != nil || len(blob) != size || crc32.ChecksumIEEE(blob) != sum {
		return nil, "", fmt.Errorf("%s corrupt: %v", key, err)
	}
	return blob, f[3], nil
}

func packBlobs(blobs [][]byte) []byte {
	var b []byte
	for _, x := range blobs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(x)))
		b = append(b, x...)
	}
	return b
}

// FuzzPMIGather runs the pmi method's handshake and one AllGather (PMI-1
// or PMI-2, worlds of 2-20 ranks, so both the direct and the packed result
// path) against pmiServer, whose KVS holds the other ranks' random blobs,
// with reply bytes flipped by muts. The client must fail with a clean
// *fault.Error, or return exactly every rank's blob; unmutated it must
// succeed. When it succeeds, what it published decodes (by the format
// written out above) to its own blob, and to everyone's packed as rank 0
// of a large world.
func FuzzPMIGather(f *testing.F) {
	f.Add(uint64(1), false, []byte{})
	f.Add(uint64(2), true, []byte{})
	f.Add(uint64(19), false, []byte{})
	f.Add(uint64(1), false, []byte{40, 0, 1})
	f.Add(uint64(2), true, []byte{200, 0, 0x20, 44, 1, 3})
	f.Fuzz(func(t *testing.T, seed uint64, v2 bool, muts []byte) {
		rng := rand.New(rand.NewPCG(seed, seed>>11))
		world := 2 + int(seed%19)
		rank := rng.IntN(world)
		if seed%5 == 0 {
			rank = 0
		}
		s := &pmiServer{v2: v2, rank: rank, size: world, valMax: 64 + rng.IntN(512), kvs: map[string]string{}, muts: muts}
		if v2 {
			s.valMax = pmi2ValMax
		}
		s.told = s.valMax
		tag := string(randBytes(rng, 12))
		blobs := make([][]byte, world)
		for r := range blobs {
			blobs[r] = randBytes(rng, 300)
			if r != rank {
				s.publish(fmt.Sprintf("b1/%d", r), blobs[r], "t"+base64.RawURLEncoding.EncodeToString([]byte(tag)))
			}
		}
		if world > pmiDirectMax && rank != 0 {
			s.publish("r1", packBlobs(blobs), "ok")
		}
		x := &pmiEx{collective: collective{method: "pmi", rank: rank, world: world, timeout: time.Second},
			conn: s, rd: bufio.NewReader(s), v2: v2}
		if v2 {
			x.kvs, x.method = "job.1", "pmi2"
		}
		var e *fault.Error
		err := x.handshake(time.Now().Add(time.Second))
		if err != nil && !errors.As(err, &e) {
			t.Fatalf("handshake failed with %T %v, not a *fault.Error", err, err)
		}
		var got [][]byte
		if err == nil {
			s.told = x.valMax
			got, err = x.AllGather(tag, blobs[rank], time.Second)
		}
		if err != nil {
			if !errors.As(err, &e) || e.Detail == "" {
				t.Fatalf("failed with %T %v, not a *fault.Error with a detail", err, err)
			}
			if !s.flipped {
				t.Fatalf("failed with no reply byte changed: %v", err)
			}
			return
		}
		if fmt.Sprint(got) != fmt.Sprint(blobs) {
			t.Fatalf("gathered %d blobs that differ from the %d published", len(got), len(blobs))
		}
		mine, extra, ferr := s.fetch(fmt.Sprintf("b1/%d", rank))
		if ferr != nil || !bytes.Equal(mine, blobs[rank]) || extra != "t"+base64.RawURLEncoding.EncodeToString([]byte(tag)) {
			t.Fatalf("this rank's published blob reads back as %x %q (%v), want %x", mine, extra, ferr, blobs[rank])
		}
		if world > pmiDirectMax && rank == 0 {
			packed, extra, ferr := s.fetch("r1")
			if ferr != nil || extra != "ok" || !bytes.Equal(packed, packBlobs(blobs)) {
				t.Fatalf("rank 0's packed result reads back wrong (%q, %v)", extra, ferr)
			}
		}
	})
}
