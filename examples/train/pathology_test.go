package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The pathologies ddtop diagnoses, caused for real: three ranks of the
// trainer under ddrun (this test binary, re-executed), each run with one
// switch that makes one pathology, and `ddtop --once --json` asked until
// its findings name it. It must within detectWindows probes of a 1 s
// window each, from the first calls of every rank: the issue's "within
// 5 s" of the job's telemetry. Counting probes, not wall time, keeps a
// loaded machine's slow ddtop start-ups (each probe is a new process)
// from eating the windows; detectHang only catches a hang. A healthy run
// must give no finding at all.

const (
	detectWindows = 5
	detectHang    = time.Minute
)

// tools builds ddtop and ddrun once per test binary.
func tools(t *testing.T) (ddtop, ddrun string) {
	t.Helper()
	dir := t.TempDir()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", dir+"/", "github.com/ddstore/ddstore/cmd/ddtop", "github.com/ddstore/ddstore/cmd/ddrun")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ddtop ddrun: %v\n%s", err, out)
	}
	return filepath.Join(dir, "ddtop"), filepath.Join(dir, "ddrun")
}

type ddtopReport struct {
	Ranks []struct {
		Rank  int   `json:"rank"`
		Calls int64 `json:"calls"`
	} `json:"ranks"`
	Findings []struct {
		Rule     string `json:"rule"`
		Rank     int    `json:"rank"`
		Var      string `json:"var"`
		Evidence string `json:"evidence"`
		Fix      string `json:"fix"`
	} `json:"findings"`
}

func (r *ddtopReport) rules() string {
	var s []string
	for _, f := range r.Findings {
		s = append(s, fmt.Sprintf("%s(rank %d %s: %s)", f.Rule, f.Rank, f.Var, f.Evidence))
	}
	return strings.Join(s, "; ")
}

// pjob is one ddrun of the trainer with its telemetry directory.
type pjob struct {
	t     *testing.T
	dir   string
	ddtop string
	cmd   *exec.Cmd
	out   syncBuffer    // ddrun's stderr, written while the test reads it
	done  chan struct{} // closed once ddrun has exited (cmd.Wait returned)
}

func startPJob(t *testing.T, ddtop, ddrun, args string, env ...string) *pjob {
	t.Helper()
	j := &pjob{t: t, dir: t.TempDir(), ddtop: ddtop, done: make(chan struct{})}
	a := []string{"-n", "3", "--timeout", "60s",
		"--env", envArgs + "=--epochs 100000 --rows-per-rank 512 --batch-size 32 --no-progress --json " + args,
		"--env", "DDSTORE_TELEMETRY_DIR=" + j.dir}
	for _, e := range env {
		a = append(a, "--env", e)
	}
	j.cmd = exec.Command(ddrun, append(a, "--", os.Args[0])...)
	j.cmd.Stderr = &j.out
	j.cmd.WaitDelay = 10 * time.Second // a rank left holding stderr cannot keep Wait (and stop) waiting
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { j.cmd.Wait(); close(j.done) }()
	t.Cleanup(j.stop)
	return j
}

func (j *pjob) stop() {
	select {
	case <-j.done:
		return
	default:
	}
	j.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-j.done:
	case <-time.After(15 * time.Second):
		j.cmd.Process.Kill()
		<-j.done
	}
}

// exited reports whether ddrun has exited (its ProcessState then set).
func (j *pjob) exited() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// probe runs ddtop --once --json over a window.
func (j *pjob) probe(window time.Duration) *ddtopReport {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, j.ddtop, "--dir", j.dir, "--once", "--json", "--window", window.String()).Output()
	if err != nil {
		j.t.Fatalf("ddtop: %v\njob output:\n%s", err, j.out.String())
	}
	var r ddtopReport
	if err := json.Unmarshal(out, &r); err != nil {
		j.t.Fatalf("ddtop JSON: %v\n%s", err, out)
	}
	return &r
}

// reading waits until every rank of the pjob has made read calls and
// returns when that was seen.
func (j *pjob) reading() time.Time {
	j.t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		if j.exited() {
			j.t.Fatalf("pjob ended early (%v):\n%s", j.cmd.ProcessState, j.out.String())
		}
		r := j.probe(0)
		n := 0
		for _, rk := range r.Ranks {
			if rk.Calls > 0 {
				n++
			}
		}
		if n == 3 {
			return time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	j.t.Fatalf("the ranks never all read:\n%s", j.out.String())
	return time.Time{}
}

func TestPathologies(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	ddtop, ddrun := tools(t)
	cases := []struct {
		name, args string
		env        []string
		rule       string
		rank       int // -1: any
	}{
		{"shared reader under several workers", "--workers 4 --prefetch 4 --thread-readers=false --node-mode fabric", nil, "lock_wait", -1},
		{"per-sample reads", "--workers 2 --prefetch 4 --batch-get=false --node-mode auto", nil, "unbatched", -1},
		{"a slowed rank", "--workers 2 --prefetch 4 --node-mode fabric --throttle-rank 1 --throttle-duty 0.8 --throttle-period 100ms", nil, "straggler", 1},
		{"registration churn", "--workers 2 --prefetch 4 --node-mode fabric --register-dst --fast-collate=false", []string{"DDSTORE_READ_MODE=rma"}, "mr_churn", -1},
		{"prefetch 0 with slow reads", "--workers 0 --node-mode fabric", nil, "loader_wait", -1},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			j := startPJob(t, ddtop, ddrun, tc.args, tc.env...)
			start := j.reading()
			var last *ddtopReport
			for probe := 1; probe <= detectWindows && time.Since(start) < detectHang; probe++ {
				last = j.probe(time.Second)
				for _, f := range last.Findings {
					if f.Rule == tc.rule && (tc.rank < 0 || f.Rank == tc.rank) {
						if f.Evidence == "" || f.Fix == "" {
							t.Fatalf("finding without evidence or fix: %+v", f)
						}
						t.Logf("%s: named by probe %d, after %v: %s rank %d %s: %s → %s", tc.name, probe, time.Since(start).Round(10*time.Millisecond),
							f.Rule, f.Rank, f.Var, f.Evidence, f.Fix)
						return
					}
				}
			}
			t.Fatalf("%s (%s): ddtop did not name %s in %d windows of 1 s (%v); last findings: %s", tc.name, tc.args, tc.rule, detectWindows, time.Since(start).Round(10*time.Millisecond), last.rules())
		})
	}
	t.Run("healthy", func(t *testing.T) {
		j := startPJob(t, ddtop, ddrun, "--workers 2 --prefetch 4 --thread-readers=true --batch-get=true --fast-collate=true --node-mode auto")
		j.reading()
		for range 2 {
			if r := j.probe(time.Second); len(r.Findings) != 0 {
				t.Fatalf("healthy run: findings %s", r.rules())
			}
		}
	})
}
