package fabric

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fault"
)

const envSignalHelper = "DDSTORE_TEST_SIGNAL_AFTER_LOAD"

// TestLoadKeepsSignalHandling: a process that loaded libfabric and gets
// SIGINT or SIGTERM dies by that signal, as Go's runtime makes it do.
// Before, a library loaded with libfabric (libinfinipath) had put its own
// handlers in place, and the process exited with code 1: launchers then
// reported a failure instead of an interrupt.
func TestLoadKeepsSignalHandling(t *testing.T) {
	if sig := os.Getenv(envSignalHelper); sig != "" {
		if err := loadLibrary(); err != nil {
			os.Exit(3)
		}
		s := map[string]syscall.Signal{"INT": syscall.SIGINT, "TERM": syscall.SIGTERM}[sig]
		syscall.Kill(os.Getpid(), s)
		time.Sleep(10 * time.Second)
		os.Exit(4) // the signal did not end the process
	}
	if err := loadLibrary(); errors.Is(err, fault.ErrNoLibrary) {
		t.Skip(err)
	}
	for name, want := range map[string]syscall.Signal{"INT": syscall.SIGINT, "TERM": syscall.SIGTERM} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLoadKeepsSignalHandling$")
		cmd.Env = append(os.Environ(), envSignalHelper+"="+name)
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("SIG%s: the helper ended with %v, want death by the signal", name, err)
		}
		ws := ee.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != want {
			t.Errorf("SIG%s after loading libfabric: exit status %d (signaled %v), want death by %v", name, ws.ExitStatus(), ws.Signaled(), want)
		}
	}
}
