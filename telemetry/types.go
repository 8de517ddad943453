package telemetry

import (
	"math/bits"
	"time"
)

// Phases of one read call, in the order of Call.Phases and Counters.PhaseNs.
const (
	PhaseGPUSync  = iota // waiting for the GPU (stream sync) before/after the copy
	PhaseLockWait        // waiting for the shared store's per-variable lock
	PhaseMR              // memory registration of the destination
	PhasePost            // posting fi_read operations
	PhaseCQWait          // waiting for completions
	PhaseCopy            // memcpy of local rows / staging copies
	PhaseOther           // everything else (owner lookup, bookkeeping)
	NumPhases
)

// PhaseNames are the display names of the phases, indexed by Phase*.
var PhaseNames = [NumPhases]string{"gpu_sync", "lock_wait", "mr", "post", "cq_wait", "copy", "other"}

// Liveness states reported by Discover and Segment.State.
const (
	StateLive    = "live"    // heartbeat fresh (and pid alive when on this host)
	StateStale   = "stale"   // heartbeat older than StaleAfter
	StateExited  = "exited"  // writer pid gone (same host only)
	StateInvalid = "invalid" // file could not be read; SegmentInfo.Err says why
)

// StaleAfter is the heartbeat age beyond which a writer is reported stale.
const StaleAfter = 5 * time.Second

// Call is one read call as reported by the engine to Writer.Record.
// All durations are nanoseconds.
type Call struct {
	Var                   int32 // variable id returned by AddVar
	Reader                int32 // reader id: 0 = the store's shared reader, 1.. = Reader objects; one goroutine at a time per (Var, Reader) unless Concurrent, see Writer.Record
	Rows, Bytes           int64
	LocalRows, RemoteRows int64
	// Targets is the set of ranks the call read from, with the rows read
	// from each: the engine calls Targets.Add per row or run. Record adds
	// each target's share to the peer table and stores the set in the ring.
	Targets TargetSet
	Phases  [NumPhases]int64 // ns spent per phase
	Err     bool             // the call returned an error
	// ErrPeer is 1 + the rank whose failure failed the call (0: none or
	// unknown); Record counts the error in that rank's peer slot.
	ErrPeer int32
	// MRRegs is the number of memory registrations the call made.
	MRRegs int64
	// Failovers is the number of reads the call moved to another replica
	// after a failure (0 until the engine has replicas).
	Failovers int64
	EndNano   int64 // Nanotime() at the call's end; 0 = Record reads the clock
	// Concurrent: other goroutines may record the same (Var, Reader) at
	// once: counters are updated with atomic adds (slower) instead of
	// single-writer stores. The engine sets it on the store's shared path
	// (reader 0) and on the overflow reader stripe. Every writer of a pair
	// that any writer records Concurrent must set it too.
	Concurrent bool
}

// Total is the call's total time in ns (the sum of its phases).
func (c *Call) Total() int64 {
	var t int64
	for _, p := range c.Phases {
		if p > 0 {
			t += p
		}
	}
	return t
}

// MaxCallTargets is how many distinct target ranks of one call TargetSet
// (and a ring record) keep by name, with their rows.
const MaxCallTargets = 12

// targetBits is the number of ranks TargetSet tracks exactly beyond its
// first MaxCallTargets (a bitmap).
const targetBits = 1024

// TargetSet is the set of ranks one call read from. The zero value is
// empty; Add never allocates. It counts distinct ranks exactly for ranks
// below 1024 (a bitmap) and keeps the first MaxCallTargets distinct ranks
// with the rows read from each; rows of later ranks are summed in
// OtherRows. A rank >= 1024 beyond the first MaxCallTargets is counted
// once per Add (Len may then over-count).
type TargetSet struct {
	n     int32
	last  int32 // index of the last rank hit, a cache for runs of rows
	rank  [MaxCallTargets]int32
	rows  [MaxCallTargets]int64
	ns    [MaxCallTargets]int64 // measured service time (Served), 0 = not measured
	other int64
	bits  [targetBits / 64]uint64
}

