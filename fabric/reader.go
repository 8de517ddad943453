package fabric

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/ddstore/ddstore/fault"
)

// Reader reads remote memory. It owns an endpoint, CQ and AV (and its own
// domain when the provider's threading model needs it). A Reader is meant for
// one goroutine at a time; its mutex (never contended in that use) only makes
// a Close from elsewhere, e.g. Fabric.Close, wait for a running batch (at
// most its deadline) instead of freeing the endpoint under it.
type Reader struct {
	mu          sync.Mutex
	f           *Fabric
	dom         *cStructFidDomain
	ownDom      bool
	c           *cDdReader
	ops         []cDdOp // view of c.ops
	peers       []peerEntry
	window      int
	timeout     time.Duration
	broken      bool   // endpoint torn down after a timeout; recreated lazily
	quarantined bool   // a provider call was abandoned: never used or freed again
	stuckGen    uint64 // stuckPeers.gen last seen
	closed      bool
	pin         *pinSet
	mrc         mrCache
	one         [1]ReadOp
	rank1       [1]int32      // a single insert's rank, for C (no allocation)
	ran         time.Duration // time in C batch loops since the last yield (yieldRuntime)

	// gather state: ops too large for a round, read with fi_read after
	// the gather (allocated on first use), and counters for tests.
	big      []ReadOp
	bigIdx   []int32
	remap    []int32 // caller's op indices while the large rows are read (nil otherwise)
	gathered uint64  // ops served by gather replies
	regs     int64   // local registrations made (Timing.Regs)
}

type peerEntry struct {
	rank    int
	addr    []byte
	stuckAt time.Time // when a quarantined reader blamed this address (stuckPeers), else zero
}

// NewReader opens a reader endpoint.
func (f *Fabric) NewReader() (*Reader, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, &fault.Error{Op: "new reader", Kind: fault.ErrClosed, Detail: "fabric is closed"}
	}
	r := &Reader{f: f, dom: f.dom, window: f.opts.Window, timeout: f.opts.Timeout, pin: &pinSet{}}
	if f.inf.ReaderDomains {
		var dom *cStructFidDomain // a local: r holds Go pointers (see Open)
		rc := ddOpenDomain(f.fab, f.info, &dom)
		if rc != 0 {
			return nil, fiErr("fi_domain(reader)", rc)
		}
		r.dom = dom
		r.ownDom = true
	}
	r.c = ddReaderNew(f.fab, r.dom, f.info, cInt(r.window), chunkOps, cInt(f.avCount), cSizeT(f.avCount))
	if r.c == nil {
		r.closeDomain()
		return nil, localErr("new reader", int(fiEnomem), "out of memory")
	}
	var stage *cChar
	if rc := ddReaderSetup(r.c, &stage); rc != 0 {
		ddReaderFree(r.c)
		r.closeDomain()
		return nil, fiErr("reader "+cGoString(stage), rc)
	}
	if f.guarded && ddWdRegister(r.c) != 0 {
		ddReaderFree(r.c)
		r.closeDomain()
		return nil, localErr("new reader", int(fiEnospc), "cannot start the provider-call watchdog (or 4096 readers watched)")
	}
	r.c.gkey = cUint64T(f.opts.GatherKey)
	r.c.dead = f.dead
	r.ops = unsafe.Slice(r.c.ops, chunkOps)
	r.mrc.init(f.forceLocalMR || f.inf.MRLocal, f.inf.MREndpoint)
	f.readers[r] = struct{}{}
	return r, nil
}

func (r *Reader) closeDomain() {
	if r.ownDom && r.dom != nil {
		ddCloseDomain(r.dom)
	}
	r.dom = nil
}

