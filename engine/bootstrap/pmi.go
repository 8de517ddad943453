package bootstrap

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ddstore/ddstore/fault"
)

// pmiEx is the pmi method: the PMI-1 wire protocol that MPICH's Hydra
// mpiexec speaks on the socket PMI_FD, or, when PMI_JOBID is set too
// (srun --mpi=pmi2), Slurm's PMI-2 wire protocol on the same socket: a
// PMI-1 style init line asking for version 2, then length-prefixed
// commands (fullinit, kvs-put, kvs-fence, kvs-get, finalize); see pmi2.go. Collective number s puts this rank's
// blob, base64url-encoded and split to the server's vallen_max, under the
// keys "b<s>/<rank>/<chunk>", plus a header key "b<s>/<rank>" holding the
// chunk count, length, CRC and tag; then barrier; then gets the other ranks'
// keys (above pmiDirectMax ranks only rank 0 does, and publishes the packed
// result "r<s>" for the others after a second barrier). PMI-1 cannot tell which ranks are missing from a barrier, so a PMI
// timeout names no ranks (the launcher's own output does).
type pmiEx struct {
	collective
	conn    net.Conn
	rd      *bufio.Reader
	kvs     string
	valMax  int
	keyMax  int
	token   string
	pending bool // a command is outstanding after a failure: the stream is out of sync
	v2      bool // PMI-2 (Slurm's srun --mpi=pmi2)
}

func connectPMI(r resolved) (*pmiEx, error) {
	const op = "connect"
	fdStr := os.Getenv("PMI_FD")
	fd, err := strconv.Atoi(strings.TrimSpace(fdStr))
	if err != nil || fd < 0 {
		return nil, &fault.Error{Op: opName("pmi", op), Kind: fault.ErrEnv, Side: fault.Local, Detail: fmt.Sprintf("PMI_FD=%q is not a file descriptor number", fdStr)}
	}
	f := os.NewFile(uintptr(fd), "PMI_FD")
	conn, err := net.FileConn(f) // dups the descriptor; deadlines then work
	f.Close()
	if err != nil {
		return nil, &fault.Error{Op: opName("pmi", op), Kind: fault.ErrEnv, Side: fault.Local, Detail: fmt.Sprintf("PMI_FD=%d is not a socket", fd), Err: err}
	}
	x := &pmiEx{
		collective: r.newCollective("pmi"),
		conn:       conn, rd: bufio.NewReader(conn), token: r.Token,
	}
	if jobid, ok := os.LookupEnv("PMI_JOBID"); ok {
		x.v2, x.kvs, x.method = true, jobid, "pmi2"
	}
	deadline := time.Now().Add(r.Timeout)
	if err := x.handshake(deadline); err != nil {
		x.abandon()
		return nil, err
	}
	if x.token == "" { // no job id in the environment: the KVS is the job's own
		x.token = x.kvs
	}
	// Connect ends with a collective that checks the world size and tokens.
	sum := sha256.Sum256([]byte(x.token))
	blob := fmt.Appendf(nil, "%d %x", x.world, sum[:8])
	// Rank 0's blob carries the job's secret, made now: the KVS is
	// readable only by the job step's own tasks.
	all, err := x.gather(op, "connect", append(blob, x.launcherSecret()...), deadline)
	if err != nil {
		x.abandon()
		return nil, err
	}
	var bad []int
	for r, b := range all {
		if withoutSecret(b) != string(blob) {
			bad = append(bad, r)
		}
	}
	if bad == nil {
		if err := x.takeSecret(all[0]); err != nil {
			x.Close()
			return nil, err
		}
	}
	if bad != nil {
		x.Close()
		return nil, &fault.Error{Op: opName("pmi", op), Kind: fault.ErrToken, Side: fault.Remote, Ranks: bad,
			Detail: fmt.Sprintf("%s have another job token or world size (check DDSTORE_JOB_TOKEN)", fault.RankList(bad))}
	}
	return x, nil
}

