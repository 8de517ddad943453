package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	randv2 "math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ddstore/ddstore/engine/bootstrap"
	"github.com/ddstore/ddstore/telemetry"
)

func TestSamplerDisjointEqualCounts(t *testing.T) {
	for _, n := range []int64{1, 7, 64, 100, 103} {
		for _, replicas := range []int{1, 3, 4} {
			for _, shuffle := range []bool{false, true} {
				for _, dropLast := range []bool{false, true} {
					name := fmt.Sprintf("n%d/r%d/shuffle=%v/drop=%v", n, replicas, shuffle, dropLast)
					per := make([][]int64, replicas)
					for r := range replicas {
						per[r] = mustSampler(t, n, replicas, r, 11, 2, shuffle, dropLast)
						if want := wantSampler(n, replicas, r, 11, 2, shuffle, dropLast); !slices.Equal(per[r], want) {
							t.Fatalf("%s: rank %d got %v, want %v", name, r, per[r], want)
						}
					}
					want := (n + int64(replicas) - 1) / int64(replicas)
					if dropLast {
						want = n / int64(replicas)
					}
					count := map[int64]int{}
					for r, idx := range per {
						if int64(len(idx)) != want {
							t.Fatalf("%s: rank %d got %d rows, want %d", name, r, len(idx), want)
						}
						for _, g := range idx {
							if g < 0 || g >= n {
								t.Fatalf("%s: index %d outside [0,%d)", name, g, n)
							}
							count[g]++
						}
					}
					total := want * int64(replicas)
					switch {
					case dropLast || total == n: // a partition: each row at most once
						for g, c := range count {
							if c != 1 {
								t.Fatalf("%s: row %d served %d times", name, g, c)
							}
						}
						if !dropLast && int64(len(count)) != n {
							t.Fatalf("%s: %d distinct rows, want all %d", name, len(count), n)
						}
					default: // padded by wrapping: every row once, total-n rows twice
						if int64(len(count)) != n {
							t.Fatalf("%s: %d distinct rows, want all %d", name, len(count), n)
						}
						dup := 0
						for _, c := range count {
							dup += c - 1
						}
						if int64(dup) != total-n {
							t.Fatalf("%s: %d padded rows, want %d", name, dup, total-n)
						}
					}
					if !shuffle && !slices.IsSorted(per[0]) && total == n {
						t.Fatalf("%s: unshuffled rank 0 not in order: %v", name, per[0])
					}
				}
			}
		}
	}
	a := mustSampler(t, 1000, 4, 1, 5, 0, true, false)
	if !slices.Equal(a, mustSampler(t, 1000, 4, 1, 5, 0, true, false)) {
		t.Fatal("same seed and epoch must give the same order")
	}
	if slices.Equal(a, mustSampler(t, 1000, 4, 1, 5, 1, true, false)) {
		t.Fatal("epochs 0 and 1 gave the same order")
	}
	if slices.Equal(a, mustSampler(t, 1000, 4, 1, 6, 0, true, false)) {
		t.Fatal("seeds 5 and 6 gave the same order")
	}
}

func mustSampler(t *testing.T, n int64, replicas, rank int, seed int64, epoch int, shuffle, dropLast bool) []int64 {
	t.Helper()
	idx, err := SamplerIndices(n, replicas, rank, seed, epoch, shuffle, dropLast)
	if err != nil {
		t.Fatalf("SamplerIndices(%d, %d, %d): %v", n, replicas, rank, err)
	}
	return idx
}

