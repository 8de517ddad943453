// Package data is ddtop's data layer over telemetry: it follows the segments
// of a directory as ranks come and go, keeps the previous snapshot of each,
// and turns two snapshots into interval rates, latency quantiles and phase
// shares, plus a history of throughput and a tail of recent calls per rank.
// It is read-only: it never writes to or locks a segment.
package data

import (
	"time"

	"github.com/ddstore/ddstore/telemetry"
)

// Stat is a counter block seen twice: cumulative totals, and the work done
// over the last interval between two snapshots.
type Stat struct {
	Total    telemetry.Counters // since the writer started
	Delta    telemetry.Counters // over the last interval; zero before the second snapshot
	Interval time.Duration      // length of the last interval; 0 before the second snapshot
}

// ratio is num/den, 0 when den is not positive.
func ratio(num, den int64) float64 {
	if den <= 0 {
		return 0
	}
	return float64(num) / float64(den)
}

// perSecond is the rate of v over an interval, 0 when it is not positive.
func perSecond(v int64, interval time.Duration) float64 {
	if interval <= 0 {
		return 0
	}
	return float64(v) / interval.Seconds()
}

// CallsPerSec is the call rate over the last interval.
func (s *Stat) CallsPerSec() float64 { return perSecond(s.Delta.Calls, s.Interval) }

// RowsPerSec is the row rate over the last interval.
func (s *Stat) RowsPerSec() float64 { return perSecond(s.Delta.Rows, s.Interval) }

// BytesPerSec is the byte rate over the last interval.
func (s *Stat) BytesPerSec() float64 { return perSecond(s.Delta.Bytes, s.Interval) }

// Window is the counter block that latency and phase figures come from: the
// last interval when it saw calls, else the cumulative totals. It points
// into s: read only.
func (s *Stat) Window() *telemetry.Counters { return window(&s.Total, &s.Delta, s.Delta.Calls) }

// window is the rule of every Window: delta, the last interval's
// counters, when it saw any (seen > 0), else total, the cumulative ones.
func window[C any](total, delta C, seen int64) C {
	if seen > 0 {
		return delta
	}
	return total
}

// NsPerRow is the mean time per row (sum of phases / rows) over Window.
func (s *Stat) NsPerRow() float64 {
	w := s.Window()
	return ratio(w.TotalNs(), w.Rows)
}

// RowQuantile is the q-quantile of per-call ns/row over Window.
func (s *Stat) RowQuantile(q float64) float64 { return s.Window().RowHist.Quantile(q) }

// CallQuantile is the q-quantile of call latency (ns) over Window.
func (s *Stat) CallQuantile(q float64) float64 { return s.Window().CallHist.Quantile(q) }

// PhaseShare is each phase's fraction of the total time over Window.
func (s *Stat) PhaseShare() [telemetry.NumPhases]float64 {
	var out [telemetry.NumPhases]float64
	w := s.Window()
	t := w.TotalNs()
	if t <= 0 {
		return out
	}
	for i, p := range w.PhaseNs {
		out[i] = float64(p) / float64(t)
	}
	return out
}

func (s *Stat) add(o *Stat) {
	s.Total.Accumulate(&o.Total)
	s.Delta.Accumulate(&o.Delta)
	if o.Interval > s.Interval {
		s.Interval = o.Interval
	}
}

// sane reports whether d can be a difference of two snapshots of the same
// stripe (no counter went backwards).
func sane(d *telemetry.Counters) bool {
	if d.Calls < 0 || d.Rows < 0 || d.Bytes < 0 || d.Errors < 0 {
		return false
	}
	for _, p := range d.PhaseNs {
		if p < 0 {
			return false
		}
	}
	return true
}

// diff sets d to cur - prev, or to cur when prev is not an earlier copy.
func diff(d, cur, prev *telemetry.Counters) {
	*d = *cur
	d.Deduct(prev)
	if !sane(d) {
		*d = *cur
	}
}
