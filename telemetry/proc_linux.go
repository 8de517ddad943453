package telemetry

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// procStart returns the start time (clock ticks since boot, field 22 of
// /proc/<pid>/stat) of pid and whether it is a zombie. ok is false when
// /proc cannot tell (no such pid, or /proc unreadable).
func procStart(pid int) (ticks uint64, zombie bool, ok bool) {
	if pid <= 0 {
		return 0, false, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false, false
	}
	// "pid (comm) S ppid ..." — comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, false, false
	}
	f := bytes.Fields(b[i+2:])
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return 0, false, false
	}
	t, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, false, false
	}
	return t, f[0][0] == 'Z' || f[0][0] == 'X', true
}
