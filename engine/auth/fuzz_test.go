package auth

import (
	"bytes"
	"testing"
	"time"

	"github.com/ddstore/ddstore/internal/testkit"
)

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
		s := testkit.NewScriptConn(in)
		err := Handshake(s, secretA, initiator, time.Now().Add(time.Second))
		if err == nil {
			t.Fatalf("a scripted peer passed the handshake with %q", in)
		}
		if read := len(in) - s.Unread(); read > HelloLen+1+ProofLen {
			t.Fatalf("read %d bytes", read)
		}
		if h, perr := ParseHello(in[:min(len(in), HelloLen)]); perr == nil && !bytes.Equal(h.Encode(), in[:HelloLen]) {
			t.Fatalf("hello does not round-trip: %q", in[:HelloLen])
		}
	})
}
