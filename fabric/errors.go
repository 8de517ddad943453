package fabric

import (
	"fmt"
	"syscall"

	"github.com/ddstore/ddstore/fault"
)

// Every error this package returns is a *fault.Error: Op names the
// libfabric call or package step ("fi_read", "fi_mr_reg(local)", "select
// provider"), Ranks the peer involved, Side says whose failure it is (Local:
// this process's registration, memory, endpoint or CQ; Remote: the peer or
// the path to it), Kind the sentinel class, Detail what happened, and Err,
// where libfabric returned a code, an Errno with fi_strerror's text.
//
// Kind is one of fault's sentinels (errors.Is): ErrTimeout, ErrPeerDead,
// ErrNoProvider, ErrNoDomain, ErrNoLibrary, ErrInvalid, ErrClosed, or
// ErrRejected (a ReadGather target refused an entry: unknown key, range
// outside the exported region, reply too large; the peer is alive, and the
// error names it and the entry).

// Errno is a positive libfabric (or errno) code. It is the Err of a
// *fault.Error whenever libfabric returned one; its text is fi_strerror's.
type Errno int

func (e Errno) Error() string { return fmt.Sprintf("%s (fi errno %d)", strerror(int(e)), int(e)) }

// errno makes a libfabric return code (negative or positive) an Errno.
func errno(rc int) Errno {
	if rc < 0 {
		rc = -rc
	}
	return Errno(rc)
}

// localErr is a failure of this process's own resources.
func localErr(op string, rc int, format string, args ...any) *fault.Error {
	e := &fault.Error{Op: op, Side: fault.Local, Detail: fmt.Sprintf(format, args...)}
	if rc != 0 {
		e.Err = errno(rc)
	}
	return e
}

// invalid is an argument error (Side unknown: nobody's resources failed).
func invalid(op string, ranks []int, format string, args ...any) *fault.Error {
	return &fault.Error{Op: op, Ranks: ranks, Kind: fault.ErrInvalid, Detail: fmt.Sprintf(format, args...)}
}

func rankList(rank int) []int {
	if rank < 0 {
		return nil
	}
	return []int{rank}
}

// pathLost reports whether a code says the connection to the peer is gone
// (the peer died, or the path to it did). shm reports a vanished peer as
// EIO (and an access outside its memory too: CMA cannot tell them apart).
func pathLost(code int) bool {
	if code < 0 {
		code = -code
	}
	switch syscall.Errno(code) {
	case syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EHOSTUNREACH,
		syscall.ENETUNREACH, syscall.ENOTCONN, syscall.EPIPE, syscall.ENETDOWN, syscall.EHOSTDOWN,
		syscall.EIO, syscall.ESHUTDOWN, syscall.EREMOTEIO:
		return true
	}
	return false
}

// cqErrLostPath reports whether an error completion (code, and the
// provider's own errno) says the path to the peer is lost, so that the
// peer counts as dead and reads fail over; an access error (a bad key or
// range) leaves it alive. tcp cancels the ops of a connection the peer
// dropped (ECANCELED, usually with provider ENOTCONN, not always with it):
// a cancelled op is a lost path too. This reader never cancels an op
// itself before the error entry is read (dd_drive records the entry, then
// dd_batch_fail closes the endpoint), so the cancel is the provider's.
func cqErrLostPath(code, provErrno int) bool {
	return pathLost(code) || pathLost(provErrno) || code == int(syscall.ECANCELED) || code == -int(syscall.ECANCELED)
}

// localCode reports whether a code returned while posting says this
// process's own resources failed (memory, queue, descriptor).
func localCode(code int) bool {
	switch syscall.Errno(code) {
	case syscall.ENOMEM, syscall.EINVAL, syscall.EBADF, syscall.ENOSPC, syscall.EOVERFLOW, syscall.ENOSYS, syscall.EOPNOTSUPP:
		return true
	}
	return false
}

var errClosedReader = &fault.Error{Op: "read", Kind: fault.ErrClosed, Detail: "reader is closed"}

func badPeer(i int) error {
	return invalid("read", nil, "op %d: peer handle not from this reader's AddPeer", i)
}

func badDst(i, rank, n int, max uint64) error {
	if n == 0 {
		return invalid("read", rankList(rank), "op %d: zero-length Dst", i)
	}
	return invalid("read", rankList(rank), "op %d: Dst of %d bytes exceeds the provider's max_msg_size %d", i, n, max)
}