// Add counts rows read from rank (rank >= 0).
func (t *TargetSet) Add(rank int, rows int64) {
	if rank < 0 {
		return
	}
	k := int(t.last)
	if k < int(t.n) && k < MaxCallTargets && t.rank[k] == int32(rank) {
		t.rows[k] += rows
		return
	}
	if rank < targetBits {
		w, b := rank>>6, uint64(1)<<(uint(rank)&63)
		if t.bits[w]&b == 0 {
			t.bits[w] |= b
			t.addNew(rank, rows)
			return
		}
	}
	lim := min(int(t.n), MaxCallTargets)
	for i := 0; i < lim; i++ {
		if t.rank[i] == int32(rank) {
			t.rows[i] += rows
			t.last = int32(i)
			return
		}
	}
	if rank >= targetBits {
		t.addNew(rank, rows)
		return
	}
	t.other += rows // a known rank beyond the first MaxCallTargets
}

func (t *TargetSet) addNew(rank int, rows int64) {
	if t.n < MaxCallTargets {
		t.rank[t.n], t.rows[t.n] = int32(rank), rows
		t.last = t.n
	} else {
		t.other += rows
	}
	t.n++
}

// Served records that rank's reads of the call completed ns after their
// fabric batch started (the latest such time is kept): the time the rank
// took to serve them. Record gives a target with a measured time that
// time in the peer table; other targets share the rest of the call by rows.
func (t *TargetSet) Served(rank int, ns int64) {
	k := int(t.last)
	if k >= int(t.n) || k >= MaxCallTargets || t.rank[k] != int32(rank) {
		k = -1
		for i := 0; i < min(int(t.n), MaxCallTargets); i++ {
			if t.rank[i] == int32(rank) {
				k = i
				break
			}
		}
		if k < 0 {
			return
		}
		t.last = int32(k)
	}
	if ns > t.ns[k] {
		t.ns[k] = ns
	}
}

// ServedNs is the measured time of Rank(i) (0: not measured).
func (t *TargetSet) ServedNs(i int) int64 { return t.ns[i] }

// Len is the number of distinct ranks (see TargetSet for its limits).
func (t *TargetSet) Len() int { return int(t.n) }

// Named is how many ranks Rank and Rows describe: min(Len, MaxCallTargets).
func (t *TargetSet) Named() int { return min(int(t.n), MaxCallTargets) }

// Rank is the i-th distinct rank added (i < Named()).
func (t *TargetSet) Rank(i int) int { return int(t.rank[i]) }

// Rows is the rows read from Rank(i).
func (t *TargetSet) Rows(i int) int64 { return t.rows[i] }

// OtherRows is the rows read from ranks beyond the first MaxCallTargets.
func (t *TargetSet) OtherRows() int64 { return t.other }

// Mask is the ranks below 64 as a bitmap (bit r = rank r), exact.
func (t *TargetSet) Mask() uint64 { return t.bits[0] }

// Counters is one stripe: the totals of every call of one (variable,
// reader) pair, or sums of such stripes. Within a live snapshot each field
// is exact and monotonic; the writer bumps Calls last and the reader loads
// it first, so every call counted in Calls is fully counted in the other
// fields (they may already include a few in-flight calls).
type Counters struct {
	Calls, Rows, Bytes    int64
	LocalRows, RemoteRows int64
	Errors                int64
	PhaseNs               [NumPhases]int64
	MRRegs                int64     // memory registrations (v2; 0 in v1 files)
	Failovers             int64     // reads moved to another replica (v2)
	CallHist              Histogram // total ns per call
	RowHist               Histogram // total ns per call / rows (calls with rows > 0)
}

// Add returns c + o, field by field.
func (c Counters) Add(o Counters) Counters {
	c.Accumulate(&o)
	return c
}

// Accumulate adds o to c, field by field (c += o without copying either).
func (c *Counters) Accumulate(o *Counters) { c.addTimes(o, 1) }

// Sub returns c - prev, field by field: the work done between two
// snapshots of the same stripe. Use it only when both snapshots have the
// same variable Generation and segment StartNs.
func (c Counters) Sub(prev Counters) Counters {
	c.Deduct(&prev)
	return c
}

