package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The test binary re-executes itself as the ranks of a job: with
// DDTRAIN_TEST_ARGS set it runs the trainer with those arguments, the rank
// coming from RANK/WORLD_SIZE as under ddrun or torchrun, and the addresses
// exchanged through a bootstrap directory.
const envArgs = "DDTRAIN_TEST_ARGS"

func TestMain(m *testing.M) {
	if throttleMain() {
		os.Exit(0)
	}
	if storageMain() {
		os.Exit(0)
	}
	if a, ok := os.LookupEnv(envArgs); ok {
		cmd := newCommand(os.Stdout, os.Stderr)
		cmd.SetArgs(strings.Fields(a))
		if err := cmd.Execute(); err != nil {
			fmt.Fprintln(os.Stderr, "train:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const world = 4

// runRanks runs the trainer as world ranks and returns every rank's JSON
// lines.
func runRanks(t *testing.T, args string) []epochResult {
	t.Helper()
	return startJob(t, world, args).wait(t, args)
}

func TestLossIdenticalAcrossLoaderVariants(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	const epochs = 2
	base := fmt.Sprintf("--epochs %d --rows-per-rank 96 --batch-size 16 --hidden 8 --lr 0.01 --seed 7 --check", epochs)
	variants := []string{
		"--workers 0 --batch-get=true --fast-collate=true --node-mode auto",
		"--workers 1 --prefetch 1 --batch-get=false --fast-collate=false --node-mode auto",
		"--workers 2 --prefetch 2 --batch-get=true --thread-readers=false --node-mode auto",
		"--workers 2 --prefetch 1 --batch-get=false --thread-readers=true --fast-collate=true --node-mode auto",
		"--workers 1 --prefetch 2 --batch-get=true --thread-readers=true --node-mode fabric",
		"--workers 0 --batch-get=false --node-mode fabric",
	}
	var ref []float64 // per epoch
	for _, v := range variants {
		res := runRanks(t, base+" "+v)
		if len(res) != world*epochs {
			t.Fatalf("%s: %d JSON lines, want %d", v, len(res), world*epochs)
		}
		losses := make([]float64, epochs)
		for _, e := range res {
			if e.Epoch < 0 || e.Epoch >= epochs {
				t.Fatalf("%s: epoch %d", v, e.Epoch)
			}
			// each rank reads 96 rows per epoch (384 rows over 4 ranks)
			if e.Rows != 96 || e.FetchS <= 0 || e.ComputeS <= 0 || e.Loss <= 0 {
				t.Fatalf("%s: implausible epoch result %+v", v, e)
			}
			// --check: every row of every batch compared with the pattern of
			// its global index, 96 more by the end of each epoch
			if e.Checked != int64(e.Epoch+1)*96 {
				t.Fatalf("%s: rank %d checked %d rows by epoch %d, want %d", v, e.Rank, e.Checked, e.Epoch, (e.Epoch+1)*96)
			}
			if e.Rank == 0 {
				losses[e.Epoch] = e.Loss
			} else if losses[e.Epoch] != 0 && e.Loss != losses[e.Epoch] {
				t.Fatalf("%s: epoch %d: rank %d loss %v != rank 0 loss %v", v, e.Epoch, e.Rank, e.Loss, losses[e.Epoch])
			}
		}
		for _, e := range res { // ranks printed in rank order: recheck all against rank 0
			if e.Loss != losses[e.Epoch] {
				t.Fatalf("%s: epoch %d: rank %d loss %v != rank 0 loss %v", v, e.Epoch, e.Rank, e.Loss, losses[e.Epoch])
			}
		}
		if ref == nil {
			ref = losses
			if !(losses[1] < losses[0]) {
				t.Fatalf("loss does not decrease: %v", losses)
			}
			t.Logf("reference losses %v", losses)
			continue
		}
		for ep := range epochs {
			if losses[ep] != ref[ep] {
				t.Fatalf("%s: epoch %d loss %s, reference %s", v, ep,
					strconv.FormatFloat(losses[ep], 'g', -1, 64), strconv.FormatFloat(ref[ep], 'g', -1, 64))
			}
		}
	}
	// A different seed gives a different loss (the comparison can fail).
	res := runRanks(t, strings.Replace(base, "--seed 7", "--seed 8", 1)+" "+variants[0])
	if res[0].Loss == ref[res[0].Epoch] {
		t.Fatalf("seed 8 gave the same loss as seed 7: %v", res[0].Loss)
	}
}
