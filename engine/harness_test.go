package engine

// Multi-rank test harness: the test binary re-executes itself as N ranks
// (TestMain runs the scenario named by DDSTORE_TEST_WORKER instead of the
// tests). Ranks meet through the bootstrap's TCP rendezvous on 127.0.0.1
// at a random port (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, torchrun
// style), or through mpiexec's PMI.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	launcher "github.com/ddstore/ddstore/cmd/ddrun/launch"
	"github.com/ddstore/ddstore/internal/testkit"
)

const workerEnv = "DDSTORE_TEST_WORKER"

// scenarios are the rank programs, by name.
var scenarios = map[string]func(w *worker) error{}

func TestMain(m *testing.M) {
	if name := os.Getenv(workerEnv); name != "" {
		os.Exit(runWorker(name))
	}
	if spec := os.Getenv(gstrangerEnv); spec != "" {
		os.Exit(gatherStrangerMain(spec))
	}
	code := m.Run()
	removeStandins()
	os.Exit(code)
}

// worker is one rank's view of its scenario parameters.
type worker struct {
	rank, world int
	mode        string // local | tcp | shm
	params      map[string]string
}

func (w *worker) param(k, def string) string {
	if v, ok := w.params[k]; ok {
		return v
	}
	return def
}

func (w *worker) intParam(k string, def int) int {
	v, err := strconv.Atoi(w.param(k, strconv.Itoa(def)))
	if err != nil {
		return def
	}
	return v
}

func (w *worker) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rank %d: %s\n", w.rank, fmt.Sprintf(format, args...))
}

func runWorker(name string) int {
	f := scenarios[name]
	w := &worker{params: map[string]string{}}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "DDT_") {
			k, v, _ := strings.Cut(kv, "=")
			w.params[strings.TrimPrefix(k, "DDT_")] = v
		}
	}
	w.mode = w.param("MODE", "local")
	w.rank = -1
	if f == nil {
		fmt.Fprintf(os.Stderr, "unknown scenario %q\n", name)
		return 2
	}
	if err := f(w); err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: FAIL: %v\n", w.rank, err)
		return 1
	}
	return 0
}

// storeOptions are the Options of a rank in the given mode.
func storeOptions(mode string, params map[string]string) Options {
	o := DefaultOptions()
	o.Timeout = 30 * time.Second
	o.Bootstrap.Timeout = 30 * time.Second
	o.Fabric.Timeout = 10 * time.Second * testkit.RaceScale
	switch mode {
	case "tcp", "tcp-rma", "tcp-gather":
		// tcp: the default read mode (auto: gather on tcp); tcp-rma and
		// tcp-gather force one-sided reads or gathering.
		o.NodeMode = NodeModeFabric
		o.Fabric.Provider = "tcp;ofi_rxm"
		o.Fabric.Domain = "lo"
		if m, ok := strings.CutPrefix(mode, "tcp-"); ok {
			o.ReadMode = m
		}
	case "shm":
		o.NodeMode = NodeModeFabric
		o.Fabric.Provider = "shm"
	}
	if d := params["TELDIR"]; d != "" {
		o.TelemetryDir = d
	}
	if params["INSECURE"] == "1" { // as DDSTORE_INSECURE=1: no secret
		o.Bootstrap.Insecure = true
	}
	if v := params["FAILOVER"]; v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			o.FailoverAfter = d
		}
	}
	if v := params["FTIMEOUT"]; v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			o.Fabric.Timeout = d * testkit.RaceScale
		}
	}
	if v := params["TIMEOUT"]; v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			o.Timeout = d
			o.Bootstrap.Timeout = d
		}
	}
	if v := params["LIVENESS"]; v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			o.Liveness = d
		}
	}
	if v := params["RING_DEAD"]; v != "" { // the agents' ring: a silent node is dead after this
		if d, err := time.ParseDuration(v); err == nil {
			o.CtrlDeadAfter = d
		}
	}
	if v := params["PROGRESS"]; v != "" {
		o.Fabric.Progress = v
	}
	if params["REGDST"] == "1" {
		// as FI_MR_LOCAL providers (verbs, some cxi) require
		o.Fabric.RegisterDst = true
	}
	if params["TELEMETRY"] == "0" {
		o.DisableTelemetry = true
	}
	o.GPU = gpuOptionsFrom(params)
	if v := params["WIDTH"]; v != "" {
		o.Width, _ = strconv.Atoi(v)
	}
	return o
}

