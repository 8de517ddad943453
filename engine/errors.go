package engine

import (
	"fmt"

	"github.com/ddstore/ddstore/fault"
)

// Error is ddstore's one error type (package fault): every error the store
// returns is an *Error or wraps one. Op names the call ("GetBatch",
// "Add", `allgather "x"`), Var the variable, Ranks the ranks concerned,
// Side whether the failure is this rank's own or the peer's, Kind the
// sentinel class below and Err the cause. Test the class with errors.Is
// and read the fields with errors.As or fault.RanksOf, fault.IsRemote.
type Error = fault.Error

// Sentinel classes (fault's, so the same class matches whichever layer
// returned it); test with errors.Is.
var (
	// ErrIndex: a row index or range outside [0, global rows) of the group,
	// or an Update outside the local shard.
	ErrIndex = fault.ErrIndex
	// ErrUnknownVar: no variable of that name on this store.
	ErrUnknownVar = fault.ErrUnknownVar
	// ErrShortBuffer: the destination holds fewer bytes than the rows asked.
	ErrShortBuffer = fault.ErrShortBuffer
	// ErrDType: an invalid data type, row size or data length.
	ErrDType = fault.ErrDType
	// ErrMismatch: ranks disagree in a collective call (name, dtype, row size).
	ErrMismatch = fault.ErrMismatch
	// ErrExists: Add or Init of a variable that already exists.
	ErrExists = fault.ErrExists
	// ErrPeerDead: the rank that owns the rows has exited or is unreachable.
	ErrPeerDead = fault.ErrPeerDead
	// ErrClosed: the store or reader was closed.
	ErrClosed = fault.ErrClosed
	// ErrTimeout: a collective or a read did not finish before its deadline.
	ErrTimeout = fault.ErrTimeout
	// ErrInvalid: an invalid option or argument.
	ErrInvalid = fault.ErrInvalid
)

// errf returns an *Error of class kind for operation op on variable name
// ("" when none).
func errf(kind error, op, name, format string, args ...any) error {
	return &fault.Error{Op: op, Var: name, Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// wrapf returns an *Error for operation op on variable name with cause
// err; kind is nil when the cause carries the class.
func wrapf(kind error, op, name string, err error, format string, args ...any) error {
	return &fault.Error{Op: op, Var: name, Kind: kind, Detail: fmt.Sprintf(format, args...), Err: err}
}
