package mesh

import (
	"bytes"
	"net"
	"testing"
	"time"
)

// script is a net.Conn whose reads come from a fixed input and whose
// writes are dropped: a peer that says exactly the fuzzer's bytes.
type script struct{ r *bytes.Reader }

func (s *script) Read(b []byte) (int, error)       { return s.r.Read(b) }
func (s *script) Write(b []byte) (int, error)      { return len(b), nil }
func (s *script) Close() error                     { return nil }
func (s *script) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (s *script) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (s *script) SetDeadline(time.Time) error      { return nil }
func (s *script) SetReadDeadline(time.Time) error  { return nil }
func (s *script) SetWriteDeadline(time.Time) error { return nil }

// FuzzMeshWire feeds arbitrary bytes to the mesh's decoders: the hello an
// acceptor reads (after the peer proved the secret), the answer a dialler
// reads, the frame reader and the abort frame's body. None may panic or
// allocate beyond its cap; a hello is admitted only if it is well formed
// for this rank.
func FuzzMeshWire(f *testing.F) {
	f.Add(helloFrame(3, 4, "tok"))
	f.Add(helloFrame(1, 4, "other"))
	f.Add(helloFrame(9, 4, "tok"))
	f.Add([]byte{13, 0, 0, 0, tAck, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, tHello})
	f.Add(abortBody(nil, []int{1, 2}, time.Unix(1, 0), "x"))
	f.Add([]byte{2, 0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	m := &Mesh{o: Options{Rank: 1, World: 4, Token: "tok"}}
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := m.serverHello(&script{r: bytes.NewReader(in)}, time.Now().Add(time.Second))
		if err == nil {
			// The header's sequence field is not read in a hello.
			want := helloFrame(r, 4, "tok")
			if r <= 1 || r >= 4 || !bytes.Equal(in[:5], want[:5]) || !bytes.Equal(in[hdrLen:len(want)], want[hdrLen:]) {
				t.Fatalf("admitted rank %d from %q", r, in)
			}
		}
		if err := m.clientHello(&script{r: bytes.NewReader(in)}, 0, time.Now().Add(time.Second)); err == nil {
			if len(in) < hdrLen || in[4] != tAck {
				t.Fatalf("accepted %q as an ack", in)
			}
		}
		if _, _, body, err := readFrame(bytes.NewReader(in), maxHello); err == nil && len(body) > maxHello {
			t.Fatalf("body of %d bytes over the cap", len(body))
		}
		e, _, _ := parseAbort("fuzz", 2, in)
		if len(e.Ranks) > len(in)/4+1 {
			t.Fatalf("%d ranks from %d bytes", len(e.Ranks), len(in))
		}
	})
}
