package bootstrap

import (
	"bytes"
	"testing"

	"github.com/ddstore/ddstore/fault"
)

// FuzzRendezvousFrame feeds arbitrary bytes to the tcp rendezvous's
// decoders (the frame reader under the handshake cap, the hello, a
// verdict, a gather and a result body) and to the dir method's file
// decoder. None may panic or allocate beyond the input's size; a frame is
// accepted only within its cap.
func FuzzRendezvousFrame(f *testing.F) {
	f.Add(hello{rank: 1, world: 4, token: "t", job: "j", host: "h", pid: 7}.frame())
	f.Add(verdictFrame(fReject, fault.ErrToken, []int{1, 2}, "no"))
	e := newEnc(fResult)
	e.u64(1)
	e.u32(2)
	e.bytes([]byte("a"))
	e.bytes([]byte("bc"))
	f.Add(e.frame())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, fHello})
	f.Add((&dirEx{collective: collective{rank: 1, world: 2, seq: 3}, token: "t"}).encode("tag", []byte("blob")))
	f.Fuzz(func(t *testing.T, in []byte) {
		typ, d, err := readFrameMax(bytes.NewReader(in), maxHandshake)
		if err != nil {
			return
		}
		if len(d.b) > len(in) || len(d.b) > maxHandshake {
			t.Fatalf("frame body of %d bytes from %d", len(d.b), len(in))
		}
		body := d.b
		switch typ {
		case fHello:
			if h, err := parseHello(&dec{b: body}); err == nil && len(h.token)+len(h.job)+len(h.host) > len(body) {
				t.Fatal("hello strings longer than the frame")
			}
		case fReject, fAbort:
			if err := verdictErr("tcp", "fuzz", &dec{b: body}); err == nil {
				t.Fatal("a verdict decoded to no error")
			}
		}
		dd := &dec{b: body}
		seq, n := dd.u64(), dd.u32()
		_ = seq
		var total int
		for i := uint32(0); i < n && dd.err == nil && i < 1<<16; i++ {
			total += len(dd.bytes())
		}
		if total > len(body) {
			t.Fatalf("blobs of %d bytes from a body of %d", total, len(body))
		}
		dg := &dec{b: body}
		_, _, _ = dg.u64(), dg.str(), dg.bytes()
		if rec, err := decodeDirFile(in); err == nil && len(rec.blob) > len(in) {
			t.Fatal("dir record blob longer than the file")
		}
	})
}
