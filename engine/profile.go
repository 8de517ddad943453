package engine

// This file owns the DDSTORE_PROFILE table (Options.Profile): the seed's
// per-phase summary printed when the job exits, read back from this rank's
// own telemetry segment.

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/ddstore/ddstore/telemetry"
)

// writeProfile writes this rank's profile table to w. It reads the rank's
// telemetry segment read-only (a snapshot), so it must run before the
// writer is closed and the variables are released. Failures are reported
// in the output, not returned: the profile is a diagnostic and must not
// fail Close.
func (s *Store) writeProfile(w io.Writer) {
	if err := s.profileTable(w); err != nil {
		fmt.Fprintf(w, "ddstore profile, rank %d: %v\n", s.rank, err)
	}
}

func (s *Store) profileTable(w io.Writer) error {
	if s.tel == nil {
		_, err := fmt.Fprintf(w, "ddstore profile, rank %d: telemetry is off (DDSTORE_TELEMETRY=0 or Options.DisableTelemetry), no profile\n", s.rank)
		return err
	}
	seg, err := telemetry.Open(s.tel.Path())
	if err != nil {
		return wrapf(nil, "profile", "", err, "open telemetry segment")
	}
	snap, err := seg.Snapshot()
	seg.Close()
	if err != nil {
		return wrapf(nil, "profile", "", err, "telemetry snapshot of %s", s.tel.Path())
	}
	return formatProfile(w, s.rank, s.world, s.job, snap)
}

// formatProfile writes the table of snap: one line per variable with its
// calls, rows, µs per call in total and per phase, then the loader's fetch
// wait.
func formatProfile(w io.Writer, rank, world int, job string, snap *telemetry.Snapshot) error {
	if _, err := fmt.Fprintf(w, "ddstore profile, rank %d of %d (job %s): µs per call\n", rank, world, job); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "variable\tcalls\trows\tµs/call")
	for _, n := range telemetry.PhaseNames {
		fmt.Fprintf(tw, "\t%s", n)
	}
	fmt.Fprintln(tw, "\t")
	for i := range snap.Vars {
		v := &snap.Vars[i]
		c := v.Total()
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s", v.Name, c.Calls, c.Rows, perCall(c.TotalNs(), c.Calls))
		for _, p := range c.PhaseNs {
			fmt.Fprintf(tw, "\t%s", perCall(p, c.Calls))
		}
		fmt.Fprintln(tw, "\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(snap.Vars) == 0 {
		fmt.Fprintln(w, "(no variables)")
	}
	l := snap.Loader
	if l.Batches == 0 {
		_, err := fmt.Fprintln(w, "loader: no batches")
		return err
	}
	_, err := fmt.Fprintf(w, "loader: %d batches, fetch wait %.1f µs/batch, step %.1f µs/batch, wait/step %.4f\n",
		l.Batches, float64(l.WaitNs)/1e3/float64(l.Batches), float64(l.StepNs)/1e3/float64(l.Batches),
		float64(l.WaitNs)/float64(max(l.StepNs, 1)))
	return err
}

// perCall is ns/calls in µs with one decimal, "-" without calls.
func perCall(ns, calls int64) string {
	if calls == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(ns)/1e3/float64(calls))
}
