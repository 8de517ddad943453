package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ddstore/ddstore/ui"
	"github.com/ddstore/ddstore/ui/record"
	htmlreport "github.com/ddstore/ddstore/ui/report"
)

// recordCommand: ddtop record -o run.ddrec.
func recordCommand(out io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "record -o run.ddrec",
		Short: "record the job's snapshots and recent calls every --interval (gzip'd JSON lines, ui/record/FORMAT.md) until it ends or Ctrl-C",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := jobSettings(cmd)
			if err != nil {
				return err
			}
			until, _ := cmd.Flags().GetDuration("until")
			f, err := createOutput(cmd, "record")
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			n, err := record.Record(ctx, f, record.Options{Dir: o.Dir, Job: o.Job, Interval: o.Interval, Until: until})
			err = closeOutput(f, err)
			fmt.Fprintf(out, "ddtop record: %d snapshots in %s\n", n, f.Name())
			return err
		},
	}
	cmd.Flags().StringP("output", "o", "", "recording file to write")
	cmd.Flags().Duration("until", 5*time.Second, "stop once no segment has been seen for this long (the job ended); 0 = only Ctrl-C")
	return cmd
}

// createOutput creates the file that --output names (required); what
// names the command in errors.
func createOutput(cmd *cobra.Command, what string) (*os.File, error) {
	path, _ := cmd.Flags().GetString("output")
	if path == "" {
		return nil, fmt.Errorf("%s: -o FILE is required", what)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return f, nil
}

// closeOutput closes f and returns err, else the error of the close.
func closeOutput(f *os.File, err error) error {
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// replayCommand: ddtop replay run.ddrec.
func replayCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replay run.ddrec",
		Short: "show a recording in the live views, with pause (p), step (. ,), seek (< > g G)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rec, err := record.Load(args[0])
			if err != nil {
				return err
			}
			speed, _ := cmd.Flags().GetFloat64("speed")
			if speed <= 0 {
				return fmt.Errorf("replay: --speed %v must be > 0", speed)
			}
			iv := time.Duration(float64(rec.IntervalNs) / speed)
			o := ui.Options{Dir: rec.Dir, Job: rec.Job, Interval: max(iv, 10*time.Millisecond)}
			return ui.RunReplay(o, rec.Frames())
		},
	}
	cmd.Flags().Float64("speed", 1, "play speed (2: twice as fast as recorded)")
	return cmd
}

// reportCommand: ddtop report run.ddrec -o report.html.
func reportCommand(out io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "report run.ddrec -o report.html",
		Short: "write a self-contained HTML report of a recording: throughput, phases, latency, findings",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rec, err := record.Load(args[0])
			if err != nil {
				return err
			}
			f, err := createOutput(cmd, "report")
			if err != nil {
				return err
			}
			err = closeOutput(f, htmlreport.Write(f, rec, rec.Frames()))
			if err == nil {
				fmt.Fprintf(out, "ddtop report: %s (%d snapshots)\n", f.Name(), len(rec.Ticks))
			}
			return err
		},
	}
	cmd.Flags().StringP("output", "o", "report.html", "HTML file to write")
	return cmd
}
