package engine

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// The Ctrl-C holder shell must inherit no descriptor but its own
// stdin/stdout/stderr: closeOnExecAbove marks every other one, including
// those opened without close-on-exec (as Hydra's proxy leaves them).
func TestCloseOnExecAbove(t *testing.T) {
	var fds [2]int
	if err := unix.Pipe(fds[:]); err != nil { // no O_CLOEXEC
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	for _, fd := range fds {
		if f, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); f&unix.FD_CLOEXEC != 0 {
			t.Fatalf("fd %d: close-on-exec before the call", fd)
		}
	}
	closeOnExecAbove(2)
	for _, fd := range fds {
		if f, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || f&unix.FD_CLOEXEC == 0 {
			t.Errorf("fd %d: flags %#x, %v; want close-on-exec", fd, f, err)
		}
	}
	if f, _ := unix.FcntlInt(os.Stderr.Fd(), unix.F_GETFD, 0); f&unix.FD_CLOEXEC != 0 {
		t.Errorf("stderr marked close-on-exec")
	}
}