// open opens the rank's store from the launcher environment.
func (w *worker) open() (*Store, error) {
	s, err := Open(storeOptions(w.mode, w.params))
	if err != nil {
		return nil, err
	}
	w.rank, w.world = s.Rank(), s.World()
	return s, nil
}

// openWith opens the rank's store and adds each spec with this rank's rows
// of its pattern; on an error the store is closed.
func (w *worker) openWith(specs ...varSpec) (*Store, error) {
	s, err := w.open()
	if err != nil {
		return nil, err
	}
	for _, spec := range specs {
		if err := addPattern(s, spec); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// rankResult is one rank's exit and output.
type rankResult struct {
	rank   int
	err    error // exit error (nil: exit 0)
	output string
}

func freePort(t testing.TB) int {
	p, err := launcher.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testJob is a fresh job id; shard files are named after it.
func testJob(tag string) string {
	return fmt.Sprintf("t%s-%d-%d", tag, os.Getpid(), rand.Int63()%1_000_000)
}

// hangGuardScale stretches the scenarios' hang guards: each scenario's
// deadline is about 5-10× what it takes on an idle machine, and 2 busy
// loops plus the other test packages on 2 cores stretch a run about 3×.
const hangGuardScale = 3

// spawnRanks starts n ranks of scenario and waits (deadline timeout) for
// all of them; it fails the test when one does not exit 0, unless allow
// accepts its result. It checks that no shard file of the job is left.
// The deadline is a hang guard, not a measurement: it is stretched by
// hangGuardScale so that it holds on a loaded 2-core machine.
func spawnRanks(t testing.TB, n int, scenario string, params map[string]string, timeout time.Duration,
	allow func(r rankResult) bool) []rankResult {
	t.Helper()
	port := freePort(t)
	job := testJob(scenario)
	teldir := t.TempDir()
	timeout *= hangGuardScale * testkit.RaceScale
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	for r := 0; r < n; r++ {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(cleanEnv(),
			workerEnv+"="+scenario,
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"DDSTORE_JOB="+job, "DDT_TELDIR="+teldir)
		for k, v := range params {
			cmd.Env = append(cmd.Env, "DDT_"+k+"="+v)
		}
		outs[r] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		// On timeout: SIGQUIT first, so the rank's goroutine stacks are in
		// its output, then SIGKILL after WaitDelay.
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
		cmd.WaitDelay = 3 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatalf("start rank %d: %v", r, err)
		}
		cmds[r] = cmd
	}
	res := make([]rankResult, n)
	for r, cmd := range cmds {
		err := cmd.Wait()
		res[r] = rankResult{rank: r, err: err, output: outs[r].String()}
	}
	if ctx.Err() != nil {
		t.Errorf("%s: ranks did not finish within %v", scenario, timeout)
	}
	for _, r := range res {
		if r.err != nil && (allow == nil || !allow(r)) {
			t.Errorf("%s rank %d: %v\n%s", scenario, r.rank, r.err, r.output)
		} else if testing.Verbose() && r.output != "" {
			t.Logf("%s rank %d output:\n%s", scenario, r.rank, r.output)
		}
	}
	// libfabric's shm provider names its regions /dev/shm/<pid>:<n>:<m>; a
	// rank killed by a signal cannot remove them.
	for _, cmd := range cmds {
		if cmd.ProcessState != nil && !cmd.ProcessState.Exited() {
			left, _ := filepath.Glob(fmt.Sprintf("/dev/shm/%d:*", cmd.Process.Pid))
			for _, f := range left {
				os.Remove(f)
			}
		}
	}
	checkNoShardFiles(t, job)
	return res
}

// cleanEnv is the environment without launcher variables of an outer job.
// skipOrRequire skips the test, or fails it when the environment variable
// env is 1: make test sets DDSTORE_REQUIRE_FABRIC (libfabric),
// DDSTORE_REQUIRE_MPI (mpiexec.mpich, mpirun.openmpi) and
// DDSTORE_REQUIRE_ROOT (mounts and namespaces), so a part missing in CI
// fails the tests that need it instead of skipping them.
func skipOrRequire(tb testing.TB, env, format string, args ...any) {
	tb.Helper()
	if os.Getenv(env) == "1" {
		tb.Fatalf(env+"=1: "+format, args...)
	}
	tb.Skipf(format, args...)
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "RANK", k == "WORLD_SIZE", k == "LOCAL_RANK", k == "LOCAL_WORLD_SIZE",
			k == "MASTER_ADDR", k == "MASTER_PORT", k == "DDSTORE_JOB", k == "DDSTORE_JOB_TOKEN",
			strings.HasPrefix(k, "PMI_"), strings.HasPrefix(k, "OMPI_"), strings.HasPrefix(k, "SLURM_"),
			strings.HasPrefix(k, "DDT_"), k == workerEnv:
			continue
		}
		env = append(env, kv)
	}
	return env
}

