package engine

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/telemetry"
)

// maxReadBytes caps one fabric read of a contiguous range (Get); larger
// runs are split into reads of whole rows up to this size.
const maxReadBytes = 4 << 20

// queueOps is how many reads a context queues before it runs them: the
// fabric's chunk (fabric.Reader.ReadBatch and ReadGather keep Window reads
// in flight over up to 4096 ops under one deadline), so a batch of up to
// 4096 remote rows is one fabric call and one Timeout, not one per Window.
const queueOps = 4096

// gatherMaxOpBytes: ReadModeAuto gathers only batches whose reads (rows,
// or contiguous runs of Get) are all at most this size. Measured on tcp,
// gather wins at 3 KB rows (0.97 vs 5.8 µs/row) and 12.5 KB (2.8 vs 7.6)
// but loses at 200 KB (41 vs 33) and 1 MiB (205 vs 187).
const gatherMaxOpBytes = 64 << 10

// readCtx is one fabric reader with its peer handles and a preallocated
// op buffer. It is used by one goroutine at a time: a Reader's, or a
// variable's shared reader under the variable's mutex.
type readCtx struct {
	s      *Store
	fr     *fabric.Reader
	peers  []fabric.Peer   // by group member; zero for mapped shards
	ops    []fabric.ReadOp // len 0, cap window
	opRank []int           // rank of ops[i] (its target), for errors and failover
	// opMember and opOff: shard (home group member) and byte offset in
	// it of ops[i], to re-address a missing read to a replica.
	opMember []int32
	opOff    []int64
	rpeers   []fabric.Peer // by rank: replicas connected for failover (peerOf)
	timeout  time.Duration // deadline last given to fr (0: the fabric's own)
	tel      int32         // telemetry reader id
	gather   int           // flushes of at least this many ops use ReadGather; 0 = never
	auto     bool          // ReadModeAuto: gather only when every queued op is <= gatherMaxOpBytes
	maxOp    int           // largest queued op, bytes
}

// newReadCtx opens a fabric reader and connects it to every group member
// whose shards are read through the fabric.
func (s *Store) newReadCtx(telReader int32) (*readCtx, error) {
	c := &readCtx{s: s, tel: telReader, peers: make([]fabric.Peer, s.width), rpeers: make([]fabric.Peer, s.nranks)}
	if s.fab == nil {
		return c, nil
	}
	fr, err := s.fab.NewReader()
	if err != nil {
		return nil, wrapf(nil, "NewReader", "", err, "open a fabric reader")
	}
	c.fr = fr
	for i := 0; i < s.width; i++ {
		r := s.groupLo + i
		if s.peers[r].sameNode {
			continue
		}
		p, err := fr.AddPeer(r, s.peers[r].Addr)
		if err != nil {
			fr.Close()
			return nil, &Error{Op: "NewReader", Ranks: []int{r}, Detail: "connect to the peer", Err: err}
		}
		c.peers[i] = p
		c.rpeers[r] = p
	}
	// Storage-only ranks (storage.go): every reader reaches them all, so
	// that reads of their shards and failover between their groups never
	// connect on the hot path.
	for r := s.world; r < len(s.peers); r++ {
		if s.peers[r].sameNode {
			continue
		}
		p, err := fr.AddPeer(r, s.peers[r].Addr)
		if err != nil {
			fr.Close()
			return nil, wrapf(nil, "NewReader", "", err, "connect reader to storage rank %d", r)
		}
		c.rpeers[r] = p
	}
	switch s.opts.ReadMode {
	case ReadModeGather:
		c.gather = 2
	case ReadModeAuto:
		// Gather on software-RMA providers, for batches of at least
		// gatherMinOps reads of at most gatherMaxOpBytes each.
		if s.fab.Info().SoftwareRMA {
			c.gather = gatherMinOps
			c.auto = true
		}
	}
	w := max(s.opts.Fabric.Window, queueOps)
	c.ops = make([]fabric.ReadOp, 0, w)
	c.opRank = make([]int, 0, w)
	c.opMember = make([]int32, 0, w)
	c.opOff = make([]int64, 0, w)
	return c, nil
}

func (c *readCtx) close() {
	if c != nil && c.fr != nil {
		c.fr.Close()
		c.fr = nil
	}
}

