package telemetry

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A writer that ends without Close (killed, or a program that never closes
// its store) leaves its segment behind. Sweep removes such leftovers; the
// engine calls it when it creates a segment, ddtop when it lists a
// directory. Whether a file is a leftover is decided by leftover and
// leftoverTemp alone.

// tmpLeftoverAge is how old a temporary file of Create must be before a
// sweep takes it for the remains of a crashed Create.
const tmpLeftoverAge = time.Minute

// leftover decides whether a segment may be removed by a process other than
// its writer: its writer ran on this host and is gone (the pid exited or
// was reused), its heartbeat stopped more than minAge (at least
// StaleAfter) ago, and the file belongs to this user.
func leftover(info SegmentInfo, fileUID, myUID uint32, host string, minAge time.Duration) bool {
	return info.State == StateExited && host != "" && info.Host == host &&
		info.HeartbeatAge > max(minAge, StaleAfter) && fileUID == myUID
}

// leftoverTemp decides the same for a temporary file of Create
// (".<segment name>.<pid>.tmp"): its pid is gone, it is older than
// tmpLeftoverAge, and it is this user's.
func leftoverTemp(name string, pidGone func(pid int) bool, age time.Duration, fileUID, myUID uint32) bool {
	pid, ok := tempPid(name)
	return ok && age > tmpLeftoverAge && fileUID == myUID && pidGone(pid)
}

// tempPid is the pid in a temporary file's name, ok false for any other name.
func tempPid(name string) (int, bool) {
	if !strings.HasPrefix(name, "."+SegmentPrefix) || !strings.HasSuffix(name, ".tmp") {
		return 0, false
	}
	rest := strings.TrimSuffix(name, ".tmp")
	i := strings.LastIndexByte(rest, '.')
	if i < 0 || !strings.HasSuffix(rest[:i], SegmentSuffix) {
		return 0, false
	}
	pid, err := strconv.Atoi(rest[i+1:])
	return pid, err == nil && pid > 0
}

// Sweep removes the leftovers in dir (see leftover and leftoverTemp) and
// returns the paths it removed. It never removes a segment whose writer
// lives, another host's, or another user's file. A segment is first moved
// aside and removed only if it is still the file that was judged, so a new
// writer that takes the same name meanwhile keeps its segment.
func Sweep(dir string) ([]string, error) { return SweepOlder(dir, StaleAfter) }

// SweepOlder is Sweep for segments whose heartbeat is older than age
// (StaleAfter at least): a viewer that shows exited ranks for a while
// removes only older ones.
func SweepOlder(dir string, age time.Duration) ([]string, error) {
	infos, err := Discover(dir)
	if err != nil {
		return nil, err
	}
	me, host := uint32(os.Geteuid()), localHost()
	var removed []string
	for _, in := range infos {
		var st unix.Stat_t
		if in.State != StateExited || unix.Lstat(in.Path, &st) != nil || !leftover(in, st.Uid, me, host, age) {
			continue
		}
		if removeIfSame(in.Path, st) {
			removed = append(removed, in.Path)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return removed, fmt.Errorf("telemetry: sweep %s: %w", dir, err)
	}
	gone := func(pid int) bool { return !pidAlive(pid, 0) }
	for _, e := range ents {
		var st unix.Stat_t
		path := filepath.Join(dir, e.Name())
		if _, ok := tempPid(e.Name()); !ok || unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		age := time.Since(time.Unix(st.Mtim.Unix()))
		if leftoverTemp(e.Name(), gone, age, st.Uid, me) && os.Remove(path) == nil {
			removed = append(removed, path)
		}
	}
	return removed, nil
}

// removeIfSame removes path if it is still the file judged (st): it is
// renamed aside first, and put back if another file had taken its name.
func removeIfSame(path string, st unix.Stat_t) bool {
	aside := filepath.Join(filepath.Dir(path), fmt.Sprintf(".sweep.%s.%d", filepath.Base(path), os.Getpid()))
	if os.Rename(path, aside) != nil {
		return false
	}
	var now unix.Stat_t
	if unix.Lstat(aside, &now) == nil && now.Dev == st.Dev && now.Ino == st.Ino {
		return os.Remove(aside) == nil
	}
	_ = os.Rename(aside, path)
	return false
}
