// Package segtest owns what ddtop's tests need to put a telemetry segment
// in a given state: the pid of a real process that has exited (an exited
// rank) and a heartbeat set back in time (a hung, stale rank).
package segtest

import (
	"encoding/binary"
	"os"
	"os/exec"
	"testing"
	"time"
)

// ExitedPid is the pid of a process that has exited and been reaped.
func ExitedPid(t testing.TB) int {
	t.Helper()
	child := exec.Command("true")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	return child.Process.Pid
}

// SetHeartbeat stores heartbeat time at into the segment at path, at the
// documented header offset 192 (see telemetry/layout.go): a time a minute
// ago makes its writer look hung.
func SetHeartbeat(t testing.TB, path string, at time.Time) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(at.UnixNano()))
	if _, err := f.WriteAt(b[:], 192); err != nil {
		t.Fatal(err)
	}
}
