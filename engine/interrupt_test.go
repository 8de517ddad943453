package engine

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func init() {
	// endbysignal: a process that handles DDT_SIG itself (as Python's
	// handler of SIGINT, or the Go runtime's after signal.Notify, only
	// notes it) ends by it through EndBySignal.
	scenarios["endbysignal"] = func(w *worker) error {
		n, _ := strconv.Atoi(w.param("SIG", "2"))
		signal.Notify(make(chan os.Signal, 1), syscall.Signal(n))
		EndBySignal(unix.Signal(n))
		return errors.New("EndBySignal returned")
	}
}

// TestEndBySignal: the parent sees the process killed by the signal (not
// EndBySignal's fallback exit), even though it had a handler for it.
func TestEndBySignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"=endbysignal", "DDT_SIG="+strconv.Itoa(int(sig)))
		out, err := cmd.CombinedOutput()
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != sig {
			t.Errorf("%v: %v (%v), output %q; want killed by %v", sig, err, cmd.ProcessState, out, sig)
		}
	}
}

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