// Invalid sampler arguments are errors naming the argument, never a panic.
func TestSamplerIndicesInvalid(t *testing.T) {
	for _, tc := range []struct {
		n              int64
		replicas, rank int
		dropLast       bool
		want           string
	}{
		{10, 0, 0, false, "replicas 0"},
		{10, -3, 0, true, "replicas -3"},
		{-1, 2, 0, false, "-1 rows"},
		{10, 2, 2, false, "rank 2"},
		{10, 2, -1, false, "rank -1"},
		{math.MaxInt64, 4, 0, false, "overflow"},
	} {
		idx, err := SamplerIndices(tc.n, tc.replicas, tc.rank, 1, 0, true, tc.dropLast)
		if !errors.Is(err, ErrLoader) || !strings.Contains(err.Error(), tc.want) || idx != nil {
			t.Errorf("SamplerIndices(%d, %d, %d): %v, %v; want ErrLoader naming %q", tc.n, tc.replicas, tc.rank, idx, err, tc.want)
		}
	}
	if idx, err := SamplerIndices(0, 3, 2, 1, 0, true, false); err != nil || len(idx) != 0 {
		t.Fatalf("zero rows: %v, %v; want an empty slice", idx, err)
	}
}

func TestLoaderOptionsValidate(t *testing.T) {
	for _, o := range []LoaderOptions{
		{BatchSize: 4},
		{Vars: []string{"a"}},
		{Vars: []string{"a", "a"}, BatchSize: 4},
		{Vars: []string{"a"}, BatchSize: 4, Workers: -1},
		{Vars: []string{"a"}, BatchSize: 4, Replicas: 2, Rank: 2},
	} {
		if err := o.Validate(); !errors.Is(err, ErrLoader) {
			t.Errorf("%+v: got %v, want ErrLoader", o, err)
		}
	}
	o := LoaderOptions{Vars: []string{"a"}, BatchSize: 4, Workers: 3, Prefetch: 1}
	if err := o.Validate(); err != nil || o.Prefetch != 1 || o.Timeout != 0 {
		t.Fatalf("Validate changed the options or refused them: %+v %v", o, err)
	}
	if err := o.EnsureDefaults().Validate(); err != nil || o.Prefetch != 3 || o.Timeout != DefaultLoaderTimeout {
		t.Fatalf("defaults: %+v %v", o, err)
	}
}

// Multi-rank test: the test binary re-executes itself as loaderWorld ranks,
// which open a real store (bootstrap through a directory) and run
// loaderRankMain.
const (
	loaderWorld   = 4
	loaderEnvRank = "DDSTORE_LOADER_TEST_RANK"
)

// Pattern of the test variables: img row g has imgElems float32 g*0.5+j;
// lab row g is the int64 g*7+1.
const imgElems = 12

func loaderLocalRows(rank int) int64 { return 17 + int64(rank)*5 } // uneven shards

func imgVal(g int64, j int) float32 { return float32(g)*0.5 + float32(j) }

