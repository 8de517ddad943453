package engine

import (
	"errors"

	"github.com/ddstore/ddstore/fabric"
)

// fabricErrRank is the peer rank a fabric error names, or -1.
func fabricErrRank(err error) int {
	var fe *fabric.Error
	if errors.As(err, &fe) {
		return fe.Peer
	}
	return -1
}

// isPeerFailure reports whether a fabric error means the peer is gone
// (the connection or its memory registration vanished).
func isPeerFailure(err error) bool {
	return errors.Is(err, fabric.ErrPeer)
}
