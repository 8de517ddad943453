package fabric

import (
	"errors"
	"fmt"
)

// Sentinel errors; every *Error matches one or more of them with errors.Is.
var (
	ErrTimeout    = errors.New("fabric: deadline exceeded")
	ErrPeer       = errors.New("fabric: read from peer failed")
	ErrNoProvider = errors.New("fabric: provider not available")
	ErrNoDomain   = errors.New("fabric: domain not available")
	ErrInvalid    = errors.New("fabric: invalid argument")
	ErrClosed     = errors.New("fabric: closed")
	// ErrRejected: a ReadGather target refused an entry (unknown key,
	// range outside the exported region, reply too large). The peer is
	// alive; the error names it and the entry.
	ErrRejected = errors.New("fabric: gather request rejected by the target")
)

// Error is a libfabric (or fabric package) failure.
type Error struct {
	Op     string // libfabric call or package step, e.g. "fi_read", "fi_cq_readerr", "select provider"
	Code   int    // positive libfabric/errno code (FI_ETIMEDOUT for deadlines)
	Text   string // fi_strerror(Code), or a description for package-level errors
	Peer   int    // rank of the peer involved, -1 when none
	Index  int    // index of the failing op in the batch (read errors only)
	Detail string // op and provider detail (fi_cq_strerror text, address, key)

	kind error // explicit sentinel, if any
}

func (e *Error) Error() string {
	s := "fabric: " + e.Op
	if e.Peer >= 0 {
		s += fmt.Sprintf(" (peer rank %d)", e.Peer)
	}
	s += ": " + e.Text
	if e.Detail != "" {
		s += " [" + e.Detail + "]"
	}
	return s
}

// Is maps the error onto the package sentinels. Any read error that names
// a peer matches ErrPeer; deadline failures also match ErrTimeout.
func (e *Error) Is(target error) bool {
	if e.kind != nil && target == e.kind {
		return true
	}
	switch target {
	case ErrTimeout:
		return e.Code == codeTimedOut
	case ErrPeer:
		return e.Peer >= 0 && e.kind != ErrInvalid && e.kind != ErrClosed && e.kind != ErrRejected
	}
	return false
}

const codeTimedOut = 110 // FI_ETIMEDOUT == ETIMEDOUT

var errClosedReader = &Error{Op: "read", Code: 22, Text: "reader is closed", Peer: -1, kind: ErrClosed}

func badPeer(i int) error {
	return &Error{Op: "read", Code: 22, Peer: -1, Index: i, kind: ErrInvalid,
		Text: fmt.Sprintf("op %d: peer handle not from this reader's AddPeer", i)}
}

func badDst(i, rank, n int, max uint64) error {
	if n == 0 {
		return &Error{Op: "read", Code: 22, Peer: rank, Index: i, kind: ErrInvalid,
			Text: fmt.Sprintf("op %d: zero-length Dst", i)}
	}
	return &Error{Op: "read", Code: 22, Peer: rank, Index: i, kind: ErrInvalid,
		Text: fmt.Sprintf("op %d: Dst of %d bytes exceeds the provider's max_msg_size %d", i, n, max)}
}
