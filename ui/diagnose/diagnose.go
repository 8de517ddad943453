// Package diagnose owns ddtop's rules: small documented functions that read
// a frame of telemetry snapshot diffs (ui/data) and name a known pathology,
// the rank, variable and reader where it shows, the numbers that show it
// (with the threshold they crossed) and the setting that fixes it. It reads
// frames only: no terminal, no segment access, so every rule is unit-tested
// on frames built from synthetic segments.
package diagnose

import (
	"cmp"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/ddstore/ddstore/telemetry"
	"github.com/ddstore/ddstore/ui/data"
)

// Rule names (Finding.Rule).
const (
	RuleGPUSync    = "gpu_sync"      // device-wide GPU sync dominates while the loader has workers
	RuleLockWait   = "lock_wait"     // the shared reader's lock is a large share of its time
	RuleUnbatched  = "unbatched"     // about one small row per call
	RuleMR         = "mr_churn"      // memory registration time or registrations per call
	RuleStraggler  = "straggler"     // one target rank's reads are much slower than the others'
	RuleLoaderWait = "loader_wait"   // the consumer waits for batches: fetch not hidden
	RuleRankState  = "rank_state"    // a rank is stale or exited
	RuleMissing    = "missing_ranks" // the job's world size says more ranks than have segments
	RuleErrors     = "errors"        // calls failed
	RuleRingDrops  = "ring_drops"    // recent-call records lost before ddtop read them
	RuleProcess    = "process"       // process counters: quarantined readers, leaked buffers
)

// Finding is one diagnosis: telemetry.Finding, the form ddtop's rules and
// the doctor's probes share.
type Finding = telemetry.Finding

// Thresholds tune the rules. The zero value of a field means its default
// (Defaults).
type Thresholds struct {
	MinCalls       int64   // calls a stripe or rank needs in the window before per-call rules judge it; default 20
	GPUSyncShare   float64 // gpu_sync share of call time; default 0.25
	LockWaitShare  float64 // lock_wait share of the shared reader's time; default 0.20
	RowsPerCall    float64 // at most this many rows per call counts as unbatched; default 1.5
	SmallRowBytes  int64   // rows up to this size are "small"; default 64 KiB
	MRShare        float64 // mr share of call time; default 0.10
	RegsPerCall    float64 // registrations per call; default 0.1
	StragglerRatio float64 // a target's µs/row over the median of the others'; default 3
	StragglerMinNs float64 // and at least this much slower per row (ns); default 5000
	MinPeerCalls   int64   // calls a target needs before it is compared; default 5
	LoaderWait     float64 // consumer wait over step time; default 0.05
	MinBatches     int64   // batches the loader needs in the window; default 2
}

// Defaults are the thresholds used for zero fields.
var Defaults = Thresholds{
	MinCalls: 20, GPUSyncShare: 0.25, LockWaitShare: 0.20, RowsPerCall: 1.5, SmallRowBytes: 64 << 10,
	MRShare: 0.10, RegsPerCall: 0.1, StragglerRatio: 3, StragglerMinNs: 5000, MinPeerCalls: 5,
	LoaderWait: 0.05, MinBatches: 2,
}

func (t Thresholds) withDefaults() Thresholds {
	d := Defaults
	t.MinCalls = cmp.Or(t.MinCalls, d.MinCalls)
	t.GPUSyncShare = cmp.Or(t.GPUSyncShare, d.GPUSyncShare)
	t.LockWaitShare = cmp.Or(t.LockWaitShare, d.LockWaitShare)
	t.RowsPerCall = cmp.Or(t.RowsPerCall, d.RowsPerCall)
	t.SmallRowBytes = cmp.Or(t.SmallRowBytes, d.SmallRowBytes)
	t.MRShare = cmp.Or(t.MRShare, d.MRShare)
	t.RegsPerCall = cmp.Or(t.RegsPerCall, d.RegsPerCall)
	t.StragglerRatio = cmp.Or(t.StragglerRatio, d.StragglerRatio)
	t.StragglerMinNs = cmp.Or(t.StragglerMinNs, d.StragglerMinNs)
	t.MinPeerCalls = cmp.Or(t.MinPeerCalls, d.MinPeerCalls)
	t.LoaderWait = cmp.Or(t.LoaderWait, d.LoaderWait)
	t.MinBatches = cmp.Or(t.MinBatches, d.MinBatches)
	return t
}

