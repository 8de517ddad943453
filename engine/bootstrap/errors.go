package bootstrap

import (
	"errors"

	"github.com/ddstore/ddstore/fault"
)

// Sentinel classes. Every error an Exchanger returns is a *fault.Error
// (errors.As) whose Op names the method and the collective (`tcp connect`,
// `pmi allgather "fabric-addr"`), whose Ranks are the ranks concerned and
// whose Kind is one of these (errors.Is). They are fault's sentinels, so
// engine.ErrTimeout and bootstrap.ErrTimeout are the same class.
var (
	// ErrTimeout: a deadline passed; the error's Ranks are the ranks that
	// never arrived.
	ErrTimeout = fault.ErrTimeout
	// ErrToken: a peer presented a different job token; it belongs to another job.
	ErrToken = fault.ErrToken
	// ErrMismatch: ranks called different collectives (tag or sequence number),
	// or disagree on the world size.
	ErrMismatch = fault.ErrMismatch
	// ErrPeerLost: a peer's connection dropped or it closed its exchanger
	// (fault.ErrPeerDead).
	ErrPeerLost = fault.ErrPeerDead
	// ErrClosed: the exchanger was closed, or broken by an earlier failure.
	ErrClosed = fault.ErrClosed
	// ErrEnv: the launcher's environment is missing or inconsistent.
	ErrEnv = fault.ErrEnv
	// ErrTooLarge: a blob or message exceeds MaxMessage.
	ErrTooLarge = fault.ErrTooLarge
)

// MaxMessage bounds one rank's blob and the gathered result of one collective.
const MaxMessage = 1 << 30

// opName is the Op of a method's operation: "tcp connect".
func opName(method, op string) string {
	if method == "" {
		return op
	}
	return method + " " + op
}

// sideOf is the side of a failure of class kind: the peers' (a timeout
// waiting for them, a lost peer, another job's token), this rank's own
// (its environment, a closed exchanger, an oversized blob), or neither
// (ranks that disagree).
func sideOf(kind error) fault.Side {
	switch {
	case errors.Is(kind, ErrTimeout), errors.Is(kind, ErrPeerLost), errors.Is(kind, ErrToken):
		return fault.Remote
	case errors.Is(kind, ErrEnv), errors.Is(kind, ErrClosed), errors.Is(kind, ErrTooLarge):
		return fault.Local
	}
	return fault.Unknown
}
