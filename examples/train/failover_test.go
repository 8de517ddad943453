package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ddstore/ddstore/internal/testkit"
)

// syncBuffer is a bytes.Buffer safe for a writer and a concurrent reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// job is a trainer job started by startJob.
type job struct {
	dir        string // bootstrap and telemetry directory
	cmds       []*exec.Cmd
	outs, errs []*syncBuffer
	cancel     context.CancelFunc
}

// startJob starts the trainer as world ranks (bootstrap directory) with
// extra environment variables.
func startJob(t testing.TB, world int, args string, env ...string) *job {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second) // hang guard, with room for a loaded machine
	name := fmt.Sprintf("trfo%d-%d", os.Getpid(), time.Now().UnixNano())
	j := &job{cancel: cancel, dir: dir}
	for r := range world {
		cmd := exec.CommandContext(ctx, os.Args[0])
		o, e := &syncBuffer{}, &syncBuffer{}
		cmd.Stdout, cmd.Stderr = o, e
		cmd.Env = append(os.Environ(), envArgs+"="+args+" --json",
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(world),
			"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(world),
			"DDSTORE_BOOTSTRAP=dir", "DDSTORE_BOOTSTRAP_DIR="+dir,
			"DDSTORE_JOB="+name, "DDSTORE_JOB_TOKEN="+name, "DDSTORE_TELEMETRY_DIR="+dir)
		cmd.Env = append(cmd.Env, env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		j.cmds, j.outs, j.errs = append(j.cmds, cmd), append(j.outs, o), append(j.errs, e)
	}
	t.Cleanup(func() {
		for _, c := range j.cmds {
			if c.ProcessState == nil {
				c.Process.Signal(syscall.SIGCONT)
				c.Process.Kill()
				c.Wait()
			}
		}
		cancel()
	})
	return j
}

// wait waits for every rank and returns their JSON lines; if any rank
// fails, it fails the test with every rank's exit status and output.
func (j *job) wait(t testing.TB, what string) []epochResult {
	t.Helper()
	res, err := j.results(what)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// results waits for every rank (all of them, even after one fails) and
// returns their JSON lines, or an error naming what failed followed by
// every rank's report (so the rank that failed first is visible even when
// a lower rank failed because of it).
func (j *job) results(what string) ([]epochResult, error) {
	var res []epochResult
	var bad []string
	for r, cmd := range j.cmds {
		if err := cmd.Wait(); err != nil {
			bad = append(bad, fmt.Sprintf("rank %d: %v", r, err))
			continue
		}
		sc := bufio.NewScanner(strings.NewReader(j.outs[r].String()))
		for sc.Scan() {
			var e epochResult
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				bad = append(bad, fmt.Sprintf("rank %d: bad JSON line %q: %v", r, sc.Text(), err))
				break
			}
			if e.Rank != r {
				bad = append(bad, fmt.Sprintf("rank %d printed rank %d", r, e.Rank))
				break
			}
			res = append(res, e)
		}
	}
	if bad != nil {
		return nil, fmt.Errorf("%s: %s\n%s", what, strings.Join(bad, "; "), j.report())
	}
	return res, nil
}

// report is every rank's exit status, stdout and stderr (after Wait).
func (j *job) report() string {
	var b strings.Builder
	for r, c := range j.cmds {
		state := "running"
		if c.ProcessState != nil {
			state = c.ProcessState.String()
		}
		fmt.Fprintf(&b, "--- rank %d (%s)\nstdout:\n%s\nstderr:\n%s\n", r, state, j.outs[r], j.errs[r])
	}
	return b.String()
}

// onePerRankEpoch fails unless res holds exactly one line for each of
// ranks ranks and epochs epochs.
func onePerRankEpoch(t testing.TB, what string, res []epochResult, ranks, epochs int) {
	t.Helper()
	if len(res) != ranks*epochs {
		t.Fatalf("%s: %d JSON lines, want %d (%d ranks × %d epochs): %+v", what, len(res), ranks*epochs, ranks, epochs, res)
	}
	seen := map[[2]int]bool{}
	for _, e := range res {
		k := [2]int{e.Rank, e.Epoch}
		if e.Rank < 0 || e.Rank >= ranks || e.Epoch < 0 || e.Epoch >= epochs || seen[k] {
			t.Fatalf("%s: unexpected or repeated line for rank %d epoch %d: %+v", what, e.Rank, e.Epoch, res)
		}
		seen[k] = true
	}
}