func (x *pmiEx) handshake(deadline time.Time) error {
	const op = "connect"
	if x.v2 {
		return x.handshake2(deadline)
	}
	kv, err := x.call(op, "cmd=init pmi_version=1 pmi_subversion=1", "response_to_init", deadline)
	if err != nil {
		return x.wrap(op, err, "init")
	}
	if kv["pmi_version"] != "1" {
		return x.errf(op, fault.ErrEnv, nil, "PMI server speaks version %s, want 1 (PMI-2 is used when PMI_JOBID is set, as under srun --mpi=pmi2)", kv["pmi_version"])
	}
	if kv, err = x.call(op, "cmd=get_maxes", "maxes", deadline); err != nil {
		return x.wrap(op, err, "get_maxes")
	}
	x.valMax, _ = strconv.Atoi(kv["vallen_max"])
	x.keyMax, _ = strconv.Atoi(kv["keylen_max"])
	if x.valMax < 64 || x.keyMax < 16 {
		return x.errf(op, fault.ErrEnv, nil, "PMI server limits are too small: vallen_max=%q keylen_max=%q", kv["vallen_max"], kv["keylen_max"])
	}
	if kv, err = x.call(op, "cmd=get_my_kvsname", "my_kvsname", deadline); err != nil {
		return x.wrap(op, err, "get_my_kvsname")
	}
	x.kvs = kv["kvsname"]
	if x.kvs == "" {
		return x.errf(op, fault.ErrEnv, nil, "PMI server returned an empty kvsname")
	}
	return nil
}

// Job names the job after its PMI KVS name, which all ranks share.
func (x *pmiEx) Job() string { return pmiJobName(x.kvs) }

// pmiJobName turns Hydra's KVS name "kvs_<mpiexec pid>_<pgid>_<random>_<host>"
// into "mpiexec-<pid>", the pid a person sees in ps; any other name n
// into "pmi-<n>".
func pmiJobName(kvs string) string {
	f := strings.Split(kvs, "_")
	if len(f) >= 3 && f[0] == "kvs" {
		if pid, err := strconv.Atoi(f[1]); err == nil && pid > 0 {
			return "mpiexec-" + f[1]
		}
	}
	return "pmi-" + kvs
}

// call sends one command line and reads the reply with command want.
func (x *pmiEx) call(op, line, want string, deadline time.Time) (map[string]string, error) {
	if x.pending {
		return nil, x.errf(op, fault.ErrClosed, nil, "PMI stream out of sync after an earlier failure")
	}
	x.conn.SetDeadline(deadline)
	x.pending = true
	if _, err := x.conn.Write([]byte(line + "\n")); err != nil {
		return nil, x.ioErr(op, err)
	}
	reply, err := x.rd.ReadString('\n')
	if err != nil {
		return nil, x.ioErr(op, err)
	}
	x.pending = false
	kv := parsePMILine(reply)
	if kv["cmd"] != want {
		return nil, x.errf(op, fault.ErrEnv, nil, "PMI server answered %q to %q", strings.TrimSpace(reply), strings.Fields(line)[0])
	}
	if rc, ok := kv["rc"]; ok && rc != "0" {
		return kv, &pmiRC{rc: rc, msg: kv["msg"]}
	}
	return kv, nil
}

type pmiRC struct{ rc, msg string }

func (e *pmiRC) Error() string { return fmt.Sprintf("PMI rc=%s msg=%s", e.rc, e.msg) }

func (x *pmiEx) ioErr(op string, err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &fault.Error{Op: opName("pmi", op), Kind: fault.ErrTimeout, Side: fault.Remote,
			Detail: "the PMI server did not answer in time: some rank has not arrived (PMI-1 cannot say which)"}
	}
	return &fault.Error{Op: opName("pmi", op), Kind: fault.ErrPeerDead, Side: fault.Remote, Detail: "connection to the PMI server (mpiexec) lost", Err: err}
}

func parsePMILine(s string) map[string]string {
	kv := map[string]string{}
	for _, f := range strings.Fields(s) {
		k, v, _ := strings.Cut(f, "=")
		kv[k] = v
	}
	return kv
}

func (x *pmiEx) AllGather(tag string, mine []byte, timeout time.Duration) ([][]byte, error) {
	op, deadline, err := x.begin("allgather", tag, mine, timeout)
	if err != nil {
		return nil, err
	}
	return x.gather(op, tag, mine, deadline)
}