// Deduct subtracts prev from c, field by field (c -= prev without copying
// either; see Sub).
func (c *Counters) Deduct(prev *Counters) { c.addTimes(prev, -1) }

// addTimes adds k·o to c, field by field (k is 1 or -1; the histograms'
// uint64 buckets wrap as c -= o does).
func (c *Counters) addTimes(o *Counters, k int64) {
	c.Calls += k * o.Calls
	c.Rows += k * o.Rows
	c.Bytes += k * o.Bytes
	c.LocalRows += k * o.LocalRows
	c.RemoteRows += k * o.RemoteRows
	c.Errors += k * o.Errors
	c.MRRegs += k * o.MRRegs
	c.Failovers += k * o.Failovers
	for i := range c.PhaseNs {
		c.PhaseNs[i] += k * o.PhaseNs[i]
	}
	for i := range c.CallHist {
		c.CallHist[i] += uint64(k) * o.CallHist[i]
		c.RowHist[i] += uint64(k) * o.RowHist[i]
	}
}

// TotalNs is the sum of all phases.
func (c Counters) TotalNs() int64 {
	var t int64
	for _, p := range c.PhaseNs {
		t += p
	}
	return t
}

// IsZero reports whether no call was counted.
func (c Counters) IsZero() bool { return c.Calls == 0 }

// Reader kinds of LoaderConfig.Readers.
const (
	LoaderReadersUnknown = 0 // not reported (v1 files, or no loader)
	LoaderReadersShared  = 1 // workers share the store's reader (one lock per variable)
	LoaderReadersThread  = 2 // one Reader (endpoint) per worker
)

// LoaderConfig is the loader's configuration, as the engine reports it
// with Writer.SetLoaderConfig (v2; zero in v1 files).
type LoaderConfig struct {
	Workers   int64 // worker goroutines (0: the consumer reads)
	Prefetch  int64 // batches in flight ahead of the consumer (the depth in use)
	Readers   int64 // LoaderReaders*
	BatchRows int64 // rows per batch
	// PrefetchMax is, with prefetch auto, the deepest prefetch the loader
	// may choose (Prefetch is its current choice); 0 when the prefetch is
	// fixed, and in files without the loader-depth feature.
	PrefetchMax int64 `json:",omitempty"`
}

// LoaderCounters is the loader block: one batch per RecordLoader call.
type LoaderCounters struct {
	Batches  int64
	WaitNs   int64     // total time the consumer waited for a batch
	StepNs   int64     // total time between batches (the training step)
	WaitHist Histogram // per-batch wait ns
	StepHist Histogram // per-batch step ns
	Config   LoaderConfig
}

// Sub returns l - prev.
func (l LoaderCounters) Sub(prev LoaderCounters) LoaderCounters {
	l.Batches -= prev.Batches
	l.WaitNs -= prev.WaitNs
	l.StepNs -= prev.StepNs
	l.WaitHist = l.WaitHist.Sub(prev.WaitHist)
	l.StepHist = l.StepHist.Sub(prev.StepHist)
	return l
}

// NumPeerBuckets is the number of buckets of a peer's latency histogram:
// bucket 0 holds 0 ns, bucket i (1..14) holds [4^(i-1), 4^i) ns, the last
// everything from 4^14 ns (about 0.27 s) up.
const NumPeerBuckets = 16

// PeerHistogram counts per-row read times (ns) of one target rank.
type PeerHistogram [NumPeerBuckets]uint64

// PeerBucketIndex returns the PeerHistogram bucket of v ns.
func PeerBucketIndex(v int64) int {
	if v <= 0 {
		return 0
	}
	return min((bits.Len64(uint64(v))+1)/2, NumPeerBuckets-1)
}

// peerBucketPerRow is the PeerHistogram bucket of ns/rows (of ns when
// rows is 0) without a division: the quotient's bit length is that of ns
// less that of rows, or one more when ns >= rows<<(that difference).
func peerBucketPerRow(ns, rows uint64) int {
	if rows <= 1 {
		return min((bits.Len64(ns)+1)/2, NumPeerBuckets-1)
	}
	k := bits.Len64(ns) - bits.Len64(rows)
	if k < 0 {
		return 0
	}
	if ns >= rows<<uint(k) {
		k++
	}
	return min((k+1)/2, NumPeerBuckets-1)
}

