package launch

import "syscall"

// sysProcAttr puts a rank in its own process group and kills it if the
// launcher itself dies (SIGKILL, a batch system's time limit).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