// checkNoShardFiles fails when a shard file of job is left in /dev/shm
// (it removes them so that one failure does not leak memory).
func checkNoShardFiles(t testing.TB, job string) {
	t.Helper()
	left, _ := filepath.Glob(filepath.Join("/dev/shm", "ddstore-"+sanitizeName(job)+"-*"))
	sort.Strings(left)
	var kept []string
	for _, f := range left {
		os.Remove(f)
		kept = append(kept, filepath.Base(f))
	}
	if len(kept) > 0 && !t.Failed() {
		t.Errorf("shard files left behind: %v", kept)
	}
}

// killedBySignal reports whether a rank's exit was the given signal.
func killedBySignal(err error, sig syscall.Signal) bool {
	ee, ok := err.(*exec.ExitError)
	if !ok {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// killedVictim is spawnRanks' allow for a scenario whose rank victim is
// killed by SIGKILL: that rank, ended by that signal, and nothing else.
func killedVictim(victim int) func(r rankResult) bool {
	return func(r rankResult) bool { return r.rank == victim && killedBySignal(r.err, syscall.SIGKILL) }
}

// exitedVictim is spawnRanks' allow for a scenario whose rank victim
// exits with status code: that rank, exited with that status, and
// nothing else (a rank that fails its checks exits 1).
func exitedVictim(victim, code int) func(r rankResult) bool {
	return func(r rankResult) bool {
		ee, ok := r.err.(*exec.ExitError)
		return r.rank == victim && ok && ee.Exited() && ee.ExitCode() == code
	}
}

// ---- row patterns ----

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// fillRow writes the pattern of global row g of the variable salted salt.
func fillRow(dst []byte, salt uint64, g int64) {
	x := splitmix64(salt ^ uint64(g)*0x100000001b3)
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		x = splitmix64(x)
		putU64(dst[i:], x)
	}
	x = splitmix64(x)
	for ; i < len(dst); i++ {
		dst[i] = byte(x)
		x >>= 8
	}
}

func putU64(b []byte, v uint64) {
	_ = b[7]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	b[4], b[5], b[6], b[7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
}

// checkRows verifies that got holds rows idx[i] of the pattern.
func checkRows(got []byte, rowBytes int64, salt uint64, idx []int64) error {
	want := make([]byte, rowBytes)
	for i, g := range idx {
		fillRow(want, salt, g)
		row := got[int64(i)*rowBytes : int64(i+1)*rowBytes]
		if !bytes.Equal(row, want) {
			j := 0
			for row[j] == want[j] {
				j++
			}
			return fmt.Errorf("row %d (global %d) differs from its pattern at byte %d: got %#x want %#x",
				i, g, j, row[j], want[j])
		}
	}
	return nil
}

// seqIdx is [start, start+n).
func seqIdx(start, n int64) []int64 {
	idx := make([]int64, n)
	for i := range idx {
		idx[i] = start + int64(i)
	}
	return idx
}

// readerAndInfo opens a Reader on s and queries variable name; the caller
// closes the Reader.
func readerAndInfo(s *Store, name string) (*Reader, VarInfo, error) {
	r, err := s.NewReader()
	if err != nil {
		return nil, VarInfo{}, err
	}
	info, err := s.Query(name)
	if err != nil {
		r.Close()
		return nil, VarInfo{}, err
	}
	return r, info, nil
}
