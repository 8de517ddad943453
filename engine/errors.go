package engine

import "errors"

// Sentinel errors. Every error returned by the store wraps one of these and
// names the cause (variable, index, rank, sizes); test with errors.Is.
var (
	// ErrIndex: a row index or range outside [0, global rows) of the group,
	// or an Update outside the local shard.
	ErrIndex = errors.New("ddstore: index out of range")
	// ErrUnknownVar: no variable of that name on this store.
	ErrUnknownVar = errors.New("ddstore: unknown variable")
	// ErrShortBuffer: the destination holds fewer bytes than the rows asked.
	ErrShortBuffer = errors.New("ddstore: destination buffer too short")
	// ErrDType: an invalid data type, row size or data length.
	ErrDType = errors.New("ddstore: invalid data type or row size")
	// ErrMismatch: ranks disagree in a collective call (name, dtype, row size).
	ErrMismatch = errors.New("ddstore: ranks disagree in collective call")
	// ErrExists: Add or Init of a variable that already exists.
	ErrExists = errors.New("ddstore: variable already exists")
	// ErrPeerDead: the rank that owns the rows has exited or is unreachable.
	ErrPeerDead = errors.New("ddstore: peer rank dead")
	// ErrClosed: the store or reader was closed.
	ErrClosed = errors.New("ddstore: store closed")
	// ErrTimeout: a collective or a read did not finish before its deadline.
	ErrTimeout = errors.New("ddstore: timeout")
)