// Close closes the reader's endpoint (and domain). Peers are forgotten.
// Nothing is in flight here (every batch completes or tears its endpoint
// down before returning), so local registrations go first: with
// FI_MR_ENDPOINT they are bound to the endpoint.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	if r.quarantined {
		return nil // never closed or freed: see quarantine
	}
	r.mrc.purge(r)
	var err error
	if rc := r.teardown(); rc != 0 {
		err = fiErr("fi_close(reader endpoint)", rc)
	}
	ddReaderFree(r.c)
	r.c = nil
	r.closeDomain()
	r.f.mu.Lock()
	delete(r.f.readers, r)
	r.f.mu.Unlock()
	return err
}

// AddPeer inserts a peer's address (its Fabric.Address) into the reader's
// address vector; rank only labels errors (and Fabric.PeerDead). The
// reader keeps addr, not a copy: it must not change while the reader
// lives. Once Reserve has made room, it allocates nothing (a reader's
// first read from a peer inserts it: the engine's lazy address vector).
func (r *Reader) AddPeer(rank int, addr []byte) (Peer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkAdd(rank, addr, 1); err != nil {
		return Peer{}, err
	}
	from := len(r.peers)
	r.peers = append(r.peers, peerEntry{rank: rank, addr: addr})
	if err := r.insert(from); err != nil {
		return Peer{}, err
	}
	return Peer{id: uint32(from + 1)}, nil
}

// Reserve makes room for n peers in all, so that AddPeer allocates
// nothing until the reader holds n.
func (r *Reader) Reserve(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.peers = slices.Grow(r.peers, n-len(r.peers))
}

// PeerRanks is the ranks in the reader's address vector, in the order
// they entered it (a copy).
func (r *Reader) PeerRanks() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]int, len(r.peers))
	for i, p := range r.peers {
		out[i] = p.rank
	}
	return out
}

// AddPeers inserts the addresses of ranks (addrs[i] is rank ranks[i]'s
// Fabric.Address, kept as AddPeer keeps it) into the reader's address
// vector with one fi_av_insert (one per address where their lengths
// differ), and returns their Peers in order. On failure none is added, and
// the error names the rank whose address was refused.
func (r *Reader) AddPeers(ranks []int, addrs [][]byte) ([]Peer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(ranks) != len(addrs) {
		return nil, invalid("av insert", nil, "%d ranks, %d addresses", len(ranks), len(addrs))
	}
	for i := range ranks {
		if err := r.checkAdd(ranks[i], addrs[i], len(ranks)); err != nil {
			return nil, err
		}
	}
	from := len(r.peers)
	for i, rank := range ranks {
		r.peers = append(r.peers, peerEntry{rank: rank, addr: addrs[i]})
	}
	if err := r.insert(from); err != nil {
		return nil, err
	}
	out := make([]Peer, len(ranks))
	for i := range out {
		out[i] = Peer{id: uint32(from + i + 1)}
	}
	return out, nil
}

// checkAdd refuses rank's address before n peers are added: a closed
// reader, an empty address, or no room left in the address vector.
func (r *Reader) checkAdd(rank int, addr []byte, n int) error {
	if r.closed {
		return &fault.Error{Op: "av insert", Ranks: rankList(rank), Kind: fault.ErrClosed, Detail: "reader is closed"}
	}
	if len(addr) == 0 {
		return invalid("av insert", rankList(rank), "empty address")
	}
	if len(r.peers)+n > r.f.avCount {
		return invalid("av insert", rankList(rank), "address vector full: %d peers and %d more (provider %s allows %d)",
			len(r.peers), n, r.f.inf.Provider, r.f.avCount)
	}
	return nil
}

// insert inserts r.peers[from:] (just appended) into the address vector,
// on an endpoint set up again first if a timeout tore it down. On failure
// they are dropped, and the endpoint is torn down: the address vector may
// hold some of them, so the next call builds it again from the peers
// before.
func (r *Reader) insert(from int) error {
	var err error
	if r.broken {
		if err = r.setupEndpoint(from); err == nil { // the peers before these
			r.broken = false
		}
	}
	if err == nil {
		if err = r.insertPeers(from); err != nil {
			r.teardown()
			r.broken = true
		}
	}
	if err != nil {
		r.peers = r.peers[:from]
	}
	return err
}