// tagField encodes a tag for the header value: base64url, or a hash if long.
func tagField(tag string) string {
	if len(tag) <= 256 {
		return "t" + base64.RawURLEncoding.EncodeToString([]byte(tag))
	}
	sum := sha256.Sum256([]byte(tag))
	return "h" + hex.EncodeToString(sum[:16])
}

func untagField(f string) string {
	if strings.HasPrefix(f, "t") {
		if b, err := base64.RawURLEncoding.DecodeString(f[1:]); err == nil {
			return string(b)
		}
	}
	return "<hashed tag " + f + ">"
}

// pmiDirectMax is the largest world in which every rank reads every other
// rank's keys (world² gets at the server). In larger worlds only rank 0
// reads them all; it publishes the packed result, which the others read
// after a second barrier (a few gets each instead of 2·world).
var pmiDirectMax = 16

func (x *pmiEx) put(op, key, val string, deadline time.Time) error {
	if x.v2 {
		_, err := x.call2(op, "kvs-put", "kvs-put-response", deadline, "key", key, "value", val)
		return x.wrap(op, err, "kvs-put of "+key)
	}
	_, err := x.call(op, fmt.Sprintf("cmd=put kvsname=%s key=%s value=%s", x.kvs, key, val), "put_result", deadline)
	if err != nil {
		return x.wrap(op, err, "put of "+key)
	}
	return nil
}

func (x *pmiEx) get(op, key string, deadline time.Time) (string, error) {
	if x.v2 {
		kv, err := x.call2(op, "kvs-get", "kvs-get-response", deadline, "jobid", x.kvs, "srcid", "-1", "key", key)
		if err == nil && !strings.EqualFold(kv["found"], "TRUE") {
			err = &pmiRC{rc: "0", msg: "not found"}
		}
		return kv["value"], err
	}
	kv, err := x.call(op, fmt.Sprintf("cmd=get kvsname=%s key=%s", x.kvs, key), "get_result", deadline)
	if err != nil {
		return "", err
	}
	return kv["value"], nil
}

// putBlob publishes data under key: chunks "<key>/<i>" of at most
// vallen_max base64url characters, then the header "<key>" =
// "<chunks>.<len>.<crc32>.<extra>".
func (x *pmiEx) putBlob(op, key string, data []byte, extra string, deadline time.Time) error {
	enc := base64.RawURLEncoding.EncodeToString(data)
	chunk := x.valMax - 8
	n := (len(enc) + chunk - 1) / chunk
	for i := range n {
		if err := x.put(op, fmt.Sprintf("%s/%d", key, i), enc[i*chunk:min((i+1)*chunk, len(enc))], deadline); err != nil {
			return err
		}
	}
	return x.put(op, key, fmt.Sprintf("%d.%d.%08x.%s", n, len(data), crc32.ChecksumIEEE(data), extra), deadline)
}

// getHeader reads a header published by putBlob; found is false when the
// key does not exist.
func (x *pmiEx) getHeader(op, key string, deadline time.Time) (n, size int, sum uint32, extra string, found bool, err error) {
	h, err := x.get(op, key, deadline)
	var rc *pmiRC
	if errors.As(err, &rc) {
		return 0, 0, 0, "", false, nil
	}
	if err != nil {
		return 0, 0, 0, "", false, x.wrap(op, err, "get of "+key)
	}
	parts := strings.SplitN(h, ".", 4)
	if len(parts) == 4 {
		n64, err1 := strconv.ParseUint(parts[0], 10, 31)
		size64, err2 := strconv.ParseUint(parts[1], 10, 31)
		sum64, err3 := strconv.ParseUint(parts[2], 16, 32)
		if err1 == nil && err2 == nil && err3 == nil && size64 <= MaxMessage {
			return int(n64), int(size64), uint32(sum64), parts[3], true, nil
		}
	}
	return 0, 0, 0, "", true, fmt.Errorf("malformed header %q under %s", h, key)
}

// getChunks reads and checks the body of a header.
func (x *pmiEx) getChunks(op, key string, n, size int, sum uint32, deadline time.Time) ([]byte, error) {
	var sb strings.Builder
	for i := range n {
		v, err := x.get(op, fmt.Sprintf("%s/%d", key, i), deadline)
		if err != nil {
			return nil, x.wrap(op, err, fmt.Sprintf("get of %s/%d", key, i))
		}
		sb.WriteString(v)
	}
	b, err := base64.RawURLEncoding.DecodeString(sb.String())
	if err != nil || len(b) != size || crc32.ChecksumIEEE(b) != sum {
		return nil, fmt.Errorf("the value under %s is corrupt", key)
	}
	return b, nil
}

