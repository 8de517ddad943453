// Package placement owns the one decision of the read path: where the bytes
// of a variable's rows are read from. Get, GetBatch, GetRanges, the device
// reads, the loader (through them) and failover all ask Place; nothing else
// computes an owner.
//
// A variable's rows form one global index space, cut into shards held by
// the members of the reader's home group (Layout.Offsets, Layout.Home).
// Every other replica group may hold a copy of each shard (Layout.Alt, in
// failover order). Place maps a contiguous run of the global byte space
// (row g starts at byte g·RowBytes) to its first piece: the shard it lies
// in, the rank that serves it (the home owner, or a replica when the owner
// is dead or suspect), whether that rank's copy is mapped on this node (a
// memcpy) or read through the fabric, and the byte offset in the shard.
// Pieces end where the run leaves a shard or reaches the largest single
// read the caller allows.
//
// The package does no I/O, takes no lock and allocates nothing on the
// read path: Place reads the layout and the ranks' Health (atomic loads).
//
// The rule for a shard o, with candidates [Home[o], Alt[o]...]:
//   - the first candidate reads need not avoid (Health.Avoid: dead, or
//     suspect of a missed failover deadline, for a layout with replicas;
//     dead only, for one without);
//   - else, a last resort: the first candidate that is not dead (slow is
//     not dead), read with the fabric's hard deadline;
//   - else the piece is Dead: no rank can serve it, and the call fails
//     naming the home owner once every other piece has landed.
//
// This rank itself is never avoided.
package placement

import (
	"sort"
	"sync/atomic"
)

// Kind says how a piece is read.
type Kind uint8

const (
	// Local: the serving rank's copy is mapped on this node; copy it.
	Local Kind = iota
	// Remote: read it through the fabric (fi_read, or a gather op).
	Remote
	// Dead: no rank holding the shard can serve it.
	Dead
)

func (k Kind) String() string {
	switch k {
	case Local:
		return "local"
	case Remote:
		return "remote"
	case Dead:
		return "dead"
	}
	return "kind?"
}

// Layout is one variable's shards as one rank sees them. It is built once,
// when the variable is created, and never changes.
type Layout struct {
	// RowBytes is the size of one row.
	RowBytes int64
	// Offsets has one entry per shard plus one: shard o holds global rows
	// [Offsets[o], Offsets[o+1]).
	Offsets []int64
	// Home[o] is the rank that reads of shard o go to first.
	Home []int
	// Alt[o] lists the other ranks that hold shard o, in failover order;
	// nil when the variable cannot fail over.
	Alt [][]int
	// Mapped[r] is true when rank r's copy of its shard is mapped on this
	// node (by rank; every rank holds at most one shard of a variable).
	Mapped []bool
	// Self is this rank; it is never avoided.
	Self int
}

// Piece is one contiguous part of a read, served by one rank.
// 32 bytes: GetBatch keeps a plan of them per batch.
type Piece struct {
	Off      int64 // byte offset in the shard
	Len      int64 // bytes
	Shard    int32 // the shard (home group member) the bytes lie in
	Rank     int32 // the rank that serves them; the home owner when Kind is Dead
	Kind     Kind
	Failover bool // served by a replica instead of the home owner
}

// Rows is the global row count.
func (l *Layout) Rows() int64 { return l.Offsets[len(l.Offsets)-1] }

// CanFailover reports whether reads may move to a replica.
func (l *Layout) CanFailover() bool { return l.Alt != nil }

// Shard returns the shard that holds global row g (0 ≤ g < Rows): the
// largest o with Offsets[o] ≤ g.
func (l *Layout) Shard(g int64) int { return shardOf(l.Offsets, g) }

