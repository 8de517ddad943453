package fabric

import (
	"syscall"
	"testing"
)

// TestCQErrLostPath: which error completions mark the peer dead (reads
// fail over) and which leave it alive. The first case is the one
// TestDeviceFailover/path=tcp/gpu=hip met when the owner was killed:
// tcp cancelled the read with the provider's errno ENOENT, which read as
// "alive" and failed the call instead of failing over.
func TestCQErrLostPath(t *testing.T) {
	for _, c := range []struct {
		name       string
		code, prov int
		lost       bool
	}{
		{"cancelled, provider ENOENT (the owner killed)", int(syscall.ECANCELED), int(syscall.ENOENT), true},
		{"cancelled, provider ENOTCONN", int(syscall.ECANCELED), int(syscall.ENOTCONN), true},
		{"cancelled, no provider errno", -int(syscall.ECANCELED), 0, true},
		{"connection reset", int(syscall.ECONNRESET), 0, true},
		{"I/O error, provider EPIPE", int(syscall.EIO), int(syscall.EPIPE), true},
		{"bad key: access", int(syscall.EACCES), 0, false},
		{"bad range: invalid", int(syscall.EINVAL), 0, false},
		{"out of memory here", int(syscall.ENOMEM), 0, false},
		{"timed out", int(syscall.ETIMEDOUT), 0, false},
	} {
		if got := cqErrLostPath(c.code, c.prov); got != c.lost {
			t.Errorf("%s (code %d, provider %d): lost path %v, want %v", c.name, c.code, c.prov, got, c.lost)
		}
	}
}
