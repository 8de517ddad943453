package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/ddstore/ddstore/telemetry"
	"github.com/ddstore/ddstore/ui/components/bar"
	"github.com/ddstore/ddstore/ui/data"
	"github.com/ddstore/ddstore/ui/diagnose"
	"github.com/ddstore/ddstore/ui/styles"
)

// OnceOptions configure one non-interactive report.
type OnceOptions struct {
	Options
	Window time.Duration // time between the two snapshots that give rates; 0 = one snapshot, cumulative only
	JSON   bool          // JSON instead of tables
	Width  int           // table width; default 120
}

// Once takes a snapshot, waits Window, takes another, and writes the ranks
// and variables (tables, or JSON) to w.
func Once(w io.Writer, o OnceOptions) error {
	if o.Window < 0 {
		return fmt.Errorf("%w: window %v < 0", ErrOptions, o.Window)
	}
	o.noCalls = true // the report has no recent calls: ring losses mean nothing here
	m, err := New(o.Options)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.refreshOnce(); err != nil {
		return err
	}
	if o.Window > 0 {
		time.Sleep(o.Window)
		if err := m.refreshOnce(); err != nil {
			return err
		}
	}
	if o.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(Report(m.Frame()))
	}
	width := o.Width
	if width <= 0 {
		width = 120
	}
	_, err = io.WriteString(w, Tables(m.Frame(), width))
	return err
}

// refreshOnce is Refresh, failing when the job selection names no job or
// several (the error lists the jobs).
func (m *Model) refreshOnce() error {
	if err := m.Refresh(); err != nil {
		return err
	}
	if e := m.frame.JobErr; e != nil {
		return e
	}
	return nil
}

// Tables renders the ranks and variables tables of a frame, all rows.
func Tables(f *data.Frame, width int) string {
	var b strings.Builder
	ranks, vars := newList(rankCols), newList(varCols)
	rr, vr := rankRows(f, nil, showAll), varRows(f)
	ranks.setSize(width, len(rr)+1)
	vars.setSize(width, len(vr)+1)
	ranks.tbl.SetFocused(false)
	vars.tbl.SetFocused(false)
	ranks.setRows(rr)
	vars.setRows(vr)
	cut := func(s string) string { return ansi.Truncate(s, width, "…") }
	b.WriteString(cut(fmt.Sprintf("%s %d ranks in %s", styles.Section.Render("RANKS"), len(rr), f.Dir)) + "\n")
	b.WriteString(cut("phases: "+bar.Legend(telemetry.PhaseNames[:])) + "\n")
	b.WriteString(ranks.view() + "\n\n")
	fmt.Fprintf(&b, "%s %d variables\n", styles.Section.Render("VARIABLES"), len(vr))
	b.WriteString(vars.view() + "\n")
	for _, p := range f.Problems {
		b.WriteString(cut(styles.Warn.Render("unreadable: "+p)) + "\n")
	}
	fs := diagnose.Diagnose(f, diagnose.Thresholds{})
	fmt.Fprintf(&b, "\n%s %d, worst first\n", styles.Section.Render("FINDINGS"), len(fs))
	for _, fd := range fs {
		b.WriteString(findingLine(fd, width) + "\n")
	}
	return b.String()
}

// JSON report types: cumulative counters plus rates over the window.

// JSONReport is what --json prints.
type JSONReport struct {
	Time      time.Time  `json:"time"`
	Dir       string     `json:"dir"`
	IntervalS float64    `json:"interval_s"`
	Ranks     []JSONRank `json:"ranks"`
	Variables []JSONVar  `json:"variables"`
	Problems  []string   `json:"problems,omitempty"`
	// Findings are the diagnoses (package ui/diagnose), worst first.
	Findings []diagnose.Finding `json:"findings"`
}

// JSONCounters are cumulative counters and interval rates of one block.
type JSONCounters struct {
	Calls      int64            `json:"calls"`
	Rows       int64            `json:"rows"`
	Bytes      int64            `json:"bytes"`
	LocalRows  int64            `json:"local_rows"`
	RemoteRows int64            `json:"remote_rows"`
	Errors     int64            `json:"errors"`
	Failovers  int64            `json:"failovers"` // row reads served by a replica instead of their owner
	PhasesNs   map[string]int64 `json:"phases_ns"`
	CallsPerS  float64          `json:"calls_per_s"`
	RowsPerS   float64          `json:"rows_per_s"`
	BytesPerS  float64          `json:"bytes_per_s"`
	UsPerRow   float64          `json:"us_per_row"`
	RowP50Us   float64          `json:"row_p50_us"`
	RowP99Us   float64          `json:"row_p99_us"`
	CallP50Us  float64          `json:"call_p50_us"`
	CallP99Us  float64          `json:"call_p99_us"`
}

