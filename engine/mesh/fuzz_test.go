package mesh

import (
	"bytes"
	"testing"
	"time"

	"github.com/ddstore/ddstore/internal/testkit"
)

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
		r, err := m.serverHello(testkit.NewScriptConn(in), time.Now().Add(time.Second))
		if err == nil {
			// The header's sequence field is not read in a hello.
			want := helloFrame(r, 4, "tok")
			if r <= 1 || r >= 4 || !bytes.Equal(in[:5], want[:5]) || !bytes.Equal(in[hdrLen:len(want)], want[hdrLen:]) {
				t.Fatalf("admitted rank %d from %q", r, in)
			}
		}
		if err := m.clientHello(testkit.NewScriptConn(in), 0, time.Now().Add(time.Second)); err == nil {
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
