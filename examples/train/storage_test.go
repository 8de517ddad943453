package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ddstore/ddstore/cmd/ddrun/launch"
	"github.com/ddstore/ddstore/engine"
	"github.com/ddstore/ddstore/telemetry"
)

// envStorage makes the test binary a storage-only rank (what
// examples/storage does): Open with Role storage, Serve.
const envStorage = "DDTRAIN_TEST_STORAGE"

func storageMain() bool {
	if os.Getenv(envStorage) == "" {
		return false
	}
	cfg, err := engine.LoadConfig("")
	if err == nil {
		o := cfg.StoreOptions()
		o.Role = engine.RoleStorage
		var st *engine.Store
		if st, err = engine.Open(o); err == nil {
			err = st.Serve()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "storage:", err)
		os.Exit(1)
	}
	return true
}

// storageEnv is the environment both launches of a job with storage
// ranks share, one DDSTORE_TOKEN included: launches that meet prove one
// secret (each ddrun launch would otherwise make its own).
func storageEnv(t testing.TB, dir string, trainers, ranks, width int) []string {
	return []string{"DDSTORE_STORAGE_JOB=" + fmt.Sprintf("st%d-%d", os.Getpid(), time.Now().UnixNano()),
		"DDSTORE_TOKEN=" + rand.Text(),
		"DDSTORE_STORAGE_ADDR=127.0.0.1:" + strconv.Itoa(freeTCPPort(t)), "DDSTORE_STORAGE_DATA=" + dir,
		"DDSTORE_STORAGE_RANKS=" + strconv.Itoa(ranks), "DDSTORE_STORAGE_TRAINERS=" + strconv.Itoa(trainers),
		"DDSTORE_STORAGE_WIDTH=" + strconv.Itoa(width)}
}

// storageLaunch starts n storage ranks as a launch of their own.
func storageLaunch(t testing.TB, n int, env ...string) *job {
	return startJob(t, n, "", append([]string{envStorage + "=1"}, env...)...)
}

// shardDir is a new directory holding the data set of 2 shards of
// rowsPerShard rows as files, for storage ranks to load.
func shardDir(tb testing.TB, rowsPerShard int) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := writeShards(dir, 2, rowsPerShard, 1); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// aloneAndShards is what 2 trainers running storageArgs (epochs epochs)
// with storage ranks are compared with: their loss holding the data set
// themselves; and a directory with that data set as shard files.
func aloneAndShards(t *testing.T, epochs int) ([]float64, string) {
	t.Helper()
	ref := lossesOf(t, "trainers alone", startJob(t, 2, storageArgs).wait(t, "trainers alone"), 2, epochs)
	return ref, shardDir(t, 256)
}

// checkedAll fails unless res holds one line per trainer (of ranks) and
// epoch (of epochs), and every trainer checked every row it read: by the
// end of epoch e, (e+1)·perEpoch rows.
func checkedAll(t testing.TB, res []epochResult, ranks, epochs int, perEpoch int64) {
	t.Helper()
	onePerRankEpoch(t, "checked rows", res, ranks, epochs)
	for _, e := range res {
		if e.Checked != int64(e.Epoch+1)*perEpoch {
			t.Fatalf("trainer %d checked %d rows by epoch %d", e.Rank, e.Checked, e.Epoch)
		}
	}
}

const storageArgs = "--epochs 2 --rows-per-rank 256 --batch-size 16 --hidden 8 --lr 0.01 --seed 7 --workers 1 --prefetch 2 --check"

// Storage ranks from a separate launch: 2 trainers read the data set from
// 2 storage-only ranks (loaded from .npy shard files), on the same-node
// (mapped) and fabric paths; every row is checked against its pattern, and
// the loss equals that of the same 2 trainers holding the data themselves.
func TestStorageRanksLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	const epochs = 2
	ref, dir := aloneAndShards(t, epochs)
	for _, mode := range []string{"auto", "fabric"} {
		env := append(storageEnv(t, dir, 2, 2, 0), "DDSTORE_NODE_MODE="+mode)
		tr := startJob(t, 2, storageArgs+" --storage", env...)
		sr := storageLaunch(t, 2, env...)
		res := tr.wait(t, "trainers, storage "+mode)
		sr.wait(t, "storage ranks "+mode)
		got := lossesOf(t, "with storage ranks", res, 2, epochs)
		if !slices.Equal(got, ref) {
			t.Fatalf("node mode %s: loss with storage ranks %v, trainers alone %v", mode, got, ref)
		}
		checkedAll(t, res, 2, epochs, 256)
	}
	t.Logf("loss %v with and without storage ranks", ref)
}