func TestLoaderMultiRank(t *testing.T) {
	if os.Getenv(loaderEnvRank) != "" {
		main := loaderRankMain
		if os.Getenv(loaderEnvAuto) != "" {
			main = autoPrefetchRankMain
		}
		if err := main(); err != nil {
			fmt.Fprintln(os.Stderr, "RANK FAILED:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if testing.Short() {
		t.Skip("multi-process test")
	}
	for _, mode := range []string{NodeModeAuto, NodeModeFabric} {
		t.Run(mode, func(t *testing.T) {
			runLoaderRanks(t, mode)
		})
	}
}

func runLoaderRanks(t *testing.T, mode string) { runLoaderRanksEnv(t, mode, nil, nil) }

// runLoaderRanksEnv runs loaderWorld ranks of TestLoaderMultiRank's child
// with env added; started, when not nil, gets the processes once all run
// and returns what to call once they have ended. It returns each rank's
// output.
func runLoaderRanksEnv(t *testing.T, mode string, env []string, started func([]*exec.Cmd) (stop func())) []string {
	dir := t.TempDir()
	// Under stress-ng and the rest of the suite, both modes together took
	// 150 s in one passing run here, and one mode overran 90 s in another.
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	job := fmt.Sprintf("ldtest%d%s", os.Getpid(), mode)
	cmds := make([]*exec.Cmd, loaderWorld)
	outs := make([]*bytes.Buffer, loaderWorld)
	for r := range loaderWorld {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLoaderMultiRank$", "-test.count=1")
		// At the deadline, SIGQUIT: a rank that hangs prints its goroutines.
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
		cmd.WaitDelay = 10 * time.Second
		outs[r] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		cmd.Env = append(os.Environ(),
			loaderEnvRank+"="+strconv.Itoa(r),
			"DDSTORE_LOADER_TEST_DIR="+dir,
			"DDSTORE_LOADER_TEST_MODE="+mode,
			"DDSTORE_LOADER_TEST_JOB="+job,
			"DDSTORE_TELEMETRY_DIR="+dir,
		)
		cmd.Env = append(cmd.Env, env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	if started != nil {
		defer started(cmds)()
	}
	failed := false
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			failed = true
			t.Errorf("rank %d: %v\n%s", r, err, outs[r])
		}
	}
	if failed && ctx.Err() != nil {
		t.Fatal("ranks did not finish within 240s")
	}
	out := make([]string, len(outs))
	for r, b := range outs {
		out[r] = b.String()
	}
	return out
}

func openLoaderTestStore() (*Store, error) {
	rank, _ := strconv.Atoi(os.Getenv(loaderEnvRank))
	c, err := LoadConfig("")
	if err != nil {
		return nil, err
	}
	o := c.StoreOptions()
	o.NodeMode = os.Getenv("DDSTORE_LOADER_TEST_MODE")
	o.DisableTelemetry = false
	o.TelemetryDir = os.Getenv("DDSTORE_LOADER_TEST_DIR")
	o.Timeout = 30 * time.Second
	o.Bootstrap = bootstrap.Options{Method: "dir", Dir: os.Getenv("DDSTORE_LOADER_TEST_DIR"),
		Token: os.Getenv("DDSTORE_LOADER_TEST_JOB"), Timeout: 30 * time.Second,
		Env: bootstrap.Env{Rank: rank, World: loaderWorld, LocalRank: rank, LocalWorld: loaderWorld,
			Launcher: "none", Job: os.Getenv("DDSTORE_LOADER_TEST_JOB")}}
	return Open(o)
}

// failAt wraps a real reader and fails reading one global row (fault
// injection for the error path).
type failAt struct {
	rowReader
	row int64
}

var errInjected = errors.New("injected read failure")

func (f failAt) GetBatchVar(v *Var, idx []int64, dst []byte) error {
	if slices.Contains(idx, f.row) {
		return fmt.Errorf("row %d: %w", f.row, errInjected)
	}
	return f.rowReader.GetBatchVar(v, idx, dst)
}

func (f failAt) GetVar(v *Var, start, count int64, dst []byte) error {
	if start <= f.row && f.row < start+count {
		return fmt.Errorf("row %d: %w", f.row, errInjected)
	}
	return f.rowReader.GetVar(v, start, count, dst)
}

// slowAt wraps a real reader and stalls reading one global row.
type slowAt struct {
	rowReader
	row     int64
	delay   time.Duration // how long a read of row stalls (at most, with release)
	release chan struct{} // nil: stall for delay; else until the test closes it
}

func (f slowAt) GetBatchVar(v *Var, idx []int64, dst []byte) error {
	if slices.Contains(idx, f.row) {
		if f.release == nil {
			time.Sleep(f.delay)
		} else {
			// The stall lasts until the test has seen what it checks, so
			// no timing threshold decides the test; delay only bounds it.
			t := time.NewTimer(f.delay)
			select {
			case <-f.release:
			case <-t.C:
			}
			t.Stop()
		}
	}
	return f.rowReader.GetBatchVar(v, idx, dst)
}

// wantSampler is the order SamplerIndices documents, computed apart from
// it: the identity permutation of [0, n), shuffled (when shuffle) by
// math/rand/v2's own Fisher–Yates (Rand.Shuffle) from PCG seeded with
// seed+epoch, padded by wrapping (entry k of the padded order is
// perm[k mod n]) or truncated (dropLast) to perRank·replicas entries, of
// which rank takes entries rank, rank+replicas, …
func wantSampler(n int64, replicas, rank int, seed int64, epoch int, shuffle, dropLast bool) []int64 {
	perm := make([]int64, n)
	for i := range perm {
		perm[i] = int64(i)
	}
	if shuffle {
		rng := randv2.New(randv2.NewPCG(uint64(seed+int64(epoch)), 0x9e3779b97f4a7c15))
		rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	}
	r := int64(replicas)
	perRank := (n + r - 1) / r
	if dropLast {
		perRank = n / r
	}
	out := make([]int64, perRank)
	for k := range out {
		out[k] = perm[(int64(rank)+int64(k)*r)%n]
	}
	return out
}

// sampler is SamplerIndices for arguments known to be valid.
func sampler(n int64, replicas, rank int, seed int64, epoch int, shuffle, dropLast bool) []int64 {
	idx, err := SamplerIndices(n, replicas, rank, seed, epoch, shuffle, dropLast)
	if err != nil {
		panic(err) // test helper: the arguments are constants of this file
	}
	return idx
}

func loaderRankMain() error {
	s, err := openLoaderTestStore()
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer s.Close()
	rank := s.Rank()
	nLocal := loaderLocalRows(rank)
	var first int64
	for r := range rank {
		first += loaderLocalRows(r)
	}
	img := make([]byte, nLocal*imgElems*4)
	lab := make([]byte, nLocal*8)
	for i := range nLocal {
		g := first + i
		for j := range imgElems {
			binary.LittleEndian.PutUint32(img[(i*imgElems+int64(j))*4:], math.Float32bits(imgVal(g, j)))
		}
		binary.LittleEndian.PutUint64(lab[i*8:], uint64(g*7+1))
	}
	if err := s.Add("img", Float32, imgElems, img); err != nil {
		return fmt.Errorf("add img: %w", err)
	}
	if err := s.Add("lab", Int64, 1, lab); err != nil {
		return fmt.Errorf("add lab: %w", err)
	}
	if err := s.Add("short", Int64, 1, lab[:8]); err != nil { // 4 rows in all
		return fmt.Errorf("add short: %w", err)
	}
	var global int64
	for r := range loaderWorld {
		global += loaderLocalRows(r)
	}

	// Variables with different row counts cannot be served together.
	if _, err := s.NewLoader(LoaderOptions{Vars: []string{"img", "short"}, BatchSize: 4}); !errors.Is(err, ErrMismatch) {
		return fmt.Errorf("img+short loader: got %v, want ErrMismatch", err)
	}
	if _, err := s.NewLoader(LoaderOptions{Vars: []string{"img", "nope"}, BatchSize: 4}); !errors.Is(err, ErrUnknownVar) {
		return fmt.Errorf("unknown variable: got %v, want ErrUnknownVar", err)
	}

	type variant struct {
		workers, prefetch         int
		batchGet, fast, ownReader bool
		dropLast                  bool
	}
	variants := []variant{
		{0, 1, true, true, true, false},
		{0, 1, false, false, false, false},
		{1, 1, true, true, true, false},
		{1, 2, true, false, true, false},
		{2, 2, false, true, true, false},
		{2, 1, true, true, false, false},
		{3, 4, false, false, false, false},
		{4, 2, true, true, true, false},
		{2, 2, true, true, true, true},
	}
	delivered := 0 // batches returned by Next, for the telemetry check
	const batch = 7
	for vi, v := range variants {
		o := LoaderOptions{Vars: []string{"img", "lab"}, BatchSize: batch, Seed: 42, Shuffle: true,
			DropLast: v.dropLast, Workers: v.workers, Prefetch: v.prefetch, BatchGet: v.batchGet,
			FastCollate: v.fast, ThreadReaders: v.ownReader}
		l, err := s.NewLoader(o)
		if err != nil {
			return fmt.Errorf("variant %d %+v: %w", vi, v, err)
		}
		for ep := range 2 {
			e, err := l.Epoch(ep)
			if err != nil {
				return err
			}
			want := wantSampler(global, loaderWorld, rank, 42, ep, true, v.dropLast)
			if !slices.Equal(e.Indices(), want) {
				return fmt.Errorf("variant %d epoch %d: Indices %v, want the sampler's order %v", vi, ep, e.Indices(), want)
			}
			var got []int64
			nb := 0
			for {
				b, err := e.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					return fmt.Errorf("variant %d %+v epoch %d batch %d: %w", vi, v, ep, nb, err)
				}
				if b.Number != nb || b.Epoch != ep {
					return fmt.Errorf("variant %d: batch %d/%d delivered as %d/%d", vi, ep, nb, b.Epoch, b.Number)
				}
				if len(b.Indices) == 0 || len(b.Indices) > batch || (v.dropLast && len(b.Indices) != batch) {
					return fmt.Errorf("variant %d: batch %d has %d rows", vi, nb, len(b.Indices))
				}
				if len(b.Data[0]) != len(b.Indices)*imgElems*4 || len(b.Data[1]) != len(b.Indices)*8 {
					return fmt.Errorf("variant %d: batch %d data sizes %d, %d for %d rows", vi, nb, len(b.Data[0]), len(b.Data[1]), len(b.Indices))
				}
				for k, g := range b.Indices {
					for j := range imgElems {
						f := math.Float32frombits(binary.LittleEndian.Uint32(b.Data[0][(k*imgElems+j)*4:]))
						if f != imgVal(g, j) {
							return fmt.Errorf("variant %d epoch %d batch %d: img row %d elem %d = %v, want %v", vi, ep, nb, g, j, f, imgVal(g, j))
						}
					}
					if l := int64(binary.LittleEndian.Uint64(b.Data[1][k*8:])); l != g*7+1 {
						return fmt.Errorf("variant %d epoch %d batch %d: lab row %d = %d, want %d", vi, ep, nb, g, l, g*7+1)
					}
				}
				got = append(got, b.Indices...)
				b.Release()
				nb++
				delivered++
			}
			if nb != e.Len() || nb != l.Batches() {
				return fmt.Errorf("variant %d: %d batches, Len %d, Batches %d", vi, nb, e.Len(), l.Batches())
			}
			if st := e.Stats(); st.Batches != nb || st.Rows != len(got) || st.Wait <= 0 || st.Step < st.Wait {
				return fmt.Errorf("variant %d: stats %+v for %d batches %d rows", vi, st, nb, len(got))
			}
			if _, err := e.Next(); err != io.EOF {
				return fmt.Errorf("variant %d: Next after the end: %v, want io.EOF", vi, err)
			}
			// The batches deliver the sampler's order exactly (DropLast:
			// without the last partial batch).
			if v.dropLast {
				want = want[:min(nb*batch, len(want))]
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("variant %d %+v epoch %d: batches delivered rows %v, want %v", vi, v, ep, got, want)
			}
		}
		// Abandon an epoch midway: Close must stop the workers cleanly.
		e, _ := l.Epoch(5)
		if b, err := e.Next(); err != nil {
			return fmt.Errorf("variant %d: epoch 5: %w", vi, err)
		} else {
			b.Release()
			delivered++
		}
		if err := l.Close(); err != nil {
			return fmt.Errorf("variant %d: close: %w", vi, err)
		}
		if _, err := e.Next(); !errors.Is(err, ErrClosed) {
			return fmt.Errorf("variant %d: Next after Close: %v, want ErrClosed", vi, err)
		}
	}
	// Every delivered batch was recorded in this rank's telemetry segment.
	lc, err := ownLoaderCounters()
	if err != nil {
		return err
	}
	if lc.Batches != int64(delivered) || lc.WaitNs <= 0 || lc.StepNs < lc.WaitNs {
		return fmt.Errorf("telemetry loader counters %d batches, wait %d ns, step %d ns; want %d batches, 0 < wait ≤ step",
			lc.Batches, lc.WaitNs, lc.StepNs, delivered)
	}

	// Fast collate with batched reads reuses the batch buffers: no heap
	// allocation per batch once the pool is warm (0 and 2 workers).
	for _, workers := range []int{0, 2} {
		l, err := s.NewLoader(LoaderOptions{Vars: []string{"img", "lab"}, BatchSize: 1, Seed: 3, Shuffle: true,
			Workers: workers, Prefetch: 2, BatchGet: true, FastCollate: true, ThreadReaders: true})
		if err != nil {
			return err
		}
		e, _ := l.Epoch(0)
		for range 4 { // warm the pool
			b, err := e.Next()
			if err != nil {
				return err
			}
			b.Release()
		}
		var nerr error
		allocs, _ := hotAllocs(10, func() {
			b, err := e.Next()
			if err != nil {
				nerr = err
				return
			}
			b.Release()
		})
		if nerr != nil {
			return nerr
		}
		if allocs > 0.5 {
			return fmt.Errorf("workers %d: %.1f allocations per batch with fast collate, want 0", workers, allocs)
		}
		l.Close()
	}

	// Errors of a read surface from Next, naming epoch, batch and variable.
	for _, workers := range []int{0, 2} {
		l, err := s.NewLoader(LoaderOptions{Vars: []string{"img"}, BatchSize: batch, Seed: 1, Shuffle: true,
			Workers: workers, Prefetch: 2, BatchGet: true, FastCollate: true, ThreadReaders: true})
		if err != nil {
			return err
		}
		bad := sampler(global, loaderWorld, rank, 1, 0, true, false)[batch*2+1]
		if workers == 0 {
			l.direct = failAt{l.direct, bad}
		}
		for w := range l.readers {
			l.readers[w] = failAt{l.readers[w], bad}
		}
		e, _ := l.Epoch(0)
		var nerr error
		n := 0
		for nerr == nil {
			var b *Batch
			b, nerr = e.Next()
			b.Release()
			n++
		}
		if !errors.Is(nerr, errInjected) || !errors.Is(nerr, ErrLoader) || n != 3 {
			return fmt.Errorf("workers %d: error %v after %d batches, want the injected error at batch 3", workers, nerr, n)
		}
		if _, again := e.Next(); !errors.Is(again, errInjected) {
			return fmt.Errorf("workers %d: error not sticky: %v", workers, again)
		}
		if err := l.Close(); err != nil {
			return err
		}
	}

	// A batch that does not arrive within Timeout is an ErrTimeout naming
	// the batch; Close then waits for the stalled worker.
	l, release, err := stalledLoader(s, global, rank, batch)
	if err != nil {
		return err
	}
	e, _ := l.Epoch(0)
	if b, err := e.Next(); err != nil { // first batch under the default timeout (connection setup)
		return err
	} else {
		b.Release()
	}
	l.o.Timeout = 100 * time.Millisecond
	t0 := time.Now()
	if _, err := e.Next(); !errors.Is(err, ErrTimeout) || !errors.Is(err, ErrLoader) {
		return fmt.Errorf("stalled batch: got %v, want ErrTimeout", err)
	}
	// Timers never fire early; the worker is still stalled (it stays so
	// until release), so Next did not wait for it.
	if el := time.Since(t0); el < 90*time.Millisecond {
		return fmt.Errorf("stalled batch: Next returned after %v, before its 100ms Timeout", el)
	}
	close(release)
	if err := l.Close(); err != nil {
		return err
	}
	if err := leaseChecks(s, global, rank); err != nil {
		return fmt.Errorf("leases: %w", err)
	}
	return closeWakesNext(s, global, rank)
}

// ownLoaderCounters reads the loader block of this process's telemetry
// segment, as ddtop does.
func ownLoaderCounters() (telemetry.LoaderCounters, error) {
	dir := os.Getenv("DDSTORE_LOADER_TEST_DIR")
	segs, err := telemetry.Discover(dir)
	if err != nil {
		return telemetry.LoaderCounters{}, err
	}
	for _, si := range segs {
		if si.Pid != os.Getpid() {
			continue
		}
		seg, err := telemetry.Open(si.Path)
		if err != nil {
			return telemetry.LoaderCounters{}, err
		}
		snap, err := seg.Snapshot()
		seg.Close()
		if err != nil {
			return telemetry.LoaderCounters{}, err
		}
		return snap.Loader, nil
	}
	return telemetry.LoaderCounters{}, fmt.Errorf("no telemetry segment of pid %d in %s", os.Getpid(), dir)
}

// stalledLoader is a one-worker loader of "img" whose worker stalls on
// the second batch of epoch 0 for a minute, or until release is closed.
func stalledLoader(s *Store, global int64, rank, batch int) (*Loader, chan struct{}, error) {
	l, err := s.NewLoader(LoaderOptions{Vars: []string{"img"}, BatchSize: batch, Seed: 1, Shuffle: true,
		Workers: 1, Prefetch: 2, BatchGet: true, FastCollate: true, ThreadReaders: true})
	if err != nil {
		return nil, nil, err
	}
	release := make(chan struct{})
	l.readers[0] = slowAt{l.readers[0], sampler(global, loaderWorld, rank, 1, 0, true, false)[batch], time.Minute, release}
	return l, release, nil
}

// closeWakesNext: a Next blocked on a stalled batch (default 2m Timeout)
// returns ErrClosed promptly when another goroutine closes the loader, or
// starts the next epoch, instead of waiting out the Timeout.
func closeWakesNext(s *Store, global int64, rank int) error {
	const batch = 7
	for _, how := range []string{"Loader.Close", "next Epoch"} {
		l, release, err := stalledLoader(s, global, rank, batch)
		if err != nil {
			return err
		}
		e, err := l.Epoch(0)
		if err != nil {
			return err
		}
		b, err := e.Next()
		if err != nil {
			return fmt.Errorf("%s: first batch: %w", how, err)
		}
		b.Release()
		type res struct {
			err error
			at  time.Time
		}
		done := make(chan res, 1)
		go func() {
			_, err := e.Next() // blocks on the stalled batch 1
			done <- res{err, time.Now()}
		}()
		time.Sleep(100 * time.Millisecond)
		closeErr := make(chan error, 1)
		go func() {
			if how == "Loader.Close" {
				closeErr <- l.Close()
				return
			}
			e2, err := l.Epoch(1)
			if err == nil {
				e2.Close()
			}
			closeErr <- err
		}()
		// The stalled read lasts until release (a minute at most): a Next
		// that returns before it did not wait for the stall.
		var r res
		select {
		case r = <-done:
		case <-time.After(30 * time.Second):
			close(release)
			return fmt.Errorf("%s: Next still blocked 30s after the close", how)
		}
		close(release)
		if !errors.Is(r.err, ErrClosed) || !errors.Is(r.err, ErrLoader) || !strings.Contains(r.err.Error(), "epoch 0") {
			return fmt.Errorf("%s: blocked Next returned %v, want ErrClosed naming epoch 0", how, r.err)
		}
		if err := <-closeErr; err != nil {
			return fmt.Errorf("%s: %w", how, err)
		}
		if _, err := e.Next(); !errors.Is(err, ErrClosed) {
			return fmt.Errorf("%s: Next after close: %v, want ErrClosed", how, err)
		}
		if err := l.Close(); err != nil {
			return err
		}
	}
	return nil
}