// insertPeers inserts r.peers[from:] into the address vector: in one call
// when their addresses have one length; after a refusal (or with lengths
// that differ) one at a time, on an address vector built again, so that
// the error names the rank refused.
func (r *Reader) insertPeers(from int) error {
	ps := r.peers[from:]
	if len(ps) > 1 && sameLength(ps) {
		buf := make([]byte, 0, len(ps)*len(ps[0].addr))
		ranks := make([]int32, len(ps))
		for i, p := range ps {
			buf = append(buf, p.addr...)
			ranks[i] = int32(p.rank)
		}
		avInserts.Add(1)
		if ddAvInsertN(r.c, cInt(from), cInt(len(ps)), &ranks[0], unsafe.Pointer(&buf[0])) == 0 {
			return nil
		}
		r.teardown()
		if err := r.setupEndpoint(from); err != nil {
			return err
		}
	}
	for i := from; i < len(r.peers); i++ {
		p := r.peers[i]
		r.rank1[0] = int32(p.rank)
		avInserts.Add(1)
		if rc := ddAvInsertN(r.c, cInt(i), 1, &r.rank1[0], unsafe.Pointer(&p.addr[0])); rc != 0 {
			e := fiErr("fi_av_insert", rc)
			e.Ranks = rankList(p.rank)
			return e
		}
	}
	return nil
}

// avInserts counts fi_av_insert calls (tests).
var avInserts atomic.Uint64

func sameLength(ps []peerEntry) bool {
	for _, p := range ps {
		if len(p.addr) != len(ps[0].addr) {
			return false
		}
	}
	return true
}

// setupEndpoint opens the endpoint (torn down) and inserts r.peers[:n].
func (r *Reader) setupEndpoint(n int) error {
	var stage *cChar
	if rc := ddReaderSetup(r.c, &stage); rc != 0 {
		return fiErr("reader "+cGoString(stage), rc)
	}
	all := r.peers
	r.peers = r.peers[:n]
	err := r.insertPeers(0)
	r.peers = all
	if err != nil {
		r.teardown()
	}
	return err
}

// ensureEndpoint recreates the endpoint after a teardown, re-inserting the
// peers in their original order.
func (r *Reader) ensureEndpoint() error {
	if !r.broken {
		return nil
	}
	if err := r.setupEndpoint(len(r.peers)); err != nil {
		return err
	}
	r.broken = false
	return nil
}

// Read reads one op. See ReadBatch.
func (r *Reader) Read(op ReadOp) (Timing, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.one[0] = op
	t, err := r.readBatch(r.one[:])
	r.one[0] = ReadOp{}
	return t, err
}

// ReadBatch performs every op, keeping at most Window reads in flight.
// It returns when all have completed, one failed (the rest are drained), or
// the deadline (Options.Timeout) passed; in the last case the endpoint is
// torn down before returning so nothing lands in a Dst afterwards, and it is
// recreated by the next call. Dst may be Go heap memory (pinned for the call)
// or off-heap memory. It makes no heap allocation.
func (r *Reader) ReadBatch(ops []ReadOp) (Timing, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	regs := r.regs
	tm, err := r.readBatch(ops)
	tm.Regs = r.regs - regs
	return tm, err
}

// yieldEvery is how often a reader's calls yield to the scheduler
// (yieldRuntime): under the Go runtime's 10ms forced-preemption period.
const yieldEvery = 2 * time.Millisecond

