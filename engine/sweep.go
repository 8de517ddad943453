package engine

// Leftovers of processes that ended without Close: telemetry segments
// (telemetry.Sweep) and shard files. One rank per node sweeps at Open.

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ddstore/ddstore/telemetry"
)

// shardLeftoverAge is how old a shard file must be before a sweep may take
// it for a leftover: a file just created is locked a moment later.
const shardLeftoverAge = time.Minute

// shardLeftover decides whether a shard file may be removed by a process
// other than its owner: nobody holds its lock (the owner keeps a shared
// flock while the file lives, and the kernel drops it when the owner
// dies), it is older than minAge, and it is this user's.
func shardLeftover(unlocked bool, age, minAge time.Duration, uid, me uint32) bool {
	return unlocked && age > minAge && uid == me
}

// sweepLeftovers removes this node's leftovers in the telemetry and shard
// directories, quietly: a sweep that fails leaves files for the next one.
func (s *Store) sweepLeftovers() {
	if !s.opts.DisableTelemetry {
		_, _ = telemetry.Sweep(s.opts.TelemetryDir)
	}
	_ = sweepShards(s.opts.ShardDir, shardLeftoverAge)
}

// sweepShards removes the leftover shard files ("ddstore-*.shard") in dir,
// see shardLeftover, and returns their paths.
func sweepShards(dir string, minAge time.Duration) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	me := uint32(os.Geteuid())
	var removed []string
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "ddstore-") || !strings.HasSuffix(name, ".shard") || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, name)
		if removeUnlockedShard(path, minAge, me) {
			removed = append(removed, path)
		}
	}
	return removed
}

// removeUnlockedShard removes path if it is a leftover, holding its lock
// while it checks that the name still is the file judged.
func removeUnlockedShard(path string, minAge time.Duration, me uint32) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st, now unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	changed := time.Unix(max(st.Mtim.Sec, st.Ctim.Sec), 0)
	unlocked := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil
	if !shardLeftover(unlocked, time.Since(changed), minAge, st.Uid, me) {
		return false
	}
	if unix.Lstat(path, &now) != nil || now.Dev != st.Dev || now.Ino != st.Ino {
		return false
	}
	return unix.Unlink(path) == nil
}
