package bootstrap

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/internal/testkit"
)

// The multi-rank tests re-execute the test binary: with BSTEST_ROLE set,
// TestMain runs one rank of a scenario and prints one "RESULT {json}" line
// (also written to $BSTEST_RESULT_DIR/rank-N.json when that is set).

type rankResult struct {
	Rank  int    `json:"rank"`
	OK    bool   `json:"ok"`
	Err   string `json:"err,omitempty"`
	Kind  string `json:"kind,omitempty"`
	Side  string `json:"side,omitempty"` // fault.SideOf(err)
	Ranks []int  `json:"ranks,omitempty"`
	Job   string `json:"job,omitempty"`
	Token bool   `json:"token,omitempty"` // errors.Is(err, fault.ErrToken)
	// The job secret as this rank holds it: where from, and a digest.
	SecretSrc string `json:"secret_src,omitempty"`
	SecretSum string `json:"secret_sum,omitempty"`
	SecretLen int    `json:"secret_len,omitempty"`
}

func TestMain(m *testing.M) { testkit.Main(m, "BSTEST_ROLE", runRole) }

// blobFor is rank r's blob of round k: its length and bytes derive from both.
func blobFor(r, k int) []byte {
	n := 3 + 97*r + 13*k
	if r == 2 {
		n += 5000 // several PMI chunks
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r*31 + k*7 + i)
	}
	return b
}

// kindNames names the sentinel classes in test expectations.
var kindNames = []struct {
	kind error
	name string
}{
	{fault.ErrTimeout, "timeout"}, {fault.ErrToken, "job token mismatch"}, {fault.ErrMismatch, "collective mismatch"},
	{fault.ErrPeerDead, "peer lost"}, {fault.ErrClosed, "closed"}, {fault.ErrEnv, "bad environment"}, {fault.ErrTooLarge, "too large"},
}

func kindName(err error) string {
	for _, k := range kindNames {
		if errors.Is(err, k.kind) {
			return k.name
		}
	}
	return "other"
}

func runRole(role string) int {
	env, err := DetectEnv()
	res := rankResult{Rank: env.Rank}
	report := func(err error) int {
		if err != nil {
			res.Err, res.Kind, res.Ranks, res.Token = err.Error(), kindName(err), fault.RanksOf(err), errors.Is(err, fault.ErrToken)
			res.Side = fault.SideOf(err).String()
		} else {
			res.OK = true
		}
		b, _ := json.Marshal(res)
		fmt.Printf("RESULT %s\n", b)
		if dir := os.Getenv("BSTEST_RESULT_DIR"); dir != "" {
			// Also a file: a launcher may die before it relays our stdout.
			os.WriteFile(fmt.Sprintf("%s/rank-%d.json", dir, res.Rank), b, 0o644)
		}
		return 0
	}
	if err != nil {
		return report(err)
	}
	timeout, _ := time.ParseDuration(os.Getenv("BSTEST_TIMEOUT"))
	if v, err := strconv.Atoi(os.Getenv("BSTEST_PMI_DIRECT")); err == nil {
		pmiDirectMax = v
	}
	if role == "late" && env.Rank == env.World-1 {
		time.Sleep(2 * timeout)
	}
	x, err := Connect(Options{Method: os.Getenv("BSTEST_METHOD"), Timeout: timeout})
	if err != nil {
		return report(err)
	}
	defer x.Close()
	res.Job = JobOf(x, env.Job)
	res.SecretSrc, res.SecretLen = SecretSource(x), len(SecretOf(x))
	if sec := SecretOf(x); sec != nil {
		res.SecretSum = fmt.Sprintf("%x", sha256.Sum256(sec))
	}
	if x.Rank() != env.Rank || x.Size() != env.World {
		return report(fmt.Errorf("exchanger says rank %d/%d, env %d/%d", x.Rank(), x.Size(), env.Rank, env.World))
	}
	switch role {
	case "gather", "late":
		for k := range 3 {
			all, err := x.AllGather(fmt.Sprintf("round-%d", k), blobFor(env.Rank, k), 0)
			if err != nil {
				return report(err)
			}
			if len(all) != env.World {
				return report(fmt.Errorf("round %d: %d blobs", k, len(all)))
			}
			for r, b := range all {
				if !bytes.Equal(b, blobFor(r, k)) {
					return report(fmt.Errorf("round %d: blob of rank %d has %d bytes, wrong content", k, r, len(b)))
				}
			}
		}
		if err := x.Barrier("end", 0); err != nil {
			return report(err)
		}
		return report(x.Close())
	case "mismatch":
		tag := "fabric-addr"
		if env.Rank == 1 {
			tag = "shard-sizes"
		}
		_, err := x.AllGather(tag, blobFor(env.Rank, 0), 0)
		if err == nil {
			err = errors.New("mismatched collective succeeded")
		}
		return report(err)
	case "die":
		if _, err := x.AllGather("first", blobFor(env.Rank, 0), 0); err != nil {
			return report(err)
		}
		if env.Rank == 2 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		_, err := x.AllGather("second", blobFor(env.Rank, 1), 0)
		if err == nil {
			err = errors.New("allgather with a dead rank succeeded")
		}
		return report(err)
	}
	return report(fmt.Errorf("unknown role %q", role))
}

type spawnSpec struct {
	role    string
	method  string
	world   int
	ranks   []int // ranks to start (default all)
	timeout time.Duration
	env     func(rank int) []string // extra per-rank env
	slurm   bool                    // rank and world as srun sets them (SLURM_PROCID/SLURM_NTASKS), not RANK/WORLD_SIZE
}

