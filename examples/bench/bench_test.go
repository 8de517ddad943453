package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

const envArgs = "DDBENCH_TEST_ARGS"

func TestMain(m *testing.M) {
	if a, ok := os.LookupEnv(envArgs); ok {
		cmd := newCommand(os.Stdout)
		cmd.SetArgs(strings.Fields(a))
		if err := cmd.Execute(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestQuickJSON runs the benchmark as 2 real ranks with --quick --json and
// checks that every table is complete and plausible.
func TestQuickJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process benchmark")
	}
	const world = 2
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second) // hang guard, with room for a loaded machine
	defer cancel()
	job := fmt.Sprintf("bench%d", os.Getpid())
	var outs, errs [world]bytes.Buffer
	var cmds [world]*exec.Cmd
	for r := range world {
		cmd := exec.CommandContext(ctx, os.Args[0])
		cmd.Stdout, cmd.Stderr = &outs[r], &errs[r]
		cmd.Env = append(os.Environ(), envArgs+"=--quick --json",
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(world),
			"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(world),
			"DDSTORE_BOOTSTRAP=dir", "DDSTORE_BOOTSTRAP_DIR="+dir,
			"DDSTORE_JOB="+job, "DDSTORE_JOB_TOKEN="+job, "DDSTORE_TELEMETRY_DIR="+dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, errs[r].String())
		}
	}
	if outs[1].Len() != 0 {
		t.Fatalf("rank 1 printed %q; only rank 0 prints", outs[1].String())
	}
	var rep Report
	if err := json.Unmarshal(outs[0].Bytes(), &rep); err != nil {
		t.Fatalf("rank 0 output is not one JSON object: %v\n%s", err, outs[0].String())
	}
	if rep.World != world || !rep.Quick {
		t.Fatalf("world %d quick %v", rep.World, rep.Quick)
	}
	seen := map[string]bool{}
	for _, g := range rep.BenchGet {
		if g.USPerRow <= 0 || (g.Batch != 1 && g.Batch != 128) {
			t.Fatalf("implausible bench_get entry %+v", g)
		}
		seen[fmt.Sprint(g.Path, g.Row, g.Batch)] = true
	}
	for _, p := range []string{"local", "tcp", "shm"} {
		for _, rb := range rowSizes {
			for _, b := range []int{1, 128} {
				if !seen[fmt.Sprint(p, rb, b)] {
					t.Errorf("bench_get lacks path %s row %d batch %d", p, rb, b)
				}
			}
		}
	}
	if len(rep.BenchThreads) != 12 {
		t.Errorf("bench_threads has %d entries, want 2 rows × 2 modes × 3 reader counts", len(rep.BenchThreads))
	}
	for _, th := range rep.BenchThreads {
		if th.RowsPerS <= 0 || (th.Mode != "shared" && th.Mode != "own") {
			t.Errorf("implausible bench_threads entry %+v", th)
		}
	}
	if len(rep.Loader) != 4 {
		t.Fatalf("loader has %d entries, want workers 0, 1, 2, 4", len(rep.Loader))
	}
	for i, l := range rep.Loader {
		if l.Workers != []int{0, 1, 2, 4}[i] || l.FetchS <= 0 || l.ComputeS <= 0 {
			t.Errorf("implausible loader entry %+v", l)
		}
	}
	t.Logf("%s", outs[0].String())
}
