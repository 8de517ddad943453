package engine

// Replica failover. With Width < world the ranks form world/Width groups
// of Width consecutive ranks, and every group holds a full copy of each
// variable: member o of every group holds shard o. A read goes to the
// caller's own group (its home). When the owner of a row in the home group
// is dead (its process exited, or the fabric says its connection failed),
// or does not answer within Options.FailoverAfter (a stalled or overloaded
// rank), the row is read from member o of another group, inside the same
// Get/GetBatch/GetRanges call: rows already read stay, only the missing
// ones are re-read.
//
// Which replica: the ranks holding shard o in the other groups, in a fixed
// order: those on this node first (their shard is mapped, so a stalled
// owner cannot delay the copy), then by distance between group indices
// (nearest group first), ties to the lower group. Dead ranks and ranks
// that missed the failover deadline in the last suspectFactor ×
// FailoverAfter are skipped; once that time has passed a rank is tried
// again (a stall may end; death is for good). When every rank holding the
// shard has been tried, the call fails with an error that names them all.
//
// A variable takes part only when every group holds shards of the same
// sizes (then a row's shard and offset are the same in every group); the
// engine cannot check that the contents agree: filling every group with
// the same rows is the caller's part (see Store.UpdateReplicas).

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"sync/atomic"
	"time"

	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/telemetry"
)

// DefaultFailoverAfter is the per-read deadline before a read moves to a
// replica (Options.FailoverAfter, config key reads.failover_after).
const DefaultFailoverAfter = 2 * time.Second

// suspectFactor: a rank that missed the failover deadline is skipped for
// suspectFactor × FailoverAfter, so that later calls go to a replica at
// once instead of paying the deadline again; then it is tried again.
const suspectFactor = 5

// replicaState is the store's failover routing and counters.
type replicaState struct {
	groups int           // world / width
	after  time.Duration // per-read deadline before failover; 0: no replica to fail over to
	// alt[o]: ranks holding shard o outside the home group, in preference
	// order (same node first, then nearest group).
	alt [][]int
	// suspect[r]: telemetry.Nanotime until which rank r is skipped (missed
	// the failover deadline); 0 when never.
	suspect []atomic.Int64
	// from[r]: reads moved away from owner r; to[r]: reads rank r served
	// in another's place.
	from, to []atomic.Int64
}

