// Command ddrun starts N ranks of a program on this machine, like
// `mpirun -n N` on one node, with the torchrun-style environment that
// ddstore's bootstrap reads (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR=127.0.0.1, MASTER_PORT, DDSTORE_JOB, DDSTORE_JOB_TOKEN and DDSTORE_TOKEN, a
// random secret per run).
//
//	ddrun -n 4 [--timeout 10m] [--prefix] [--env K=V]... [--] prog args...
//
// SIGINT and SIGTERM are forwarded to every rank. When a rank fails, the
// others get a short grace, then SIGTERM, then SIGKILL, and ddrun exits with
// the failing rank's status, naming it. The work is done by engine/launch.
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

	"github.com/ddstore/ddstore/cmd/ddrun/launch"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without os.Exit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	var (
		spec launch.Spec
		code int
	)
	cmd := &cobra.Command{
		Use:   "ddrun -n N [flags] [--] prog [args...]",
		Short: "Run N ranks of a program on this machine (like mpirun -n N) for ddstore jobs",
		Long: "ddrun starts N copies of prog with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n" +
			"MASTER_ADDR=127.0.0.1, MASTER_PORT (a free port), DDSTORE_JOB, DDSTORE_JOB_TOKEN and DDSTORE_TOKEN (a random secret) set,\n" +
			"so that ddstore's engine bootstraps over TCP. SIGINT/SIGTERM are forwarded; if a rank\n" +
			"fails the others are stopped and ddrun exits with that rank's status.",
		Args:          cobra.MinimumNArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			spec.Prog, spec.Args = args[0], args[1:]
			spec.Stdout, spec.Stderr = stdout, stderr
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sigs)
			spec.Signals = sigs
			err := launch.Run(context.Background(), spec)
			code = launch.ExitCode(err)
			return err
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false) // flags after prog belong to prog
	f.IntVarP(&spec.N, "np", "n", 1, "number of ranks")
	f.DurationVar(&spec.Timeout, "timeout", 0, "stop the job after this long (0 = no limit)")
	f.DurationVar(&spec.Grace, "grace", 2*time.Second, "after a rank fails: time the others get before SIGTERM, and after SIGTERM before SIGKILL")
	f.BoolVar(&spec.Prefix, "prefix", false, `prefix every output line with "[rank N] "`)
	f.StringArrayVar(&spec.Env, "env", nil, "extra KEY=VALUE for every rank (repeatable)")
	f.StringVar(&spec.Dir, "dir", "", "working directory of the ranks")
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(stderr, "ddrun:", err)
		if code == 0 {
			code = 2 // usage error
		}
	}
	return code
}
