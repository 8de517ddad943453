package fabric

import (
	"time"
	"unsafe"
)

// Gather protocol constants, defined once in dd_proto.h (TestGatherWire
// checks them against the protocol as the Go tests write it down).
const (
	maxGatherBytes   = ddGmaxBytes // largest reply a target builds
	maxGatherEntries = ddGmaxEnt   // entries per request
	maxGatherName    = ddGmaxName  // endpoint name bytes in a request
	gatherReqHdr     = sizeofDdGreqHdr
	gatherEntry      = sizeofDdGent
	gatherRepHdr     = sizeofDdGrepHdr
	gatherText       = ddGtext // error text bytes in a reply
)

// gatherRoundCap is the round cap dd_gather uses for a batch of total
// bytes, with cap bytes (Options.GatherMaxBytes) and rounds in flight.
func gatherRoundCap(total, cap uint64, rounds int) uint64 {
	return uint64(ddGatherRoundCap(cUint64T(total), cUint64T(cap), cInt(rounds)))
}

// ReadGather performs ops like ReadBatch, but on software-RMA providers
// (Info().SoftwareRMA: tcp, sockets, udp, net) it asks each peer for its
// rows with one tagged request per round instead of one fi_read per row:
// the peer's progress thread validates the entries against its exports,
// packs the rows into one reply of at most Options.GatherMaxBytes. When a
// round's Dst slices lie back to back in request order (in at most three
// runs: a packed GetRanges, or a GetBatch of one peer's rows) the reply is
// received straight into them; otherwise the reader copies the rows from
// its bounce buffer (off-heap, grow-only) into the Dst slices. Up to Options.GatherRounds rounds are in flight. An entry the
// peer rejects (unknown key, range outside the region) fails the call with
// an error that matches fault.ErrRejected and names the peer and the entry; the
// reader and the peer keep working. Rows larger than GatherMaxBytes are read
// with fi_read after the gather, and providers without software RMA use
// ReadBatch for everything. Deadline, teardown and allocation guarantees are
// those of ReadBatch: nothing writes a Dst after return.
func (r *Reader) ReadGather(ops []ReadOp) (tm Timing, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	regs := r.regs
	defer func() { tm.Regs = r.regs - regs }()
	if !r.f.inf.SoftwareRMA {
		return r.readBatch(ops)
	}
	if r.closed {
		return tm, r.closedErr()
	}
	r.yieldRuntime()
	if err := r.ensureEndpoint(); err != nil {
		return tm, err
	}
	t0 := time.Now()
	for start := 0; start < len(ops); start += chunkOps {
		end := min(start+chunkOps, len(ops))
		left := max(r.timeout-time.Since(t0), 1)
		if err := r.gatherChunk(ops[start:end], start, left, &tm); err != nil {
			markRest(ops, start, end)
			return tm, err
		}
	}
	return tm, nil
}

// GatheredOps counts the ops this reader has had served by gather replies
// (diagnostics and tests: which path a batch took).
func (r *Reader) GatheredOps() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gathered
}

// endGather is the cleanup of every exit of gatherChunk: clearOps for the
// chunk, and the big-row list (it holds the callers' Dst slices).
func (r *Reader) endGather(n int) {
	r.clearOps(n)
	clear(r.big)
	r.big = r.big[:0]
}

func (r *Reader) gatherChunk(ops []ReadOp, base int, timeout time.Duration, tm *Timing) error {
	n := len(ops)
	npeers := uint32(len(r.peers))
	r.checkStuck()
	limit := uint64(r.f.opts.GatherMaxBytes)
	if r.big == nil {
		r.big = make([]ReadOp, 0, chunkOps)
		r.bigIdx = make([]int32, 0, chunkOps)
	}
	r.big, r.bigIdx = r.big[:0], r.bigIdx[:0]
	defer r.endGather(n)
	for i := range ops {
		ops[i].Done = false
	}
	for i := range ops {
		op := &ops[i]
		if op.Peer.id == 0 || op.Peer.id > npeers {
			return badPeer(base + i)
		}
		if err := r.stuckErr(&r.peers[op.Peer.id-1], base+i); err != nil {
			return err
		}
		if len(op.Dst) == 0 {
			return badDst(base+i, r.peers[op.Peer.id-1].rank, 0, 0)
		}
		c := &r.ops[i]
		fillOp(c, op)
		if uint64(len(op.Dst)) > limit {
			c.skip = 1
			c.dst = nil
			r.big = append(r.big, *op)
			r.bigIdx = append(r.bigIdx, int32(base+i))
			continue
		}
		c.skip = 0
		p := unsafe.Pointer(unsafe.SliceData(op.Dst))
		r.pin.pin(p, cap(op.Dst))
		c.dst = p
	}
	var rc cInt
	if len(r.big) < n {
		t0 := time.Now()
		rc = ddGuardedGather(r.c, cInt(n), cUint64T(limit), cInt(r.f.opts.GatherRounds), cInt64T(timeout))
		res := &r.c.res
		tm.Post += time.Duration(res.post_ns)
		tm.CQWait += time.Duration(res.wait_ns)
		r.ran += time.Duration(res.post_ns + res.wait_ns)
		tm.Copy += time.Duration(res.copy_ns)
		r.gathered += uint64(res.done)
		r.afterCall(res)
		timeout -= time.Since(t0)
	}
	if rc != 0 {
		r.markDone(ops) // the big rows (skip) were not read yet: done is 0
		r.clearOps(n)
		return r.batchError(&r.c.res, base, "gather rounds")
	}
	r.doneTimes(ops) // the big rows get theirs below
	r.clearOps(n)    // before readChunk reuses r.ops for the big rows
	if len(r.big) == 0 {
		return nil
	}
	// Rows larger than a round: one-sided reads.
	for i := range ops {
		ops[i].Done = true // every gathered op; the big ones are set below
	}
	if err := r.ensureEndpoint(); err != nil {
		for _, j := range r.bigIdx {
			ops[int(j)-base].Done = false
		}
		return err
	}
	r.remap = r.bigIdx
	err := r.readChunk(r.big, 0, max(timeout, 1), tm)
	r.remap = nil
	if err != nil {
		for k, j := range r.bigIdx {
			ops[int(j)-base].Done = r.big[k].Done
		}
	} else {
		for k, j := range r.bigIdx {
			ops[int(j)-base].DoneNs = r.big[k].DoneNs
		}
	}
	return err
}
