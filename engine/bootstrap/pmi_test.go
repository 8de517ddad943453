package bootstrap

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// requireMPIEnv set to 1 (make test sets it) turns the skip for a missing
// MPI launcher into a failure.
const requireMPIEnv = "DDSTORE_REQUIRE_MPI"

// lookLauncher finds an MPI launcher by its full name (with MPICH and Open
// MPI both installed, a bare mpiexec is whichever the alternatives chose),
// or skips naming the package, or fails under DDSTORE_REQUIRE_MPI=1.
func lookLauncher(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(requireMPIEnv) == "1" {
			t.Fatalf("%s not found (%s=1): install %s", name, requireMPIEnv, pkg)
		}
		t.Skipf("%s not found: install %s", name, pkg)
	}
	return p
}

// runMPIExec runs n ranks of a scenario under MPICH's real Hydra mpiexec.
func runMPIExec(t *testing.T, n int, role string, timeout time.Duration, need int, env ...string) map[int]rankResult {
	t.Helper()
	mpiexec := lookLauncher(t, "mpiexec.mpich", "MPICH (Debian package mpich) to test the PMI method")
	return runLauncher(t, []string{mpiexec, "-n", strconv.Itoa(n)}, role, timeout, need, env...)
}

// runOpenMPI runs n ranks of a scenario under Open MPI's real mpirun.
func runOpenMPI(t *testing.T, n int, role string, timeout time.Duration, need int, env ...string) map[int]rankResult {
	t.Helper()
	mpirun := lookLauncher(t, "mpirun.openmpi", "Open MPI (Debian package openmpi-bin)")
	args := []string{mpirun, "-n", strconv.Itoa(n), "--oversubscribe"}
	if os.Geteuid() == 0 {
		args = append(args, "--allow-run-as-root")
	}
	// -x: mpirun passes only these of our variables to the ranks.
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		args = append(args, "-x", k)
	}
	return runLauncher(t, args, role, timeout, need, env...)
}

// runLauncher runs a scenario under the launcher command line launch.
func runLauncher(t *testing.T, launch []string, role string, timeout time.Duration, need int, env ...string) map[int]rankResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, launch[0], append(launch[1:], os.Args[0], "-test.run=^$")...)
	// Ranks also write their results to files: Hydra can die of its own
	// assertion (control_cb: assert (!closed)) when a rank leaves without
	// PMI finalize under load, before it relays the ranks' stdout.
	dir := t.TempDir()
	env = append([]string{"BSTEST_ROLE=" + role, "BSTEST_METHOD=auto", "BSTEST_TIMEOUT=" + timeout.String(),
		"BSTEST_RESULT_DIR=" + dir}, env...)
	cmd.Env = append(cleanEnv(), env...)
	out, err := cmd.CombinedOutput()
	res := map[int]rankResult{}
	found := strings.Split(string(out), "\n")
	files, _ := filepath.Glob(filepath.Join(dir, "rank-*.json"))
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			found = append(found, "RESULT "+string(b))
		}
	}
	for _, line := range found {
		if j, ok := strings.CutPrefix(line, "RESULT "); ok {
			var rr rankResult
			if json.Unmarshal([]byte(j), &rr) == nil {
				if _, seen := res[rr.Rank]; !seen {
					t.Logf("rank %d: ok=%v job=%s %s", rr.Rank, rr.OK, rr.Job, rr.Err)
				}
				res[rr.Rank] = rr
			}
		}
	}
	if len(res) < need {
		t.Fatalf("%s: %v; %d of %d results; output:\n%s", launch[0], err, len(res), need, out)
	}
	return res
}

func TestPMIAllGather(t *testing.T) {
	wantJobNamed(t, runMPIExec(t, 4, "gather", 10*time.Second, 4), "mpiexec-", "mpiexec's pid in the PMI kvsname")
}

// wantJobNamed checks that every rank succeeded and named the same job,
// one that starts with prefix (named after what).
func wantJobNamed(t *testing.T, res map[int]rankResult, prefix, what string) {
	t.Helper()
	wantAllOK(t, res)
	job := res[0].Job
	if !strings.HasPrefix(job, prefix) {
		t.Errorf("job %q is not named after %s", job, what)
	}
	for r, rr := range res {
		if rr.Job != job {
			t.Errorf("rank %d job %q, rank 0 %q", r, rr.Job, job)
		}
	}
}

func TestPMIMismatch(t *testing.T) {
	res := runMPIExec(t, 3, "mismatch", 5*time.Second, 3)
	wantKind(t, res, 0, "collective mismatch", []int{1}, `rank 1 called "shard-sizes" (#1), rank 0 called "fabric-addr" (#1)`)
	wantKind(t, res, 1, "collective mismatch", []int{0}, `rank 0 called "fabric-addr" (#1), rank 1 called "shard-sizes" (#1)`)
}

// PMI-1 cannot say who is missing from a barrier: the timeout names no
// ranks but must still come, on time, as fault.ErrTimeout. The first rank that
// drops its PMI socket without finalize makes Hydra kill all the others, so
// only one report is certain.
func TestPMITimeout(t *testing.T) {
	start := time.Now()
	res := runMPIExec(t, 3, "late", time.Second, 1)
	for r := range res {
		if r == 2 {
			t.Errorf("late rank 2 reported %+v", res[r])
			continue
		}
		wantKind(t, res, r, "timeout", nil, "PMI server did not answer in time")
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v", d)
	}
}

// Above pmiDirectMax ranks the gather goes through rank 0 (forced here).
func TestPMIAllGatherViaRoot(t *testing.T) {
	wantAllOK(t, runMPIExec(t, 4, "gather", 10*time.Second, 4, "BSTEST_PMI_DIRECT=1"))
}

func TestPMIMismatchViaRoot(t *testing.T) {
	res := runMPIExec(t, 3, "mismatch", 5*time.Second, 3, "BSTEST_PMI_DIRECT=1")
	msg := `collective mismatch: rank 1 called "shard-sizes" (#1), rank 0 called "fabric-addr" (#1)`
	wantKind(t, res, 0, "collective mismatch", []int{1}, msg)
	wantKind(t, res, 1, "collective mismatch", []int{1}, "rank 0 reports: "+msg)
	wantKind(t, res, 2, "collective mismatch", []int{1}, "rank 0 reports: "+msg)
}

// Open MPI's mpirun on one node, with no address or directory given: auto
// picks the dir method in the node's PMIx session directory, and the job
// is named after the PMIx namespace on every rank.
func TestOpenMPIAllGather(t *testing.T) {
	wantJobNamed(t, runOpenMPI(t, 4, "gather", 10*time.Second, 4), "ompi-", "Open MPI's PMIx namespace")
}

func TestOpenMPIMismatch(t *testing.T) {
	res := runOpenMPI(t, 3, "mismatch", 5*time.Second, 3)
	wantKind(t, res, 0, "collective mismatch", []int{1}, `rank 1 called "shard-sizes" (#1), rank 0 called "fabric-addr" (#1)`)
}
