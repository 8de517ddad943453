package engine

import (
	"fmt"

	"github.com/ddstore/ddstore/engine/placement"
	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/fault"
)

// maxReadBytes caps one fabric read of a contiguous range (Get); larger
// runs are split into reads of whole rows up to this size.
const maxReadBytes = 4 << 20

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

// planRows is how many rows GetBatch places at a time (placement.PlaceRows
// into a plan on the stack).
const planRows = 64

// getBatch reads rows idx[i] into dst[i*rowBytes:]. c is the Reader's
// context, or nil for the variable's shared reader.
func (v *Var) getBatch(c *readCtx, idx []int64, dst []byte) (err error) {
	var st callStats
	rows := int64(len(idx))
	if err = v.begin(&st, c, "GetBatch", rows); err != nil {
		return err
	}
	defer func() { v.end(&st, err) }()

	rb := v.rowBytes
	if need := rows * rb; int64(len(dst)) < need {
		return v.errShort("GetBatch", rows, need, len(dst))
	}
	for _, g := range idx {
		if g < 0 || g >= v.global {
			return v.errIndex(g)
		}
	}
	if c != nil {
		c.reset()
	}
	h := v.s.health
	var plan [planRows]placement.Piece // on the stack: no allocation
	for at := 0; at < len(idx); at += planRows {
		part := idx[at:min(at+planRows, len(idx))]
		v.lay.PlaceRows(h, part, plan[:])
		for k := range part {
			i := int64(at + k)
			// Full capacity on purpose: the fabric pins a destination once
			// and recognises later rows of the same buffer by [ptr, ptr+cap).
			d := dst[i*rb : (i+1)*rb]
			if p := &plan[k]; p.Kind == placement.Local && !p.Failover { // serve's common case, inline
				st.targets.Add(int(p.Rank), 1)
				copy(d, v.src[p.Rank][p.Off:p.Off+rb])
				st.localRows++
				continue
			}
			if c, err = v.serve(c, &st, plan[k], d, 1); err != nil {
				return err
			}
		}
	}
	return v.drain(c, &st)
}

// serve copies piece p into d (its length) when the serving rank's copy
// is mapped, or queues its fabric read; a piece no rank can serve is
// noted for the call's error. rows is how many rows start in the piece
// (telemetry). It returns the context that holds the queued reads (the
// variable's shared reader, locked at the first remote piece of a Store
// call).
func (v *Var) serve(c *readCtx, st *callStats, p placement.Piece, d []byte, rows int64) (*readCtx, error) {
	rank := int(p.Rank)
	if p.Kind == placement.Dead {
		if st.deadRank < 0 {
			st.deadRank = rank
		}
		return c, nil
	}
	if p.Failover {
		v.countFailover(st, v.lay.Home[p.Shard], rank, rows)
	}
	st.targets.Add(rank, rows)
	if p.Kind == placement.Local {
		copy(d, v.src[rank][p.Off:p.Off+p.Len])
		st.localRows += rows
		return c, nil
	}
	st.remoteRows += rows
	if c == nil {
		c = v.lockShared(st) // first remote piece of a Store call
	}
	peer := c.rpeers[rank]
	if peer == (fabric.Peer{}) { // this reader's first read from rank
		var err error
		if peer, err = c.peerOf(rank); err != nil {
			return c, err
		}
	}
	rs := v.remote[rank]
	op := fabric.ReadOp{Dst: d[:p.Len], Peer: peer, Addr: rs.base + uint64(p.Off), Key: rs.key}
	return c, v.enqueue(c, st, op, rank, int(p.Shard), p.Off)
}

// get reads rows [start, start+count) into dst, coalescing each shard's
// part into one copy (mapped) or reads of up to maxReadBytes (fabric).
func (v *Var) get(c *readCtx, start, count int64, dst []byte) (err error) {
	var st callStats
	if err = v.begin(&st, c, "Get", count); err != nil {
		return err
	}
	defer func() { v.end(&st, err) }()

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
	if c, err = v.readRun(c, &st, start, count, dst); err != nil {
		return err
	}
	return v.drain(c, &st)
}