// lossesOf returns the per-epoch loss, checking that there is one line
// per rank and epoch and that every rank agrees.
func lossesOf(t testing.TB, what string, res []epochResult, ranks, epochs int) []float64 {
	t.Helper()
	onePerRankEpoch(t, what, res, ranks, epochs)
	l := make([]float64, epochs)
	for _, e := range res {
		if e.Epoch < 0 || e.Epoch >= epochs {
			t.Fatalf("%s: epoch %d", what, e.Epoch)
		}
		if l[e.Epoch] == 0 {
			l[e.Epoch] = e.Loss
		} else if e.Loss != l[e.Epoch] {
			t.Fatalf("%s: epoch %d: rank %d loss %v != %v", what, e.Epoch, e.Rank, e.Loss, l[e.Epoch])
		}
	}
	return l
}

// A stalled owner inside a training job: 4 ranks in 2 replica groups
// (store.width 2), every read through the fabric (a mapped shard would
// stay readable while its owner is stopped). Rank 1 is stopped (SIGSTOP)
// for 3 s (×testkit.RaceScale) in the middle of the job, then resumed. Rank 0, whose group's
// member 1 it is, reads those rows from rank 3 meanwhile (failover after
// 1 s); the collectives wait for rank 1; the job completes with the
// loss of an undisturbed run, every row of every batch checked against its
// pattern, and no rank ever takes rank 1 for dead.
func TestStalledOwnerFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	const epochs = 3
	args := fmt.Sprintf("--epochs %d --rows-per-rank 4096 --batch-size 16 --hidden 8 --lr 0.01 --seed 7 "+
		"--workers 1 --prefetch 2 --sync-every 0 --check --node-mode fabric", epochs)
	// Rank 1 is stopped for 3 s (12 s under -race, whose ranks read
	// several times slower): well past the 1 s failover deadline, and well
	// under the deadlines after which rank 1 would be declared dead, set
	// here to 10 s (40 s under -race): Liveness (a silent plain rank) and
	// the tree ring's dead-after (each rank is its own node's agent here;
	// the ring's default 3.6 s would be shorter than a scaled stop).
	stop, dead := 3*time.Second*testkit.RaceScale, 10*time.Second*testkit.RaceScale
	env := []string{"DDSTORE_WIDTH=2", "DDSTORE_FAILOVER_AFTER=1s", "DDSTORE_FABRIC=tcp;ofi_rxm", "FABRIC_IFACE=lo",
		"DDSTORE_LIVENESS=" + dead.String(), "DDSTORE_CTRL_PERIOD=1s",
		"DDSTORE_CTRL_SUSPECT_AFTER=" + (dead / 2).String(), "DDSTORE_CTRL_DEAD_AFTER=" + dead.String()}

	ref := startJob(t, 4, args, env...).wait(t, "undisturbed")
	refLoss := lossesOf(t, "undisturbed", ref, 4, epochs)
	for _, e := range ref {
		// A healthy read may still miss the deadline on a loaded machine
		// (and move to a replica, correctly): failovers are not checked here.
		if len(e.Dead) != 0 || e.Checked != int64(e.Epoch+1)*4096 {
			t.Fatalf("undisturbed run: %+v", e)
		}
	}

	j := startJob(t, 4, args, env...)
	deadline := time.Now().Add(120 * time.Second)
	for !strings.Contains(j.outs[1].String(), `"epoch":0`) {
		if time.Now().After(deadline) {
			t.Fatalf("rank 1 printed no epoch: %s", j.errs[1])
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := j.cmds[1].Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(stop)
	if err := j.cmds[1].Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	res := j.wait(t, "rank 1 stopped")
	loss := lossesOf(t, "rank 1 stopped", res, 4, epochs)
	if !slices.Equal(loss, refLoss) {
		t.Fatalf("loss with rank 1 stopped %v, undisturbed %v", loss, refLoss)
	}
	var moved int64
	for _, e := range res {
		if slices.Contains(e.Dead, 1) {
			t.Fatalf("rank %d took rank 1 for dead: %+v", e.Rank, e)
		}
		if e.Checked != int64(e.Epoch+1)*4096 {
			t.Fatalf("rank %d checked %d rows by epoch %d", e.Rank, e.Checked, e.Epoch)
		}
		if e.Rank == 0 && e.Epoch == epochs-1 {
			moved = e.FailedFrom[1]
		}
	}
	if moved == 0 {
		t.Fatalf("rank 0 moved no read of rank 1's rows to a replica while rank 1 was stopped: %+v", res)
	}
	t.Logf("losses %v; rank 0 moved %d row reads to rank 3 while rank 1 was stopped", loss, moved)
}