// yieldRuntime lets the scheduler run once every yieldEvery of a reader's
// calls. Each batch is one cgo call; a goroutine that makes such calls
// back to back is never rescheduled, and once it has run 10ms without
// being rescheduled, sysmon takes its P away at every cgo call that lasts
// more than one sysmon tick (20µs: a lone tcp read), and the call's return
// wakes sysmon from its deep sleep (a futex wake on the reader's path,
// and a thread woken on a core the target may need). Gosched resets that
// clock; with nothing else runnable it resumes the caller at once, no
// syscall. The time counted is what the C batch loops measured of
// themselves (Timing.Post and CQWait, added up in r.ran), so a call reads
// no clock of its own for this.
func (r *Reader) yieldRuntime() {
	if r.ran >= yieldEvery {
		r.ran = 0
		runtime.Gosched()
	}
}

func (r *Reader) readBatch(ops []ReadOp) (Timing, error) {
	var tm Timing
	r.yieldRuntime()
	if r.closed {
		return tm, r.closedErr()
	}
	if err := r.ensureEndpoint(); err != nil {
		return tm, err
	}
	if len(ops) <= chunkOps {
		return tm, r.readChunk(ops, 0, r.timeout, &tm)
	}
	t0 := time.Now()
	for start := 0; start < len(ops); start += chunkOps {
		end := start + chunkOps
		if end > len(ops) {
			end = len(ops)
		}
		// One deadline for the whole call; a chunk gets what is left (at
		// least 1ns, so an expired deadline fails with the right peer).
		left := max(r.timeout-time.Since(t0), 1)
		if err := r.readChunk(ops[start:end], start, left, &tm); err != nil {
			markRest(ops, start, end)
			return tm, err
		}
	}
	return tm, nil
}

// markRest sets Done on the ops around a failed chunk [start, end) of a
// call: those before it completed, those after it were never posted.
func markRest(ops []ReadOp, start, end int) {
	for i := range ops[:start] {
		ops[i].Done = true
	}
	for i := range ops[end:] {
		ops[end+i].Done = false
	}
}

// doneTimes copies the chunk's per-op completion times (set by the C
// batch loops) into ops[i].DoneNs.
func (r *Reader) doneTimes(ops []ReadOp) {
	for i := range ops {
		ops[i].DoneNs = int64(r.ops[i].done_t) << 4
	}
}

// markDone copies the chunk's per-op completion flags (set by the C batch
// loops) into ops[i].Done; called on a failed chunk, before clearOps.
func (r *Reader) markDone(ops []ReadOp) {
	for i := range ops {
		ops[i].Done = r.ops[i].done != 0
	}
}

// SetTimeout replaces the deadline of the reader's later ReadBatch,
// ReadGather and Read calls (Options.Timeout until then); d ≤ 0 restores
// Options.Timeout. A caller with a fallback (the engine's replica
// failover) gives a read less time than the hard deadline.
func (r *Reader) SetTimeout(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d <= 0 {
		d = r.f.opts.Timeout
	}
	r.timeout = d
}

// clearOps is the one cleanup of every exit of readChunk and gatherChunk:
// it drops the Go pointers (dst) and gather skip flags of r.ops[0, n) from
// the C-malloc'ed op array, then unpins. C never keeps a Go pointer after a
// call returns, whichever way it returns.
func (r *Reader) clearOps(n int) {
	for i := 0; i < n; i++ {
		c := &r.ops[i]
		c.dst = nil
		c.skip = 0
	}
	r.pin.unpin()
}

// fillOp sets C op c from op, all but its destination pointer, which
// the read and gather paths set each their own way. Small enough to be
// inlined on the hot path.
func fillOp(c *cDdOp, op *ReadOp) {
	c.len = cUint64T(len(op.Dst))
	c.addr = cUint64T(op.Addr)
	c.key = cUint64T(op.Key)
	c.peer = cUint32T(op.Peer.id - 1)
	c.desc = nil
	c.done = 0
	c.done_t = 0
}