// initReplicas builds the failover order once the peers are known.
func (s *Store) initReplicas() {
	rs := &s.repl
	rs.groups = s.world / s.width
	rs.suspect = make([]atomic.Int64, s.nranks)
	rs.from = make([]atomic.Int64, s.nranks)
	rs.to = make([]atomic.Int64, s.nranks)
	if rs.groups < 2 {
		return
	}
	rs.after = s.opts.FailoverAfter
	if rs.after <= 0 {
		rs.after = DefaultFailoverAfter
	}
	home := s.rank / s.width
	rs.alt = make([][]int, s.width)
	for o := range rs.alt {
		var l []int
		for h := 0; h < rs.groups; h++ {
			if h != home {
				l = append(l, h*s.width+o)
			}
		}
		dist := func(r int) int { return abs(r/s.width - home) }
		sort.SliceStable(l, func(i, j int) bool {
			a, b := l[i], l[j]
			if sa, sb := s.peers[a].sameNode, s.peers[b].sameNode; sa != sb {
				return sa
			}
			if da, db := dist(a), dist(b); da != db {
				return da < db
			}
			return a < b
		})
		rs.alt[o] = l
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// avoid reports whether reads should skip rank r: it is dead, or it missed
// the failover deadline less than suspectFactor × FailoverAfter ago.
func (s *Store) avoid(r int) bool {
	if s.dead.has(r) {
		return true
	}
	u := s.repl.suspect[r].Load()
	return u != 0 && telemetry.Nanotime() < u
}

// suspectRank marks r as having missed the failover deadline.
func (s *Store) suspectRank(r int) {
	if r >= 0 && r < s.nranks {
		s.repl.suspect[r].Store(telemetry.Nanotime() + int64(suspectFactor*s.repl.after))
	}
}

// replica returns the first rank holding shard o (of the home group) that
// reads need not avoid, or -1. Only for variables with v.replicated.
func (v *Var) replica(o int) int {
	for _, r := range v.alt[o] {
		if !v.s.avoid(r) {
			return r
		}
	}
	return -1
}

// shardOf is rank r's copy of shard o, r being its home owner or one of
// v.alt[o]: the mapping (nil when read through the fabric) and the remote
// region. The home owner's are v.src and v.remote, the others' v.rsrc and
// v.rremote (lastResort may send a read back to the home owner).
func (v *Var) shardOf(o, r int) ([]byte, remoteShard) {
	if r == v.home[o] {
		return v.src[o], v.remote[o]
	}
	return v.rsrc[r], v.rremote[r]
}

// lastResort is the first rank holding shard o that is not dead (suspect
// or not), or -1.
func (v *Var) lastResort(o int) int {
	if r := v.home[o]; !v.s.dead.has(r) {
		return r
	}
	for _, r := range v.alt[o] {
		if !v.s.dead.has(r) {
			return r
		}
	}
	return -1
}

// shun reports whether reads of home owner r should go elsewhere: it is
// dead, or (for a variable with replicas) it missed the failover deadline
// recently. One atomic load per row when all is well.
func (v *Var) shun(r int) bool {
	s := v.s
	if s.dead.has(r) {
		return true
	}
	return v.replicated && s.repl.suspect[r].Load() != 0 && s.avoid(r)
}

// memberOf is the shard (home member index) rank r holds, or -1.
func (v *Var) memberOf(r int) int {
	for o, h := range v.home {
		if h == r {
			return o
		}
	}
	for o, l := range v.alt {
		for _, a := range l {
			if a == r {
				return o
			}
		}
	}
	return -1
}

// countFailover records that a read of owner's rows went to replica r.
func (v *Var) countFailover(st *callStats, owner, r int, n int64) {
	s := v.s
	s.repl.from[owner].Add(n)
	s.repl.to[r].Add(n)
	v.failovers.Add(n)
	st.failovers += n
	s.tel.Failover(owner, r, n) // the peer table names the failed owner (nil-safe)
}

// canFailover reports whether reads of v may move to another group.
func (v *Var) canFailover() bool { return v.replicated && v.s.repl.after > 0 }

// readTimeout is the fabric deadline for the queued reads: the failover
// deadline when every one of them has another rank to go to, else the
// fabric's hard deadline (0 restores it).
func (v *Var) readTimeout(c *readCtx) time.Duration {
	if !v.canFailover() {
		return 0
	}
	for i := range c.ops {
		o := int(c.opMember[i])
		if c.opRank[i] == v.home[o] && !v.s.avoid(c.opRank[i]) {
			continue // the owner: the replicas are untried
		}
		if v.replica(o) < 0 {
			return 0 // a last resort: the hard deadline
		}
	}
	return v.s.repl.after
}

// retarget is called after a failed fabric call on c's queue when the
// variable can fail over and the failure is the peer's (dead, unreachable
// or past the deadline). It marks the blamed rank (dead, or suspect after
// a timeout), drops the ops that completed, copies the rows it can from
// mapped replicas, and points the rest of the missing ops at a replica.
// It fails, naming every rank tried, when a missing row has no rank left.
func (v *Var) retarget(c *readCtx, st *callStats, cause error) error {
	s := v.s
	blamed := fabricErrRank(cause)
	if blamed < 0 {
		return v.fabricError(c, cause)
	}
	if errors.Is(cause, fabric.ErrTimeout) {
		s.suspectRank(blamed)
	} else {
		s.dead.mark(blamed)
	}
	n := 0
	for i := range c.ops {
		op := c.ops[i]
		if op.Done {
			continue
		}
		r, o, off := c.opRank[i], int(c.opMember[i]), c.opOff[i]
		if s.avoid(r) {
			r2 := v.replica(o)
			if r2 < 0 {
				// Every rank holding the shard is dead or suspect: try a
				// suspect one again (slow is not dead), now with the
				// fabric's hard deadline (readTimeout: no alternative).
				r2 = v.lastResort(o)
			}
			if r2 < 0 {
				return v.errNoReplica(st, o, cause)
			}
			owner := v.home[o]
			rows := int64(len(op.Dst)) / v.rowBytes
			if r2 != owner {
				v.countFailover(st, owner, r2, rows)
			}
			st.targets.Add(r2, rows)
			src, rs := v.shardOf(o, r2)
			if src != nil {
				copy(op.Dst, src[off:off+int64(len(op.Dst))])
				continue
			}
			p, err := c.peerOf(r2)
			if err != nil {
				return err
			}
			op.Peer, op.Addr, op.Key = p, rs.base+uint64(off), rs.key
			r = r2
		}
		c.ops[n], c.opRank[n], c.opMember[n], c.opOff[n] = op, r, int32(o), off
		n++
	}
	clear(c.ops[n:]) // drop the callers' Dst slices
	c.ops, c.opRank, c.opMember, c.opOff = c.ops[:n], c.opRank[:n], c.opMember[:n], c.opOff[:n]
	return nil
}

// routeAvoided serves rows of shard o whose home owner reads must avoid
// (dead, or suspect): from a mapped replica (copy), or queued on a
// replica's fabric peer. ok is false when no replica can take them (the
// caller then reads the owner, or fails if it is dead).
func (v *Var) routeAvoided(c *readCtx, st *callStats, o int, off int64, d []byte) (_ *readCtx, ok bool, err error) {
	if !v.canFailover() {
		return c, false, nil
	}
	r := v.replica(o)
	if r < 0 {
		return c, false, nil
	}
	n := int64(len(d)) / v.rowBytes
	v.countFailover(st, v.home[o], r, n)
	st.targets.Add(r, n)
	src, rs := v.shardOf(o, r)
	if src != nil {
		copy(d, src[off:off+int64(len(d))])
		st.localRows += n
		return c, true, nil
	}
	st.remoteRows += n
	if c == nil {
		c = v.lockShared(st)
	}
	p, err := c.peerOf(r)
	if err != nil {
		return c, false, err
	}
	step := max(maxReadBytes/v.rowBytes, 1) * v.rowBytes
	for k := int64(0); k < int64(len(d)); k += step {
		e := min(int64(len(d)), k+step)
		op := fabric.ReadOp{Dst: d[k:e], Peer: p, Addr: rs.base + uint64(off+k), Key: rs.key}
		if err := v.enqueue(c, st, op, r, o, off+k); err != nil {
			return c, true, err
		}
	}
	return c, true, nil
}

// peerOf is the reader's fabric peer for rank r, connected on first use
// (a replica outside the home group: the first failover to it from this
// reader inserts its address, the one allocation of the failover path).
func (c *readCtx) peerOf(r int) (fabric.Peer, error) {
	if p := c.rpeers[r]; p != (fabric.Peer{}) {
		return p, nil
	}
	if c.fr == nil {
		return fabric.Peer{}, &fault.Error{Op: "failover", Ranks: []int{r}, Side: fault.Local, Kind: ErrPeerDead,
			Detail: "replica is on another node but this rank has no fabric"}
	}
	p, err := c.fr.AddPeer(r, c.s.peers[r].Addr)
	if err != nil {
		return fabric.Peer{}, wrapf(nil, "failover", "", err, "connect reader to replica rank %d", r)
	}
	c.rpeers[r] = p
	return p, nil
}

// errNoReplica is the error of a row of shard o that no rank could serve:
// it names the owner and every replica, and wraps the last failure.
func (v *Var) errNoReplica(st *callStats, o int, cause error) error {
	s := v.s
	tried := append([]int{v.home[o]}, v.alt[o]...)
	kind := ErrPeerDead
	if errors.Is(cause, fabric.ErrTimeout) {
		kind = ErrTimeout
	}
	var dead, slow []int
	for _, r := range tried {
		if s.dead.has(r) {
			dead = append(dead, r)
		} else {
			slow = append(slow, r)
		}
	}
	detail := fmt.Sprintf("no rank holding shard %d can serve it", o)
	if len(dead) > 0 {
		detail += "; dead: " + fault.RankList(dead)
	}
	if len(slow) > 0 {
		detail += fmt.Sprintf("; missed the failover deadline %v: %s", s.repl.after, fault.RankList(slow))
	}
	return &fault.Error{Op: st.op, Var: v.name, Ranks: tried, Side: fault.Remote, Kind: kind, Detail: detail, Err: cause}
}

// FailoverStats counts reads that moved to another replica group.
type FailoverStats struct {
	// Reads is the number of row reads (contiguous runs count their rows)
	// served by a replica instead of their owner, since Open.
	Reads int64
	// From[r] is how many of those reads were moved away from owner r;
	// To[r] how many rank r served. Ranks with no count are absent.
	From, To map[int]int64
	// Suspect lists the ranks reads currently skip because they missed the
	// failover deadline; Dead the ranks known to have died.
	Suspect, Dead []int
}

// Failovers returns the store's failover counters (not on a hot path: it
// allocates the maps).
func (s *Store) Failovers() FailoverStats {
	f := FailoverStats{From: map[int]int64{}, To: map[int]int64{}}
	now := telemetry.Nanotime()
	for r := 0; r < s.nranks; r++ {
		if n := s.repl.from[r].Load(); n > 0 {
			f.From[r] = n
			f.Reads += n
		}
		if n := s.repl.to[r].Load(); n > 0 {
			f.To[r] = n
		}
		if u := s.repl.suspect[r].Load(); u != 0 && now < u {
			f.Suspect = append(f.Suspect, r)
		}
		if r != s.rank && s.dead.has(r) {
			f.Dead = append(f.Dead, r)
		}
	}
	return f
}

// Failovers is the number of this variable's row reads served by a
// replica instead of their owner on this rank.
func (v *Var) Failovers() int64 { return v.failovers.Load() }

// UpdateReplicas is Update for a variable with replica groups, and the
// guarantee that goes with failover: every replica of a shard holds the
// same rows. It is collective (every rank calls it, in the same order as
// the other collectives): each rank passes the rows for its own shard, and
// the ranks that hold the same shard (member o of every group) must pass
// the same local offset and the same bytes. The call compares them (a
// digest of the rows) before anything is written: if any rank's update is
// invalid or replicas disagree, every rank returns an error (ErrMismatch
// naming the ranks, or the invalid rank's error) and no shard changes.
// Otherwise every rank writes its shard and meets the others at a barrier,
// so that once UpdateReplicas returns on any rank, every replica holds the
// new rows and reads (failed over or not) see them.
//
// Plain Update stays local and unchecked: it changes this rank's copy
// only, and a read that fails over may then see another group's rows.
func (s *Store) UpdateReplicas(name string, rows []byte, localOffset int64) error {
	const op = "UpdateReplicas"
	v, err := s.acquire(op, name)
	if err != nil {
		return err
	}
	defer v.inflight.Add(-1)
	type rec struct {
		Off    int64  `json:"off"`
		Digest uint64 `json:"digest"`
		N      int    `json:"n"`
		Err    string `json:"err,omitempty"`
	}
	me := rec{Off: localOffset, Digest: digest(rows), N: len(rows)}
	localErr := v.checkUpdate(op, rows, localOffset)
	if localErr != nil {
		me.Err = localErr.Error()
	}
	b, err := json.Marshal(me)
	if err != nil {
		return wrapf(ErrInvalid, op, name, err, "encode")
	}
	blobs, err := s.allGather("update-replicas", name, b)
	if err != nil {
		return err
	}
	recs := make([]rec, len(blobs))
	var failed, differ []int
	for r, blob := range blobs {
		if json.Unmarshal(blob, &recs[r]) != nil {
			return errf(ErrMismatch, op, name, "rank %d sent a bad record", r)
		}
		if recs[r].Err != "" {
			failed = append(failed, r)
		}
	}
	if localErr != nil {
		return localErr
	}
	if len(failed) > 0 {
		return &Error{Op: op, Var: name, Ranks: failed, Kind: ErrMismatch,
			Detail: "the update failed on " + fault.RankList(failed) + ": " + recs[failed[0]].Err}
	}
	// Every rank checks every shard, so that all return the same error.
	for o := 0; o < s.width && len(differ) == 0; o++ {
		for r := o + s.width; r < s.world; r += s.width {
			if recs[r] != recs[o] {
				differ = append(differ, o, r)
				break
			}
		}
	}
	if len(differ) > 0 {
		return &Error{Op: op, Var: name, Ranks: differ, Kind: ErrMismatch,
			Detail: fmt.Sprintf("replicas of shard %d were given different rows or offsets (%s)", differ[0]%s.width, fault.RankList(differ))}
	}
	copy(v.own.data[localOffset*v.rowBytes:], rows)
	return s.Barrier()
}

// digest is FNV-1a over b (the replicas' agreement check).
func digest(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}