// acquire finds the variable and counts the call in flight; the caller
// must v.inflight.Add(-1) when done.
func (s *Store) acquire(op, name string) (*Var, error) {
	v := (*s.vars.Load())[name]
	if v == nil {
		return nil, s.errLookup(op, name)
	}
	if err := v.enter(op); err != nil {
		return nil, err
	}
	return v, nil
}

// enter counts a call in flight, then checks that the variable is alive
// (Free and Close set the flags first, then wait for the count).
func (v *Var) enter(op string) error {
	v.inflight.Add(1)
	if v.s.closed.Load() {
		v.inflight.Add(-1)
		return errf(ErrClosed, op, v.name, "store closed")
	}
	if v.freed.Load() {
		v.inflight.Add(-1)
		return errf(ErrUnknownVar, op, v.name, "variable freed")
	}
	return nil
}

// owner returns the group member whose shard holds global row g
// (0 ≤ g < global): the largest i with offsets[i] ≤ g.
func (v *Var) owner(g int64) int {
	lo, hi := 0, len(v.offsets)-1
	for hi-lo > 1 {
		mid := int(uint(lo+hi) >> 1)
		if v.offsets[mid] <= g {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// callStats accumulates one call's telemetry. With telemetry off (timed
// false) nothing reads the clock.
type callStats struct {
	timed                 bool
	locked                bool  // holds the variable's shared reader (v.mu)
	start, end            int64 // telemetry.Nanotime
	lockWait              int64
	copyTime              int64
	gpuSync               int64 // device reads: waiting for the GPU
	fabTime               int64 // wall time inside fabric calls
	fab                   fabric.Timing
	localRows, remoteRows int64
	targets               telemetry.TargetSet
	failovers             int64  // rows served by a replica instead of their owner
	op                    string // the API call, for errors: "Get", "GetBatch", "GetRanges"
}

// now reads the clock (ns) when the call is timed, else returns 0.
func (st *callStats) now() int64 {
	if st.timed {
		return telemetry.Nanotime()
	}
	return 0
}

// finish releases the shared reader, if the call took it, and records the
// call. Stripe (var, 0) of the store's shared path has concurrent writers
// (calls with all-local rows and early errors never take v.mu), so it is
// always recorded Concurrent, and need not be recorded under the lock.
func (v *Var) finish(tel int32, st *callStats, rows int64, err error) {
	if st.locked {
		st.locked = false
		v.mu.Unlock()
	}
	v.record(tel, st, rows, err)
}

func (v *Var) record(tel int32, st *callStats, rows int64, err error) {
	if !st.timed {
		return
	}
	if st.end == 0 {
		st.end = telemetry.Nanotime()
	}
	total := st.end - st.start
	c := telemetry.Call{Var: v.telID, Reader: tel, Rows: rows, Bytes: rows * v.rowBytes,
		LocalRows: st.localRows, RemoteRows: st.remoteRows, Targets: st.targets, Err: err != nil, EndNano: st.end,
		MRRegs: st.fab.Regs, Failovers: st.failovers,
		// The shared path (0) and the overflow stripe have several writers.
		Concurrent: tel == 0 || tel >= maxTelReaders-1}
	c.Phases[telemetry.PhaseGPUSync] = st.gpuSync
	c.Phases[telemetry.PhaseLockWait] = st.lockWait
	c.Phases[telemetry.PhaseMR] = int64(st.fab.MR)
	c.Phases[telemetry.PhasePost] = int64(st.fab.Post)
	c.Phases[telemetry.PhaseCQWait] = int64(st.fab.CQWait)
	c.Phases[telemetry.PhaseCopy] = st.copyTime
	other := total - st.gpuSync - st.lockWait - int64(st.fab.MR) - int64(st.fab.Post) - int64(st.fab.CQWait) - st.copyTime
	if other < 0 {
		other = 0
	}
	c.Phases[telemetry.PhaseOther] = other
	if err != nil {
		if r := fault.RanksOf(err); len(r) == 1 {
			c.ErrPeer = int32(r[0]) + 1
		}
	}
	v.s.tel.Record(&c)
}

// lockShared takes the variable's shared reader, timing the wait. The
// Store path calls it at its first remote read, so calls (or parts of
// calls) served from mapped shards never wait for the lock. It resets the
// reader's queue.
func (v *Var) lockShared(st *callStats) *readCtx {
	t := st.now()
	v.mu.Lock()
	st.locked = true
	st.lockWait = st.now() - t
	v.shared.reset()
	return v.shared
}

// getBatch reads rows idx[i] into dst[i*rowBytes:]. c is the Reader's
// context, or nil for the variable's shared reader.
func (v *Var) getBatch(c *readCtx, idx []int64, dst []byte) (err error) {
	if err = v.enter("GetBatch"); err != nil {
		return err
	}
	defer v.inflight.Add(-1)
	st := callStats{timed: v.telID >= 0 && v.s.tel != nil, op: "GetBatch"} // telID is stable while entered
	st.start = st.now()
	tel := int32(0)
	if c != nil {
		tel = c.tel
	}
	rows := int64(len(idx))
	defer func() { v.finish(tel, &st, rows, err) }()

	rb := v.rowBytes
	if need := rows * rb; int64(len(dst)) < need {
		return v.errShort("GetBatch", rows, need, len(dst))
	}
	for _, g := range idx {
		if g < 0 || g >= v.global {
			return v.errIndex(g)
		}
	}
	s := v.s
	var deadRank = -1
	if c != nil {
		c.reset()
	}
	for i, g := range idx {
		o := v.owner(g)
		rank := v.home[o]
		off := (g - v.offsets[o]) * rb
		// Full capacity on purpose: the fabric pins a destination once and
		// recognises later rows of the same buffer by [ptr, ptr+cap).
		d := dst[int64(i)*rb : int64(i+1)*rb]
		if rank != s.rank && v.shun(rank) {
			var ok bool
			if c, ok, err = v.routeAvoided(c, &st, o, off, d); err != nil {
				return err
			}
			if ok {
				continue
			}
			if s.dead.has(rank) {
				if deadRank < 0 {
					deadRank = rank
				}
				continue
			}
		}
		st.targets.Add(rank, 1)
		if src := v.src[o]; src != nil {
			copy(d, src[off:off+rb])
			st.localRows++
			continue
		}
		st.remoteRows++
		if c == nil {
			c = v.lockShared(&st) // first remote row of a Store call
		}
		op := fabric.ReadOp{Dst: d, Peer: c.rpeers[rank], Addr: v.remote[o].base + uint64(off), Key: v.remote[o].key}
		if err = v.enqueue(c, &st, op, rank, o, off); err != nil {
			return err
		}
	}
	return v.drain(c, &st, deadRank)
}

// get reads rows [start, start+count) into dst, coalescing each shard's
// part into one copy (mapped) or reads of up to maxReadBytes (fabric).
func (v *Var) get(c *readCtx, start, count int64, dst []byte) (err error) {
	if err = v.enter("Get"); err != nil {
		return err
	}
	defer v.inflight.Add(-1)
	st := callStats{timed: v.telID >= 0 && v.s.tel != nil, op: "Get"} // telID is stable while entered
	st.start = st.now()
	tel := int32(0)
	if c != nil {
		tel = c.tel
	}
	defer func() { v.finish(tel, &st, count, err) }()

	if start < 0 || count < 0 || start > v.global-count {
		return v.errRange(start, count)
	}
	if need := count * v.rowBytes; int64(len(dst)) < need {
		return v.errShort("Get", count, need, len(dst))
	}
	if count == 0 {
		return nil
	}
	if c != nil {
		c.reset()
	}
	deadRank := -1
	if c, err = v.readRun(c, &st, start, count, dst, &deadRank); err != nil {
		return err
	}
	return v.drain(c, &st, deadRank)
}

// getRanges reads the row ranges [starts[i], starts[i]+counts[i]) into dst
// one after the other: range i lands at the sum of the earlier counts
// (in rows). Every range is checked before anything is read; the reads of
// all ranges are queued together, so a batch of small ranges is one fabric
// call (gathered on software-RMA providers, like GetBatch).
func (v *Var) getRanges(c *readCtx, starts, counts []int64, dst []byte) (err error) {
	if err = v.enter("GetRanges"); err != nil {
		return err
	}
	defer v.inflight.Add(-1)
	st := callStats{timed: v.telID >= 0 && v.s.tel != nil, op: "GetRanges"} // telID is stable while entered
	st.start = st.now()
	tel := int32(0)
	if c != nil {
		tel = c.tel
	}
	var rows int64
	defer func() { v.finish(tel, &st, rows, err) }()

	if len(starts) != len(counts) {
		return errf(ErrIndex, "GetRanges", v.name, "%d starts and %d counts", len(starts), len(counts))
	}
	var total int64
	for i, s := range starts {
		n := counts[i]
		if s < 0 || n < 0 || s > v.global-n {
			return errf(ErrIndex, "GetRanges", v.name, "range %d of %d: rows [%d,%d) (start %d, count %d) outside [0,%d)",
				i, len(starts), s, s+n, s, n, v.global)
		}
		total += n // ≤ len(starts)·global: no overflow for any real store
	}
	if need := total * v.rowBytes; int64(len(dst)) < need {
		return v.errShort("GetRanges", total, need, len(dst))
	}
	rows = total
	if c != nil {
		c.reset()
	}
	deadRank := -1
	var at int64
	for i, s := range starts {
		n := counts[i]
		if n == 0 {
			continue
		}
		if c, err = v.readRun(c, &st, s, n, dst[at*v.rowBytes:(at+n)*v.rowBytes], &deadRank); err != nil {
			return err
		}
		at += n
	}
	return v.drain(c, &st, deadRank)
}

// readRun copies or queues the reads of rows [start, start+count) into
// dst, shard by shard: one copy per mapped shard, fabric reads of up to
// maxReadBytes per remote shard. It returns the context that holds the
// queued reads (the shared reader, taken at the first remote run of a
// Store call). The range is valid and dst holds it.
func (v *Var) readRun(c *readCtx, st *callStats, start, count int64, dst []byte, deadRank *int) (*readCtx, error) {
	s := v.s
	rb := v.rowBytes
	end := start + count
	chunkRows := int64(maxReadBytes) / rb
	if chunkRows < 1 {
		chunkRows = 1
	}
	g := start
	for o := v.owner(start); g < end; o++ {
		hi := v.offsets[o+1]
		if hi > end {
			hi = end
		}
		if hi <= g {
			continue
		}
		rank := v.home[o]
		n := hi - g
		d := dst[(g-start)*rb : (hi-start)*rb]
		off := (g - v.offsets[o]) * rb
		g = hi
		if rank != s.rank && v.shun(rank) {
			var ok bool
			var err error
			if c, ok, err = v.routeAvoided(c, st, o, off, d); err != nil {
				return c, err
			}
			if ok {
				continue
			}
			if s.dead.has(rank) {
				if *deadRank < 0 {
					*deadRank = rank
				}
				continue
			}
		}
		st.targets.Add(rank, n)
		if src := v.src[o]; src != nil {
			copy(d, src[off:off+n*rb])
			st.localRows += n
			continue
		}
		st.remoteRows += n
		if c == nil {
			c = v.lockShared(st) // first remote run of a Store call
		}
		for k := int64(0); k < n; k += chunkRows {
			m := n - k
			if m > chunkRows {
				m = chunkRows
			}
			op := fabric.ReadOp{Dst: d[k*rb : (k+m)*rb], Peer: c.rpeers[rank],
				Addr: v.remote[o].base + uint64(off+k*rb), Key: v.remote[o].key}
			if err := v.enqueue(c, st, op, rank, o, off+k*rb); err != nil {
				return c, err
			}
		}
	}
	return c, nil
}

// enqueue queues one fabric read of rank's copy of shard o (home member
// o), at byte offset off of the shard, and runs the queue when it is full.
func (v *Var) enqueue(c *readCtx, st *callStats, op fabric.ReadOp, rank, o int, off int64) error {
	c.ops = append(c.ops, op)
	c.opRank = append(c.opRank, rank)
	c.opMember = append(c.opMember, int32(o))
	c.opOff = append(c.opOff, off)
	c.maxOp = max(c.maxOp, len(op.Dst))
	if len(c.ops) == cap(c.ops) {
		return v.flush(c, st)
	}
	return nil
}

// drain runs the reads still queued and closes the call's timing: copy is
// what the call spent outside the fabric and the lock wait. A row owned by
// a dead rank fails the call once every other row is in place.
func (v *Var) drain(c *readCtx, st *callStats, deadRank int) error {
	if c != nil && len(c.ops) > 0 {
		if err := v.flush(c, st); err != nil {
			return err
		}
	}
	st.end = st.now()
	// Copy: the call's own copies, plus the fabric's copies out of its
	// gather bounce buffer.
	st.copyTime = st.end - st.start - st.lockWait - st.fabTime + int64(st.fab.Copy)
	if deadRank >= 0 {
		if v.canFailover() { // every replica of the shard is dead too
			return v.errNoReplica(st, v.memberOf(deadRank), v.errDead(deadRank))
		}
		return v.errDead(deadRank)
	}
	return nil
}

// flush runs the queued fabric reads. When the variable has replicas and
// a read fails on the peer's side (dead, unreachable, or past the failover
// deadline), the reads that did not complete are re-addressed to replicas
// (retarget) and run again, until all have landed or a row has no rank
// left to try.
func (v *Var) flush(c *readCtx, st *callStats) error {
	defer c.reset()
	for tries := 0; len(c.ops) > 0; tries++ {
		if d := v.readTimeout(c); d != c.timeout {
			c.fr.SetTimeout(d)
			c.timeout = d
		}
		t := st.now()
		var ft fabric.Timing
		var err error
		if c.gather > 0 && len(c.ops) >= c.gather && (!c.auto || c.maxOp <= gatherMaxOpBytes) {
			ft, err = c.fr.ReadGather(c.ops)
		} else {
			ft, err = c.fr.ReadBatch(c.ops)
		}
		st.fabTime += st.now() - t
		st.fab.MR += ft.MR
		st.fab.Post += ft.Post
		st.fab.CQWait += ft.CQWait
		st.fab.Copy += ft.Copy
		st.fab.Regs += ft.Regs
		if err == nil {
			if st.timed {
				// Per-target service times for the peer table: when
				// each target's last read of this batch completed.
				for i := range c.ops {
					st.targets.Served(c.opRank[i], c.ops[i].DoneNs)
				}
			}
			return nil
		}
		if !v.canFailover() || !(errors.Is(err, fabric.ErrTimeout) || isPeerFailure(err)) {
			return v.fabricError(c, err)
		}
		// Give up when a read that had no alternative (at the fabric's
		// hard deadline: readTimeout 0, a last resort) timed out: the
		// rank it blames would only be chosen again. Reads that merely
		// missed the failover deadline go on to the next rank, and to a
		// suspect one at the hard deadline once every holder missed it
		// (retarget); each retarget marks one more rank dead or suspect,
		// so the cap below only bounds a pathological loop. (A cap of one
		// try per group gave up on a loaded machine while the suspect
		// ranks were alive and the hard-deadline retry never ran.)
		lastResort := c.timeout == 0 && errors.Is(err, fabric.ErrTimeout)
		if lastResort || tries > 2*v.s.nranks {
			return v.errNoReplica(st, int(c.opMember[0]), err)
		}
		if err = v.retarget(c, st, err); err != nil {
			return err
		}
	}
	return nil
}

// reset empties the context's queue.
func (c *readCtx) reset() {
	clear(c.ops) // drop the callers' Dst slices
	c.ops = c.ops[:0]
	c.opRank = c.opRank[:0]
	c.opMember = c.opMember[:0]
	c.opOff = c.opOff[:0]
	c.maxOp = 0
}

// fabricError names the failed peer and classifies the error.
func (v *Var) fabricError(c *readCtx, err error) error {
	rank := fabricErrRank(err)
	if rank < 0 && len(c.opRank) > 0 {
		// Name the ranks of the batch when the fabric did not say which.
		rank = c.opRank[0]
		for _, r := range c.opRank {
			if r != rank {
				rank = -1
				break
			}
		}
	}
	e := &Error{Op: "read", Var: v.name, Side: fault.SideOf(err), Detail: "read from a peer rank", Err: err}
	if rank >= 0 {
		e.Ranks, e.Detail = []int{rank}, fmt.Sprintf("read from rank %d", rank)
	}
	switch {
	case errors.Is(err, fabric.ErrTimeout):
		e.Kind = ErrTimeout
	case isPeerFailure(err):
		if rank >= 0 {
			v.s.dead.mark(rank)
		}
		e.Kind = ErrPeerDead
	}
	return e
}

func (v *Var) errShort(op string, rows, need int64, have int) error {
	return errf(ErrShortBuffer, op, v.name, "%d rows of %d bytes need %d bytes, dst has %d",
		rows, v.rowBytes, need, have)
}

func (v *Var) errIndex(g int64) error {
	return errf(ErrIndex, "GetBatch", v.name, "row %d outside [0,%d)", g, v.global)
}

func (v *Var) errRange(start, count int64) error {
	return errf(ErrIndex, "Get", v.name, "rows [%d,%d) (start %d, count %d) outside [0,%d)",
		start, start+count, start, count, v.global)
}

func (v *Var) errDead(rank int) error {
	p := v.s.peers[rank]
	if cause := v.s.DeadCause(rank); cause != nil {
		return &Error{Op: "read", Var: v.name, Ranks: []int{rank}, Side: fault.Remote, Kind: ErrPeerDead,
			Detail: fmt.Sprintf("rank %d (pid %d on %s) owns requested rows and is dead", rank, p.Pid, p.Host), Err: cause}
	}
	return &Error{Op: "read", Var: v.name, Ranks: []int{rank}, Side: fault.Remote, Kind: ErrPeerDead,
		Detail: fmt.Sprintf("rank %d (pid %d) owns requested rows and has exited", rank, p.Pid)}
}

// Get reads the contiguous global rows [start, start+count) of variable
// name into dst, which must hold count rows. The range may span shards.
func (s *Store) Get(name string, start, count int64, dst []byte) error {
	v := (*s.vars.Load())[name]
	if v == nil {
		return s.errLookup("Get", name)
	}
	return v.get(nil, start, count, dst)
}

// GetBatch reads global rows idx[i] of variable name into
// dst[i*rowBytes:(i+1)*rowBytes], in index order; duplicates are allowed.
func (s *Store) GetBatch(name string, idx []int64, dst []byte) error {
	v := (*s.vars.Load())[name]
	if v == nil {
		return s.errLookup("GetBatch", name)
	}
	return v.getBatch(nil, idx, dst)
}

// GetRanges reads many ranges of rows of variable name in one call: range
// i is rows [starts[i], starts[i]+counts[i]) (it may span shards), and the
// ranges land in dst one after the other, range i at byte offset
// (counts[0]+…+counts[i-1])·rowBytes. A uint8 variable of one byte per row
// makes these byte ranges: packed variable-length records. Empty ranges are
// allowed; a bad range, mismatched lengths or a short dst fail the whole
// call before anything is read.
func (s *Store) GetRanges(name string, starts, counts []int64, dst []byte) error {
	v := (*s.vars.Load())[name]
	if v == nil {
		return s.errLookup("GetRanges", name)
	}
	return v.getRanges(nil, starts, counts, dst)
}

func (s *Store) errLookup(op, name string) error {
	if s.closed.Load() {
		return errf(ErrClosed, op, name, "store closed")
	}
	return errf(ErrUnknownVar, op, name, "no such variable")
}

// Get is Store.Get on this variable through the shared reader.
func (v *Var) Get(start, count int64, dst []byte) error { return v.get(nil, start, count, dst) }

// GetBatch is Store.GetBatch on this variable through the shared reader.
func (v *Var) GetBatch(idx []int64, dst []byte) error { return v.getBatch(nil, idx, dst) }

// GetRanges is Store.GetRanges on this variable through the shared reader.
func (v *Var) GetRanges(starts, counts []int64, dst []byte) error {
	return v.getRanges(nil, starts, counts, dst)
}

// errReaderClosed is returned by the methods of a closed Reader.
var errReaderClosed error = &Error{Kind: ErrClosed, Op: "Reader", Detail: "reader closed"}

// Reader reads with its own fabric endpoint and completion queue, so
// readers never wait for each other or for the store's shared reader.
// Use one Reader per goroutine; its methods must not be called concurrently.
type Reader struct {
	s      *Store
	c      *readCtx
	dc     *devCtx     // device path, made at the first device read
	closed atomic.Bool // set by Close or Store.Close (another goroutine)
}

// NewReader returns a Reader with its own fabric endpoint. Close it when done
// (Store.Close closes any left open).
func (s *Store) NewReader() (*Reader, error) {
	if s.closed.Load() {
		return nil, errf(ErrClosed, "NewReader", "", "store closed")
	}
	c, err := s.newReadCtx(maxTelReaders - 1)
	if err != nil {
		return nil, err
	}
	r := &Reader{s: s, c: c}
	s.readersMu.Lock()
	defer s.readersMu.Unlock()
	if s.closed.Load() {
		c.close()
		return nil, errf(ErrClosed, "NewReader", "", "store closed")
	}
	c.tel = s.freeTelReader()
	s.readers[r] = struct{}{}
	return r, nil
}

// maxTelReaders is the number of telemetry reader stripes per variable
// (telemetry.WriterOptions.MaxReaders' default). Stripe 0 is the store's
// shared path; 1 .. maxTelReaders-2 are owned by one open Reader each;
// maxTelReaders-1 is shared by the Readers beyond those (recorded with
// atomic adds).
const maxTelReaders = 64

// freeTelReader returns the lowest reader stripe no open Reader owns, or
// the shared last stripe when all are taken. Closing a Reader frees its
// stripe (it leaves s.readers). Call with s.readersMu held: the mutex
// also orders a closed Reader's last Record before the next owner's first.
func (s *Store) freeTelReader() int32 {
	var used [maxTelReaders]bool
	for r := range s.readers {
		used[r.c.tel] = true
	}
	for id := int32(1); id < maxTelReaders-1; id++ {
		if !used[id] {
			return id
		}
	}
	return maxTelReaders - 1
}

// ID is the reader's telemetry id (stripe); the store's shared path is 0,
// and Readers beyond the first maxTelReaders-2 open at once share the last.
func (r *Reader) ID() int { return int(r.c.tel) }

// Get is Store.Get through this reader's endpoint.
func (r *Reader) Get(name string, start, count int64, dst []byte) error {
	if r.closed.Load() {
		return errReaderClosed
	}
	v := (*r.s.vars.Load())[name]
	if v == nil {
		return r.s.errLookup("Get", name)
	}
	return v.get(r.c, start, count, dst)
}

// GetBatch is Store.GetBatch through this reader's endpoint.
func (r *Reader) GetBatch(name string, idx []int64, dst []byte) error {
	if r.closed.Load() {
		return errReaderClosed
	}
	v := (*r.s.vars.Load())[name]
	if v == nil {
		return r.s.errLookup("GetBatch", name)
	}
	return v.getBatch(r.c, idx, dst)
}

// GetRanges is Store.GetRanges through this reader's endpoint.
func (r *Reader) GetRanges(name string, starts, counts []int64, dst []byte) error {
	if r.closed.Load() {
		return errReaderClosed
	}
	v := (*r.s.vars.Load())[name]
	if v == nil {
		return r.s.errLookup("GetRanges", name)
	}
	return v.getRanges(r.c, starts, counts, dst)
}

// GetVar is Get on a variable handle, skipping the name lookup.
func (r *Reader) GetVar(v *Var, start, count int64, dst []byte) error {
	if r.closed.Load() {
		return errReaderClosed
	}
	return v.get(r.c, start, count, dst)
}

// GetBatchVar is GetBatch on a variable handle, skipping the name lookup.
func (r *Reader) GetBatchVar(v *Var, idx []int64, dst []byte) error {
	if r.closed.Load() {
		return errReaderClosed
	}
	return v.getBatch(r.c, idx, dst)
}

// Close releases the reader's endpoint.
func (r *Reader) Close() error {
	r.s.readersMu.Lock()
	defer r.s.readersMu.Unlock()
	if r.closed.Load() {
		return nil
	}
	delete(r.s.readers, r)
	return r.release()
}

// release closes the reader's endpoint and its device path (stream,
// staging), whose error it returns.
func (r *Reader) release() error {
	r.closed.Store(true)
	r.c.close()
	err := r.dc.close()
	r.dc = nil
	if err != nil {
		return gpuError("Reader.Close", "", "device path", err)
	}
	return nil
}
