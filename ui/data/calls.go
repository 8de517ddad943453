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
// new block when that one is full): at least one record.
func (t *callTail) room() []telemetry.Record {
	end := t.off + t.n
	if end == len(t.blocks)*callBlock {
		t.blocks = append(t.blocks, new([callBlock]telemetry.Record))
	}
	last := t.blocks[len(t.blocks)-1]
	return last[end-(len(t.blocks)-1)*callBlock:]
}

// took keeps the first k records of room as the newest calls, and the last
// keep calls in all.
func (t *callTail) took(k, keep int) {
	t.n += k
	if over := t.n - keep; over > 0 {
		t.off += over
		t.n = keep
	}
	if drop := t.off / callBlock; drop > 0 {
		t.blocks = t.blocks[drop:] // views may still hold them: not cleared
		t.off -= drop * callBlock
	}
}

// add appends recs (ddtop replay's recorded calls).
func (t *callTail) add(recs []telemetry.Record, keep int) {
	for len(recs) > 0 {
		k := copy(t.room(), recs)
		t.took(k, keep)
		recs = recs[k:]
	}
}
