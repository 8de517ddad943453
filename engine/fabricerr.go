package engine

import (
	"errors"

	"github.com/ddstore/ddstore/fault"
)

// fabricErrRank is the peer rank a fabric error names, or -1.
func fabricErrRank(err error) int { return fault.RankOf(err) }

// isPeerFailure reports whether a fabric error means the peer is gone: only
// a Remote error (the peer or the path to it failed) of class ErrPeerDead.
// A Local failure (this rank's registration, memory, endpoint or CQ) never
// marks a healthy peer dead, whichever peer the failed op was for.
func isPeerFailure(err error) bool {
	return fault.IsRemote(err) && errors.Is(err, fault.ErrPeerDead)
}