func (x *pmiEx) barrier(op string, deadline time.Time) error {
	if x.v2 {
		_, err := x.call2(op, "kvs-fence", "kvs-fence-response", deadline)
		return x.wrap(op, err, "kvs-fence")
	}
	if _, err := x.call(op, "cmd=barrier_in", "barrier_out", deadline); err != nil {
		return x.wrap(op, err, "barrier")
	}
	return nil
}

func (x *pmiEx) gather(op, tag string, mine []byte, deadline time.Time) ([][]byte, error) {
	prefix := fmt.Sprintf("b%d/", x.seq)
	if err := x.putBlob(op, prefix+strconv.Itoa(x.rank), mine, tagField(tag), deadline); err != nil {
		return nil, x.fail(err)
	}
	if err := x.barrier(op, deadline); err != nil {
		return nil, x.fail(err)
	}
	if x.world <= pmiDirectMax {
		blobs, err := x.fetchAll(op, tag, prefix, mine, deadline)
		return blobs, x.fail(err)
	}
	result := fmt.Sprintf("r%d", x.seq)
	if x.rank == 0 {
		blobs, err := x.fetchAll(op, tag, prefix, mine, deadline)
		var e *fault.Error
		switch {
		case err == nil:
			var packed enc
			for _, b := range blobs {
				packed.bytes(b)
			}
			err = x.putBlob(op, result, packed.b, "ok", deadline)
		case errors.As(err, &e) && !x.pending:
			// Tell the others why, then fail like them.
			detail := e.Detail
			if len(detail) > 600 {
				detail = detail[:600] + "..."
			}
			ranks := make([]string, len(e.Ranks))
			for i, r := range e.Ranks {
				ranks[i] = strconv.Itoa(r)
			}
			extra := fmt.Sprintf("err.%d.%s.%s", kindCode(e), strings.Join(ranks, "-"),
				base64.RawURLEncoding.EncodeToString([]byte(detail)))
			if perr := x.putBlob(op, result, nil, extra, deadline); perr != nil {
				return nil, x.fail(err)
			}
		default:
			return nil, x.fail(err) // the PMI stream itself failed: the others time out
		}
		if berr := x.barrier(op, deadline); err == nil {
			err = berr
		}
		if err != nil {
			return nil, x.fail(err)
		}
		return blobs, nil
	}
	if err := x.barrier(op, deadline); err != nil {
		return nil, x.fail(err)
	}
	n, size, sum, extra, found, err := x.getHeader(op, result, deadline)
	var fe *fault.Error
	switch {
	case err != nil && !errors.As(err, &fe):
		err = x.errf(op, fault.ErrPeerDead, []int{0}, "rank 0's result of collective #%d: %v", x.seq, err)
	case err == nil && !found:
		err = x.errf(op, fault.ErrMismatch, []int{0}, "rank 0 published no result for collective #%d (%q)", x.seq, tag)
	}
	if err != nil {
		return nil, x.fail(err)
	}
	if verdict, ok := strings.CutPrefix(extra, "err."); ok {
		return nil, x.fail(pmiVerdict(op, verdict))
	}
	packed, err := x.getChunks(op, result, n, size, sum, deadline)
	if err != nil {
		return nil, x.fail(x.errf(op, fault.ErrPeerDead, []int{0}, "rank 0's result of collective #%d: %v", x.seq, err))
	}
	d := &dec{b: packed}
	blobs := make([][]byte, x.world)
	for r := range blobs {
		blobs[r] = d.bytes()
	}
	if d.err != nil || len(d.b) != 0 || !bytes.Equal(blobs[x.rank], mine) {
		return nil, x.fail(x.errf(op, fault.ErrMismatch, []int{0}, "rank 0's result of collective #%d does not hold %d blobs including this rank's", x.seq, x.world))
	}
	return blobs, nil
}