// PeerBucketBounds is the range [lo, hi) of bucket i in ns.
func PeerBucketBounds(i int) (lo, hi int64) { return logBounds(i, NumPeerBuckets, 2) }

// Quantile estimates the q-quantile in ns (see Histogram.Quantile).
func (h PeerHistogram) Quantile(q float64) float64 { return quantile(h[:], PeerBucketBounds, q) }

// PeerCounters is one target rank's slot of the peer table (v2): the
// reads this process made from that rank. A call that reads from several
// ranks counts once for each, and its time (total minus lock wait and GPU
// sync) is split among them by rows; a call from a single rank is timed
// exactly.
type PeerCounters struct {
	Rank   int   // target rank; MaxPeers-1 also holds every higher rank
	Calls  int64 // calls that read from the rank
	Rows   int64
	Bytes  int64
	Errors int64 // failed calls blamed on the rank (Call.ErrPeer)
	Ns     int64 // time attributed to the rank
	// FailedFrom: row reads moved away from the rank (their owner: dead,
	// unreachable or past the failover deadline) to a replica; ServedFor:
	// row reads the rank served as that replica (Writer.Failover).
	FailedFrom, ServedFor int64
	Hist                  PeerHistogram
}

// Sub returns p - prev.
func (p PeerCounters) Sub(prev PeerCounters) PeerCounters {
	p.Calls -= prev.Calls
	p.Rows -= prev.Rows
	p.Bytes -= prev.Bytes
	p.Errors -= prev.Errors
	p.Ns -= prev.Ns
	p.FailedFrom -= prev.FailedFrom
	p.ServedFor -= prev.ServedFor
	for i := range p.Hist {
		p.Hist[i] -= prev.Hist[i]
	}
	return p
}

// Process counters (Header.Proc indices, v2): engine-wide events that are
// not per call. Writers bump them with Writer.AddProc.
const (
	ProcQuarantinedReaders = iota // Readers whose endpoint was torn down and set aside
	ProcLeakedBuffers             // buffers not returned to their pool
	ProcGatherStrangers           // gather requests with another job's key, dropped unanswered
	ProcReserved3
	ProcReserved4
	ProcReserved5
	ProcReserved6
	ProcReserved7
	NumProc
)

// ProcNames are the display names of the process counters.
var ProcNames = [NumProc]string{"quarantined_readers", "leaked_buffers", "gather_strangers", "proc3", "proc4", "proc5", "proc6", "proc7"}

// Header is the identity and geometry of a segment.
type Header struct {
	Version    int
	Pid        int
	Host       string
	Rank       int
	World      int
	Job        string
	StartNs    int64 // writer creation time, unix ns; identifies one incarnation
	Heartbeat  int64 // last heartbeat, unix ns
	Provider   string
	ReaderMode string
	Method     string
	MaxVars    int
	MaxReaders int
	RingSize   int
	// BadVarCalls counts Record calls for an unknown or removed variable;
	// they are not counted anywhere else.
	BadVarCalls int64
	// BadReaderCalls counts Record calls whose reader id was >= MaxReaders;
	// they are counted in the last reader stripe.
	BadReaderCalls int64
	// RingClaimFails counts records the writer could not place in the ring
	// because the slot was still being written by an older lap.
	RingClaimFails int64
	// RingHead is the number of ring slots claimed so far (the next
	// record's position).
	RingHead uint64
	// LaneRingSize is the number of slots of each lane ring (v4; 0
	// before: one ring).
	LaneRingSize int
	// MaxPeers is the number of peer slots (0 in v1 files).
	MaxPeers int
	// PeerLanes is the number of lanes of the peer table (v3; 1 in v2
	// files, 0 in v1): Peers adds a rank's slots over them.
	PeerLanes int
	// Proc holds the process counters (ProcNames; zero in v1 files).
	Proc [NumProc]int64
}

