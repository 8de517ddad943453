//go:build !linux

package telemetry

func procStart(pid int) (ticks uint64, zombie bool, ok bool) { return 0, false, false }

func openPidfd(pid int, start uint64) (fd int, exited bool) { return -1, false }

// pollFd stands for unix.PollFd where there are no pidfds.
type pollFd struct {
	Fd      int32
	Events  int16
	Revents int16
}

func pollExited(fds []pollFd) bool { return false }

func exitedEvent(fd *pollFd) bool { return false }

func closeFd(fd int) {}

func pidfdWorks() bool { return false }