// getRanges reads the row ranges [starts[i], starts[i]+counts[i]) into dst
// one after the other: range i lands at the sum of the earlier counts
// (in rows). Every range is checked before anything is read; the reads of
// all ranges are queued together, so a batch of small ranges is one fabric
// call (gathered on software-RMA providers, like GetBatch).
func (v *Var) getRanges(c *readCtx, starts, counts []int64, dst []byte) (err error) {
	var st callStats
	if err = v.begin(&st, c, "GetRanges", 0); err != nil {
		return err
	}
	defer func() { v.end(&st, err) }()

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
	st.rows = total
	if c != nil {
		c.reset()
	}
	var at int64
	for i, s := range starts {
		n := counts[i]
		if n == 0 {
			continue
		}
		if c, err = v.readRun(c, &st, s, n, dst[at*v.rowBytes:(at+n)*v.rowBytes]); err != nil {
			return err
		}
		at += n
	}
	return v.drain(c, &st)
}

// readRun copies or queues the reads of rows [start, start+count) into
// dst, piece by piece as placement cuts them: at shard boundaries, and
// into reads of whole rows up to maxReadBytes. It returns the context that
// holds the queued reads (the shared reader, taken at the first remote
// piece of a Store call). The range is valid and dst holds it.
func (v *Var) readRun(c *readCtx, st *callStats, start, count int64, dst []byte) (*readCtx, error) {
	rb := v.rowBytes
	maxPiece := max(maxReadBytes/rb, 1) * rb
	h := v.s.health
	for g, end := start, start+count; g < end; {
		p := v.lay.Place(h, g, 0, (end-g)*rb, maxPiece)
		n := p.Len / rb
		var err error
		if c, err = v.serve(c, st, p, dst[(g-start)*rb:], n); err != nil {
			return c, err
		}
		g += n
	}
	return c, nil
}

// drain runs the reads still queued and closes the call's timing: copy is
// what the call spent outside the fabric and the lock wait. A row owned by
// a dead rank fails the call once every other row is in place.
func (v *Var) drain(c *readCtx, st *callStats) error {
	if c != nil && len(c.ops) > 0 {
		if err := v.flush(c, st); err != nil {
			return err
		}
	}
	st.end = st.now()
	// Copy: the call's own copies, plus the fabric's copies out of its
	// gather bounce buffer.
	st.copyTime = st.end - st.start - st.lockWait - st.fabTime + int64(st.fab.Copy)
	return v.deadErr(st)
}

// deadErr is the call's error when a piece had no rank to serve it.
func (v *Var) deadErr(st *callStats) error {
	if st.deadRank < 0 {
		return nil
	}
	if v.canFailover() { // every replica of the shard is dead too
		return v.errNoReplica(st, v.lay.ShardOf(st.deadRank), v.errDead(st.deadRank))
	}
	return v.errDead(st.deadRank)
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
	return errf(ErrUnknownVar, op, name, "no such variable; %s", knownVars(s.Vars()))
}

// knownVars names the variables a store has, for an unknown name's error.
func knownVars(names []string) string {
	const most = 8
	switch {
	case len(names) == 0:
		return "the store has none yet (Add or Init creates one)"
	case len(names) > most:
		return fmt.Sprintf("the store has %q and %d more", names[:most], len(names)-most)
	}
	return fmt.Sprintf("the store has %q", names)
}

// Get is Store.Get on this variable through the shared reader.
func (v *Var) Get(start, count int64, dst []byte) error { return v.get(nil, start, count, dst) }

// GetBatch is Store.GetBatch on this variable through the shared reader.
func (v *Var) GetBatch(idx []int64, dst []byte) error { return v.getBatch(nil, idx, dst) }

// GetRanges is Store.GetRanges on this variable through the shared reader.
func (v *Var) GetRanges(starts, counts []int64, dst []byte) error {
	return v.getRanges(nil, starts, counts, dst)
}