// spawn starts the ranks of a scenario and returns each started rank's result.
func spawn(t *testing.T, s spawnSpec) map[int]rankResult {
	t.Helper()
	s.ranks = s.started()
	byRank := map[int]rankResult{}
	for proc, rr := range spawnProcs(t, s) {
		byRank[s.ranks[proc]] = rr
	}
	return byRank
}

// started is the ranks to start: s.ranks, or every rank of the world.
func (s spawnSpec) started() []int {
	if s.ranks != nil {
		return s.ranks
	}
	var all []int
	for r := range s.world {
		all = append(all, r)
	}
	return all
}

// spawnProcs starts the ranks of a scenario and returns each process's
// result by its index in s.ranks: two processes that claim one rank each
// keep their own.
func spawnProcs(t *testing.T, s spawnSpec) map[int]rankResult {
	t.Helper()
	s.ranks = s.started()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	outs := make(chan rankOut, len(s.ranks))
	for i, r := range s.ranks {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		rankVar, worldVar := "RANK=", "WORLD_SIZE="
		if s.slurm {
			rankVar, worldVar = "SLURM_PROCID=", "SLURM_NTASKS="
		}
		cmd.Env = append(cleanEnv(),
			"BSTEST_ROLE="+s.role, "BSTEST_METHOD="+s.method, "BSTEST_TIMEOUT="+s.timeout.String(),
			rankVar+strconv.Itoa(r), worldVar+strconv.Itoa(s.world))
		if s.env != nil {
			cmd.Env = append(cmd.Env, s.env(i)...)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		go func() {
			b, err := cmd.Output()
			if err != nil {
				err = fmt.Errorf("%v: %s", err, stderr.String())
			}
			outs <- rankOut{i, b, err}
		}()
	}
	res := collectResults(t, outs, len(s.ranks), func(proc int) bool { return s.role == "die" && s.ranks[proc] == 2 })
	for proc, rr := range res {
		if rr.Rank != s.ranks[proc] {
			t.Fatalf("process %d reports rank %d, started as rank %d", proc, rr.Rank, s.ranks[proc])
		}
	}
	return res
}

// rankOut is what a rank process printed, and how it exited; key is its
// rank or its index among the processes started.
type rankOut struct {
	key int
	b   []byte
	err error
}

// collectResults reads n processes' outputs from outs and parses each
// one's result, by key; one that printed none fails the test unless
// mayMiss(key).
func collectResults(t *testing.T, outs <-chan rankOut, n int, mayMiss func(key int) bool) map[int]rankResult {
	t.Helper()
	res := map[int]rankResult{}
	for range n {
		o := <-outs
		rr, ok := parseResult(o.b)
		if !ok && mayMiss != nil && mayMiss(o.key) {
			continue
		}
		if !ok {
			t.Fatalf("process %d printed no result (err %v): %q", o.key, o.err, o.b)
		}
		t.Logf("process %d: rank %d ok=%v job=%s %s", o.key, rr.Rank, rr.OK, rr.Job, rr.Err)
		res[o.key] = rr
	}
	return res
}

func parseResult(b []byte) (rankResult, bool) {
	for _, line := range strings.Split(string(b), "\n") {
		if j, ok := strings.CutPrefix(line, "RESULT "); ok {
			var rr rankResult
			if json.Unmarshal([]byte(j), &rr) == nil {
				return rr, true
			}
		}
	}
	return rankResult{}, false
}

// cleanEnv is the environment without any launcher variables of the host.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "SLURM_") || strings.HasPrefix(k, "PMI_") || strings.HasPrefix(k, "OMPI_") || strings.HasPrefix(k, "PMIX_") ||
			strings.HasPrefix(k, "DDSTORE_") || strings.HasPrefix(k, "MASTER_") || strings.HasPrefix(k, "TORCHELASTIC_") ||
			k == "RANK" || k == "WORLD_SIZE" || k == "LOCAL_RANK" || k == "LOCAL_WORLD_SIZE" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func wantAllOK(t *testing.T, res map[int]rankResult) {
	t.Helper()
	for r, rr := range res {
		if !rr.OK {
			t.Errorf("rank %d: %s", r, rr.Err)
		}
	}
}

func wantKind(t *testing.T, res map[int]rankResult, rank int, kind string, ranks []int, msg string) {
	t.Helper()
	rr, ok := res[rank]
	if !ok {
		t.Fatalf("rank %d: no result", rank)
	}
	if rr.OK || rr.Kind != kind || fmt.Sprint(rr.Ranks) != fmt.Sprint(ranks) || !strings.Contains(rr.Err, msg) {
		t.Errorf("rank %d: got ok=%v kind=%q ranks=%v err=%q\nwant kind %q ranks %v containing %q",
			rank, rr.OK, rr.Kind, rr.Ranks, rr.Err, kind, ranks, msg)
	}
	// The side follows the class: waiting for peers, losing one or meeting
	// another job's token is the peers' failure; a disagreement is neither.
	side := map[string]string{"timeout": "remote", "peer lost": "remote", "job token mismatch": "remote",
		"collective mismatch": "unknown"}[kind]
	if side != "" && rr.Side != side {
		t.Errorf("rank %d: %s error classified %q, want %q: %s", rank, kind, rr.Side, side, rr.Err)
	}
}
