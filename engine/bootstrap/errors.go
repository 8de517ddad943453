package bootstrap

import (
	"errors"

	"github.com/ddstore/ddstore/fault"
)

// Every error an Exchanger returns is a *fault.Error (errors.As) whose Op
// names the method and the collective (`tcp connect`, `pmi allgather
// "fabric-addr"`), whose Ranks are the ranks concerned and whose Kind is one
// of fault's sentinels (errors.Is):
//   - fault.ErrTimeout: a deadline passed; Ranks are the ranks that never arrived;
//   - fault.ErrToken: a peer presented another job's token;
//   - fault.ErrMismatch: ranks called different collectives (tag or sequence
//     number), or disagree on the world size;
//   - fault.ErrPeerDead: a peer's connection dropped or it closed its exchanger;
//   - fault.ErrClosed: the exchanger was closed, or broken by an earlier failure;
//   - fault.ErrEnv: the launcher's environment is missing or inconsistent;
//   - fault.ErrTooLarge: a blob or message exceeds MaxMessage.

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
	case errors.Is(kind, fault.ErrTimeout), errors.Is(kind, fault.ErrPeerDead), errors.Is(kind, fault.ErrToken):
		return fault.Remote
	case errors.Is(kind, fault.ErrEnv), errors.Is(kind, fault.ErrClosed), errors.Is(kind, fault.ErrTooLarge):
		return fault.Local
	}
	return fault.Unknown
}