func (r *Reader) readChunk(ops []ReadOp, base int, timeout time.Duration, tm *Timing) error {
	n := len(ops)
	defer r.clearOps(n)
	npeers := uint32(len(r.peers))
	maxMsg := r.f.inf.MaxMsgSize
	for i := range ops {
		ops[i].Done = false
	}
	r.checkStuck()
	for i := range ops {
		op := &ops[i]
		if op.Peer.id == 0 || op.Peer.id > npeers {
			return badPeer(r.opIndex(base, i))
		}
		if err := r.stuckErr(&r.peers[op.Peer.id-1], r.opIndex(base, i)); err != nil {
			return err
		}
		if len(op.Dst) == 0 || uint64(len(op.Dst)) > maxMsg {
			return badDst(r.opIndex(base, i), r.peers[op.Peer.id-1].rank, len(op.Dst), maxMsg)
		}
		p := unsafe.Pointer(unsafe.SliceData(op.Dst))
		r.pin.pin(p, cap(op.Dst))
		c := &r.ops[i]
		c.dst = p
		fillOp(c, op)
	}
	if r.mrc.enabled {
		t0 := time.Now()
		r.mrc.begin(r)
		for i := range ops {
			desc, err := r.mrc.lookup(r, ops, i)
			if err != nil {
				r.mrc.releaseTemp(r)
				if fe, ok := err.(*fault.Error); ok {
					fe.Ranks = rankList(r.peers[ops[i].Peer.id-1].rank)
					fe.Detail = fmt.Sprintf("op %d: registering %d bytes of Dst", r.opIndex(base, i), len(ops[i].Dst))
				}
				return err
			}
			r.ops[i].desc = desc
		}
		tm.MR += time.Since(t0)
	}
	rc := ddGuardedReadBatch(r.c, cInt(n), cInt64T(timeout))
	res := &r.c.res
	tm.Post += time.Duration(res.post_ns)
	tm.CQWait += time.Duration(res.wait_ns)
	r.ran += time.Duration(res.post_ns + res.wait_ns)
	r.afterCall(res)
	if r.mrc.enabled {
		t0 := time.Now()
		r.mrc.releaseTemp(r)
		tm.MR += time.Since(t0)
	}
	if rc == 0 {
		r.doneTimes(ops)
		r.clearOps(n) // the deferred call repeats it: cheap
		return nil
	}
	r.markDone(ops)
	r.clearOps(n) // before building the error
	return r.batchError(res, base, "reads")
}

// afterCall handles what a batch call left behind: a provider call that
// never returned (the watchdog abandoned it: quarantine the reader), or an
// endpoint that was torn down (recreated by the next call) and whose close
// failed: then the provider may still write the destinations, so they stay
// pinned and registered for the life of the process (leaked, and counted).
func (r *Reader) afterCall(res *cDdResult) {
	if res.stage == ddStuck {
		if i := int(res.failed_op); i >= 0 && i < chunkOps && int(r.ops[i].peer) < len(r.peers) {
			markStuck(r.peers[r.ops[i].peer].addr)
		}
		r.quarantine()
		return
	}
	if res.torn_down == 0 {
		return
	}
	r.broken = true
	if res.teardown_rc != 0 {
		r.leakBuffers()
		r.f.leaveRegion(r.shmRegion()) // before the next setup renames r.c
		return
	}
	r.mrc.purgeEndpointBound(r)
}

// leaked holds what a provider might still write: pins of destinations and
// registrations of readers whose endpoint could not be closed or whose call
// was abandoned. Never released (an unreachable Pinner with pins panics).
var leaked struct {
	sync.Mutex
	pins []*pinSet
}

// leakBuffers keeps the current call's destinations pinned forever and
// forgets (without closing) the reader's local registrations.
func (r *Reader) leakBuffers() {
	leaked.Lock()
	leaked.pins = append(leaked.pins, r.pin)
	leaked.Unlock()
	r.pin = &pinSet{}
	r.mrc.abandon()
}

