// Package auth owns the challenge–response that every control connection of
// a ddstore job runs first: both ends prove that they know the job's secret,
// with fresh nonces both ways (HMAC-SHA256), and the secret never crosses the
// wire. It knows nothing of ranks or frames above it; the rendezvous, the
// mesh and the control plane call Handshake on a new connection before they
// read anything else from it.
//
// The exchange (fixed sizes, so that a stranger can make neither end
// allocate nor wait on a length):
//
//	initiator → hello{magic "DDSA", version, flags, nonce nI}   (38 bytes)
//	responder → hello{magic "DDSA", version, flags, nonce nR}   (38 bytes)
//	initiator → HMAC(secret, "ddstore-auth-1 initiator" ‖ nI ‖ nR)
//	responder → 0x00 ‖ HMAC(secret, "ddstore-auth-1 responder" ‖ nR ‖ nI)
//	            or 0x01 (refused: the initiator's proof was wrong)
//
// The responder (the side that accepted the connection) proves nothing
// before the initiator has proved itself, so a stranger that connects to a
// listener learns nothing derived from the secret (no offline guessing of a
// weak token). The role labels keep a proof from being reflected back.
//
// An empty secret is the explicit "no authentication" mode that a job runs
// in only when its configuration says so (configs: DDSTORE_INSECURE): both
// ends then exchange hellos only, and a side with a secret refuses a side
// without one, and the other way round.
//
// What it does not do: encrypt, or protect a connection after the handshake
// from someone who can read and inject packets on the path.
package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/ddstore/ddstore/fault"
)

// Wire constants.
const (
	Magic      = "DDSA"
	Version    = 1
	NonceLen   = 32
	HelloLen   = 4 + 1 + 1 + NonceLen
	ProofLen   = sha256.Size
	flagSecret = 1

	statusOK      = 0
	statusRefused = 1

	labelInitiator = "ddstore-auth-1 initiator"
	labelResponder = "ddstore-auth-1 responder"
)

// MinSecret is the shortest secret Handshake accepts (bytes); an empty one
// is the no-authentication mode.
const MinSecret = 16

// Hello is one side's first message.
type Hello struct {
	Version   uint8
	HasSecret bool
	Nonce     [NonceLen]byte
}

// Encode is h on the wire (HelloLen bytes).
func (h Hello) Encode() []byte {
	b := make([]byte, 0, HelloLen)
	b = append(b, Magic...)
	b = append(b, h.Version)
	var f byte
	if h.HasSecret {
		f |= flagSecret
	}
	b = append(b, f)
	return append(b, h.Nonce[:]...)
}

// ParseHello decodes a hello; anything but exactly HelloLen bytes with the
// magic, a known version and known flags is an error (fault.ErrCorrupt).
func ParseHello(b []byte) (Hello, error) {
	var h Hello
	switch {
	case len(b) != HelloLen:
		return h, corrupt("hello of %d bytes, want %d", len(b), HelloLen)
	case string(b[:4]) != Magic:
		return h, corrupt("not a ddstore peer (magic %q)", b[:4])
	case b[4] != Version:
		return h, corrupt("peer speaks auth version %d, this build %d", b[4], Version)
	case b[5]&^flagSecret != 0:
		return h, corrupt("unknown flags %#x", b[5])
	}
	h.Version, h.HasSecret = b[4], b[5]&flagSecret != 0
	copy(h.Nonce[:], b[6:])
	return h, nil
}

func corrupt(format string, args ...any) error {
	return &fault.Error{Op: "auth handshake", Kind: fault.ErrCorrupt, Side: fault.Remote, Detail: fmt.Sprintf(format, args...)}
}

