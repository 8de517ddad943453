package telemetry

import "time"

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
	Targets               uint64           // bitmask of target ranks (bit rank%64)
	Phases                [NumPhases]int64 // ns spent per phase
	Err                   bool             // the call returned an error
	EndNano               int64            // Nanotime() at the call's end; 0 = Record reads the clock
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
	CallHist              Histogram // total ns per call
	RowHist               Histogram // total ns per call / rows (calls with rows > 0)
}

// Add returns c + o, field by field.
func (c Counters) Add(o Counters) Counters {
	c.Calls += o.Calls
	c.Rows += o.Rows
	c.Bytes += o.Bytes
	c.LocalRows += o.LocalRows
	c.RemoteRows += o.RemoteRows
	c.Errors += o.Errors
	for i := range c.PhaseNs {
		c.PhaseNs[i] += o.PhaseNs[i]
	}
	c.CallHist = c.CallHist.Add(o.CallHist)
	c.RowHist = c.RowHist.Add(o.RowHist)
	return c
}

// Sub returns c - prev, field by field: the work done between two
// snapshots of the same stripe. Use it only when both snapshots have the
// same variable Generation and segment StartNs.
func (c Counters) Sub(prev Counters) Counters {
	c.Calls -= prev.Calls
	c.Rows -= prev.Rows
	c.Bytes -= prev.Bytes
	c.LocalRows -= prev.LocalRows
	c.RemoteRows -= prev.RemoteRows
	c.Errors -= prev.Errors
	for i := range c.PhaseNs {
		c.PhaseNs[i] -= prev.PhaseNs[i]
	}
	c.CallHist = c.CallHist.Sub(prev.CallHist)
	c.RowHist = c.RowHist.Sub(prev.RowHist)
	return c
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

// LoaderCounters is the loader block: one batch per RecordLoader call.
type LoaderCounters struct {
	Batches  int64
	WaitNs   int64     // total time the consumer waited for a batch
	StepNs   int64     // total time between batches (the training step)
	WaitHist Histogram // per-batch wait ns
	StepHist Histogram // per-batch step ns
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
	Seq                   uint64 // ring position (0, 1, 2, ... since creation)
	TimeNs                int64  // unix ns when the call was recorded (its end), from the writer's monotonic clock anchored to the wall clock at each heartbeat
	Var                   int32
	Reader                int32 // stripe the call was counted in (ids >= MaxReaders show as MaxReaders-1)
	Rows, Bytes           int64
	LocalRows, RemoteRows int64
	Targets               uint64
	Phases                [NumPhases]int64
	Err                   bool
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
