package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/ddstore/ddstore/telemetry"
)

// printProfile prints this rank's per-phase summary (DDSTORE_PROFILE=1, like
// the seed's printout): µs per read call of each variable, split by phase,
// read back from the rank's own telemetry segment.
func printProfile(w io.Writer, dir string, rank int) error {
	segs, err := telemetry.Discover(dir)
	if err != nil {
		return err
	}
	for _, si := range segs {
		if si.Pid != os.Getpid() {
			continue
		}
		seg, err := telemetry.Open(si.Path)
		if err != nil {
			return err
		}
		snap, err := seg.Snapshot()
		seg.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "ddstore profile, rank %d: µs per call\n", rank)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "variable\tcalls\trows\ttotal")
		for _, n := range telemetry.PhaseNames {
			fmt.Fprintf(tw, "\t%s", n)
		}
		fmt.Fprintln(tw, "\t")
		for i := range snap.Vars {
			v := &snap.Vars[i]
			c := v.Total()
			if c.Calls == 0 {
				continue
			}
			var total int64
			for _, p := range c.PhaseNs {
				total += p
			}
			us := func(ns int64) float64 { return float64(ns) / 1e3 / float64(c.Calls) }
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f", v.Name, c.Calls, c.Rows, us(total))
			for _, p := range c.PhaseNs {
				fmt.Fprintf(tw, "\t%.1f", us(p))
			}
			fmt.Fprintln(tw, "\t")
		}
		l := snap.Loader
		if l.Batches > 0 {
			fmt.Fprintf(tw, "loader\t%d batches\twait %.1f µs\tstep %.1f µs\twait/step %.4f\t\n",
				l.Batches, float64(l.WaitNs)/1e3/float64(l.Batches), float64(l.StepNs)/1e3/float64(l.Batches),
				float64(l.WaitNs)/float64(max(l.StepNs, 1)))
		}
		return tw.Flush()
	}
	return fmt.Errorf("no telemetry segment of pid %d in %s (telemetry off?)", os.Getpid(), dir)
}
