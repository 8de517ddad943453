package gpu

import (
	"errors"
	"fmt"

	"github.com/ddstore/ddstore/fault"
)

// Sentinel errors; every *Error matches one of them with errors.Is, and
// through it the class of package fault it belongs to (ErrNoDriver and
// ErrNoDevice: fault.ErrNoLibrary; ErrInvalid, ErrClosed, ErrTimeout:
// fault's of the same name).
var (
	// ErrNoDriver: no usable GPU runtime library: none of the sonames
	// could be opened, one lacks a required symbol (driver too old), or
	// its initialisation failed. The text names every library tried and
	// what to install.
	ErrNoDriver = fault.Sentinel("gpu: no usable GPU driver", fault.ErrNoLibrary)
	// ErrNoDevice: the driver works but has no device, or not the one
	// asked for. The text names the index and how many devices there are.
	ErrNoDevice = fault.Sentinel("gpu: no such GPU device", fault.ErrNoLibrary)
	// ErrDriver: a driver call failed; Code and Text are the driver's.
	ErrDriver = errors.New("gpu: driver call failed")
	// ErrOutOfMemory: a device or pinned allocation failed for lack of
	// memory (also matches ErrDriver when the driver said so).
	ErrOutOfMemory = errors.New("gpu: out of memory")
	// ErrInvalid: a bad argument (range outside a buffer, nil stream,
	// unknown runtime name).
	ErrInvalid = fault.Sentinel("gpu: invalid argument", fault.ErrInvalid)
	// ErrClosed: the device, stream, event, buffer or stager was closed.
	ErrClosed = fault.Sentinel("gpu: closed", fault.ErrClosed)
	// ErrTimeout: an event did not complete before the deadline.
	ErrTimeout = fault.Sentinel("gpu: deadline exceeded", fault.ErrTimeout)
	// ErrSharedQueue: no stream independent of the default stream could
	// be made (HIP: every new stream shared the default stream's hardware
	// queue; raise GPU_MAX_HW_QUEUES).
	ErrSharedQueue = errors.New("gpu: no stream independent of the default stream")
)

// Error is a failure of the package or of a driver call.
type Error struct {
	Runtime Runtime // CUDA or HIP; empty before a runtime was chosen
	Device  int     // device index, -1 when none
	Op      string  // driver function (e.g. "cuMemcpyHtoDAsync_v2") or package step
	Code    int     // the driver's result code, 0 for package-level errors
	Text    string  // cuGetErrorString/hipGetErrorString text, or a description
	Detail  string  // what was tried, what to install

	kind error
}

func (e *Error) Error() string {
	s := "gpu: "
	if e.Runtime != "" {
		s += string(e.Runtime)
		if e.Device >= 0 {
			s += fmt.Sprintf(":%d", e.Device)
		}
		s += ": "
	}
	s += e.Op
	if e.Code != 0 {
		s += fmt.Sprintf(": error %d: %s", e.Code, e.Text)
	} else if e.Text != "" {
		s += ": " + e.Text
	}
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

// Unwrap is the error's sentinel, so that errors.Is reaches its fault class.
func (e *Error) Unwrap() error { return e.kind }

// Is matches the error's class, and ErrDriver for any driver code.
func (e *Error) Is(target error) bool {
	if target == e.kind {
		return true
	}
	return target == ErrDriver && e.Code != 0
}

func invalid(rt Runtime, dev int, op, format string, args ...any) error {
	return &Error{Runtime: rt, Device: dev, Op: op, Text: fmt.Sprintf(format, args...), kind: ErrInvalid}
}
