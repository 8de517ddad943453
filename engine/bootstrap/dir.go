package bootstrap

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ddstore/ddstore/fault"
)

// dirEx is the dir method. Collective number s of rank r is the file
// <Dir>/<job>/<s>/<r>, written atomically (temporary name, then rename) and
// holding the job token, s, the tag, the world size and the blob under a
// CRC. Ranks poll for the files of the others with a backoff of 5 ms up to
// 200 ms. A rank removes its file of collective s-1 once collective s is
// complete (everyone has then read it); Close ends with a barrier after which
// rank 0 removes <Dir>/<job>.
type dirEx struct {
	collective
	jobDir string
	token  string
}

const dirMagic = "ddstore-bootstrap-dir 1\n"

func connectDir(r resolved) (*dirEx, error) {
	// The job's subdirectory is removed on Close: it must be a plain name.
	if j := r.Env.Job; j == "" {
		return nil, &fault.Error{Op: "dir connect", Kind: fault.ErrEnv, Side: fault.Local,
			Detail: fmt.Sprintf("the launcher (%s) exports no job id that every rank shares: set DDSTORE_JOB to name the job's subdirectory of %s",
				r.Env.Launcher, r.Dir)}
	} else if j == "." || j == ".." || strings.ContainsAny(j, `/\`) {
		return nil, &fault.Error{Op: "dir connect", Kind: fault.ErrEnv, Side: fault.Local,
			Detail: fmt.Sprintf("job id %q cannot name a subdirectory of %s (set DDSTORE_JOB)", j, r.Dir)}
	}
	x := &dirEx{
		collective: r.newCollective("dir"),
		jobDir:     filepath.Join(r.Dir, r.Env.Job),
		token:      r.Token,
	}
	if err := os.MkdirAll(x.jobDir, 0o700); err != nil {
		return nil, &fault.Error{Op: "dir connect", Kind: fault.ErrEnv, Side: fault.Local,
			Detail: fmt.Sprintf("cannot create %s (DDSTORE_BOOTSTRAP_DIR or Options.Dir)", x.jobDir), Err: err}
	}
	if err := checkOwned(x.jobDir, nil, true); err != nil {
		return nil, &fault.Error{Op: "dir connect", Kind: fault.ErrEnv, Side: fault.Local,
			Detail: fmt.Sprintf("refusing the job directory: %v", err)}
	}
	if fi, err := os.Stat(x.jobDir); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, &fault.Error{Op: "dir connect", Kind: fault.ErrEnv, Side: fault.Local,
			Detail: fmt.Sprintf("refusing the job directory %s: mode %#o lets others in (want 0700)", x.jobDir, fi.Mode().Perm())}
	}
	host, _ := os.Hostname()
	me := fmt.Sprintf("%s pid %d", host, os.Getpid())
	// Rank 0's blob carries the job's secret: the files are 0600 in a
	// 0700 directory of this user.
	all, err := x.gather("connect", "connect", []byte(me+x.launcherSecret()), time.Now().Add(r.Timeout))
	if err != nil {
		return nil, err
	}
	if err := x.takeSecret(all[0]); err != nil {
		return nil, err
	}
	return x, nil
}

func (x *dirEx) path(seq uint64, rank int) string {
	return filepath.Join(x.jobDir, strconv.FormatUint(seq, 10), strconv.Itoa(rank))
}

func (x *dirEx) encode(tag string, blob []byte) []byte {
	e := &enc{b: []byte(dirMagic)}
	e.str(x.token)
	e.u64(x.seq)
	e.str(tag)
	e.u32(uint32(x.rank))
	e.u32(uint32(x.world))
	e.bytes(blob)
	e.u32(crc32.ChecksumIEEE(e.b))
	return e.b
}

type dirRecord struct {
	token string
	seq   uint64
	tag   string
	rank  int
	world int
	blob  []byte
}

func decodeDirFile(b []byte) (dirRecord, error) {
	if !bytes.HasPrefix(b, []byte(dirMagic)) || len(b) < len(dirMagic)+4 {
		return dirRecord{}, errors.New("not a ddstore bootstrap file")
	}
	body, sum := b[:len(b)-4], b[len(b)-4:]
	if crc32.ChecksumIEEE(body) != uint32(sum[0])|uint32(sum[1])<<8|uint32(sum[2])<<16|uint32(sum[3])<<24 {
		return dirRecord{}, errors.New("checksum mismatch (corrupt file)")
	}
	d := &dec{b: body[len(dirMagic):]}
	rec := dirRecord{token: d.str(), seq: d.u64(), tag: d.str(), rank: int(d.u32()), world: int(d.u32()), blob: d.bytes()}
	if d.err != nil {
		return dirRecord{}, errors.New("truncated file")
	}
	if err := d.end(); err != nil {
		return dirRecord{}, err
	}
	return rec, nil
}

func (x *dirEx) write(tag string, blob []byte) error {
	final := x.path(x.seq, x.rank)
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(final), fmt.Sprintf(".%d.tmp.%d", x.rank, os.Getpid()))
	if err := os.WriteFile(tmp, x.encode(tag, blob), 0o600); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func (x *dirEx) AllGather(tag string, mine []byte, timeout time.Duration) ([][]byte, error) {
	op, deadline, err := x.begin("allgather", tag, mine, timeout)
	if err != nil {
		return nil, err
	}
	return x.gather(op, tag, mine, deadline)
}

func (x *dirEx) gather(op, tag string, mine []byte, deadline time.Time) ([][]byte, error) {
	start := time.Now()
	if err := x.write(tag, mine); err != nil {
		return nil, x.fail(&fault.Error{Op: opName("dir", op), Kind: fault.ErrEnv, Side: fault.Local,
			Detail: fmt.Sprintf("rank %d cannot write its file in %s", x.rank, x.jobDir), Err: err})
	}
	blobs := make([][]byte, x.world)
	got := make([]bool, x.world)
	blobs[x.rank], got[x.rank] = append([]byte{}, mine...), true
	n, total := 1, len(mine)
	delay := 5 * time.Millisecond
	for {
		for r := range x.world {
			if got[r] {
				continue
			}
			p := x.path(x.seq, r)
			b, err := readPrivateFile(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, x.fail(&fault.Error{Op: opName("dir", op), Kind: fault.ErrPeerDead, Side: fault.Remote, Ranks: []int{r},
					Detail: fmt.Sprintf("cannot read rank %d's file %s", r, p), Err: err})
			}
			rec, err := decodeDirFile(b)
			switch {
			case err != nil:
				return nil, x.fail(&fault.Error{Op: opName("dir", op), Kind: fault.ErrPeerDead, Side: fault.Remote, Ranks: []int{r},
					Detail: fmt.Sprintf("rank %d's file %s is unreadable", r, p), Err: err})
			case rec.token != x.token:
				return nil, x.fail(x.errf(op, fault.ErrToken, []int{r},
					"rank %d's file %s has another job token (a stale file of an earlier job with the same id? set DDSTORE_JOB)", r, p))
			case rec.world != x.world || rec.rank != r:
				return nil, x.fail(x.errf(op, fault.ErrMismatch, []int{r},
					"file %s says rank %d of %d, want rank %d of %d", p, rec.rank, rec.world, r, x.world))
			case rec.seq != x.seq || rec.tag != tag:
				return nil, x.fail(x.errf(op, fault.ErrMismatch, []int{r}, "%s",
					mismatchDetail(r, rec.seq, rec.tag, x.rank, x.seq, tag)))
			}
			total += len(rec.blob)
			if total > MaxMessage {
				return nil, x.fail(x.errf(op, fault.ErrTooLarge, nil, "gathered blobs exceed %d bytes", MaxMessage))
			}
			blobs[r], got[r] = rec.blob, true
			n++
		}
		if n == x.world {
			break
		}
		if !time.Now().Before(deadline) {
			var missing []int
			for r, ok := range got {
				if !ok {
					missing = append(missing, r)
				}
			}
			return nil, x.fail(x.errf(op, fault.ErrTimeout, missing, "%s did not arrive in %s within %v",
				fault.RankList(missing), filepath.Join(x.jobDir, strconv.FormatUint(x.seq, 10)), deadline.Sub(start).Round(time.Millisecond)))
		}
		delay = backoff(delay, 200*time.Millisecond, deadline)
	}
	// Everyone has written collective seq, so everyone has read seq-1.
	if x.seq > 0 {
		prev := x.path(x.seq-1, x.rank)
		os.Remove(prev)
		os.Remove(filepath.Dir(prev)) // succeeds for the last rank only
	}
	return blobs, nil
}

func (x *dirEx) Barrier(tag string, timeout time.Duration) error {
	_, err := x.AllGather(tag, nil, timeout)
	return err
}

// Close runs a last barrier; then every rank marks itself done and rank 0,
// once all are done (at most 5 s), removes the job directory. Cleanup is best
// effort: a failed barrier leaves the files in place.
func (x *dirEx) Close() error {
	defer x.releaseRendezvous()
	if x.closed {
		return nil
	}
	if x.broken != nil {
		x.closed = true
		return nil
	}
	t := x.timeout
	if t > 10*time.Second {
		t = 10 * time.Second
	}
	err := x.Barrier("bootstrap/close", t)
	x.closed = true
	if err != nil {
		return err
	}
	done := filepath.Join(x.jobDir, "done")
	os.MkdirAll(done, 0o700)
	if x.rank != 0 {
		return os.WriteFile(filepath.Join(done, strconv.Itoa(x.rank)), nil, 0o600)
	}
	deadline := time.Now().Add(5 * time.Second)
	delay := 5 * time.Millisecond
	for time.Now().Before(deadline) {
		ents, _ := os.ReadDir(done)
		if len(ents) >= x.world-1 {
			break
		}
		delay = backoff(delay, 100*time.Millisecond, deadline)
	}
	return os.RemoveAll(x.jobDir)
}

// readPrivateFile reads a peer's file, refusing one that is not a regular
// file of this user with mode 0600 or stricter.
func readPrivateFile(p string) ([]byte, error) {
	return readOwnedFile(p, maxFrame, func(n int64) error { return fmt.Errorf("%w: %d bytes", fault.ErrTooLarge, n) })
}