// pmiVerdict decodes rank 0's "<kind>.<ranks>.<detail>" error record.
func pmiVerdict(op, v string) error {
	parts := strings.SplitN(v, ".", 3)
	e := &fault.Error{Op: opName("pmi", op), Kind: fault.ErrPeerDead, Side: fault.Remote, Ranks: []int{0}, Detail: "rank 0 reports a failure it could not encode"}
	if len(parts) != 3 {
		return e
	}
	code, _ := strconv.Atoi(parts[0])
	e.Kind = kindOf(uint8(code))
	e.Side = sideOf(e.Kind)
	e.Ranks = nil
	if parts[1] != "" {
		for _, f := range strings.Split(parts[1], "-") {
			r, _ := strconv.Atoi(f)
			e.Ranks = append(e.Ranks, r)
		}
	}
	detail, _ := base64.RawURLEncoding.DecodeString(parts[2])
	e.Detail = "rank 0 reports: " + string(detail)
	return e
}

// fetchAll reads every other rank's blob of collective x.seq and checks
// its tag against this rank's.
func (x *pmiEx) fetchAll(op, tag, prefix string, mine []byte, deadline time.Time) ([][]byte, error) {
	blobs := make([][]byte, x.world)
	blobs[x.rank] = append([]byte{}, mine...)
	total := len(mine)
	for r := range x.world {
		if r == x.rank {
			continue
		}
		key := prefix + strconv.Itoa(r)
		n, size, sum, extra, found, err := x.getHeader(op, key, deadline)
		switch {
		case err != nil:
			var e *fault.Error
			if errors.As(err, &e) {
				return nil, err
			}
			return nil, x.errf(op, fault.ErrMismatch, []int{r}, "rank %d: %v", r, err)
		case !found:
			return nil, x.errf(op, fault.ErrMismatch, []int{r},
				"collective mismatch: rank %d did not publish collective #%d (%q) before the barrier", r, x.seq, tag)
		case extra != tagField(tag):
			return nil, x.errf(op, fault.ErrMismatch, []int{r}, "%s", mismatchDetail(r, x.seq, untagField(extra), x.rank, x.seq, tag))
		}
		total += size
		if total > MaxMessage {
			return nil, x.errf(op, fault.ErrTooLarge, nil, "gathered blobs exceed %d bytes", MaxMessage)
		}
		b, err := x.getChunks(op, key, n, size, sum, deadline)
		if err != nil {
			var e *fault.Error
			if errors.As(err, &e) {
				return nil, err
			}
			return nil, x.errf(op, fault.ErrPeerDead, []int{r}, "rank %d's blob of collective #%d: %v", r, x.seq, err)
		}
		blobs[r] = b
	}
	return blobs, nil
}

// wrap turns a PMI rc error into a *fault.Error; a *fault.Error passes through.
func (x *pmiEx) wrap(op string, err error, what string) error {
	if err == nil {
		return nil
	}
	var e *fault.Error
	if errors.As(err, &e) {
		return err
	}
	return &fault.Error{Op: opName("pmi", op), Kind: fault.ErrEnv, Side: fault.Local, Detail: "PMI " + what + " failed", Err: err}
}

func (x *pmiEx) Barrier(tag string, timeout time.Duration) error {
	_, err := x.AllGather(tag, nil, timeout)
	return err
}

// Close sends finalize and closes the socket. When the stream is out of sync
// (a command timed out) it cannot finalize; it then leaves the socket open
// until the process exits (see abandon).
func (x *pmiEx) Close() error {
	if x.closed {
		return nil
	}
	x.closed = true
	if x.pending {
		x.abandon()
		return nil
	}
	var err error
	if x.v2 {
		_, err = x.call2("close", "finalize", "finalize-response", time.Now().Add(5*time.Second))
	} else {
		_, err = x.call("close", "cmd=finalize", "finalize_ack", time.Now().Add(5*time.Second))
	}
	if err != nil {
		x.abandon()
		return err
	}
	return x.conn.Close()
}

// abandoned keeps PMI sockets that could not be finalized open until exit:
// Hydra kills the whole job as soon as one rank drops its PMI socket without
// finalize, which would kill the other ranks before they can report their
// own errors.
var (
	abandonedMu sync.Mutex
	abandoned   []net.Conn
)

func (x *pmiEx) abandon() {
	x.closed = true
	abandonedMu.Lock()
	abandoned = append(abandoned, x.conn)
	abandonedMu.Unlock()
}
