// Command ddtop is the live terminal monitor of ddstore: it reads the
// telemetry segments every engine process exports (default /dev/shm) and
// shows, per rank and per variable, where data-loading time goes.
//
// It only parses flags and configuration, then hands over to ui.Run (or
// ui.Once for --once/--json). It imports ui and telemetry, never the engine
// or the fabric, so it builds without libfabric.
//
// Settings, strongest first: flags, the environment (DDSTORE_TELEMETRY_DIR),
// the config file, the embedded local.yaml. The config file is the
// trainers' own (package configs: one schema, with a ddtop section for
// ddtop.interval, ddtop.history, ddtop.job and ddtop.nice; the directory
// is telemetry.dir): --config or DDSTORE_CONFIG, a path or a machine name
// such as "frontier" (embedded, so it works from any directory), else the
// detected machine.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spf13/cobra"

	"github.com/ddstore/ddstore/configs"
	"github.com/ddstore/ddstore/telemetry"
	"github.com/ddstore/ddstore/ui"
	"github.com/ddstore/ddstore/ui/data"
)

func main() {
	// ddtop works on one goroutine at a time (a refresh, then its screen):
	// one P keeps the runtime from waking a second thread, on a core a
	// trainer uses, for every hand-off. GOMAXPROCS in the environment wins.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	// A refresh of many ranks makes a few MB of short-lived frames over a
	// live heap of a few MB: collecting at 5× the live heap rather than
	// 2× spends less of the core on GC (BenchmarkRefresh/ranks64: 4.0-4.8
	// -> 3.2-3.3 ms). GOGC in the environment wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	// DDTOP_CPUPROFILE=FILE writes a CPU profile of the whole run, "%p"
	// in FILE replaced by the pid (how ddtop's own cost is profiled: see
	// docs/BENCHMARKS.md).
	if path := os.Getenv("DDTOP_CPUPROFILE"); path != "" {
		if f, err := os.Create(strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid()))); err == nil && pprof.StartCPUProfile(f) == nil {
			defer f.Close()
			defer pprof.StopCPUProfile()
		} else {
			fmt.Fprintln(os.Stderr, "ddtop: DDTOP_CPUPROFILE:", err)
		}
	}
	if err := newCommand(os.Stdout, os.Stderr).Execute(); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "ddtop:", err)
		os.Exit(1)
	}
}

// newCommand builds the ddtop command writing reports to out.
func newCommand(out, errOut io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ddtop",
		Short: "live monitor of ddstore telemetry: where data-loading time goes, per rank and variable",
		Long: `ddtop attaches to the telemetry segments of running ddstore engines (read-only)
and shows per rank and per variable: calls/s, rows/s, MB/s, µs per row (mean,
p50, p99 over the last interval, from histogram deltas), the phase breakdown (gpu_sync, lock_wait, mr, post, cq_wait, copy, other),
errors and the loader's fetch wait. Keys: tab/1/2/3 views, j/k select,
enter drill in, esc back, s sort, / filter, p pause, X show or hide the ranks
that exited over 30 s ago, ? help, q quit. --job takes a job id or a unique
prefix of one.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := settings(cmd)
			if err != nil {
				return err
			}
			once, _ := cmd.Flags().GetBool("once")
			asJSON, _ := cmd.Flags().GetBool("json")
			if once || asJSON {
				window, _ := cmd.Flags().GetDuration("window")
				width, _ := cmd.Flags().GetInt("width")
				return ui.Once(out, ui.OnceOptions{Options: o, Window: window, JSON: asJSON, Width: width})
			}
			if _, err := os.Stat(o.Dir); err != nil {
				return fmt.Errorf("telemetry directory: %w", err)
			}
			return ui.Run(o)
		},
	}
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	pf := cmd.PersistentFlags()
	pf.String("dir", data.DefaultDir, "telemetry segment directory (env DDSTORE_TELEMETRY_DIR, config telemetry.dir)")
	pf.String("job", "", "show only this job: its id or a prefix that no other job's id starts with (config ddtop.job)")
	pf.Duration("interval", time.Second, "refresh interval; record: time between snapshots (config ddtop.interval)")
	pf.Int("history", 300, "throughput points kept per rank for the sparkline (config ddtop.history)")
	pf.String("config", "", "config: a YAML path or an embedded machine name ("+strings.Join(configs.Machines(), ", ")+") (env DDSTORE_CONFIG)")
	pf.Int("nice", 19, "niceness ddtop gives itself (0-19), so that the kernel always runs the trainers it watches first; 0 keeps the inherited one (config ddtop.nice)")
	f := cmd.Flags()
	f.Bool("once", false, "print the ranks and variables tables once and exit")
	f.Bool("json", false, "print one snapshot as JSON and exit (implies --once)")
	f.Duration("window", time.Second, "with --once/--json: time between the two snapshots that give rates; 0 = cumulative only")
	f.Int("width", 120, "with --once: table width")
	cmd.AddCommand(recordCommand(out), replayCommand(), reportCommand(out), serveCommand(out))
	return cmd
}

// settings resolves the monitor's options: flags given on the command
// line, else the config file, else defaults; and lowers ddtop's priority.
func settings(cmd *cobra.Command) (ui.Options, error) {
	f := cmd.Flags()
	name, _ := f.GetString("config")
	c, err := configs.Load(name)
	if err != nil {
		return ui.Options{}, err
	}
	o := ui.Options{Dir: c.Telemetry.Dir, Job: c.Ddtop.Job, Interval: c.Ddtop.Interval, History: c.Ddtop.History}
	nice := c.Ddtop.Nice
	if f.Changed("dir") {
		o.Dir, _ = f.GetString("dir")
	}
	if f.Changed("job") {
		o.Job, _ = f.GetString("job")
	}
	if f.Changed("interval") {
		o.Interval, _ = f.GetDuration("interval")
	}
	if f.Changed("history") {
		o.History, _ = f.GetInt("history")
	}
	if f.Changed("nice") {
		nice, _ = f.GetInt("nice")
	}
	if err := o.Validate(); err != nil {
		return o, err
	}
	// Leftovers of processes that ended without closing, from before this
	// ddtop: ranks that exit while it watches stay until the next job's
	// Open (hidden after ui.DefaultExitedGrace, shown with X).
	_, _ = telemetry.SweepOlder(o.Dir, ui.DefaultExitedGrace)
	if nice != 0 {
		if err := lowerPriority(nice); err != nil {
			return o, err
		}
	}
	return o, nil
}

// jobSettings are the settings with ddtop.job (--job), an id or a unique
// prefix of one, replaced by the full id of the job it names in the
// directory: record and serve follow that one job. When it names no job
// or several, the error lists the jobs there.
func jobSettings(cmd *cobra.Command) (ui.Options, error) {
	o, err := settings(cmd)
	if err != nil {
		return o, err
	}
	o.Job, err = data.ResolveJob(o.Dir, o.Job)
	return o, err
}

// lowerPriority sets the niceness of every thread of ddtop to nice. Linux
// keeps niceness per thread, and threads inherit their creator's, so
// setting it on all current threads covers the ones the runtime starts
// later.
func lowerPriority(nice int) error {
	if nice < 0 || nice > 19 {
		return fmt.Errorf("--nice %d: want 0 to 19 (ddtop only lowers its priority)", nice)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return unix.Setpriority(unix.PRIO_PROCESS, 0, nice)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil && err != unix.ESRCH {
			return fmt.Errorf("--nice %d: setpriority of thread %d: %w", nice, tid, err)
		}
	}
	return nil
}
