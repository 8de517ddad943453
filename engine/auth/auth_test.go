package auth

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fault"
)

var (
	secretA = []byte("0123456789abcdef-job-A")
	secretB = []byte("0123456789abcdef-job-B")
)

// tap records what one side writes.
type tap struct {
	net.Conn
	mu  sync.Mutex
	out bytes.Buffer
}

func (t *tap) Write(b []byte) (int, error) {
	t.mu.Lock()
	t.out.Write(b)
	t.mu.Unlock()
	return t.Conn.Write(b)
}

// pair runs Handshake on both ends of a real TCP connection and returns
// the dialler's error, the acceptor's error and the bytes each wrote.
func pair(t *testing.T, dial, accept []byte) (errD, errA error, wroteD, wroteA []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	var ta *tap
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			errA = err
			return
		}
		defer c.Close()
		ta = &tap{Conn: c}
		errA = Handshake(ta, accept, false, time.Now().Add(10*time.Second))
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	td := &tap{Conn: c}
	errD = Handshake(td, dial, true, time.Now().Add(10*time.Second))
	c.Close()
	<-done
	return errD, errA, td.out.Bytes(), ta.out.Bytes()
}

func TestHandshakeSameSecret(t *testing.T) {
	errD, errA, wd, wa := pair(t, secretA, secretA)
	if errD != nil || errA != nil {
		t.Fatalf("dialler %v, acceptor %v", errD, errA)
	}
	// The secret never crosses the wire, and each side wrote a hello and
	// its proof (the acceptor a status byte too).
	for _, w := range [][]byte{wd, wa} {
		if bytes.Contains(w, secretA) || bytes.Contains(w, secretA[:MinSecret]) {
			t.Fatalf("the secret was written on the wire: %q", w)
		}
	}
	if len(wd) != HelloLen+ProofLen || len(wa) != HelloLen+1+ProofLen {
		t.Fatalf("wrote %d and %d bytes, want %d and %d", len(wd), len(wa), HelloLen+ProofLen, HelloLen+1+ProofLen)
	}
}

func TestHandshakeWrongSecretRefusedBothWays(t *testing.T) {
	errD, errA, _, wa := pair(t, secretB, secretA)
	for _, err := range []error{errD, errA} {
		if !errors.Is(err, fault.ErrToken) {
			t.Fatalf("got %v, want ErrToken", err)
		}
	}
	// The acceptor proved nothing to a peer that failed its proof.
	if len(wa) != HelloLen+1 {
		t.Fatalf("acceptor wrote %d bytes to a refused peer, want hello and status only (%d)", len(wa), HelloLen+1)
	}
}

func TestHandshakeSecretAgainstNone(t *testing.T) {
	for _, c := range []struct{ d, a []byte }{{secretA, nil}, {nil, secretA}} {
		errD, errA, _, _ := pair(t, c.d, c.a)
		if !errors.Is(errD, fault.ErrToken) || !errors.Is(errA, fault.ErrToken) {
			t.Fatalf("dialler secret %v acceptor %v: got %v / %v, want ErrToken on both", c.d != nil, c.a != nil, errD, errA)
		}
	}
	if errD, errA, _, _ := pair(t, nil, nil); errD != nil || errA != nil {
		t.Fatalf("insecure both sides: %v / %v", errD, errA)
	}
}

func TestHandshakeShortSecret(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	err := Handshake(a, []byte("short"), true, time.Now().Add(time.Second))
	if !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
}

// A recorded initiator's bytes replayed to a new responder are refused:
// the responder's fresh nonce makes the old proof worthless.
func TestHandshakeReplayRefused(t *testing.T) {
	_, _, wd, _ := pair(t, secretA, secretA)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	res := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			res <- err
			return
		}
		defer c.Close()
		res <- Handshake(c, secretA, false, time.Now().Add(10*time.Second))
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(wd)
	if err := <-res; !errors.Is(err, fault.ErrToken) {
		t.Fatalf("replayed handshake: got %v, want ErrToken", err)
	}
}

func TestHandshakeGarbageAndSilence(t *testing.T) {
	for _, c := range []struct {
		name string
		send []byte
		want error
	}{
		{"http", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\nxxxxxxxxxxxxxxxxxxxx"), fault.ErrCorrupt},
		{"length prefix", append([]byte{0xff, 0xff, 0xff, 0x7f}, make([]byte, 60)...), fault.ErrCorrupt},
		{"silent", nil, fault.ErrTimeout},
		{"truncated", []byte("DDSA\x01\x01abc"), fault.ErrTimeout},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			go func() { b.Write(c.send); io.Copy(io.Discard, b) }()
			start := time.Now()
			err := Handshake(a, secretA, false, time.Now().Add(300*time.Millisecond))
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("took %v", d)
			}
			b.Close()
		})
	}
}

func TestParseHelloRoundTrip(t *testing.T) {
	h := Hello{Version: Version, HasSecret: true}
	h.Nonce[3] = 7
	got, err := ParseHello(h.Encode())
	if err != nil || got != h {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, b := range [][]byte{nil, h.Encode()[:HelloLen-1], append(h.Encode(), 0)} {
		if _, err := ParseHello(b); !errors.Is(err, fault.ErrCorrupt) {
			t.Fatalf("%d bytes: %v, want ErrCorrupt", len(b), err)
		}
	}
}

func TestGateBoundsPendingAndAdmitsTheJob(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g := NewGate("test", secretA, 500*time.Millisecond, 4)
	ok := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			g.Go(c, func(c net.Conn) { ok <- struct{}{}; c.Close() })
		}
	}()
	// 20 silent strangers: 4 wait in the gate, the others are closed at once.
	var strangers []net.Conn
	for range 20 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		strangers = append(strangers, c)
	}
	defer func() {
		for _, c := range strangers {
			c.Close()
		}
	}()
	// One of the job's peers, retrying as the mesh and rendezvous do.
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		err = Handshake(c, secretA, true, time.Now().Add(2*time.Second))
		c.Close()
		if err == nil {
			break
		}
		if errors.Is(err, fault.ErrToken) || time.Now().After(deadline) {
			t.Fatalf("the job's peer was not admitted: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-ok:
	case <-time.After(10 * time.Second):
		t.Fatal("the gate admitted the job's peer but never called then()")
	}
	if g.Refused() < 16 || g.Admitted() != 1 {
		t.Fatalf("refused %d (want ≥ 16), admitted %d (want 1)", g.Refused(), g.Admitted())
	}
}
