//go:build !linux

package launch

import "syscall"

// sysProcAttr puts a rank in its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
