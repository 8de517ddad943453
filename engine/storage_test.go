package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ddstore/ddstore/internal/testkit"
)

func init() {
	scenarios["storage-train"] = scenarioStorageTrain
	scenarios["storage-serve"] = scenarioStorageServe
}

// Storage test data: "img" float32 rows of 24 elements as .npy, "lab"
// int64 rows of 2 elements as raw .bin with meta.json; shard o holds
// storageRows(o) rows of the pattern (salted by the name) from its global
// start.
var storageSpecs = []varSpec{
	{name: "img", dt: Float32, rowBytes: 96, base: 50, emptyMember: -1},
	{name: "lab", dt: Int64, rowBytes: 16, base: 50, emptyMember: -1},
}

// writeStorageData writes the shard files of width shards under dir.
func writeStorageData(t *testing.T, dir string, width int) {
	t.Helper()
	for _, spec := range storageSpecs {
		vd := filepath.Join(dir, spec.name)
		if err := os.MkdirAll(vd, 0o755); err != nil {
			t.Fatal(err)
		}
		var start int64
		for o := 0; o < width; o++ {
			n := spec.nLocal(o)
			rows := make([]byte, n*spec.rowBytes)
			for i := int64(0); i < n; i++ {
				fillRow(rows[i*spec.rowBytes:(i+1)*spec.rowBytes], spec.salt(0), start+i)
			}
			start += n
			var b []byte
			var name string
			if spec.dt == Float32 {
				hdr := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", n, spec.rowElems())
				hdr += strings.Repeat(" ", 63-(10+len(hdr))%64) + "\n"
				b = append([]byte("\x93NUMPY\x01\x00"), 0, 0)
				binary.LittleEndian.PutUint16(b[8:], uint16(len(hdr)))
				b = append(append(b, hdr...), rows...)
				name = fmt.Sprintf("shard-%d.npy", o)
			} else {
				b, name = rows, fmt.Sprintf("shard-%d.bin", o)
				meta := fmt.Sprintf(`{"dtype": %q, "row_elems": %d}`, spec.dt, spec.rowElems())
				if err := os.WriteFile(filepath.Join(vd, "meta.json"), []byte(meta), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(vd, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// scenarioStorageServe is a storage-only rank: Open, Serve until the job
// closes.
func scenarioStorageServe(w *worker) error {
	o := storeOptions(w.mode, w.params)
	o.Role = RoleStorage
	s, err := Open(o)
	if err != nil {
		return err
	}
	w.rank = s.Rank()
	if s.Role() != RoleStorage {
		return fmt.Errorf("Role() = %q", s.Role())
	}
	if err := s.Barrier(); !errors.Is(err, ErrInvalid) {
		return fmt.Errorf("Barrier on a storage rank: %v, want ErrInvalid", err)
	}
	return s.Serve()
}

// scenarioStorageTrain is a trainer reading the storage ranks' variables:
// every row (Get ranges, GetBatch of random rows, through the store and a
// Reader) checked against its pattern; the owner map names storage ranks;
// Update is refused. With KILL=<storage rank>, the test kills that storage
// rank while the trainers read (rank 0 signals through a file), and the
// reads must all succeed from the other group.
func scenarioStorageTrain(w *worker) error {
	s, err := w.open()
	if err != nil {
		return err
	}
	T := s.World()
	width := w.intParam("SWIDTH", 0)
	S := w.intParam("SRANKS", 0)
	if width == 0 {
		width = S
	}
	r, err := s.NewReader()
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewSource(int64(s.Rank())))
	kill := w.intParam("KILL", -1)
	dir := w.param("TELDIR", os.TempDir())
	for round := 0; round < w.intParam("ROUNDS", 1); round++ {
		if kill >= 0 && round == 1 && s.Rank() == 0 {
			// Ask the test to kill a storage rank, then read on.
			os.WriteFile(filepath.Join(dir, "kill-now"), nil, 0o600)
			for t0 := time.Now(); !s.PeerDead(T + kill); time.Sleep(2 * time.Millisecond) {
				if time.Since(t0) > 20*time.Second*hangGuardScale*testkit.RaceScale {
					return fmt.Errorf("storage rank %d's death not seen", kill)
				}
			}
		}
		for _, spec := range storageSpecs {
			info, err := s.Query(spec.name)
			if err != nil {
				return err
			}
			if len(info.GroupRanks) != width || info.GroupRanks[0] < T || info.LocalRows != 0 {
				return fmt.Errorf("%s: owner map %+v: want %d storage ranks (ids ≥ %d)", spec.name, info, width, T)
			}
			for _, g := range []getter{s, r} {
				if _, err := checkVarSalted(s, g, spec, rng, spec.salt(0), width); err != nil {
					return fmt.Errorf("round %d: %w", round, err)
				}
			}
		}
	}
	if err := s.Update("img", make([]byte, 96), 0); !errors.Is(err, ErrInvalid) {
		return fmt.Errorf("Update of a storage variable: %v", err)
	}
	if kill >= 0 && s.Rank() == 0 {
		f := s.Failovers()
		if f.From[T+kill] == 0 {
			return fmt.Errorf("no read moved from dead storage rank %d: %+v", kill, f)
		}
		// Its replica is the same position in the next group: every read
		// moved away from it must have been served there.
		if mirror := T + (kill+width)%S; f.To[mirror] < f.From[T+kill] {
			return fmt.Errorf("%d reads moved from dead storage rank %d but only %d served by its replica %d: %+v",
				f.From[T+kill], kill, f.To[mirror], mirror-T, f)
		}
		if !slices.Contains(f.Dead, T+kill) {
			return fmt.Errorf("storage rank %d not reported dead: %+v", kill, f)
		}
		if d, err := time.ParseDuration(w.params["FAILOVER"]); err != nil || s.repl.after != d {
			return fmt.Errorf("failover deadline %v, want DDT_FAILOVER=%q", s.repl.after, w.params["FAILOVER"])
		}
		w.logf("storage rank %d dead: %d row reads failed over (%v)", kill, f.From[T+kill], f.To)
	}
	r.Close()
	return s.Close()
}

// checkVarSalted reads every row of spec (one Get of all rows, GetBatch of
// 200 random rows) and checks each against the pattern salted salt.
func checkVarSalted(s *Store, g getter, spec varSpec, rng *rand.Rand, salt uint64, width int) (int64, error) {
	var global int64
	for o := 0; o < width; o++ {
		global += spec.nLocal(o)
	}
	info, _ := s.Query(spec.name)
	if info.GlobalRows != global {
		return 0, fmt.Errorf("%s: %d global rows, want %d", spec.name, info.GlobalRows, global)
	}
	dst := make([]byte, max(global, 200)*spec.rowBytes)
	poison(dst)
	if err := g.Get(spec.name, 0, global, dst); err != nil {
		return 0, err
	}
	if err := checkRows(dst, spec.rowBytes, salt, seqIdx(0, global)); err != nil {
		return 0, fmt.Errorf("%s Get: %w", spec.name, err)
	}
	idx := make([]int64, 200)
	for i := range idx {
		idx[i] = rng.Int63n(global)
	}
	poison(dst)
	if err := g.GetBatch(spec.name, idx, dst); err != nil {
		return 0, err
	}
	if err := checkRows(dst, spec.rowBytes, salt, idx); err != nil {
		return 0, fmt.Errorf("%s GetBatch: %w", spec.name, err)
	}
	return global + 200, nil
}

// launch is one set of ranks started like a launcher would (its own
// RANK/WORLD_SIZE and rendezvous port).
type launch struct {
	cmds []*exec.Cmd
	outs []*bytes.Buffer
}

func startLaunch(t *testing.T, ctx context.Context, n int, scenario string, env []string) *launch {
	t.Helper()
	port := freePort(t)
	job := testJob(scenario)
	l := &launch{}
	for r := 0; r < n; r++ {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(cleanEnv(), workerEnv+"="+scenario,
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port), "DDSTORE_JOB="+job)
		cmd.Env = append(cmd.Env, env...)
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
		cmd.WaitDelay = 3 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		l.cmds, l.outs = append(l.cmds, cmd), append(l.outs, out)
	}
	return l
}

// storageJob runs T trainers and S storage ranks (width SWIDTH) as two
// launches meeting at a join rendezvous; killStorage ≥ 0 kills that
// storage rank when trainer 0 asks. It returns the launches after both
// ended.
func storageJob(t *testing.T, mode string, T, S, width, killStorage int, extra ...string) (*launch, *launch) {
	t.Helper()
	dir, teldir := t.TempDir(), t.TempDir()
	writeStorageData(t, dir, max(width, 1))
	if width == 0 {
		writeStorageData(t, dir, S)
	}
	name := testJob("storage")
	env := []string{"DDSTORE_STORAGE_RANKS=" + strconv.Itoa(S), "DDSTORE_STORAGE_TRAINERS=" + strconv.Itoa(T),
		"DDSTORE_STORAGE_WIDTH=" + strconv.Itoa(width), "DDSTORE_STORAGE_JOB=" + name,
		"DDSTORE_STORAGE_ADDR=127.0.0.1:" + strconv.Itoa(freePort(t)), "DDSTORE_STORAGE_DATA=" + dir,
		"DDT_MODE=" + mode, "DDT_TELDIR=" + teldir, "DDT_SRANKS=" + strconv.Itoa(S), "DDT_SWIDTH=" + strconv.Itoa(width),
		"DDT_KILL=" + strconv.Itoa(killStorage), "DDT_FTIMEOUT=5s", "DDT_TIMEOUT=20s"}
	env = append(env, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second*hangGuardScale*testkit.RaceScale)
	defer cancel()
	tr := startLaunch(t, ctx, T, "storage-train", env)
	sr := startLaunch(t, ctx, S, "storage-serve", env)
	if killStorage >= 0 {
		for t0 := time.Now(); ; time.Sleep(2 * time.Millisecond) {
			if fileExists(filepath.Join(teldir, "kill-now")) {
				break
			}
			if time.Since(t0) > 60*time.Second*hangGuardScale*testkit.RaceScale {
				t.Fatal("trainer 0 never asked for the kill")
			}
			if exited(tr.cmds[0]) && !fileExists(filepath.Join(teldir, "kill-now")) { // asked, then exited: not this
				tr.cmds[0].Wait() // its output, all of it
				t.Fatalf("trainer 0 exited before it asked for the kill:\n%s", tr.outs[0])
			}
		}
		sr.cmds[killStorage].Process.Kill()
	}
	for i, l := range []*launch{tr, sr} {
		for r, cmd := range l.cmds {
			err := cmd.Wait()
			killed := i == 1 && r == killStorage
			if killed != (err != nil) {
				t.Errorf("%s %d: exit %v\n%s", []string{"trainer", "storage rank"}[i], r, err, l.outs[r])
			} else if testing.Verbose() {
				t.Logf("%s %d: %s", []string{"trainer", "storage rank"}[i], r, l.outs[r])
			}
		}
	}
	if ctx.Err() != nil {
		t.Errorf("the job did not finish in time")
	}
	left, _ := filepath.Glob(filepath.Join("/dev/shm", "ddstore-"+sanitizeName(name)+"-storage-*"))
	for _, f := range left {
		os.Remove(f)
	}
	return tr, sr
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// exited reports whether cmd's process has ended, without reaping it
// (cmd.Wait still collects its status).
func exited(cmd *exec.Cmd) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == nil && info.Signo == int32(unix.SIGCHLD)
}

// Storage-only ranks from a separate launch: 2 trainers read every row of
// two variables that 2 storage ranks loaded from .npy and raw files, on the
// same-node (mapped) and fabric paths.
func TestStorageRanks(t *testing.T) {
	for _, mode := range []string{"local", "tcp"} {
		t.Run("path="+mode, func(t *testing.T) { storageJob(t, mode, 2, 2, 0, -1) })
	}
}

// 2 trainers + 4 storage ranks in 2 replica groups: storage rank 1 is
// SIGKILLed while the trainers read; every later read of its shard comes
// from storage rank 3, every row checked.
func TestStorageRankKilled(t *testing.T) {
	storageJob(t, "tcp", 2, 4, 2, 1, "DDT_ROUNDS=3", "DDT_FAILOVER=500ms")
}

// A storage rank that never comes: the trainers' Open fails after the
// bootstrap deadline naming it.
func TestStorageRankMissing(t *testing.T) {
	dir := t.TempDir()
	env := []string{"DDSTORE_STORAGE_RANKS=2", "DDSTORE_STORAGE_JOB=" + testJob("missing"),
		"DDSTORE_STORAGE_ADDR=127.0.0.1:" + strconv.Itoa(freePort(t)), "DDT_TIMEOUT=3s", "DDT_TELDIR=" + dir}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second*hangGuardScale*testkit.RaceScale)
	defer cancel()
	tr := startLaunch(t, ctx, 2, "storage-train", env)
	for r, cmd := range tr.cmds {
		err := cmd.Wait()
		out := tr.outs[r].String()
		if err == nil || !strings.Contains(out, "storage ranks 0, 1") {
			t.Errorf("trainer %d: want an Open error naming storage ranks 0, 1; exit %v\n%s", r, err, out)
		}
	}
}