// quarantine retires a reader whose provider call did not return: its
// endpoint, CQ, AV, domain, C state, pinned destinations and registrations
// are never used, closed or freed again, since the provider may still hold
// its locks or write its buffers. Every later call fails.
func (r *Reader) quarantine() {
	r.quarantined = true
	r.f.keepDead.Store(true) // the abandoned call may still read it
	r.closed = true          // every later call fails (closedErr); Close frees nothing
	r.broken = true
	r.leakBuffers()
	r.f.leaveRegion(r.shmRegion())
	r.f.mu.Lock()
	delete(r.f.readers, r)
	r.f.mu.Unlock()
}

// teardown closes the reader's endpoint (dd_reader_teardown). An endpoint
// that fails to close keeps its shm region file, which Fabric.Close then
// removes.
func (r *Reader) teardown() cInt {
	rc := ddReaderTeardown(r.c)
	if rc != 0 {
		r.f.leaveRegion(r.shmRegion()) // the name outlives the teardown
	}
	return rc
}

// shmPrefix begins the endpoint names of the shm provider
// ("fi_shm://<pid>:<uid>:<n>"), whose regions are /dev/shm/<pid>:<uid>:<n>.
const shmPrefix = "fi_shm://"

// shmRegion is the file of the shm provider's region behind the reader's
// endpoint; "" on other providers.
func (r *Reader) shmRegion() string {
	return shmRegionOf(cGoBytes(unsafe.Pointer(&r.c.name[0]), cInt(r.c.namelen)))
}

// shmRegionOf is the region file of the shm endpoint named name (as
// fi_getname gives it, NUL-terminated or not); "" unless name is shm's
// fi_shm://<pid>:<uid>:<n>.
func shmRegionOf(name []byte) string {
	rest, ok := strings.CutPrefix(string(bytes.TrimRight(name, "\x00")), shmPrefix)
	if !ok || !shmRegionName.MatchString(rest) {
		return ""
	}
	return "/dev/shm/" + rest
}

var shmRegionName = regexp.MustCompile(`^[0-9]+:[0-9]+:[0-9]+$`)

// QuarantinedReaders counts the readers of this process abandoned inside a
// provider call that overran its deadline (telemetry: each holds an
// endpoint and buffers forever).
func QuarantinedReaders() uint64 { return uint64(ddQuarantinedCount()) }

// GatherStrangers counts the gather requests that this process's targets
// dropped because they carried another key than Options.GatherKey: an
// endpoint outside the job asking for rows (telemetry's gather_strangers).
func GatherStrangers() uint64 { return uint64(ddGatherStrangersCount()) }

// LeakedEndpoints counts reader endpoints whose close failed after an error
// or deadline; their destinations stay pinned and registered (telemetry).
func LeakedEndpoints() uint64 { return uint64(ddLeakedEpsCount()) }

func (r *Reader) closedErr() error {
	if r.quarantined {
		return &fault.Error{Op: "read", Side: fault.Local, Kind: fault.ErrClosed,
			Detail: "reader quarantined: a provider call overran its deadline and never returned; open a new reader"}
	}
	return errClosedReader
}

// opIndex is the caller's index of op i of a chunk that starts at base
// (remapped for the large rows a gather reads with fi_read).
func (r *Reader) opIndex(base, i int) int {
	if r.remap != nil && i >= 0 && i < len(r.remap) {
		return int(r.remap[i])
	}
	return base + i
}