// rankRule judges one rank; jobRule judges the ranks of one job together.
type (
	rankRule func(r *data.Rank, t *Thresholds) []Finding
	jobRule  func(job string, ranks []*data.Rank, t *Thresholds) []Finding
)

var (
	rankRules = []rankRule{GPUSync, LockWait, Unbatched, MRChurn, LoaderWait, RankState, Errors, RingDrops, Process}
	jobRules  = []jobRule{Straggler, Missing}
)

// Diagnose runs every rule over the frame and returns the findings, worst
// first (then by rule, job, rank). A nil frame has none.
func Diagnose(f *data.Frame, t Thresholds) []Finding {
	if f == nil {
		return nil
	}
	t = t.withDefaults()
	var out []Finding
	jobs := map[string][]*data.Rank{}
	var order []string
	for _, r := range f.Ranks {
		for _, rule := range rankRules {
			out = append(out, rule(r, &t)...)
		}
		if jobs[r.Job] == nil {
			order = append(order, r.Job)
		}
		jobs[r.Job] = append(jobs[r.Job], r)
	}
	for _, job := range order {
		for _, rule := range jobRules {
			out = append(out, rule(job, jobs[job], &t)...)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Severity != b.Severity {
			return a.Severity > b.Severity
		}
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		if a.Job != b.Job {
			return a.Job < b.Job
		}
		return a.Rank < b.Rank
	})
	return out
}

// at starts a finding about rank r.
func at(rule string, r *data.Rank) Finding {
	return Finding{Rule: rule, Job: r.Job, Rank: r.Rank, Host: r.Host, Reader: -1}
}

func share(c *telemetry.Counters, phase int) float64 {
	t := c.TotalNs()
	if t <= 0 {
		return 0
	}
	return float64(c.PhaseNs[phase]) / float64(t)
}

