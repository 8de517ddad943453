package auth

import (
	"bytes"
	"net"
	"testing"
	"time"
)

// script is a net.Conn whose reads come from a fixed input and whose
// writes are dropped: one side of a handshake against a fuzzed peer.
type script struct {
	r *bytes.Reader
}

func (s *script) Read(b []byte) (int, error)       { return s.r.Read(b) }
func (s *script) Write(b []byte) (int, error)      { return len(b), nil }
func (s *script) Close() error                     { return nil }
func (s *script) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (s *script) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (s *script) SetDeadline(time.Time) error      { return nil }
func (s *script) SetReadDeadline(time.Time) error  { return nil }
func (s *script) SetWriteDeadline(time.Time) error { return nil }

// FuzzHandshake feeds arbitrary peer bytes to either side: the handshake
// must fail with an error (no input proves a secret against a fresh
// nonce), never panic, and read at most a hello, a status and a proof.
func FuzzHandshake(f *testing.F) {
	h := Hello{Version: Version, HasSecret: true}
	f.Add(false, h.Encode())
	f.Add(true, append(h.Encode(), statusOK))
	f.Add(true, append(h.Encode(), statusRefused))
	f.Add(false, append(h.Encode(), make([]byte, ProofLen)...))
	f.Add(false, []byte("DDSA\x01\x00"))
	f.Add(true, []byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	f.Fuzz(func(t *testing.T, initiator bool, in []byte) {
		s := &script{r: bytes.NewReader(in)}
		err := Handshake(s, secretA, initiator, time.Now().Add(time.Second))
		if err == nil {
			t.Fatalf("a scripted peer passed the handshake with %q", in)
		}
		if read := len(in) - s.r.Len(); read > HelloLen+1+ProofLen {
			t.Fatalf("read %d bytes", read)
		}
		if h, perr := ParseHello(in[:min(len(in), HelloLen)]); perr == nil && !bytes.Equal(h.Encode(), in[:HelloLen]) {
			t.Fatalf("hello does not round-trip: %q", in[:HelloLen])
		}
	})
}