// batchError turns a failed dd_read_batch or dd_gather into a *fault.Error
// that names the peer, the op and whose failure it is: a deadline the peer
// did not meet, a lost connection or an error completion is Remote; a
// failure of this process's CQ, endpoint or memory is Local; an entry the
// target rejected is neither (the peer is alive; the request was wrong).
func (r *Reader) batchError(res *cDdResult, base int, inflight string) error {
	idx := int(res.failed_op)
	rank := -1
	if idx >= 0 && idx < chunkOps {
		c := &r.ops[idx]
		if int(c.peer) < len(r.peers) {
			rank = r.peers[c.peer].rank
		}
	}
	code := int(res.err)
	e := &fault.Error{Ranks: rankList(rank), Side: fault.Remote}
	if code != 0 {
		e.Err = errno(code)
	}
	detail := ""
	if idx >= 0 && idx < chunkOps {
		c := &r.ops[idx]
		detail = fmt.Sprintf("op %d: %d bytes at remote address %#x, key %#x", r.opIndex(base, idx), uint64(c.len), uint64(c.addr), uint64(c.key))
		if r.remap != nil {
			detail += fmt.Sprintf(" (read with fi_read: larger than GatherMaxBytes %d)", r.f.opts.GatherMaxBytes)
		}
	}
	switch res.stage {
	case ddPost:
		e.Op = "fi_read"
		if t := cGoString(&res.text[0]); t != "" {
			e.Op = t // gather: fi_tsend or fi_trecv
		}
		switch {
		case pathLost(code):
			e.Kind = fault.ErrPeerDead
		case localCode(code):
			e.Side = fault.Local
		}
	case ddReject:
		e.Op = "gather"
		e.Side = fault.Unknown
		e.Kind = fault.ErrRejected
		detail += "; target: " + cGoString(&res.text[0])
	case ddBadreply:
		e.Op = "gather"
		detail += "; " + cGoString(&res.text[0]) + "; endpoint torn down"
	case ddNomem:
		e.Op = "gather"
		e.Side = fault.Local
		detail += "; out of memory for the reader's gather buffers"
	case ddCqerr:
		e.Op = "fi_cq_readerr"
		if cqErrLostPath(code, int(res.prov_errno)) {
			e.Kind = fault.ErrPeerDead
		} else if syscall.Errno(code) == syscall.ENOMEM {
			e.Side = fault.Local
		}
		if t := cGoString(&res.text[0]); t != "" {
			detail += "; provider: " + t
		}
		if res.guessed != 0 {
			detail += " (no op context in the error entry: blamed the oldest read in flight)"
		}
	case ddCqread:
		e.Op = "fi_cq_read"
		e.Side = fault.Local
		detail += "; endpoint torn down"
	case ddTimeout:
		e.Op = "read"
		e.Kind = fault.ErrTimeout
		e.Err = nil
		detail += fmt.Sprintf("; deadline %v passed with %d %s in flight", r.timeout, int(res.inflight_at_fail), inflight)
		if res.inflight_at_fail == 0 {
			detail += " (fi_read kept returning -FI_EAGAIN: peer unreachable or not progressing)"
		}
		if res.torn_down != 0 {
			detail += ", endpoint torn down"
		}
	case ddStuck:
		e.Op = "read"
		e.Kind = fault.ErrTimeout
		e.Err = nil
		detail += fmt.Sprintf("; a provider call was still running %v past the deadline %v: abandoned, reader quarantined "+
			"(its endpoint and buffers are kept, never reused)", time.Duration(ddWdGraceNs), r.timeout)
	case ddPeerdead:
		e.Op = "read"
		e.Kind = fault.ErrPeerDead
		e.Err = nil
		detail += fmt.Sprintf("; rank %d declared dead (Fabric.PeerDead) while %d %s were in flight: cut short, endpoint torn down", rank, int(res.inflight_at_fail), inflight)
	case ddNoep:
		e.Op = "read"
		e.Side = fault.Local
		detail = "reader has no endpoint"
	}
	if res.torn_down != 0 && res.teardown_rc != 0 {
		// The cancel-by-close guarantee is void: say so loudly.
		detail += "; fi_close(endpoint) failed: " + strerror(int(-res.teardown_rc))
	}
	e.Detail = detail
	return e
}

// activeReaders is how many readers of this process are inside a batch
// (tests: every batch leaves the count on every exit).
func activeReaders() int { return int(ddActiveReaders()) }