// 2 trainers + 4 storage-only ranks in 2 replica groups; storage rank 1 is
// SIGKILLed in the middle of the first epoch: the trainers' epochs
// complete (its shard read from storage rank 3), every row checked, and
// the loss equals the run without the kill.
func TestStorageRankKilledLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	const epochs = 3
	args := "--epochs 3 --rows-per-rank 2048 --batch-size 16 --hidden 8 --lr 0.01 --seed 7 --workers 1 --prefetch 2 --check --sync-every 0 --storage"
	dir := shardDir(t, 2048)
	run := func(kill bool) ([]float64, []epochResult) {
		res := killJob(t, dir, args, kill, "DDSTORE_NODE_MODE=fabric", "DDSTORE_FAILOVER_AFTER=1s")
		return lossesOf(t, "trainers", res, 2, epochs), res
	}
	ref, _ := run(false)
	got, res := run(true)
	if !slices.Equal(got, ref) {
		t.Fatalf("loss with storage rank 1 killed %v, without %v", got, ref)
	}
	checkedAll(t, res, 2, epochs, 2048)
	var moved int64
	for _, e := range res {
		if e.Epoch == epochs-1 {
			moved += e.FailedFrom[3] // storage rank 1 is global id 2+1
		}
	}
	if moved == 0 {
		t.Fatalf("no read moved away from the killed storage rank: %+v", res)
	}
	t.Logf("loss %v; %d row reads moved from the killed storage rank to its replica", got, moved)
}

// readCalls sums the calls counted in the telemetry segments under dir.
func readCalls(dir string) int64 {
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	var n int64
	for _, f := range files {
		seg, err := telemetry.Open(f)
		if err != nil {
			continue
		}
		if snap, err := seg.Snapshot(); err == nil {
			n += snap.Total().Calls
		}
		seg.Close()
	}
	return n
}