// shardOf is the binary search of Shard over the offsets.
func shardOf(offsets []int64, g int64) int {
	lo, hi := 0, len(offsets)-1
	for hi-lo > 1 {
		mid := int(uint(lo+hi) >> 1)
		if offsets[mid] <= g {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// Place returns the first piece of the run of n bytes (n > 0) that starts
// skip bytes into global row row (0 ≤ skip < RowBytes; the run lies inside
// the global rows). The piece ends at the run's end, the shard's end, or
// after max bytes (max > 0), whichever comes first.
func (l *Layout) Place(h *Health, row, skip, n, max int64) Piece {
	o := l.Shard(row)
	r, kind, failover := l.server(h, o)
	// Built once at the end: fields written one by one into a struct on
	// the stack and read back cost store-forwarding stalls here.
	return Piece{Shard: int32(o), Rank: int32(r), Off: (row-l.Offsets[o])*l.RowBytes + skip,
		Len: min(n, (l.Offsets[o+1]-row)*l.RowBytes-skip, max), Kind: kind, Failover: failover}
}

// PlaceRows is Place for whole rows: plan[i] is the piece of row idx[i]
// (0 ≤ idx[i] < Rows; len(plan) ≥ len(idx)). One call places a batch,
// with server's common case written out in the loop (the compiler does
// not inline it): GetBatch's hot path costs a few ns a row.
func (l *Layout) PlaceRows(h *Health, idx []int64, plan []Piece) {
	plan = plan[:len(idx)]
	// Locals: the stores into plan would otherwise make the compiler
	// reload every field of l and h in each iteration.
	offsets, home, mapped, rb, self, alt := l.Offsets, l.Home, l.Mapped, l.RowBytes, l.Self, l.Alt != nil
	dead, suspect := h.dead, h.suspect
	for i, g := range idx {
		o := shardOf(offsets, g)
		r, kind, failover := home[o], Local, false
		if r != self && (isDead(dead, r) || alt && suspect[r].Load() != 0) { // h.mayAvoid
			r, kind, failover = l.reroute(h, o)
		} else if !mapped[r] {
			kind = Remote
		}
		// Field by field: a composite literal is built on the stack and
		// copied with 16-byte loads that stall on its narrower stores.
		p := &plan[i]
		p.Off, p.Len, p.Shard, p.Rank, p.Kind, p.Failover = (g-offsets[o])*rb, rb, int32(o), int32(r), kind, failover
	}
}

// server is the rank that serves shard o and how: the home owner in the
// common case (inlined), else Route's answer.
func (l *Layout) server(h *Health, o int) (int, Kind, bool) {
	r := l.Home[o]
	if r != l.Self && h.mayAvoid(r, l.Alt != nil) {
		return l.reroute(h, o)
	}
	if l.Mapped[r] {
		return r, Local, false
	}
	return r, Remote, false
}

// reroute is the slow path: the home owner may have to be avoided. Kept
// out of line, so that the common case stays small.
//
//go:noinline
func (l *Layout) reroute(h *Health, o int) (int, Kind, bool) {
	p := l.Route(h, o)
	return int(p.Rank), p.Kind, p.Failover
}

// Route decides which rank serves shard o, and how (Place's rule). Off and
// Len are left zero. Failover re-routes a failed read with it, once the
// blamed rank is marked in h.
func (l *Layout) Route(h *Health, o int) Piece {
	home := l.Home[o]
	if home == l.Self || !h.avoid(home, l.Alt != nil) {
		return Piece{Shard: int32(o), Rank: int32(home), Kind: l.kind(home)}
	}
	var alt []int
	if l.Alt != nil {
		alt = l.Alt[o]
	}
	for _, r := range alt {
		if !h.avoid(r, true) {
			return Piece{Shard: int32(o), Rank: int32(r), Kind: l.kind(r), Failover: true}
		}
	}
	// A last resort: slow is not dead.
	if !h.Dead(home) {
		return Piece{Shard: int32(o), Rank: int32(home), Kind: l.kind(home)}
	}
	for _, r := range alt {
		if !h.Dead(r) {
			return Piece{Shard: int32(o), Rank: int32(r), Kind: l.kind(r), Failover: true}
		}
	}
	return Piece{Shard: int32(o), Rank: int32(home), Kind: Dead}
}

// HasAlternative reports whether a read of shard o from rank r could go to
// another rank that reads need not avoid: then it may use the (short)
// failover deadline; a read without one waits the fabric's hard deadline.
func (l *Layout) HasAlternative(h *Health, o, r int) bool {
	if l.Alt == nil {
		return false
	}
	if r == l.Home[o] && !h.avoid(r, true) {
		return true // the owner: the replicas are untried
	}
	for _, a := range l.Alt[o] {
		if !h.avoid(a, true) {
			return true
		}
	}
	return false
}

// Holders returns the home owner of shard o followed by its replicas (for
// errors that name every rank tried). It allocates.
func (l *Layout) Holders(o int) []int {
	h := []int{l.Home[o]}
	if l.Alt != nil {
		h = append(h, l.Alt[o]...)
	}
	return h
}

// FailoverOrder returns the ranks that hold shard o outside the home group,
// in the order reads fail over to them. Groups are runs of width
// consecutive ranks from rank first (group g's member o is rank
// first+g·width+o). Ranks whose copy is on this node come first (their
// shard is mapped, so a stalled owner cannot delay the copy), then the
// nearest groups by index distance, ties to the lower group.
func FailoverOrder(groups, width, first, home, o int, sameNode func(r int) bool) []int {
	var l []int
	for g := 0; g < groups; g++ {
		if g != home {
			l = append(l, first+g*width+o)
		}
	}
	dist := func(r int) int {
		d := (r-first)/width - home
		if d < 0 {
			return -d
		}
		return d
	}
	sort.SliceStable(l, func(i, j int) bool {
		a, b := l[i], l[j]
		if sa, sb := sameNode(a), sameNode(b); sa != sb {
			return sa
		}
		if da, db := dist(a), dist(b); da != db {
			return da < db
		}
		return a < b
	})
	return l
}

// ShardOf returns the shard rank r holds (as home owner or replica), or -1.
func (l *Layout) ShardOf(r int) int {
	for o, h := range l.Home {
		if h == r {
			return o
		}
	}
	for o, alt := range l.Alt {
		for _, a := range alt {
			if a == r {
				return o
			}
		}
	}
	return -1
}

func (l *Layout) kind(r int) Kind {
	if l.Mapped[r] {
		return Local
	}
	return Remote
}

// Health is the ranks' liveness as reads see it: dead for good, or suspect
// (a missed failover deadline) until a time. Safe for concurrent use.
type Health struct {
	dead    []atomic.Uint64 // bitmap
	suspect []atomic.Int64  // clock time until which rank r is suspect; 0: never
	clock   func() int64    // nanoseconds, monotonic
	onDead  atomic.Pointer[func(r int)]
}

// NewHealth returns the health of n ranks, all alive, reading time from
// clock (monotonic nanoseconds) when a suspicion must be checked.
func NewHealth(n int, clock func() int64) *Health {
	return &Health{dead: make([]atomic.Uint64, (n+63)/64), suspect: make([]atomic.Int64, n), clock: clock}
}

// MarkDead records that rank r is dead (for good), and tells the OnDead
// hook the first time.
func (h *Health) MarkDead(r int) {
	bit := uint64(1) << (uint(r) & 63)
	if h.dead[r>>6].Or(bit)&bit == 0 {
		if f := h.onDead.Load(); f != nil {
			(*f)(r)
		}
	}
}

// OnDead sets f to run once for every rank marked dead from now on, and
// at once for each rank already dead (the engine: the fabric cuts short
// the reads from it). f may run for a rank twice.
func (h *Health) OnDead(f func(r int)) {
	h.onDead.Store(&f)
	for r := range len(h.suspect) {
		if h.Dead(r) {
			f(r)
		}
	}
}

// Dead reports whether rank r is known to be dead.
func (h *Health) Dead(r int) bool { return isDead(h.dead, r) }

// isDead tests rank r's bit in the dead bitmap.
func isDead(dead []atomic.Uint64, r int) bool { return dead[r>>6].Load()&(1<<(uint(r)&63)) != 0 }

// Suspect marks rank r as suspect until clock time until.
func (h *Health) Suspect(r int, until int64) {
	if r >= 0 && r < len(h.suspect) {
		h.suspect[r].Store(until)
	}
}

// Suspected reports whether rank r is suspect now.
func (h *Health) Suspected(r int) bool {
	u := h.suspect[r].Load()
	return u != 0 && h.clock() < u
}

// Avoid reports whether reads should skip rank r: dead, or suspect now.
func (h *Health) Avoid(r int) bool { return h.avoid(r, true) }

// avoid is Avoid; suspicion counts only when withSuspect (a layout with
// replicas: without one there is nowhere else to go).
func (h *Health) avoid(r int, withSuspect bool) bool {
	return h.mayAvoid(r, withSuspect) && (h.Dead(r) || h.Suspected(r))
}

// mayAvoid is avoid without the clock: false means rank r is certainly
// usable (the read path's common case, one or two atomic loads; written
// out in PlaceRows' loop).
func (h *Health) mayAvoid(r int, withSuspect bool) bool {
	return h.Dead(r) || withSuspect && h.suspect[r].Load() != 0
}

// GatherBatch decides whether a batch of nops queued reads, the largest
// maxOp bytes, goes as gather requests (one per peer, served by the
// target's CPU) instead of one-sided reads: minOps > 0 is the smallest
// batch that gathers, and with auto, only batches whose every read is at
// most maxGatherOp bytes gather (measured on tcp: gather wins at 3 KB and
// 12.5 KB rows, loses at 200 KB and 1 MiB).
func GatherBatch(minOps int, auto bool, nops, maxOp, maxGatherOp int) bool {
	return minOps > 0 && nops >= minOps && (!auto || maxOp <= maxGatherOp)
}