// waitFD reports whether the reader's CQ has a wait fd to sleep on (tests).
func (r *Reader) waitFD() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c != nil && ddReaderWaitfd(r.c) >= 0
}

// localMR registers [p, p+n) with FI_READ access in the reader's domain.
func (r *Reader) localMR(p unsafe.Pointer, n int) (mrHandle, error) {
	req := uint64(0)
	if !r.f.inf.MRProvKey {
		req = r.f.nextKey.Add(1)
	}
	var mr *cStructFidMr
	var key cUint64T
	var desc unsafe.Pointer
	bind := cInt(0)
	if r.f.inf.MREndpoint {
		bind = 1
	}
	rc := ddMrReg(r.dom, r.c.ep, p, cSizeT(n), fiRead, cUint64T(req), bind, &mr, &key, &desc)
	if r.f.failLocalMR && rc == 0 {
		ddCloseMr(mr)
		rc = -fiEnomem
	}
	if rc != 0 {
		return mrHandle{}, fiErr("fi_mr_reg(local)", rc)
	}
	liveLocalMRs.Add(1)
	r.regs++
	return mrHandle{mr: unsafe.Pointer(mr), desc: desc}, nil
}

func (r *Reader) closeMR(h mrHandle) {
	if h.mr != nil {
		ddCloseMr((*cStructFidMr)(h.mr))
		liveLocalMRs.Add(-1)
	}
}

// baselineRead runs the plain C reference loop (dd_baseline) on this
// reader's endpoint: n reads of rowLen bytes at base+offs[i] into dst rows.
// It exists for BenchmarkReadBaselineC.
func (r *Reader) baselineRead(p Peer, dst []byte, rowLen int, offs []uint64, base, key uint64, window int) (time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, r.closedErr()
	}
	if err := r.ensureEndpoint(); err != nil {
		return 0, err
	}
	if p.id == 0 || int(p.id) > len(r.peers) {
		return 0, badPeer(0)
	}
	slots := len(dst) / rowLen
	if slots == 0 || len(offs) == 0 {
		return 0, errors.New("fabric: baselineRead: empty dst or offsets")
	}
	coffs := (*cUint64T)(cMalloc(cSizeT(8 * len(offs))))
	defer cFree(unsafe.Pointer(coffs))
	copy(unsafe.Slice((*uint64)(unsafe.Pointer(coffs)), len(offs)), offs)
	var pin runtime.Pinner
	pin.Pin(&dst[0])
	defer pin.Unpin()
	el := ddBaseline(r.c, cUint32T(p.id-1), (*cChar)(unsafe.Pointer(&dst[0])), cUint64T(rowLen), cInt(slots),
		coffs, cInt(len(offs)), cInt(window), cUint64T(base), cUint64T(key), cInt64T(r.timeout))
	if el < 0 {
		r.broken = true // dd_baseline tore the endpoint down
		return 0, fiErr("baseline fi_read", cInt(el))
	}
	return time.Duration(el), nil
}

// InjectStuckCalls makes the next n guarded provider calls of this process
// (readers on shm, under the watchdog) spin as a call stuck on a stopped
// peer's lock would, until the watchdog abandons them and quarantines their
// readers; n = 0 cancels what is left. For fault-injection tests of the
// layers above (the engine's reader renewal); never in a job.
func InjectStuckCalls(n int) { ddSetTestStuck(cInt(n)) }

// setTestStuck makes the next guarded call stuck, or cancels it (tests).
func setTestStuck(on bool) {
	if on {
		InjectStuckCalls(1)
	} else {
		InjectStuckCalls(0)
	}
}

// Quarantined reports whether the watchdog abandoned a provider call of
// this reader: it refuses every call from then on, and its owner replaces
// it with a new reader.
func (r *Reader) Quarantined() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.quarantined
}

// setFailClose makes the reader's endpoint close fail (tests).
func (r *Reader) setFailClose(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.fail_close = 0
	if on {
		r.c.fail_close = 1
	}
}
