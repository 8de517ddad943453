package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Throttling a rank: a watchdog child process stops its parent with
// SIGSTOP for duty of every period and continues it with SIGCONT, as a
// CPU quota (a throttled node, a noisy neighbour) does. While stopped, the
// rank's fabric progress thread serves no reads either, so its peers see
// it as a straggler target. The child is this same program, started with
// envThrottle set; it always continues its parent before it exits.

// envThrottle carries "pid period_ns duty" to the watchdog child.
const envThrottle = "DDTRAIN_THROTTLE"

type throttleFlags struct {
	rank   int
	duty   float64
	period time.Duration
}

// startThrottle starts the watchdog for this process; stop ends it (and
// leaves this process running).
func startThrottle(t throttleFlags) (stop func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("throttle: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %g", envThrottle, os.Getpid(), t.period.Nanoseconds(), t.duty))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// The watchdog dies with us (it could not continue a dead process anyway).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("throttle: start watchdog: %w", err)
	}
	return func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}, nil
}

// throttleMain runs the watchdog when envThrottle is set and reports
// whether it did (the process should then exit).
func throttleMain() bool {
	spec, ok := os.LookupEnv(envThrottle)
	if !ok {
		return false
	}
	f := strings.Fields(spec)
	if len(f) != 3 {
		fmt.Fprintf(os.Stderr, "train: bad %s=%q\n", envThrottle, spec)
		os.Exit(2)
	}
	pid, e1 := strconv.Atoi(f[0])
	period, e2 := strconv.ParseInt(f[1], 10, 64)
	duty, e3 := strconv.ParseFloat(f[2], 64)
	if e1 != nil || e2 != nil || e3 != nil || pid <= 1 {
		fmt.Fprintf(os.Stderr, "train: bad %s=%q\n", envThrottle, spec)
		os.Exit(2)
	}
	quit := make(chan os.Signal, 1)
	signal.Notify(quit, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	off := time.Duration(float64(period) * duty)
	on := time.Duration(period) - off
	for {
		if unix.Kill(pid, 0) != nil {
			return true // the rank is gone
		}
		unix.Kill(pid, unix.SIGSTOP)
		select {
		case <-quit:
			unix.Kill(pid, unix.SIGCONT)
			return true
		case <-time.After(off):
		}
		unix.Kill(pid, unix.SIGCONT)
		select {
		case <-quit:
			return true
		case <-time.After(on):
		}
	}
}
