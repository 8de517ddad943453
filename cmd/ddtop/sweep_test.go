package main

import (
	"os"
	"testing"
	"time"

	"github.com/ddstore/ddstore/internal/segtest"
	"github.com/ddstore/ddstore/telemetry"
	"github.com/ddstore/ddstore/ui"
)

// TestStartSweepsOldLeftovers: ddtop removes, as it starts, the segments of
// writers that exited longer than the grace ago (leftovers from before it
// watched); a rank that exited recently stays for the page, and a live one
// stays whatever its heartbeat.
func TestStartSweepsOldLeftovers(t *testing.T) {
	dir := t.TempDir()
	host, _ := os.Hostname()
	dead := segtest.ExitedPid(t)
	seg := func(job string, pid int, beat time.Duration) string {
		w, err := telemetry.Create(telemetry.WriterOptions{Dir: dir, Job: job, World: 1, Host: host, Pid: pid,
			MaxVars: 1, MaxReaders: 1, RingSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		segtest.SetHeartbeat(t, w.Path(), time.Now().Add(-beat))
		return w.Path()
	}
	old := seg("old", dead, 2*ui.DefaultExitedGrace)
	recent := seg("recent", dead, ui.DefaultExitedGrace/2)
	live := seg("live", os.Getpid(), 2*ui.DefaultExitedGrace)
	r := runJSON(t, "--dir", dir)
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the old leftover is still there: %v", err)
	}
	for _, p := range []string{recent, live} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v (it must stay)", p, err)
		}
	}
	if len(r.Ranks) != 2 {
		t.Errorf("ddtop shows %d ranks, want the recent exited one and the live one", len(r.Ranks))
	}
}
