//go:build !linux

package telemetry

func procStart(pid int) (ticks uint64, zombie bool, ok bool) { return 0, false, false }
