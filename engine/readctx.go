package engine

// The fabric side of a read: a reader context queues the fabric reads of
// one call and runs them as batches (one-sided reads, or gather requests
// on software-RMA providers: placement.GatherBatch), re-addressing the
// reads of a failed peer to replicas (replica.go).

import (
	"errors"
	"fmt"
	"time"

	"github.com/ddstore/ddstore/engine/placement"
	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/fault"
)

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
	ops    []fabric.ReadOp // len 0, cap window
	opRank []int           // rank of ops[i] (its target), for errors and failover
	// opMember and opOff: shard (home group member) and byte offset in
	// it of ops[i], to re-address a missing read to a replica.
	opMember []int32
	opOff    []int64
	rpeers   []fabric.Peer // by rank: the peers in fr's address vector (peerOf)
	timeout  time.Duration // deadline last given to fr (0: the fabric's own)
	tel      int32         // telemetry reader id
	gather   int           // flushes of at least this many ops use ReadGather; 0 = never
	auto     bool          // ReadModeAuto: gather only when every queued op is <= gatherMaxOpBytes
	maxOp    int           // largest queued op, bytes
}

// newReadCtx opens a fabric reader (connect).
func (s *Store) newReadCtx(telReader int32) (*readCtx, error) {
	c := &readCtx{s: s, tel: telReader, rpeers: make([]fabric.Peer, s.nranks)}
	if s.fab == nil {
		return c, nil
	}
	if err := c.connect(); err != nil {
		return nil, err
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

// connect opens the context's fabric reader. Its address vector starts
// empty: a peer's address (a view into the node's table, under tree)
// enters it on this reader's first read from that peer (peerOf), so a
// reader holds only the peers it reads; room for every peer on another
// node is reserved here, so that those first reads allocate nothing.
func (c *readCtx) connect() error {
	fr, err := c.s.fab.NewReader()
	if err != nil {
		return wrapf(nil, "NewReader", "", err, "open a fabric reader")
	}
	clear(c.rpeers)
	fr.Reserve(c.s.fabricPeers) // first reads from peers allocate nothing
	if c.timeout != 0 {
		fr.SetTimeout(c.timeout) // the deadline the context last set (flush)
	}
	c.fr = fr
	return nil
}

// renew replaces a reader that the fabric quarantined (a provider call
// overran its deadline and never returned: the reader refuses every call
// from then on and is never freed) with a new one, and points the queued
// reads at the new reader's peers. A variable's shared reader and a
// Reader so go on working, and failover retries on the new reader.
func (c *readCtx) renew() error {
	// The quarantined reader is dropped, never closed (see fabric's
	// quarantine); until a new one connects, it refuses every call.
	if err := c.connect(); err != nil {
		return err
	}
	for i := range c.ops {
		if c.ops[i].Done {
			continue
		}
		p, err := c.peerOf(c.opRank[i])
		if err != nil {
			return err
		}
		c.ops[i].Peer = p
	}
	return nil
}

func (c *readCtx) close() {
	if c != nil && c.fr != nil {
		c.fr.Close()
		c.fr = nil
	}
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
		if placement.GatherBatch(c.gather, c.auto, len(c.ops), c.maxOp, gatherMaxOpBytes) {
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
		if err != nil && c.fr.Quarantined() {
			if rerr := c.renew(); rerr != nil {
				return v.fabricError(c, errors.Join(err, rerr))
			}
		}
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
		if !v.canFailover() || !(errors.Is(err, fault.ErrTimeout) || isPeerFailure(err)) {
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
		lastResort := c.timeout == 0 && errors.Is(err, fault.ErrTimeout)
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
	case errors.Is(err, fault.ErrTimeout):
		e.Kind = ErrTimeout
		if rank >= 0 && fault.SideOf(err) != fault.Local {
			v.s.timedOut.LoadOrStore(rank, error(e)) // closeBarrier
		}
	case isPeerFailure(err):
		if rank >= 0 {
			v.s.health.MarkDead(rank)
		}
		e.Kind = ErrPeerDead
	}
	return e
}
