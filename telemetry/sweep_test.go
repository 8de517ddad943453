package telemetry

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestLeftoverDecision(t *testing.T) {
	const me, other = 1000, 1001
	gone := SegmentInfo{State: StateExited, Host: "n1", HeartbeatAge: time.Minute}
	for _, c := range []struct {
		name string
		in   SegmentInfo
		uid  uint32
		host string
		want bool
	}{
		{"exited, stale, mine", gone, me, "n1", true},
		{"another user's", gone, other, "n1", false},
		{"another host's", gone, me, "n2", false},
		{"host unknown", gone, me, "", false},
		{"heartbeat fresh", SegmentInfo{State: StateExited, Host: "n1", HeartbeatAge: StaleAfter}, me, "n1", false},
		{"stale but alive", SegmentInfo{State: StateStale, Host: "n1", HeartbeatAge: time.Hour}, me, "n1", false},
		{"live", SegmentInfo{State: StateLive, Host: "n1", HeartbeatAge: time.Hour}, me, "n1", false},
		{"unreadable", SegmentInfo{State: StateInvalid, Host: "n1", HeartbeatAge: time.Hour}, me, "n1", false},
	} {
		if got := leftover(c.in, c.uid, me, c.host, 2*time.Minute); got {
			t.Errorf("%s: a leftover younger than the age asked", c.name)
		}
		if got := leftover(c.in, c.uid, me, c.host, 0); got != c.want {
			t.Errorf("%s: leftover = %v, want %v", c.name, got, c.want)
		}
	}
	dead := func(pid int) bool { return pid == 7 }
	for _, c := range []struct {
		name string
		age  time.Duration
		uid  uint32
		want bool
	}{
		{".ddstore-j-0.tel.7.tmp", time.Hour, me, true},
		{".ddstore-j-0.tel.8.tmp", time.Hour, me, false},   // pid alive
		{".ddstore-j-0.tel.7.tmp", time.Second, me, false}, // a Create may still run
		{".ddstore-j-0.tel.7.tmp", time.Hour, other, false},
		{".ddstore-j-0.tel.x.tmp", time.Hour, me, false},
		{".other-j-0.tel.7.tmp", time.Hour, me, false},
		{"ddstore-j-0.tel", time.Hour, me, false},
	} {
		if got := leftoverTemp(c.name, dead, c.age, c.uid, me); got != c.want {
			t.Errorf("%s age %v uid %d: leftoverTemp = %v, want %v", c.name, c.age, c.uid, got, c.want)
		}
	}
}

// exitedPid is the pid of a process that has exited and been reaped.
func exitedPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// TestSweep: of the segments in a directory, only those whose writer is
// gone and whose heartbeat is old are removed, with the temporary files
// of a dead Create; a live writer's, another host's, a fresh one and a
// corrupt file stay.
func TestSweep(t *testing.T) {
	dir := t.TempDir()
	old := uint64(time.Now().Add(-time.Minute).UnixNano())
	seg := func(job string, pid int, host string, stale bool) *Writer {
		w := newTestWriter(t, WriterOptions{Dir: dir, Job: job, Pid: pid, Host: host, MaxVars: 1, MaxReaders: 1, RingSize: 1})
		if stale {
			w.m.store(hHeartbeat, old)
		}
		return w
	}
	dead := exitedPid(t)
	gone := seg("gone", dead, "", true)
	freshGone := seg("fresh-gone", dead, "", false)
	live := seg("live-stale", os.Getpid(), "", true)
	elsewhere := seg("elsewhere", dead, "other-host", true)
	corrupt := filepath.Join(dir, "ddstore-corrupt-0.tel")
	if err := os.WriteFile(corrupt, []byte("not a segment"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadTmp := filepath.Join(dir, ".ddstore-x-0.tel."+itoa(dead)+".tmp")
	liveTmp := filepath.Join(dir, ".ddstore-y-0.tel."+itoa(os.Getpid())+".tmp")
	for _, p := range []string{deadTmp, liveTmp} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		then := time.Now().Add(-time.Hour)
		os.Chtimes(p, then, then)
	}
	var foreign *Writer
	if os.Geteuid() == 0 {
		foreign = seg("foreign", dead, "", true)
		if err := os.Chown(foreign.Path(), 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}

	removed, err := Sweep(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := []string{deadTmp, gone.Path()}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	kept := []string{freshGone.Path(), live.Path(), elsewhere.Path(), corrupt, liveTmp}
	if foreign != nil {
		kept = append(kept, foreign.Path())
	}
	for _, p := range kept {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v (it must stay)", filepath.Base(p), err)
		}
	}
	for _, p := range want {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there: %v", filepath.Base(p), err)
		}
	}
	if again, err := Sweep(dir); err != nil || len(again) != 0 {
		t.Errorf("second sweep: %q %v", again, err)
	}
}

// TestSweepKeepsANewWriter: a segment judged a leftover but replaced by a
// new writer of the same name before its removal stays.
func TestSweepKeepsANewWriter(t *testing.T) {
	dir := t.TempDir()
	w := newTestWriter(t, WriterOptions{Dir: dir, Job: "j", MaxVars: 1, MaxReaders: 1, RingSize: 1})
	judged, now := stat(t, w.Path()), stat(t, w.Path())
	judged.Ino++ // the file judged was another one
	if removeIfSame(w.Path(), judged) {
		t.Fatal("removed a file other than the one judged")
	}
	if got := stat(t, w.Path()); got.Ino != now.Ino {
		t.Fatalf("the live segment was not put back: inode %d, want %d", got.Ino, now.Ino)
	}
	if !removeIfSame(w.Path(), now) {
		t.Fatal("the judged file was not removed")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func stat(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}
