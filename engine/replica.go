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
// Which replica is placement's decision (package engine/placement, the one
// place that decides where a row is read from): the ranks holding shard o
// in the other groups, in a fixed order: those on this node first (their
// shard is mapped, so a stalled owner cannot delay the copy), then by
// distance between group indices (nearest group first), ties to the lower
// group. Dead ranks and ranks that missed the failover deadline in the
// last suspectFactor × FailoverAfter are skipped; once that time has passed
// a rank is tried again (a stall may end; death is for good). When every
// rank holding the shard has been tried, the call fails with an error that
// names them all.
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
	"sync/atomic"
	"time"

	"github.com/ddstore/ddstore/engine/placement"
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

// replicaState is the store's failover routing and counters. Which rank
// serves a read is placement's decision (placement.Layout.Route); the
// store keeps the failover order and counts the moves.
type replicaState struct {
	groups int           // world / width
	after  time.Duration // per-read deadline before failover; 0: no replica to fail over to
	// alt[o]: ranks holding shard o outside the home group, in failover
	// order (placement.FailoverOrder).
	alt [][]int
	// from[r]: reads moved away from owner r; to[r]: reads rank r served
	// in another's place.
	from, to []atomic.Int64
}

// initReplicas builds the failover order once the peers are known.
func (s *Store) initReplicas() {
	rs := &s.repl
	rs.groups = s.world / s.width
	rs.from = make([]atomic.Int64, s.nranks)
	rs.to = make([]atomic.Int64, s.nranks)
	if rs.groups < 2 {
		return
	}
	rs.after = s.opts.FailoverAfter
	if rs.after <= 0 {
		rs.after = DefaultFailoverAfter
	}
	rs.alt = make([][]int, s.width)
	for o := range rs.alt {
		rs.alt[o] = placement.FailoverOrder(rs.groups, s.width, 0, s.rank/s.width, o, s.sameNode)
	}
}

// sameNode reports whether rank r runs on this node.
func (s *Store) sameNode(r int) bool { return s.peers[r].sameNode }

// suspectRank marks r as having missed the failover deadline: reads skip
// it for suspectFactor × FailoverAfter.
func (s *Store) suspectRank(r int) {
	s.health.Suspect(r, telemetry.Nanotime()+int64(suspectFactor*s.repl.after))
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
func (v *Var) canFailover() bool { return v.lay.CanFailover() && v.s.repl.after > 0 }

// readTimeout is the fabric deadline for the queued reads: the failover
// deadline when every one of them has another rank to go to, else the
// fabric's hard deadline (0 restores it).
func (v *Var) readTimeout(c *readCtx) time.Duration {
	if !v.canFailover() {
		return 0
	}
	for i := range c.ops {
		if !v.lay.HasAlternative(v.s.health, int(c.opMember[i]), c.opRank[i]) {
			return 0 // a last resort: the hard deadline
		}
	}
	return v.s.repl.after
}

// retarget is called after a failed fabric call on c's queue when the
// variable can fail over and the failure is the peer's (dead, unreachable
// or past the deadline). It marks the blamed rank (dead, or suspect after
// a timeout), drops the ops that completed, and routes each missing op
// again (placement): copied from a mapped replica, or pointed at a
// replica's fabric peer. It fails, naming every rank tried, when a missing
// row has no rank left.
func (v *Var) retarget(c *readCtx, st *callStats, cause error) error {
	s := v.s
	blamed := fabricErrRank(cause)
	if blamed < 0 {
		return v.fabricError(c, cause)
	}
	if errors.Is(cause, fault.ErrTimeout) {
		s.suspectRank(blamed)
	} else {
		s.health.MarkDead(blamed)
	}
	n := 0
	for i := range c.ops {
		op := c.ops[i]
		if op.Done {
			continue
		}
		r, o, off := c.opRank[i], int(c.opMember[i]), c.opOff[i]
		if s.health.Avoid(r) {
			p := v.lay.Route(s.health, o)
			if p.Kind == placement.Dead {
				return v.errNoReplica(st, o, cause)
			}
			r2 := int(p.Rank)
			rows := int64(len(op.Dst)) / v.rowBytes
			if owner := v.lay.Home[o]; r2 != owner {
				v.countFailover(st, owner, r2, rows)
			}
			st.targets.Add(r2, rows)
			if p.Kind == placement.Local {
				copy(op.Dst, v.src[r2][off:off+int64(len(op.Dst))])
				continue
			}
			peer, err := c.peerOf(r2)
			if err != nil {
				return err
			}
			rs := v.remote[r2]
			op.Peer, op.Addr, op.Key = peer, rs.base+uint64(off), rs.key
			r = r2
		}
		c.ops[n], c.opRank[n], c.opMember[n], c.opOff[n] = op, r, int32(o), off
		n++
	}
	clear(c.ops[n:]) // drop the callers' Dst slices
	c.ops, c.opRank, c.opMember, c.opOff = c.ops[:n], c.opRank[:n], c.opMember[:n], c.opOff[:n]
	return nil
}

// peerOf is the reader's fabric peer for rank r, inserted into its
// address vector on the reader's first read from r (one fi_av_insert, no
// allocation within the room connect reserved; later reads find it in
// rpeers).
func (c *readCtx) peerOf(r int) (fabric.Peer, error) {
	if p := c.rpeers[r]; p != (fabric.Peer{}) {
		return p, nil
	}
	if c.fr == nil {
		return fabric.Peer{}, &fault.Error{Op: "read", Ranks: []int{r}, Side: fault.Local, Kind: ErrPeerDead,
			Detail: "rank is on another node but this rank has no fabric"}
	}
	p, err := c.fr.AddPeer(r, c.s.peers[r].Addr)
	if err != nil {
		return fabric.Peer{}, &Error{Op: "read", Ranks: fault.RanksOf(err), Detail: fmt.Sprintf("connect this reader to rank %d", r), Err: err}
	}
	c.rpeers[r] = p
	return p, nil
}

// errNoReplica is the error of a row of shard o that no rank could serve:
// it names the owner and every replica, and wraps the last failure.
func (v *Var) errNoReplica(st *callStats, o int, cause error) error {
	s := v.s
	tried := v.lay.Holders(o)
	kind := ErrPeerDead
	if errors.Is(cause, fault.ErrTimeout) {
		kind = ErrTimeout
	}
	var dead, slow []int
	for _, r := range tried {
		if s.health.Dead(r) {
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
	for r := 0; r < s.nranks; r++ {
		if n := s.repl.from[r].Load(); n > 0 {
			f.From[r] = n
			f.Reads += n
		}
		if n := s.repl.to[r].Load(); n > 0 {
			f.To[r] = n
		}
		if s.health.Suspected(r) {
			f.Suspect = append(f.Suspect, r)
		}
		if r != s.rank && s.health.Dead(r) {
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