// JSONRank is one rank.
type JSONRank struct {
	Rank          int     `json:"rank"`
	World         int     `json:"world"`
	Host          string  `json:"host"`
	Pid           int     `json:"pid"`
	Job           string  `json:"job"`
	State         string  `json:"state"`
	HeartbeatAgeS float64 `json:"heartbeat_age_s"`
	Path          string  `json:"path"`
	JSONCounters
	Loader  *JSONLoader  `json:"loader,omitempty"`
	Readers []JSONReader `json:"readers"`
	Dropped uint64       `json:"ring_dropped"`
	// FailedOwners names the owners whose rows this rank read from a
	// replica instead (dead, unreachable or past reads.failover_after):
	// rank → row reads moved (format v2 peer table).
	FailedOwners map[int]int64 `json:"failed_owners,omitempty"`
}

// JSONLoader is a rank's loader block.
type JSONLoader struct {
	Batches   int64   `json:"batches"`
	WaitNs    int64   `json:"wait_ns"`
	StepNs    int64   `json:"step_ns"`
	WaitShare float64 `json:"wait_share"`
}

// JSONReader is one (variable, reader) stripe.
type JSONReader struct {
	Var    string `json:"var"`
	Reader int    `json:"reader"`
	JSONCounters
}

// JSONVar is one variable summed over ranks.
type JSONVar struct {
	Name       string `json:"name"`
	DType      string `json:"dtype"`
	RowBytes   int64  `json:"row_bytes"`
	GlobalRows int64  `json:"global_rows"`
	JSONCounters
	Ranks []JSONVarRank `json:"ranks"`
}

// JSONVarRank is one variable on one rank.
type JSONVarRank struct {
	Rank int    `json:"rank"`
	Host string `json:"host"`
	JSONCounters
}

func jsonCounters(s data.Stat) JSONCounters {
	t := s.Total
	ph := make(map[string]int64, telemetry.NumPhases)
	for i, n := range telemetry.PhaseNames {
		ph[n] = t.PhaseNs[i]
	}
	return JSONCounters{
		Calls: t.Calls, Rows: t.Rows, Bytes: t.Bytes, LocalRows: t.LocalRows, RemoteRows: t.RemoteRows,
		Errors: t.Errors, Failovers: t.Failovers, PhasesNs: ph,
		CallsPerS: s.CallsPerSec(), RowsPerS: s.RowsPerSec(), BytesPerS: s.BytesPerSec(),
		UsPerRow: s.NsPerRow() / 1e3, RowP50Us: s.RowQuantile(0.5) / 1e3, RowP99Us: s.RowQuantile(0.99) / 1e3,
		CallP50Us: s.CallQuantile(0.5) / 1e3, CallP99Us: s.CallQuantile(0.99) / 1e3,
	}
}

// Report converts a frame to the JSON report.
func Report(f *data.Frame) JSONReport {
	out := JSONReport{Time: f.At, Dir: f.Dir, Ranks: []JSONRank{}, Variables: []JSONVar{}, Problems: f.Problems,
		Findings: diagnose.Diagnose(f, diagnose.Thresholds{})}
	if out.Findings == nil {
		out.Findings = []diagnose.Finding{}
	}
	for _, r := range f.Ranks {
		out.IntervalS = max(out.IntervalS, r.Interval.Seconds())
		jr := JSONRank{Rank: r.Rank, World: r.World, Host: r.Host, Pid: r.Pid, Job: r.Job, State: r.State,
			HeartbeatAgeS: r.HeartbeatAge.Seconds(), Path: r.Path, JSONCounters: jsonCounters(r.Stat),
			Readers: []JSONReader{}, Dropped: r.Dropped}
		if r.Loader.Present() {
			t := r.Loader.Total
			jr.Loader = &JSONLoader{Batches: t.Batches, WaitNs: t.WaitNs, StepNs: t.StepNs, WaitShare: r.Loader.WaitShare()}
		}
		for _, rs := range r.Readers {
			jr.Readers = append(jr.Readers, JSONReader{Var: rs.Var, Reader: rs.Reader, JSONCounters: jsonCounters(rs.Stat)})
		}
		for _, p := range r.Peers {
			if p.Total.FailedFrom > 0 {
				if jr.FailedOwners == nil {
					jr.FailedOwners = map[int]int64{}
				}
				jr.FailedOwners[p.Total.Rank] = p.Total.FailedFrom
			}
		}
		out.Ranks = append(out.Ranks, jr)
	}
	for _, v := range f.Vars {
		jv := JSONVar{Name: v.Name, DType: v.DType, RowBytes: v.RowBytes, GlobalRows: v.GlobalRows,
			JSONCounters: jsonCounters(v.Stat), Ranks: []JSONVarRank{}}
		for _, vr := range v.ByRank {
			jv.Ranks = append(jv.Ranks, JSONVarRank{Rank: vr.Rank, Host: vr.Host, JSONCounters: jsonCounters(vr.Stat)})
		}
		out.Variables = append(out.Variables, jv)
	}
	return out
}
