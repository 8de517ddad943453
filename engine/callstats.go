package engine

// One call's timing and counts, recorded in the telemetry segment when the
// call ends (phases: lock wait, MR, post, CQ wait, copy, GPU sync).

import (
	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/telemetry"
)

// callStats accumulates one call's telemetry. With telemetry off (timed
// false) nothing reads the clock.
type callStats struct {
	timed                 bool
	locked                bool  // holds the variable's shared reader (v.mu)
	start, end            int64 // telemetry.Nanotime
	lockWait              int64
	copyTime              int64
	gpuSync               int64 // device reads: waiting for the GPU
	fabTime               int64 // wall time inside fabric calls
	fab                   fabric.Timing
	localRows, remoteRows int64
	targets               telemetry.TargetSet
	failovers             int64  // rows served by a replica instead of their owner
	op                    string // the API call, for errors: "Get", "GetBatch", "GetRanges"
	// deadRank is the home owner of the first piece no rank could serve
	// (placement.Dead), -1 when none: the call fails naming it once every
	// other piece has landed.
	deadRank int
	tel      int32 // telemetry reader stripe: the Reader's, 0 for the store's shared path
	rows     int64 // rows the call reads
}

// begin enters v for a call to op through c (nil: the store's shared
// reader) and starts st (zero) for it, reading the clock when the call is
// timed; rows is what the call reads. When it returns nil the caller must
// defer v.end(st, err).
func (v *Var) begin(st *callStats, c *readCtx, op string, rows int64) error {
	if err := v.enter(op); err != nil {
		return err
	}
	st.timed = v.telID >= 0 && v.s.tel != nil // telID is stable while entered
	st.op, st.deadRank, st.rows = op, -1, rows
	if c != nil {
		st.tel = c.tel
	}
	st.start = st.now()
	return nil
}

// end finishes the call begun by begin and leaves the variable.
func (v *Var) end(st *callStats, err error) {
	v.finish(st, err)
	v.inflight.Add(-1)
}

// now reads the clock (ns) when the call is timed, else returns 0.
func (st *callStats) now() int64 {
	if st.timed {
		return telemetry.Nanotime()
	}
	return 0
}

// finish releases the shared reader, if the call took it, and records the
// call. Stripe (var, 0) of the store's shared path has concurrent writers
// (calls with all-local rows and early errors never take v.mu), so it is
// always recorded Concurrent, and need not be recorded under the lock.
func (v *Var) finish(st *callStats, err error) {
	if st.locked {
		st.locked = false
		v.mu.Unlock()
	}
	v.record(st, err)
}

func (v *Var) record(st *callStats, err error) {
	tel, rows := st.tel, st.rows
	if !st.timed {
		return
	}
	if st.end == 0 {
		st.end = telemetry.Nanotime()
	}
	total := st.end - st.start
	c := telemetry.Call{Var: v.telID, Reader: tel, Rows: rows, Bytes: rows * v.rowBytes,
		LocalRows: st.localRows, RemoteRows: st.remoteRows, Targets: st.targets, Err: err != nil, EndNano: st.end,
		MRRegs: st.fab.Regs, Failovers: st.failovers,
		// The shared path (0) and the overflow stripe have several writers.
		Concurrent: tel == 0 || tel >= maxTelReaders-1}
	c.Phases[telemetry.PhaseGPUSync] = st.gpuSync
	c.Phases[telemetry.PhaseLockWait] = st.lockWait
	c.Phases[telemetry.PhaseMR] = int64(st.fab.MR)
	c.Phases[telemetry.PhasePost] = int64(st.fab.Post)
	c.Phases[telemetry.PhaseCQWait] = int64(st.fab.CQWait)
	c.Phases[telemetry.PhaseCopy] = st.copyTime
	other := total - st.gpuSync - st.lockWait - int64(st.fab.MR) - int64(st.fab.Post) - int64(st.fab.CQWait) - st.copyTime
	if other < 0 {
		other = 0
	}
	c.Phases[telemetry.PhaseOther] = other
	if err != nil {
		if r := fault.RanksOf(err); len(r) == 1 {
			c.ErrPeer = int32(r[0]) + 1
		}
	}
	v.s.tel.Record(&c)
}