func pct(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

func us(ns float64) string {
	switch {
	case ns >= 1e6:
		return fmt.Sprintf("%.1f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	}
	return fmt.Sprintf("%.0f ns", ns)
}

// GPUSync: the gpu_sync phase is at least GPUSyncShare of a rank's call
// time while its loader runs worker goroutines (or, where the loader's
// configuration is unknown, several reader stripes are busy): a device-wide
// synchronize per call serialises every worker behind the whole GPU. Fix:
// synchronise the reader's own stream (gpu.sync: stream).
func GPUSync(r *data.Rank, t *Thresholds) []Finding {
	w := r.Stat.Window()
	if w.Calls < t.MinCalls {
		return nil
	}
	sh := share(w, telemetry.PhaseGPUSync)
	if sh < t.GPUSyncShare {
		return nil
	}
	workers := r.Loader.Total.Config.Workers
	busy := 0
	for i := range r.Readers {
		rs := &r.Readers[i]
		if rs.Window().Calls > 0 {
			busy++
		}
	}
	if workers == 0 && (r.Loader.Total.Config != (telemetry.LoaderConfig{}) || busy < 2) {
		return nil
	}
	f := at(RuleGPUSync, r)
	f.Severity = sh
	f.Evidence = fmt.Sprintf("gpu_sync is %s of call time (threshold %s) with %d loader workers, %d busy reader stripes, %s per call",
		pct(sh), pct(t.GPUSyncShare), workers, busy, us(float64(w.PhaseNs[telemetry.PhaseGPUSync])/float64(w.Calls)))
	f.Fix, f.Key, f.Env = "sync the reader's own stream, not the device", "gpu.sync: stream", "DDSTORE_GPU_SYNC=stream"
	return []Finding{f}
}

// LockWait: on the store's shared reader (stripe 0 of a variable), the
// lock_wait phase is at least LockWaitShare of its time: goroutines queue
// for one endpoint. Fix: one Reader per worker (reads.thread_readers).
func LockWait(r *data.Rank, t *Thresholds) []Finding {
	var out []Finding
	for i := range r.Readers {
		rs := &r.Readers[i]
		if rs.Reader != 0 {
			continue
		}
		w := rs.Window()
		if w.Calls < t.MinCalls {
			continue
		}
		sh := share(w, telemetry.PhaseLockWait)
		if sh < t.LockWaitShare {
			continue
		}
		f := at(RuleLockWait, r)
		f.Var, f.Reader, f.Severity = rs.Var, 0, sh
		f.Evidence = fmt.Sprintf("lock_wait is %s of the shared reader's time (threshold %s), %s per call over %d calls",
			pct(sh), pct(t.LockWaitShare), us(float64(w.PhaseNs[telemetry.PhaseLockWait])/float64(w.Calls)), w.Calls)
		f.Fix, f.Key, f.Env = "give every worker its own reader", "reads.thread_readers: true", "DDSTORE_THREAD_READERS=1"
		out = append(out, f)
	}
	return out
}

// Unbatched: a variable of small rows (at most SmallRowBytes) is read at
// about one row per call (at most RowsPerCall): each row pays a whole
// call's fixed cost. Fix: one GetBatch per batch (reads.batch_get).
func Unbatched(r *data.Rank, t *Thresholds) []Finding {
	var out []Finding
	for i := range r.Vars {
		v := &r.Vars[i]
		w := v.Stat.Window()
		if w.Calls < t.MinCalls || v.RowBytes > t.SmallRowBytes || v.RowBytes <= 0 {
			continue
		}
		per := float64(w.Rows) / float64(w.Calls)
		if per > t.RowsPerCall {
			continue
		}
		f := at(RuleUnbatched, r)
		f.Var = v.Name
		f.Severity = 0.5 * t.RowsPerCall / math.Max(per, 0.5) / 3 // ~0.5 at one row per call
		f.Evidence = fmt.Sprintf("%.2f rows per call (threshold %.1f) of %d-byte rows over %d calls, %s per row",
			per, t.RowsPerCall, v.RowBytes, w.Calls, us(v.Stat.NsPerRow()))
		f.Fix, f.Key, f.Env = "read each batch with one GetBatch", "reads.batch_get: true", "DDSTORE_BATCH_GET=1"
		out = append(out, f)
	}
	return out
}

// MRChurn: memory registration is at least MRShare of a rank's call time,
// or its calls register memory (at least RegsPerCall registrations per
// call): destinations are not registered memory, so every call registers
// and deregisters them. Fix: read into registered buffers (the loader's
// batch buffers, or memory from fabric.Alloc), which the reader's
// registration cache keeps.
func MRChurn(r *data.Rank, t *Thresholds) []Finding {
	w := r.Stat.Window()
	if w.Calls < t.MinCalls {
		return nil
	}
	sh := share(w, telemetry.PhaseMR)
	regs := float64(w.MRRegs) / float64(w.Calls)
	if sh < t.MRShare && regs < t.RegsPerCall {
		return nil
	}
	f := at(RuleMR, r)
	f.Severity = math.Max(sh, math.Min(regs, 1)*0.5)
	f.Evidence = fmt.Sprintf("mr is %s of call time (threshold %s), %.2f registrations per call (threshold %.2f) over %d calls",
		pct(sh), pct(t.MRShare), regs, t.RegsPerCall, w.Calls)
	f.Fix = "read into registered buffers (the loader's batches or fabric.Alloc memory) so the registration cache keeps them"
	f.Key = "reads.fast_collate: true"
	f.Env = "DDSTORE_FAST_COLLATE=1"
	return []Finding{f}
}

// LoaderWait: the consumer waits for batches for at least LoaderWait of
// its step time (wait / time between batches): the loader's fetch is not
// hidden behind the step. Fix: more workers, a deeper prefetch; the
// finding gives the numbers to set. With prefetch auto below its bound
// the loader is still deepening the prefetch itself, so the finding names
// only the workers; at the bound, or with the prefetch fixed by hand, it
// names loader.prefetch too.
func LoaderWait(r *data.Rank, t *Thresholds) []Finding {
	l := r.Loader
	w := l.Window()
	if w.Batches < t.MinBatches || w.StepNs <= 0 {
		return nil
	}
	ratio := float64(w.WaitNs) / float64(w.StepNs)
	if ratio < t.LoaderWait {
		return nil
	}
	c := l.Total.Config
	f := at(RuleLoaderWait, r)
	f.Severity = math.Min(ratio*2, 1)
	f.Evidence = fmt.Sprintf("consumer waits %s of step time (threshold %s): %s/batch wait vs %s/batch step over %d batches; workers %d, prefetch %d",
		pct(ratio), pct(t.LoaderWait), us(l.MeanWaitNs()), us(l.MeanStepNs()), w.Batches, c.Workers, c.Prefetch)
	autoCan := c.PrefetchMax > 0 && c.Workers > 0 && c.Prefetch < c.PrefetchMax
	if c.PrefetchMax > 0 {
		f.Evidence += fmt.Sprintf(" (auto, at most %d)", c.PrefetchMax)
	}
	// A batch takes about wait + (step - wait) = step to fetch when the
	// consumer waits; workers that fetch in parallel hide it when
	// workers >= fetch time / compute time.
	compute := math.Max(float64(w.StepNs-w.WaitNs), 1)
	fetch := float64(w.WaitNs)
	if c.Workers > 0 {
		fetch = float64(w.StepNs) * float64(c.Workers) // each worker's batch took about workers steps
	}
	// At most double the workers in one go: past a point more workers only
	// queue behind each other (and behind a shared reader).
	want := min(max(int64(math.Ceil(fetch/compute))+1, c.Workers+1, 2), max(2*c.Workers, 2))
	pre := max(2*want, c.Prefetch+1)
	f.Fix = fmt.Sprintf("raise loader workers to %d and prefetch to %d", want, pre)
	f.Key = fmt.Sprintf("loader.workers: %d, loader.prefetch: %d", want, pre)
	f.Env = fmt.Sprintf("DDSTORE_LOADER_WORKERS=%d DDSTORE_LOADER_PREFETCH=%d", want, pre)
	if autoCan {
		f.Fix = fmt.Sprintf("raise loader workers to %d; prefetch auto is deepening the prefetch itself", want)
		f.Key = fmt.Sprintf("loader.workers: %d", want)
		f.Env = fmt.Sprintf("DDSTORE_LOADER_WORKERS=%d", want)
	}
	if c.Readers == telemetry.LoaderReadersShared && c.Workers > 1 {
		f.Fix += ", each with its own reader (DDSTORE_THREAD_READERS=1)"
	}
	return []Finding{f}
}

// RankState: a rank's segment is stale (no heartbeat for
// telemetry.StaleAfter) or its process exited without removing it.
func RankState(r *data.Rank, t *Thresholds) []Finding {
	if r.State != telemetry.StateStale && r.State != telemetry.StateExited {
		return nil
	}
	f := at(RuleRankState, r)
	f.Severity = 0.9
	f.Evidence = fmt.Sprintf("rank is %s: heartbeat %.1f s old (stale after %v), pid %d", r.State, r.HeartbeatAge.Seconds(), telemetry.StaleAfter, r.Pid)
	if r.State == telemetry.StateExited {
		f.Fix = "the process is gone: look at its log; its peers fail reads of its rows"
	} else {
		f.Fix = "the process is hung or its node is unreachable: look at it (py-spy/gdb) or restart the job"
	}
	return []Finding{f}
}

// Errors: calls failed in the window.
func Errors(r *data.Rank, t *Thresholds) []Finding {
	w := r.Stat.Window()
	if w.Errors <= 0 {
		return nil
	}
	f := at(RuleErrors, r)
	f.Severity = 0.8
	var blame []string
	for _, p := range r.Peers {
		if e := p.Window().Errors; e > 0 {
			blame = append(blame, fmt.Sprintf("rank %d: %d", p.Total.Rank, e))
		}
	}
	f.Evidence = fmt.Sprintf("%d of %d calls failed (threshold 1)", w.Errors, w.Calls)
	if len(blame) > 0 {
		f.Evidence += "; by target " + strings.Join(blame, ", ")
	}
	f.Fix = "read the job's error log: the errors name the variable, index and peer"
	return []Finding{f}
}

// RingDrops: recent-call records were overwritten before ddtop read them,
// or writers could not claim a ring slot.
func RingDrops(r *data.Rank, t *Thresholds) []Finding {
	if r.Dropped == 0 {
		return nil
	}
	f := at(RuleRingDrops, r)
	f.Severity = 0.1
	f.Evidence = fmt.Sprintf("%d ring records lost while ddtop watched (threshold 1)", r.Dropped)
	f.Fix = "counters are exact; only the recent-calls list misses records: refresh faster (--interval)"
	return []Finding{f}
}

// Process: process counters that should stay zero (quarantined readers,
// leaked buffers, gather strangers) are not.
func Process(r *data.Rank, t *Thresholds) []Finding {
	var out []Finding
	for i, v := range r.Proc {
		if v <= 0 || i > telemetry.ProcGatherStrangers {
			continue
		}
		f := at(RuleProcess, r)
		f.Severity = 0.4
		f.Evidence = fmt.Sprintf("%s = %d (threshold 1)", telemetry.ProcNames[i], v)
		switch i {
		case telemetry.ProcQuarantinedReaders:
			f.Fix = "readers hit timeouts and were set aside: check the fabric (fabric.timeout, DDSTORE_FABRIC_TIMEOUT) and the peers"
		case telemetry.ProcLeakedBuffers:
			f.Fix = "batches were not released: call Batch.Release for every batch the loader hands out"
		case telemetry.ProcGatherStrangers:
			f.Severity = 0.6
			f.Evidence = fmt.Sprintf("%s = %d: gather requests for this rank's rows came from an endpoint without the job's key "+
				"(another job, another user, or a rank of this job started with another secret); dropped unanswered", telemetry.ProcNames[i], v)
			f.Fix = "no data left this rank; find who reaches the fabric port (the rank's log names no address: check the host's " +
				"connections, e.g. ss -tnp), and make sure every rank of a job gets the same secret (DDSTORE_TOKEN or the token file)"
		}
		out = append(out, f)
	}
	return out
}

// Straggler: a target rank whose reads take at least StragglerRatio
// times the median µs/row of the reader's other targets (and
// StragglerMinNs more per row), as seen by most (a strict majority) of the ranks that
// read from it and from another target. Judging each reader against its
// own other targets keeps a slow reader (one that is itself throttled
// sees every target slow) from blaming its peers. Reads of a rank by
// itself are left out (memory copies). Needs peer tables (format v2).
func Straggler(job string, ranks []*data.Rank, t *Thresholds) []Finding {
	type tgt struct {
		rank        int
		perNs       float64
		rows, calls int64
	}
	type vote struct {
		readers, slow int
		ratios        []float64
		rows, ns      int64
		otherNs       []float64
	}
	// Sized once: a refresh over many ranks would otherwise grow them
	// (and rehash) step by step; ts and others are reused across ranks.
	votes := make(map[int]*vote, len(ranks))
	var ts []tgt
	var others []float64
	for _, r := range ranks {
		ts = ts[:0]
		for _, p := range r.Peers {
			w := p.Window()
			if p.Total.Rank == r.Rank || w.Calls < t.MinPeerCalls || w.Rows <= 0 {
				continue
			}
			ts = append(ts, tgt{p.Total.Rank, float64(w.Ns) / float64(w.Rows), w.Rows, w.Calls})
		}
		if len(ts) < 2 {
			continue
		}
		for i, x := range ts {
			others = others[:0]
			for j, y := range ts {
				if j != i {
					others = append(others, y.perNs)
				}
			}
			med := medianInPlace(others)
			v := votes[x.rank]
			if v == nil {
				v = &vote{}
				votes[x.rank] = v
			}
			v.readers++
			v.rows += x.rows
			v.ns += int64(x.perNs * float64(x.rows))
			v.otherNs = append(v.otherNs, med)
			if x.perNs >= t.StragglerRatio*med && x.perNs-med >= t.StragglerMinNs {
				v.slow++
				v.ratios = append(v.ratios, x.perNs/math.Max(med, 1))
			}
		}
	}
	var order []int
	for rank := range votes {
		order = append(order, rank)
	}
	sort.Ints(order)
	var out []Finding
	for _, rank := range order {
		v := votes[rank]
		if 2*v.slow <= v.readers { // a strict majority of its readers
			continue
		}
		ratio := median(v.ratios)
		per := float64(v.ns) / float64(v.rows)
		host := hostOf(ranks, rank)
		hs := host
		if hs == "" {
			hs = "host unknown (no segment of that rank here)"
		}
		f := Finding{Rule: RuleStraggler, Job: job, Rank: rank, Host: host, Reader: -1}
		f.Severity = math.Min(0.3+ratio/20, 1)
		f.Evidence = fmt.Sprintf("reads from rank %d (%s) take %s/row over %d rows; %d of %d readers see it %.1f× slower (median) than their other targets' %s/row (threshold %.1f×)",
			rank, hs, us(per), v.rows, v.slow, v.readers, ratio, us(median(v.otherNs)), t.StragglerRatio)
		f.Fix = fmt.Sprintf("look at rank %d on %s: CPU or NIC contention, a slow link, or a throttled node", rank, hs)
		out = append(out, f)
	}
	return out
}

// hostOf is the host of rank's segment among ranks ("" when none; the
// last one listed, as a map filled in order would give).
func hostOf(ranks []*data.Rank, rank int) string {
	h := ""
	for _, r := range ranks {
		if r.Rank == rank {
			h = r.Host
		}
	}
	return h
}

func median(v []float64) float64 {
	return medianInPlace(append([]float64(nil), v...))
}

// medianInPlace is median, sorting v.
func medianInPlace(s []float64) float64 {
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Missing: a job's segments say its world has more ranks than there are
// segments (a rank never started, or exited and removed its segment).
func Missing(job string, ranks []*data.Rank, t *Thresholds) []Finding {
	world := 0
	seen := map[int]bool{}
	for _, r := range ranks {
		world = max(world, r.World)
		seen[r.Rank] = true
	}
	var miss []string
	for r := 0; r < world; r++ {
		if !seen[r] {
			miss = append(miss, fmt.Sprint(r))
		}
	}
	if len(miss) == 0 {
		return nil
	}
	list := strings.Join(miss, ", ")
	if len(miss) > 16 {
		list = strings.Join(miss[:16], ", ") + ", …"
	}
	f := Finding{Rule: RuleMissing, Job: job, Rank: -1, Reader: -1, Severity: 0.85}
	f.Evidence = fmt.Sprintf("world size %d but %d ranks have segments; missing ranks: %s", world, len(seen), list)
	f.Fix = "the missing ranks never started or exited: check the launcher's log; ddtop sees only this node's /dev/shm (use a shared DDSTORE_TELEMETRY_DIR to see all)"
	return []Finding{f}
}
