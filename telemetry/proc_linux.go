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

// openPidfd returns a pidfd for the writer pid whose start time is start
// (0: unknown), or -1 when none can be had (no pidfd support, no fds
// left, or another process's pid). exited is true when the writer is
// known to be gone: no such pid, a zombie, or a reused pid.
func openPidfd(pid int, start uint64) (fd int, exited bool) {
	if pid <= 0 {
		return -1, false
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, err == unix.ESRCH
	}
	// The fd names whatever process has the pid now: it is the writer
	// only if its start time (read after the open) is the writer's.
	if t, zombie, ok := procStart(pid); ok && (zombie || start != 0 && t != start) {
		unix.Close(fd)
		return -1, true
	}
	return fd, false
}

// pollFd is one pidfd to poll.
type pollFd = unix.PollFd

// pollExited polls pidfds without blocking; then exitedEvent tells, per
// fd, whether its process has exited. ok is false when the poll failed.
func pollExited(fds []pollFd) (ok bool) {
	for i := range fds {
		fds[i].Events, fds[i].Revents = unix.POLLIN, 0
	}
	for {
		_, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err == nil
	}
}

// exitedEvent reports whether a polled pidfd says its process exited.
func exitedEvent(fd *pollFd) bool { return fd.Revents&unix.POLLIN != 0 }

func closeFd(fd int) { unix.Close(fd) }

// pidfdWorks reports whether this process may open pidfds.
func pidfdWorks() bool {
	fd, err := unix.PidfdOpen(unix.Getpid(), 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}