func freeTCPPort(t testing.TB) int {
	p, err := launch.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// killJob runs 2 trainers (args) reading from 4 storage-only ranks in 2
// replica groups (shard files in dir); with kill, storage rank 1 is
// SIGKILLed once the trainers read, in the first epoch. Every other rank
// must exit 0; it returns the trainers' epoch results.
func killJob(tb testing.TB, dir, args string, kill bool, env ...string) []epochResult {
	env = append(storageEnv(tb, dir, 2, 4, 2), env...)
	tr := startJob(tb, 2, args, env...)
	sr := storageLaunch(tb, 4, env...)
	if kill {
		// Kill once trainer 0 has read (its telemetry counts calls), in the
		// first epoch (the trainers print after each epoch).
		for t0 := time.Now(); readCalls(tr.dir) == 0; time.Sleep(2 * time.Millisecond) {
			if time.Since(t0) > 60*time.Second {
				tb.Fatal("the trainers never read")
			}
		}
		if tr.outs[0].String() != "" {
			tb.Fatal("trainer 0 finished an epoch before the kill")
		}
		sr.cmds[1].Process.Signal(syscall.SIGKILL)
	}
	res, err := tr.results("trainers")
	if err != nil {
		// Storage ranks serve until the trainers close; after a trainer
		// failed, give them a while to notice, then kill them (their
		// output is reported either way).
		stop := time.AfterFunc(10*time.Second, func() {
			for _, c := range sr.cmds {
				c.Process.Kill()
			}
		})
		defer stop.Stop()
	}
	var bad []string
	for r, c := range sr.cmds {
		if werr := c.Wait(); (werr != nil) != (kill && r == 1) {
			bad = append(bad, fmt.Sprintf("storage rank %d: %v", r, werr))
		}
	}
	if err != nil || bad != nil {
		// Every trainer's and storage rank's output: the rank that failed
		// first is often not the one whose failure is noticed first.
		tb.Fatalf("kill=%v: %v %s\ntrainers:\n%s\nstorage ranks (global ids 2..5):\n%s", kill, err,
			strings.Join(bad, "; "), tr.report(), sr.report())
	}
	return res
}

// epochTimes returns every epoch's step time (max over the trainers) and
// the largest fetch wait ÷ step of any trainer and epoch.
func epochTimes(res []epochResult, epochs int) ([]float64, float64) {
	t := make([]float64, epochs)
	var wait float64
	for _, e := range res {
		t[e.Epoch] = max(t[e.Epoch], e.StepS)
		wait = max(wait, e.WaitStep)
	}
	return t, wait
}

// BenchmarkStorageDeadRank: 2 trainers read from 4 storage-only ranks in
// 2 replica groups with the example's default loader settings (1 worker,
// prefetch 2, batches of 64), reads failing over after 500 ms
// (reads.failover_after). Side by side in one run, per path (fabric: every
// read through tcp; colocate: storage ranks on the trainers' node, shards
// mapped): a healthy job, and the same job with storage rank 1 SIGKILLed
// once the trainers read. Goals: epoch time with the dead rank ≤ 1.3×
// healthy (kill epoch, which pays the detection, and later ones); fetch
// wait ÷ step ≤ 0.05 for the healthy trainers.
func BenchmarkStorageDeadRank(b *testing.B) {
	const epochs = 3
	args := "--epochs 3 --rows-per-rank 8192 --hidden 8 --lr 0.01 --seed 7 --workers 1 --prefetch 2 --storage"
	dir := shardDir(b, 8192)
	for _, path := range []struct{ name, mode string }{{"fabric", "fabric"}, {"colocate", "auto"}} {
		b.Run(path.name, func(b *testing.B) {
			run := func(kill bool) []epochResult {
				return killJob(b, dir, args, kill, "DDSTORE_NODE_MODE="+path.mode, "DDSTORE_FAILOVER_AFTER=500ms")
			}
			for i := 0; i < b.N; i++ {
				healthy, hw := epochTimes(run(false), epochs)
				dead, _ := epochTimes(run(true), epochs)
				b.ReportMetric(dead[0]/healthy[0], "kill-epoch÷healthy")
				b.ReportMetric((dead[1]+dead[2])/(healthy[1]+healthy[2]), "later-epochs÷healthy")
				b.ReportMetric(hw, "fetch-wait÷step")
				b.Logf("epoch s healthy %v, storage rank 1 dead %v", healthy, dead)
			}
		})
	}
}

// Two launches exactly as two ddrun commands start them (engine/launch,
// ddrun's library: each its own RANK/WORLD_SIZE, rendezvous port, job id
// and token): 2 trainers and 2 storage-only ranks meeting at the join
// rendezvous, on the fabric path; the trainers' loss equals that of the
// same trainers holding the data themselves (every row checked).
func TestStorageRanksTwoDdrunLaunches(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	const epochs = 2
	ref, dir := aloneAndShards(t, epochs)
	env := append(storageEnv(t, dir, 2, 2, 0), "DDSTORE_NODE_MODE=fabric", "DDSTORE_TELEMETRY_DIR="+t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var storeOut, trainOut, trainErr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- launch.Run(ctx, launch.Spec{N: 2, Prog: os.Args[0], Env: append([]string{envStorage + "=1"}, env...),
			Stdout: &storeOut, Stderr: &storeOut, Grace: 5 * time.Second})
	}()
	err := launch.Run(ctx, launch.Spec{N: 2, Prog: os.Args[0], Env: append([]string{envArgs + "=" + storageArgs + " --storage --json"}, env...),
		Stdout: &trainOut, Stderr: &trainErr, Grace: 5 * time.Second})
	if err != nil {
		t.Fatalf("trainer launch: %v\n%s", err, trainErr.String())
	}
	if err := <-done; err != nil {
		t.Fatalf("storage launch: %v\n%s", err, storeOut.String())
	}
	var res []epochResult
	for _, l := range strings.Split(strings.TrimSpace(trainOut.String()), "\n") {
		var e epochResult
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("bad line %q: %v", l, err)
		}
		res = append(res, e)
	}
	checkedAll(t, res, 2, epochs, 256)
	if got := lossesOf(t, "two launches", res, 2, epochs); !slices.Equal(got, ref) {
		t.Fatalf("loss with storage ranks of a second launch %v, trainers alone %v", got, ref)
	}
}