// Proof is what the side in role (initiator or not) sends: an HMAC over
// its own nonce and the peer's, under the role's label.
func Proof(secret []byte, initiator bool, mine, theirs [NonceLen]byte) [ProofLen]byte {
	label := labelResponder
	if initiator {
		label = labelInitiator
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write(mine[:])
	m.Write(theirs[:])
	var p [ProofLen]byte
	m.Sum(p[:0])
	return p
}

// Check reports whether proof is the one the side in role initiator must
// send (constant time).
func Check(secret []byte, initiator bool, sender, receiver [NonceLen]byte, proof []byte) bool {
	want := Proof(secret, initiator, sender, receiver)
	return hmac.Equal(want[:], proof)
}

// Handshake proves to the peer on c, and checks that the peer proves,
// knowledge of secret, with fresh nonces both ways (HMAC-SHA256); the
// secret never crosses the wire. initiator is the side that dialled.
// Every read and write ends by deadline. On return c has no deadline set.
//
// Errors (*fault.Error, Side Remote unless said): fault.ErrToken when the
// peer's proof is wrong, it refused ours, or one side has a secret and the
// other none; fault.ErrCorrupt for a peer that does not speak this protocol;
// fault.ErrTimeout when the deadline passed; fault.ErrInvalid (Local) for a
// secret shorter than MinSecret; else the connection's own error.
func Handshake(c net.Conn, secret []byte, initiator bool, deadline time.Time) error {
	if len(secret) > 0 && len(secret) < MinSecret {
		return &fault.Error{Op: "auth handshake", Kind: fault.ErrInvalid, Side: fault.Local,
			Detail: fmt.Sprintf("secret of %d bytes is shorter than %d", len(secret), MinSecret)}
	}
	c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	err := handshake(c, secret, initiator)
	if err == nil {
		return nil
	}
	var fe *fault.Error
	if errors.As(err, &fe) {
		fe.Detail = fmt.Sprintf("peer %s: %s", remote(c), fe.Detail)
		return fe
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &fault.Error{Op: "auth handshake", Kind: fault.ErrTimeout, Side: fault.Remote,
			Detail: fmt.Sprintf("peer %s did not complete the handshake in time", remote(c)), Err: err}
	}
	return &fault.Error{Op: "auth handshake", Side: fault.Remote,
		Detail: fmt.Sprintf("connection to %s failed during the handshake", remote(c)), Err: err}
}

func remote(c net.Conn) string {
	if a := c.RemoteAddr(); a != nil {
		return a.String()
	}
	return "?"
}

func refused(format string, args ...any) error {
	return &fault.Error{Op: "auth handshake", Kind: fault.ErrToken, Side: fault.Remote, Detail: fmt.Sprintf(format, args...)}
}

func handshake(c net.Conn, secret []byte, initiator bool) error {
	mine := Hello{Version: Version, HasSecret: len(secret) > 0}
	if _, err := rand.Read(mine.Nonce[:]); err != nil {
		return err
	}
	// The initiator speaks first; the responder answers only a valid hello
	// (and neither side waits on the other's write, even on a net.Pipe).
	if initiator {
		if _, err := c.Write(mine.Encode()); err != nil {
			return err
		}
	}
	var buf [HelloLen]byte
	if _, err := io.ReadFull(c, buf[:]); err != nil {
		return err
	}
	theirs, err := ParseHello(buf[:])
	if err != nil {
		return err
	}
	if !initiator {
		if _, err := c.Write(mine.Encode()); err != nil {
			return err
		}
	}
	switch {
	case mine.HasSecret && !theirs.HasSecret:
		return refused("peer runs without a job secret (insecure mode) and this side has one")
	case !mine.HasSecret && theirs.HasSecret:
		return refused("peer has a job secret and this side runs without one (insecure mode)")
	case !mine.HasSecret:
		return nil
	case theirs.Nonce == mine.Nonce:
		return refused("peer echoed this side's nonce")
	}
	var proof [1 + ProofLen]byte
	if initiator {
		p := Proof(secret, true, mine.Nonce, theirs.Nonce)
		if _, err := c.Write(p[:]); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, proof[:1]); err != nil {
			return err
		}
		switch proof[0] {
		case statusOK:
		case statusRefused:
			return refused("peer refused this side's proof: another job's secret (check DDSTORE_TOKEN or the token file)")
		default:
			return corrupt("unknown handshake status %d", proof[0])
		}
		if _, err := io.ReadFull(c, proof[1:]); err != nil {
			return err
		}
		if !Check(secret, false, theirs.Nonce, mine.Nonce, proof[1:]) {
			return refused("peer does not know this job's secret")
		}
		return nil
	}
	if _, err := io.ReadFull(c, proof[1:]); err != nil {
		return err
	}
	if !Check(secret, true, theirs.Nonce, mine.Nonce, proof[1:]) {
		c.Write([]byte{statusRefused})
		return refused("peer does not know this job's secret")
	}
	p := Proof(secret, false, mine.Nonce, theirs.Nonce)
	proof[0] = statusOK
	copy(proof[1:], p[:])
	_, err = c.Write(proof[:])
	return err
}