// Start is StartNs as a time.
func (h *Header) Start() time.Time { return time.Unix(0, h.StartNs) }

// HeartbeatTime is Heartbeat as a time.
func (h *Header) HeartbeatTime() time.Time { return time.Unix(0, h.Heartbeat) }

// VarSnapshot is one in-use variable and its per-reader stripes.
type VarSnapshot struct {
	ID         int
	Name       string
	DType      string
	RowBytes   int64
	GlobalRows int64
	LocalRows  int64
	// Generation changes every time the variable slot is (re)used; do not
	// diff counters across different generations.
	Generation uint64
	// Readers is indexed by reader id and trimmed after the last reader
	// with at least one call; unused readers in between are zero.
	Readers []Counters
}

// Total sums the variable's reader stripes.
func (v *VarSnapshot) Total() Counters {
	var t Counters
	for i := range v.Readers {
		t = t.Add(v.Readers[i])
	}
	return t
}

// Snapshot is a copy of a segment's counters at one moment.
type Snapshot struct {
	Header
	Taken        time.Time // when the snapshot was taken (reader clock)
	Path         string    // segment file
	State        string    // StateLive, StateStale or StateExited
	Alive        bool      // writer pid alive (same host) or heartbeat fresh (other host)
	HeartbeatAge time.Duration
	Vars         []VarSnapshot // in-use variables, by id
	Loader       LoaderCounters
	// Peers are the peer slots that saw a call, by rank (v2; nil in v1).
	Peers []PeerCounters
}

// Peer returns the slot of rank, or nil.
func (s *Snapshot) Peer(rank int) *PeerCounters {
	for i := range s.Peers {
		if s.Peers[i].Rank == rank {
			return &s.Peers[i]
		}
	}
	return nil
}

// Total sums every variable's stripes.
func (s *Snapshot) Total() Counters {
	var t Counters
	for i := range s.Vars {
		t = t.Add(s.Vars[i].Total())
	}
	return t
}

// Var returns the variable with the given name, or nil.
func (s *Snapshot) Var(name string) *VarSnapshot {
	for i := range s.Vars {
		if s.Vars[i].Name == name {
			return &s.Vars[i]
		}
	}
	return nil
}

// Record is one call from the ring of recent calls.
type Record struct {
	Seq                   uint64 // position in its ring (0, 1, 2, ... since creation)
	Ring                  int    `json:",omitempty"` // its ring: 0 the shared one, i >= 1 lane ring i (v4: reader id i-1)
	TimeNs                int64  // unix ns when the call was recorded (its end), from the writer's monotonic clock anchored to the wall clock at each heartbeat
	Var                   int32
	Reader                int32 // stripe the call was counted in (ids >= MaxReaders show as MaxReaders-1)
	Rows, Bytes           int64
	LocalRows, RemoteRows int64
	// Targets: bit r set for target rank r < 64 (v1 files: bit rank%64,
	// which aliases ranks 64 and up).
	Targets uint64
	// NTargets is the number of distinct target ranks; FirstTargets[:min(
	// NTargets, MaxCallTargets)] are the first of them (in v1 files both
	// are derived from Targets).
	NTargets     int
	FirstTargets [MaxCallTargets]int32
	MRRegs       int64 // v2
	Phases       [NumPhases]int64
	Err          bool
}

// Time is TimeNs as a time.
func (r *Record) Time() time.Time { return time.Unix(0, r.TimeNs) }

// Total is the record's total ns (sum of phases).
func (r *Record) Total() int64 {
	var t int64
	for _, p := range r.Phases {
		t += p
	}
	return t
}

// SegmentInfo describes one segment found by Discover.
type SegmentInfo struct {
	Path         string
	Job, Host    string
	Rank, World  int
	Pid          int
	StartNs      int64
	Alive        bool          // pid alive (same host) or heartbeat fresh (other host)
	HeartbeatAge time.Duration // reader clock minus last heartbeat
	State        string        // StateLive, StateStale, StateExited or StateInvalid
	Err          error         // why the file is StateInvalid
}
