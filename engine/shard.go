package engine

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/ddstore/ddstore/fault"

	"golang.org/x/sys/unix"
)

// shardFile is a shard in a shared-memory file, mapped outside the Go heap.
// The owner maps it read-write; same-node peers map it read-only.
type shardFile struct {
	path  string
	mem   []byte // the whole mapping (at least one page)
	data  []byte // mem[:size]: the rows
	owner bool
	rank  int // owner's rank
	lock  int // the owner's open descriptor, holding a shared flock (see sweepShards); -1 if none
}

// shardName is the file name of a rank's shard of a variable. seq (the
// collective's sequence number) keeps names apart that sanitize alike.
func shardName(job string, rank, seq int, name string) string {
	return fmt.Sprintf("ddstore-%s-%d-%d-%s.shard", sanitizeName(job), rank, seq, sanitizeName(name))
}

// sanitizeName keeps [A-Za-z0-9._-] and replaces anything else by '_'.
func sanitizeName(s string) string {
	if s == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-':
			return r
		}
		return '_'
	}, s)
}

func mapLen(size int64) int {
	page := int64(os.Getpagesize())
	n := (size + page - 1) / page * page
	if n == 0 {
		n = page
	}
	return int(n)
}

// createShard creates (replacing a stale one) and maps a zero-filled shard
// file of size bytes, mode 0600, for variable varName. Its pages are
// allocated up front (fallocate), so that a full tmpfs fails here with an
// error instead of killing the process with SIGBUS at the first copy.
func createShard(dir, file, varName string, size int64) (*shardFile, error) {
	if size < 0 || size > math.MaxInt64-int64(os.Getpagesize()) {
		return nil, errf(ErrIndex, "create shard", varName, "shard of %d bytes", size)
	}
	path := filepath.Join(dir, file)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err == unix.EEXIST {
		// A leftover of a crashed run with the same job id: replace it.
		_ = unix.Unlink(path)
		fd, err = unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	}
	if err != nil {
		return nil, shardErr(varName, -1, err, "create shard file %s", path)
	}
	// The owner holds a shared lock while the file lives (its descriptor
	// and its mapping keep it): a sweep that can lock the file exclusively
	// knows the owner is gone (sweepShards).
	locked := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB) == nil
	keep := false
	defer func() {
		if !keep {
			unix.Close(fd)
		}
	}()
	n := mapLen(size)
	if err := allocate(fd, int64(n)); err != nil {
		_ = unix.Unlink(path)
		if err == unix.ENOSPC || err == unix.EFBIG || err == unix.ENOMEM {
			return nil, shardErr(varName, -1, err, "shard of %d bytes does not fit in shard directory %s "+
				"(shared memory full? Docker's default /dev/shm is 64 MiB: raise --shm-size, or set Options.ShardDir)",
				n, dir)
		}
		return nil, shardErr(varName, -1, err, "allocate %d bytes for shard file %s in shard directory %s", n, path, dir)
	}
	mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = unix.Unlink(path)
		return nil, shardErr(varName, -1, err, "map shard file %s (%d bytes)", path, n)
	}
	f := &shardFile{path: path, mem: mem, data: mem[:size:size], owner: true, lock: -1}
	if locked {
		f.lock, keep = fd, true
	}
	return f, nil
}

// shardErr is an error of this rank's shard of varName (rank < 0) or of
// peer rank's shard file, with cause err (nil when none).
func shardErr(varName string, rank int, err error, format string, args ...any) error {
	e := &Error{Op: "shard", Var: varName, Side: fault.Local, Detail: fmt.Sprintf(format, args...), Err: err}
	if rank >= 0 {
		e.Ranks, e.Side = []int{rank}, fault.Unknown
	}
	return e
}

// allocate sizes the file to n bytes with its blocks allocated; it falls
// back to ftruncate (sparse, no reservation) where the filesystem does not
// support fallocate.
func allocate(fd int, n int64) error {
	for {
		err := unix.Fallocate(fd, 0, 0, n)
		switch err {
		case nil:
			return nil
		case unix.EINTR:
			continue
		case unix.EOPNOTSUPP, unix.ENOSYS:
			return unix.Ftruncate(fd, n)
		}
		return err
	}
}

// openShard maps a peer's shard file read-only.
func openShard(path string, rank int, size int64) (*shardFile, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, shardErr("", rank, err, "open peer shard file %s", path)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, shardErr("", rank, err, "stat peer shard file %s", path)
	}
	n := mapLen(size)
	if st.Size < int64(n) {
		return nil, shardErr("", rank, nil, "peer shard file %s has %d bytes, want %d", path, st.Size, n)
	}
	mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, shardErr("", rank, err, "map peer shard file %s", path)
	}
	return &shardFile{path: path, mem: mem, data: mem[:size:size], rank: rank, lock: -1}, nil
}

// unlink removes the owner's shard file. Mappings of it, ours and the
// peers', stay valid until unmapped.
func (f *shardFile) unlink() {
	if f != nil && f.owner {
		_ = unix.Unlink(f.path)
	}
}

// close unmaps; the owner also removes the file if it is still there.
func (f *shardFile) close() error {
	if f == nil || f.mem == nil {
		return nil
	}
	err := unix.Munmap(f.mem)
	f.mem, f.data = nil, nil
	if f.owner {
		if e := unix.Unlink(f.path); e != nil && e != unix.ENOENT && err == nil {
			err = e
		}
		if f.lock >= 0 {
			unix.Close(f.lock)
			f.lock = -1
		}
	}
	if err != nil {
		return shardErr("", -1, err, "release shard %s", f.path)
	}
	return nil
}
