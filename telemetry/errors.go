package telemetry

import "errors"

// Sentinel errors. Errors returned by this package wrap one of these, so
// callers test them with errors.Is; the wrapping text names the file and
// the field that was wrong.
var (
	// ErrForeign: the file does not start with this format's magic.
	ErrForeign = errors.New("telemetry: not a ddstore telemetry segment")
	// ErrNotReady: the segment's version word is still 0, i.e. its writer
	// has not finished creating it.
	ErrNotReady = errors.New("telemetry: segment not ready (version 0)")
	// ErrVersion: the segment was written by a newer format version.
	ErrVersion = errors.New("telemetry: unsupported segment format version")
	// ErrTruncated: the file is smaller than its header says.
	ErrTruncated = errors.New("telemetry: segment truncated")
	// ErrCorrupt: the header holds impossible sizes, counts or offsets.
	ErrCorrupt = errors.New("telemetry: segment corrupt")
	// ErrInUse: Create found a segment of the same job and rank whose
	// writer is still alive.
	ErrInUse = errors.New("telemetry: segment in use by a live process")
	// ErrClosed: the writer or segment was closed.
	ErrClosed = errors.New("telemetry: closed")
	// ErrFull: AddVar found no free variable slot (see WriterOptions.MaxVars).
	ErrFull = errors.New("telemetry: variable table full")
	// ErrOptions: invalid WriterOptions.
	ErrOptions = errors.New("telemetry: invalid options")
)
