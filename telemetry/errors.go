package telemetry

import (
	"errors"

	"github.com/ddstore/ddstore/fault"
)

// Sentinel errors. Errors returned by this package wrap one of these, so
// callers test them with errors.Is; the wrapping text names the file and
// the field that was wrong. Those that belong to a class of package fault
// match it too: a foreign, newer, truncated or corrupt segment is
// fault.ErrCorrupt; ErrClosed and ErrOptions are fault.ErrClosed and
// fault.ErrInvalid.
var (
	// ErrForeign: the file does not start with this format's magic.
	ErrForeign = fault.Sentinel("telemetry: not a ddstore telemetry segment", fault.ErrCorrupt)
	// ErrNotReady: the segment's version word is still 0, i.e. its writer
	// has not finished creating it.
	ErrNotReady = errors.New("telemetry: segment not ready (version 0)")
	// ErrVersion: the segment was written by a newer format version.
	ErrVersion = fault.Sentinel("telemetry: unsupported segment format version", fault.ErrCorrupt)
	// ErrTruncated: the file is smaller than its header says.
	ErrTruncated = fault.Sentinel("telemetry: segment truncated", fault.ErrCorrupt)
	// ErrCorrupt: the header holds impossible sizes, counts or offsets.
	ErrCorrupt = fault.Sentinel("telemetry: segment corrupt", fault.ErrCorrupt)
	// ErrInUse: Create found a segment of the same job and rank whose
	// writer is still alive.
	ErrInUse = errors.New("telemetry: segment in use by a live process")
	// ErrClosed: the writer or segment was closed.
	ErrClosed = fault.Sentinel("telemetry: closed", fault.ErrClosed)
	// ErrFull: AddVar found no free variable slot (see WriterOptions.MaxVars).
	ErrFull = errors.New("telemetry: variable table full")
	// ErrOptions: invalid WriterOptions.
	ErrOptions = fault.Sentinel("telemetry: invalid options", fault.ErrInvalid)
)
