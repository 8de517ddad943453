package data

import (
	"slices"
	"time"

	"github.com/ddstore/ddstore/telemetry"
)

// Frame is everything one refresh saw.
type Frame struct {
	At       time.Time
	Dir      string
	Ranks    []*Rank  // by job, then rank
	Vars     []*Var   // by name, summed over ranks
	Problems []string // segments that could not be read, with the reason
	// Job is the job Options.Job resolved to ("" without a selection);
	// JobErr says why the frame has no rank when it named no job or
	// several.
	Job    string
	JobErr *JobError
	// Raw is what the frame was made from, when Options.KeepRaw is set.
	Raw []Recorded

	poll uint64 // the Poll that made it (1, 2, ...); 0 for Feed
}

// Rank is one segment: one engine process.
type Rank struct {
	Path                         string
	Job, Host                    string
	Rank, World, Pid             int
	State                        string // live, stale or exited
	HeartbeatAge                 time.Duration
	ExitedAt                     time.Time // when ddtop first saw it exited (the poller's clock); zero unless exited
	Start                        time.Time
	Provider, ReaderMode, Method string

	Stat     // summed over variables and readers
	Loader   LoaderStat
	BadCalls int64 // Record calls the writer could not attribute

	Vars    []VarOnRank  // every variable of this rank
	Readers []ReaderStat // one per (variable, reader) stripe with calls

	RowsHistory  []float64 // rows/s per interval, oldest first (shared: read only)
	BytesHistory []float64 // bytes/s per interval, oldest first (shared: read only)

	Recent  Calls  // most recent calls, oldest first
	Dropped uint64 // ring records overwritten before ddtop read them

	Version int                      // segment format version
	Peers   []PeerStat               // per target rank (format v2), by rank
	Proc    [telemetry.NumProc]int64 // process counters (format v2)

	varNames map[int32]string
}

// Clone is a copy of r that shares no memory a Poller may recycle (its
// histories and names are never written again and stay shared).
func (r *Rank) Clone() *Rank {
	c := *r
	c.Vars = slices.Clone(r.Vars)
	c.Readers = slices.Clone(r.Readers)
	c.Peers = slices.Clone(r.Peers)
	c.Recent = r.Recent.clone()
	return &c
}

// VarOnRank is one variable on one rank.
type VarOnRank struct {
	Name, DType          string
	RowBytes, GlobalRows int64
	LocalRows            int64
	Rank                 int
	Host, Path           string
	Stat
}

// ReaderStat is one (variable, reader) stripe.
type ReaderStat struct {
	Var    string
	Reader int
	Stat
}

// PeerStat is one target rank's slot of a rank's peer table, seen twice.
type PeerStat struct {
	Total, Delta telemetry.PeerCounters
	Interval     time.Duration
}

// Window is the interval's counters when it saw calls, else the totals.
func (p PeerStat) Window() telemetry.PeerCounters { return window(p.Total, p.Delta, p.Delta.Calls) }

// NsPerRow is the mean time per row read from the peer over Window.
func (p PeerStat) NsPerRow() float64 {
	w := p.Window()
	return ratio(w.Ns, w.Rows)
}

// RowsPerSec is the rows read from the peer per second over the interval.
func (p PeerStat) RowsPerSec() float64 {
	return perSecond(p.Delta.Rows, p.Interval)
}

// Var is one variable summed over every rank.
type Var struct {
	Name, DType          string
	RowBytes, GlobalRows int64
	Stat
	ByRank []*VarOnRank // the ranks' own VarOnRank (Rank.Vars), read only
}

// LoaderStat is a rank's loader block seen twice.
type LoaderStat struct {
	Total, Delta telemetry.LoaderCounters
	Interval     time.Duration
}

// Window is the interval's loader counters when batches were seen, else the totals.
func (l LoaderStat) Window() telemetry.LoaderCounters {
	return window(l.Total, l.Delta, l.Delta.Batches)
}

// Present reports whether the rank ever recorded a loader batch.
func (l LoaderStat) Present() bool { return l.Total.Batches > 0 }

// WaitShare is the fraction of loader time spent waiting for data:
// wait / (wait + step), over Window.
func (l LoaderStat) WaitShare() float64 {
	w := l.Window()
	return ratio(w.WaitNs, w.WaitNs+w.StepNs)
}

// MeanWaitNs is the mean fetch wait per batch over Window.
func (l LoaderStat) MeanWaitNs() float64 {
	w := l.Window()
	return ratio(w.WaitNs, w.Batches)
}

// MeanStepNs is the mean step time per batch over Window.
func (l LoaderStat) MeanStepNs() float64 {
	w := l.Window()
	return ratio(w.StepNs, w.Batches)
}
