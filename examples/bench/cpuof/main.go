// Command cpuof runs a command and prints, after its output, the CPU time
// (user + system, µs, from wait4's rusage) that it and the children it
// waited for used: a figure that a loaded machine inflates far less than
// wall time, since time spent waiting for a core is not counted.
//
//	go run ./examples/bench/cpuof CMD [ARG...]   ->  ... "cpuof: 123456 us"
//
// examples/bench/vsrev.sh uses it for METRIC=cpu-ns/op.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cpuof CMD [ARG...]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, "cpuof:", err)
		os.Exit(1)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	us := ru.Utime.Sec*1e6 + ru.Utime.Usec + ru.Stime.Sec*1e6 + ru.Stime.Usec
	fmt.Printf("cpuof: %d us\n", us)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpuof:", err)
		os.Exit(1)
	}
}
