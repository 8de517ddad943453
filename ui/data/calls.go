package data

import "github.com/ddstore/ddstore/telemetry"

// callBlock is how many calls one block of a rank's recent-call tail
// holds (64 ring records: 12.5 KiB).
const callBlock = 64

// Calls is a rank's most recent calls, oldest first (Rank.Recent). Frames
// share the blocks that hold them, each frame seeing only its own range,
// so they are read only.
type Calls struct {
	blocks []*[callBlock]telemetry.Record
	off, n int // call 0 is blocks[0][off]
}

// Len is the number of calls.
func (c Calls) Len() int { return c.n }

// At is call i, 0 the oldest; i must be in [0, Len). The record is shared
// with other frames: do not modify it.
func (c Calls) At(i int) *telemetry.Record {
	if i < 0 || i >= c.n {
		panic("data: Calls.At out of range")
	}
	j := c.off + i
	return &c.blocks[j/callBlock][j%callBlock]
}

// Copy returns the calls as a new slice, oldest first.
func (c Calls) Copy() []telemetry.Record {
	out := make([]telemetry.Record, c.n)
	for i := range out {
		out[i] = *c.At(i)
	}
	return out
}

// clone is a copy of c in blocks of its own.
func (c Calls) clone() Calls {
	out := Calls{n: c.n}
	for i := 0; i < c.n; i += callBlock {
		b := new([callBlock]telemetry.Record)
		for j := 0; j < callBlock && i+j < c.n; j++ {
			b[j] = *c.At(i + j)
		}
		out.blocks = append(out.blocks, b)
	}
	return out
}

// callTail is where the poller keeps one rank's recent calls: a list of
// blocks, the oldest first. Calls are only ever written past the end of
// every Calls already handed out (view), into the last block or a new
// one, and blocks leave the list from the front: a view never changes, and
// a refresh allocates one 12.5 KiB block per 64 calls read, no more.
type callTail struct {
	blocks []*[callBlock]telemetry.Record
	off, n int // the first kept call is blocks[0][off]; n calls are kept
}

// view is the calls kept now.
func (t *callTail) view() Calls {
	nb := (t.off + t.n + callBlock - 1) / callBlock
	return Calls{blocks: t.blocks[:nb:nb], off: t.off, n: t.n}
}

// room is the free space after the last call (in the last block, or in a
// new block from pool when that one is full): at least one record.
func (t *callTail) room(pool *blockPool) []telemetry.Record {
	end := t.off + t.n
	if end == len(t.blocks)*callBlock {
		t.blocks = append(t.blocks, pool.get())
	}
	last := t.blocks[len(t.blocks)-1]
	return last[end-(len(t.blocks)-1)*callBlock:]
}

// took keeps the first k records of room as the newest calls, and the last
// keep calls in all. Blocks that no call kept uses any more go to pool,
// retired at poll: earlier frames' views may still hold them.
func (t *callTail) took(k, keep int, pool *blockPool, poll uint64) {
	t.n += k
	if over := t.n - keep; over > 0 {
		t.off += over
		t.n = keep
	}
	if drop := t.off / callBlock; drop > 0 {
		for _, b := range t.blocks[:drop] {
			pool.retire(b, poll)
		}
		t.blocks = t.blocks[drop:]
		t.off -= drop * callBlock
	}
}

// add appends recs (ddtop replay's recorded calls).
func (t *callTail) add(recs []telemetry.Record, keep int) {
	for len(recs) > 0 {
		k := copy(t.room(nil), recs)
		t.took(k, keep, nil, 0)
		recs = recs[k:]
	}
}

// blockPool keeps the call blocks that have left every rank's tail until
// no frame that might show them is in use (Poller.Recycle), then hands
// them out again. A nil pool, or one that was never told of a recycled
// frame, allocates new blocks and lets old ones go.
type blockPool struct {
	on      bool           // a frame was recycled: keep retired blocks
	retired []retiredBlock // by poll, oldest first
	free    []*[callBlock]telemetry.Record
}

// retiredBlock is a block that left its tail during poll: only frames of
// earlier polls can show it.
type retiredBlock struct {
	b    *[callBlock]telemetry.Record
	poll uint64
}

func (bp *blockPool) get() *[callBlock]telemetry.Record {
	if bp != nil {
		if n := len(bp.free); n > 0 {
			b := bp.free[n-1]
			bp.free = bp.free[:n-1]
			return b
		}
	}
	return new([callBlock]telemetry.Record)
}

func (bp *blockPool) retire(b *[callBlock]telemetry.Record, poll uint64) {
	if bp != nil && bp.on {
		bp.retired = append(bp.retired, retiredBlock{b, poll})
	}
}

// release frees the blocks that only frames of polls up to poll (given
// back) can show: those retired at poll+1 or before.
func (bp *blockPool) release(poll uint64) {
	bp.on = true
	i := 0
	for i < len(bp.retired) && bp.retired[i].poll <= poll+1 {
		bp.free = append(bp.free, bp.retired[i].b)
		i++
	}
	n := copy(bp.retired, bp.retired[i:])
	clear(bp.retired[n:])
	bp.retired = bp.retired[:n]
}
