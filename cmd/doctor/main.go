// Command doctor checks a node before training: libfabric and the
// provider the engine would pick, memory limits, reads between two local
// processes, interfaces, GPUs and NUMA affinity (engine/doctor). It prints
// tables (or --json) with findings in ddtop's form, and --write FILE writes
// a machine config from what it measured.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/ddstore/ddstore/configs"
	"github.com/ddstore/ddstore/engine"
	"github.com/ddstore/ddstore/engine/doctor"
)

func main() {
	if ok, code := doctor.ServeTargetArgs(os.Args); ok {
		os.Exit(code)
	}
	os.Exit(run())
}

func run() int {
	fs := pflag.NewFlagSet("doctor", pflag.ContinueOnError)
	cfgPath := fs.String("config", "", "config file or embedded machine (default: DDSTORE_CONFIG, the detected machine, else local)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	write := fs.String("write", "", "write a machine config measured here to `FILE`")
	providers := fs.StringSlice("providers", nil, "providers to measure reads on (default: the engine's pick and every other offered one of cxi, verbs, tcp, shm)")
	probeTimeout := fs.Duration("probe-timeout", 25*time.Second, "time limit of each probe")
	readTime := fs.Duration("read-time", 300*time.Millisecond, "time spent on each read measurement")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	job := fs.Bool("job", false, "check the job instead: run under srun, mpiexec or ddrun; every rank reads its ring neighbours and --random others, rank 0 prints the view")
	random := fs.Int("random", 2, "--job: random partners per rank besides the ring neighbours")
	perLink := fs.Duration("per-link", 300*time.Millisecond, "--job: measuring time per link")
	slower := fs.Float64("slower", 10, "--job: a link or host whose bandwidth is below the median by this factor is named")
	readCount := fs.Int("read-count", 0, "read exactly this many 3 KB rows for the single-read and 128-in-flight figures instead of --read-time (as fabric's BenchmarkRead -test.benchtime=Nx)")
	reads := fs.Bool("reads", true, "measure reads between two local processes (false: the quick probes only)")
	memlockMin := fs.Int64("memlock-min", 0, "memlock bytes below which it is a finding (default 64 MiB)")
	shmMin := fs.Int64("shm-min", 0, "free bytes of telemetry.dir below which it is a finding (default 1 GiB)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == pflag.ErrHelp {
			return 0
		}
		return 2
	}
	if *job {
		return runJob(*cfgPath, *asJSON, *quiet, doctor.JobOptions{Random: *random, PerLink: *perLink, Slower: *slower})
	}
	cfg, err := configs.Load(*cfgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "doctor:", err)
		return 2
	}
	o := doctor.Options{Config: &cfg, Providers: *providers, ProbeTimeout: *probeTimeout, ReadTime: *readTime, ReadCount: *readCount,
		SkipReads: !*reads, Thresholds: doctor.Thresholds{MemlockMin: *memlockMin, ShmFreeMin: *shmMin}}
	if !*quiet {
		o.Progress = os.Stderr
	}
	rep, err := doctor.Run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "doctor:", err)
		return 1
	}
	if err := writeReport(rep, *asJSON); err != nil {
		fmt.Fprintln(os.Stderr, "doctor:", err)
		return 1
	}
	if *write != "" {
		if err := rep.WriteConfig(*write); err != nil {
			fmt.Fprintln(os.Stderr, "doctor:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "doctor: wrote %s (load it with --config %s or DDSTORE_CONFIG=%s)\n", *write, *write, *write)
	}
	return 0
}

// runJob is doctor --job on this rank: rank 0 prints the gathered view.
func runJob(cfgPath string, asJSON, quiet bool, o doctor.JobOptions) int {
	cfg, err := engine.LoadConfig(cfgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "doctor --job:", err)
		return 2
	}
	o.Config = cfg
	if !quiet {
		o.Progress = os.Stderr
	}
	rep, err := doctor.RunJob(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "doctor --job:", err)
		return 1
	}
	if !rep.IsRankZero {
		return 0
	}
	if err := writeReport(rep, asJSON); err != nil {
		fmt.Fprintln(os.Stderr, "doctor --job:", err)
		return 1
	}
	return 0
}

// writeReport prints a report on stdout: indented JSON, or its table.
func writeReport(rep interface{ WriteTable(io.Writer) error }, asJSON bool) error {
	if !asJSON {
		return rep.WriteTable(os.Stdout)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
