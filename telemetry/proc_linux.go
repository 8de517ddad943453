package telemetry

import (
	"bytes"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// procStart returns the start time (clock ticks since boot, field 22 of
// /proc/<pid>/stat) of pid and whether it is a zombie. ok is false when
// /proc cannot tell (no such pid, or /proc unreadable).
func procStart(pid int) (ticks uint64, zombie bool, ok bool) {
	if pid <= 0 {
		return 0, false, false
	}
	// One open and read into a stack buffer: a viewer checks every
	// segment's writer each refresh.
	var pb [32]byte
	path := strconv.AppendInt(append(pb[:0], "/proc/"...), int64(pid), 10)
	path = append(path, "/stat"...)
	fd, err := unix.Open(unsafe.String(&path[0], len(path)), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false, false
	}
	var buf [1024]byte
	n, err := unix.Read(fd, buf[:])
	unix.Close(fd)
	if err != nil || n <= 0 {
		return 0, false, false
	}
	b := buf[:n]
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
	t, err := strconv.ParseUint(unsafe.String(&f[19][0], len(f[19])), 10, 64)
	if err != nil {
		return 0, false, false
	}
	return t, f[0][0] == 'Z' || f[0][0] == 'X', true
}
