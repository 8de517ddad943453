// Command bench prints the seed's tables measured on this machine, through
// the real engine and real processes:
//
//   - bench_get: µs per row of single-row Get vs GetBatch of 128 rows, for
//     rows of 3 KB, 12.5 KB, 200 KB and 1 MiB, on each path: local (a
//     same-node shard mapped into the reader, memcpy), tcp ("tcp;ofi_rxm",
//     every rank its own node) and shm (libfabric shm, every rank its own
//     node). Rank 0 reads rows owned by rank 1, in random order. With --gpu,
//     the seed's host-vs-GPU columns: GetBatch of 128 into device memory
//     (GetBatchDevice on the GPU that machine.gpu and gpu.device choose),
//     alternating call by call with the host batches, and device ÷ host.
//   - bench_threads: rows/s of 1, 2 and 4 goroutines reading batches of 64
//     rows, sharing the store (its locked default path) or each with its
//     own Reader, over tcp.
//   - loader: the trainer's loop (engine Loader + a small MLP) with 0, 1, 2
//     and 4 workers over tcp, every rank training: fetch (time waiting in
//     Next) and compute seconds per epoch on rank 0.
//
// It runs as ≥ 2 ranks under any launcher (ddrun -n 2 bench, mpiexec.mpich -n 2
// bench, srun); rank 0 prints. --json prints one JSON object instead of the
// tables; --quick makes a fast sanity run.
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ddstore/ddstore/engine"
	"github.com/ddstore/ddstore/engine/bootstrap"
	"github.com/ddstore/ddstore/examples/train/model"
	"github.com/ddstore/ddstore/gpu"
)

func main() {
	if err := newCommand(os.Stdout).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	config string
	json   bool
	quick  bool
	only   []string
	paths  []string
	gpu    bool
}

func newCommand(stdout io.Writer) *cobra.Command {
	var o options
	cmd := &cobra.Command{
		Use:           "bench",
		Short:         "measure single vs batched reads, thread readers and loader workers (run as ≥ 2 ranks)",
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(*cobra.Command, []string) error {
			return run(o, stdout)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.config, "config", "", "config file or embedded name (local, frontier, perlmutter)")
	fl.BoolVar(&o.json, "json", false, "print one JSON object instead of tables")
	fl.BoolVar(&o.quick, "quick", false, "fast sanity run: fewer rows and repetitions")
	fl.StringSliceVar(&o.only, "only", []string{"get", "threads", "loader"}, "suites to run: get, threads, loader")
	fl.StringSliceVar(&o.paths, "paths", []string{"local", "tcp", "shm"}, "bench_get paths: local, tcp, shm")
	fl.BoolVar(&o.gpu, "gpu", false, "bench_get also reads batches into GPU memory (host-vs-GPU columns; needs a GPU)")
	return cmd
}

// GetResult is one bench_get figure.
type GetResult struct {
	Path     string  `json:"path"`
	Row      int     `json:"row"`
	Batch    int     `json:"batch"`
	USPerRow float64 `json:"us_per_row"`
	Dest     string  `json:"dest,omitempty"` // "gpu" for device batches; host otherwise
}

// ThreadResult is one bench_threads figure.
type ThreadResult struct {
	Readers  int     `json:"readers"`
	Mode     string  `json:"mode"` // shared | own
	Row      int     `json:"row"`
	RowsPerS float64 `json:"rows_per_s"`
}

// LoaderResult is one loader figure (rank 0, mean of the epochs after the first).
type LoaderResult struct {
	Workers  int     `json:"workers"`
	FetchS   float64 `json:"fetch_s"`
	ComputeS float64 `json:"compute_s"`
	WaitStep float64 `json:"wait_per_step"`
}

// Report is the --json output.
type Report struct {
	World        int            `json:"world"`
	Quick        bool           `json:"quick"`
	Config       string         `json:"config"`
	BenchGet     []GetResult    `json:"bench_get"`
	BenchThreads []ThreadResult `json:"bench_threads"`
	Loader       []LoaderResult `json:"loader"`
}

var rowSizes = []int{3136, 12544, 200 << 10, 1 << 20}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func run(o options, stdout io.Writer) error {
	cfg, err := engine.LoadConfig(o.config)
	if err != nil {
		return err
	}
	rep := &Report{Quick: o.quick, Config: cfg.Source, BenchGet: []GetResult{}, BenchThreads: []ThreadResult{}, Loader: []LoaderResult{}}
	paths := []string{}
	for _, p := range []string{"local", "tcp", "shm"} {
		if has(o.paths, p) && has(o.only, "get") || p == "tcp" && (has(o.only, "threads") || has(o.only, "loader")) {
			paths = append(paths, p)
		}
	}
	rank := -1
	var rendezvous []string // tcp bootstrap addresses of the stores after the first
	for pi, path := range paths {
		addr := ""
		if pi > 0 {
			addr = rendezvous[pi-1]
		}
		st, err := openPath(cfg, path, addr)
		if err != nil {
			return fmt.Errorf("path %s: %w", path, err)
		}
		if pi == 0 && len(paths) > 1 {
			// A launcher's PMI can be joined once per process: later stores
			// meet over a tcp rendezvous whose address rank 0 shares through
			// this first store.
			if rendezvous, err = shareRendezvous(st, len(paths)-1); err != nil {
				st.Close()
				return fmt.Errorf("path %s: rendezvous: %w", path, err)
			}
		}
		if st.World() < 2 {
			st.Close()
			return errors.New("run as ≥ 2 ranks (ddrun -n 2 bench, mpiexec.mpich -n 2 bench)")
		}
		rank, rep.World = st.Rank(), st.World()
		if rank == 0 && !o.json {
			fmt.Fprintf(os.Stderr, "bench: path %s: %d ranks...\n", path, st.World())
		}
		if has(o.only, "get") && has(o.paths, path) {
			for _, rb := range rowSizes {
				r, err := benchGet(st, path, rb, o.quick, o.gpu)
				if err != nil {
					st.Close()
					return fmt.Errorf("bench_get %s %d B: %w", path, rb, err)
				}
				rep.BenchGet = append(rep.BenchGet, r...)
			}
		}
		if path == "tcp" && has(o.only, "threads") {
			for _, rb := range []int{3136, 200 << 10} {
				r, err := benchThreads(st, rb, o.quick)
				if err != nil {
					st.Close()
					return fmt.Errorf("bench_threads %d B: %w", rb, err)
				}
				rep.BenchThreads = append(rep.BenchThreads, r...)
			}
		}
		if path == "tcp" && has(o.only, "loader") {
			r, err := benchLoader(st, cfg, o.quick)
			if err != nil {
				st.Close()
				return fmt.Errorf("loader: %w", err)
			}
			rep.Loader = r
		}
		if err := st.Close(); err != nil {
			return fmt.Errorf("path %s: close: %w", path, err)
		}
	}
	if rank != 0 {
		return nil
	}
	if o.json {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	printTables(stdout, rep)
	return nil
}

// shareRendezvous picks n free TCP ports on rank 0's host (a fresh one per
// later store, so that no rank meets a previous store's listener) and
// returns their "host:port" on every rank, exchanged through a store
// variable.
func shareRendezvous(st *engine.Store, n int) ([]string, error) {
	const rb = 1024
	row := make([]byte, rb)
	if st.Rank() == 0 {
		host, err := os.Hostname()
		if err != nil {
			return nil, err
		}
		var addrs []string
		for range n {
			ln, err := net.Listen("tcp", ":0")
			if err != nil {
				return nil, err
			}
			defer ln.Close()
			addrs = append(addrs, net.JoinHostPort(host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)))
		}
		copy(row, strings.Join(addrs, " "))
	}
	if err := st.Add("bench_rendezvous", engine.Uint8, rb, row); err != nil {
		return nil, err
	}
	all := make([]byte, rb)
	if err := st.Get("bench_rendezvous", 0, 1, all); err != nil {
		return nil, err
	}
	if err := st.Free("bench_rendezvous"); err != nil {
		return nil, err
	}
	addrs := strings.Fields(string(bytes.TrimRight(all, "\x00")))
	if len(addrs) != n {
		return nil, fmt.Errorf("got %d rendezvous addresses, want %d", len(addrs), n)
	}
	return addrs, nil
}

// openPath opens a store for one read path; with rendezvous != "" its
// bootstrap is a tcp rendezvous at that address.
func openPath(cfg engine.Config, path, rendezvous string) (*engine.Store, error) {
	o := cfg.StoreOptions()
	o.Timeout = 10 * time.Minute // rank 0 measures while the others wait in a collective
	// One store per path, one after the other: give each its own job id so
	// that the bootstrap (a directory, or PMI keys) never sees the previous
	// store's entries.
	env, err := bootstrap.DetectEnv()
	if err != nil {
		return nil, err
	}
	env.Job += "." + path
	o.Bootstrap.Env = env
	if rendezvous != "" {
		o.Bootstrap.Method, o.Bootstrap.Addr = "tcp", rendezvous
		if o.Bootstrap.Token == "" {
			o.Bootstrap.Token = env.Job
		}
	}
	switch path {
	case "local":
		o.NodeMode = engine.NodeModeAuto
	case "tcp":
		o.NodeMode = engine.NodeModeFabric
		if o.Fabric.Provider != "tcp;ofi_rxm" && o.Fabric.Provider != "tcp" {
			o.Fabric.Domain = "" // the config's domain belongs to another provider
		}
		o.Fabric.Provider = "tcp;ofi_rxm"
	case "shm":
		o.NodeMode = engine.NodeModeFabric
		o.Fabric.Provider = "shm"
		o.Fabric.Domain = ""
	default:
		return nil, fmt.Errorf("unknown path %q", path)
	}
	return engine.Open(o)
}

func rowsFor(rb int, quick bool) int {
	total := 64 << 20
	if quick {
		total = 8 << 20
	}
	return max(16, min(4096, total/rb))
}

// pattern fills a shard: every 8 bytes of row g hold g*1_000_003 + word.
func pattern(dst []byte, first int64, rb int) {
	for i := 0; i < len(dst)/rb; i++ {
		g := first + int64(i)
		for w := 0; w+8 <= rb; w += 8 {
			binary.LittleEndian.PutUint64(dst[i*rb+w:], uint64(g*1_000_003+int64(w)))
		}
	}
}

// checkEvery: every checkEvery-th read (single Get) or batch (GetBatch) of a
// timed run is verified in full against the pattern, with its destination
// poisoned before the read; the check and the poisoning are not timed.
const checkEvery = 16

// poison fills dst with a value the pattern never has in every word, so a
// read that silently leaves dst untouched fails checkRow.
func poison(dst []byte) {
	for i := range dst {
		dst[i] = 0xA5
	}
}

// checkRows verifies rows idx, stored contiguously in dst (rb bytes each).
func checkRows(dst []byte, idx []int64, rb int) error {
	for k, g := range idx {
		if err := checkRow(dst[k*rb:(k+1)*rb], g); err != nil {
			return fmt.Errorf("row %d of %d in the read: %w", k, len(idx), err)
		}
	}
	return nil
}

func checkRow(row []byte, g int64) error {
	for w := 0; w+8 <= len(row); w += 8 {
		if v := binary.LittleEndian.Uint64(row[w:]); v != uint64(g*1_000_003+int64(w)) {
			return fmt.Errorf("row %d word %d: read %d, want %d", g, w/8, v, g*1_000_003+int64(w))
		}
	}
	return nil
}

// addVar adds a variable of rows rows of rb bytes per rank (Uint8 elements).
func addVar(st *engine.Store, name string, rb, rows int) error {
	local := make([]byte, rb*rows)
	pattern(local, int64(st.Rank())*int64(rows), rb)
	return st.Add(name, engine.Uint8, rb, local)
}

// remoteIndices returns n random rows of rank 1's shard.
func remoteIndices(n, rows int, seed uint64) []int64 {
	rng := rand.New(rand.NewPCG(seed, 7))
	idx := make([]int64, n)
	for i := range idx {
		idx[i] = int64(rows) + int64(rng.IntN(rows))
	}
	return idx
}

// withBenchVar adds a variable of rows rows of rb bytes on every rank,
// runs bench on rank 0 alone and frees the variable; the first error wins.
func withBenchVar(st *engine.Store, name string, rb, rows int, bench func() error) error {
	if err := addVar(st, name, rb, rows); err != nil {
		return err
	}
	var runErr error
	if st.Rank() == 0 {
		runErr = bench()
	}
	if err := st.Free(name); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

func benchGet(st *engine.Store, path string, rb int, quick, gpuToo bool) ([]GetResult, error) {
	rows := rowsFor(rb, quick)
	name := fmt.Sprintf("bench_get_%d", rb)
	var out []GetResult
	err := withBenchVar(st, name, rb, rows, func() (runErr error) {
		reads := max(64, min(4096, (32<<20)/rb))
		if quick {
			reads = max(32, reads/8)
		}
		reads = (reads + 127) / 128 * 128
		idx := remoteIndices(reads, rows, uint64(rb))
		dst := make([]byte, 128*rb)
		var dev *gpu.Buffer // the device batch, with --gpu
		var back *gpu.Stream
		if gpuToo {
			d, err := st.Device()
			if err == nil {
				dev, err = d.Alloc(128 * rb)
			}
			if err == nil {
				defer dev.Free()
				back, err = d.NewStream()
			}
			if err != nil {
				runErr = fmt.Errorf("--gpu: %w", err)
			} else {
				defer back.Close()
				runErr = st.GetBatchDevice(name, idx[:128], dev, 0) // warm up: stream, staging
			}
		}
		// warm up both paths (connections, registrations)
		if runErr == nil {
			runErr = st.GetBatch(name, idx[:128], dst)
		}
		for i := 0; i < 8 && runErr == nil; i++ {
			runErr = st.Get(name, idx[i], 1, dst[:rb])
		}
		if runErr == nil {
			// Timed runs; every checkEvery-th read (and the last) is poisoned
			// before and verified after, outside the clock. Device batches
			// alternate with host batches and are checked after a copy back.
			var single, batched, device time.Duration
			for i := 0; i < reads && runErr == nil; i++ {
				check := i%checkEvery == 0 || i == reads-1
				if check {
					poison(dst[:rb])
				}
				t0 := time.Now()
				runErr = st.Get(name, idx[i], 1, dst[:rb])
				single += time.Since(t0)
				if check && runErr == nil {
					runErr = checkRow(dst[:rb], idx[i])
				}
			}
			nb := reads / 128
			for b := 0; b < nb && runErr == nil; b++ {
				check := b%checkEvery == 0 || b == nb-1
				if check {
					poison(dst)
				}
				part := idx[b*128 : (b+1)*128]
				t0 := time.Now()
				runErr = st.GetBatch(name, part, dst)
				batched += time.Since(t0)
				if check && runErr == nil {
					runErr = checkRows(dst, part, rb)
				}
				if dev != nil && runErr == nil {
					t0 := time.Now()
					runErr = st.GetBatchDevice(name, part, dev, 0)
					device += time.Since(t0)
					if check && runErr == nil {
						poison(dst)
						if runErr = back.ReadBack(dst, dev, 0); runErr == nil {
							runErr = checkRows(dst, part, rb)
						}
					}
				}
			}
			out = append(out,
				GetResult{Path: path, Row: rb, Batch: 1, USPerRow: float64(single.Microseconds()) / float64(reads)},
				GetResult{Path: path, Row: rb, Batch: 128, USPerRow: float64(batched.Microseconds()) / float64(reads)})
			if dev != nil {
				out = append(out, GetResult{Path: path, Row: rb, Batch: 128, Dest: "gpu", USPerRow: float64(device.Microseconds()) / float64(reads)})
			}
		}
		return runErr
	})
	return out, err
}

func benchThreads(st *engine.Store, rb int, quick bool) ([]ThreadResult, error) {
	rows := rowsFor(rb, quick)
	name := fmt.Sprintf("bench_threads_%d", rb)
	var out []ThreadResult
	err := withBenchVar(st, name, rb, rows, func() (runErr error) {
		dur := 400 * time.Millisecond
		if quick {
			dur = 100 * time.Millisecond
		}
		for _, mode := range []string{"shared", "own"} {
			for _, n := range []int{1, 2, 4} {
				if runErr != nil {
					break
				}
				var rps float64
				rps, runErr = threadRun(st, name, rb, rows, n, mode == "own", dur)
				out = append(out, ThreadResult{n, mode, rb, rps})
			}
		}
		return runErr
	})
	return out, err
}

type batchGetter interface {
	GetBatch(name string, idx []int64, dst []byte) error
}

func threadRun(st *engine.Store, name string, rb, rows, n int, own bool, dur time.Duration) (float64, error) {
	const batch = 64
	var wg sync.WaitGroup
	counts := make([]int, n)
	checkTime := make([]time.Duration, n) // verification time, not reading
	errs := make([]error, n)
	start := make(chan struct{})
	var ready sync.WaitGroup
	ready.Add(n)
	for w := range n {
		var g batchGetter = st
		if own {
			r, err := st.NewReader()
			if err != nil {
				return 0, err
			}
			defer r.Close()
			g = r
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			idx := remoteIndices(batch*16, rows, uint64(w+1))
			dst := make([]byte, batch*rb)
			errs[w] = g.GetBatch(name, idx[:batch], dst) // warm up: connection, registration
			ready.Done()
			<-start
			if errs[w] != nil {
				return
			}
			// Every checkEvery-th batch is poisoned before and verified in
			// full after its read; the deadline moves by the time that takes,
			// so each reader reads for dur.
			deadline := time.Now().Add(dur)
			for i := 0; time.Now().Before(deadline); i++ {
				k := (i % 16) * batch
				part := idx[k : k+batch]
				check := i%checkEvery == 0
				if check {
					poison(dst)
				}
				if err := g.GetBatch(name, part, dst); err != nil {
					errs[w] = err
					return
				}
				counts[w] += batch
				if check {
					c0 := time.Now()
					if err := checkRows(dst, part, rb); err != nil {
						errs[w] = fmt.Errorf("batch %d: %w", i, err)
						return
					}
					checkTime[w] += time.Since(c0)
					deadline = deadline.Add(time.Since(c0))
				}
			}
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	wg.Wait()
	el := time.Since(t0)
	total := 0
	var checks time.Duration
	for w := range n {
		if errs[w] != nil {
			return 0, fmt.Errorf("reader %d: %w", w, errs[w])
		}
		total += counts[w]
		checks += checkTime[w]
	}
	el -= checks / time.Duration(n) // readers verify concurrently: mean check time
	return float64(total) / el.Seconds(), nil
}

func benchLoader(st *engine.Store, cfg engine.Config, quick bool) ([]LoaderResult, error) {
	const scale, batch, hidden = 1, 64, 64
	rows, epochs := 1024, 3
	if quick {
		rows, epochs = 256, 2
	}
	px := model.Pixels(scale)
	first := int64(st.Rank()) * int64(rows)
	img := make([]byte, rows*px*4)
	lab := make([]byte, rows*8)
	model.FillImages(img, first, scale)
	model.FillLabels(lab, first)
	if err := st.Add("bench_image", engine.Float32, px, img); err != nil {
		return nil, err
	}
	if err := st.Add("bench_label", engine.Int64, 1, lab); err != nil {
		return nil, err
	}
	var out []LoaderResult
	for _, workers := range []int{0, 1, 2, 4} {
		lo := cfg.LoaderOptions([]string{"bench_image", "bench_label"}, batch, 1)
		lo.Workers, lo.Prefetch = workers, 2
		ld, err := st.NewLoader(lo)
		if err != nil {
			return nil, err
		}
		m := model.New(px, hidden, 1)
		var fetch, compute, wait, step time.Duration
		for e := range epochs {
			ep, err := ld.Epoch(e)
			if err != nil {
				ld.Close()
				return nil, err
			}
			var c time.Duration
			for {
				b, err := ep.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					ld.Close()
					return nil, err
				}
				t0 := time.Now()
				m.Step(b.Data[0], b.Data[1], 0.002)
				b.Release()
				c += time.Since(t0)
			}
			if e > 0 || epochs == 1 {
				s := ep.Stats()
				fetch += s.Wait
				wait += s.Wait
				step += s.Step
				compute += c
			}
		}
		if err := ld.Close(); err != nil {
			return nil, err
		}
		n := float64(max(epochs-1, 1))
		r := LoaderResult{Workers: workers, FetchS: fetch.Seconds() / n, ComputeS: compute.Seconds() / n}
		if step > 0 {
			r.WaitStep = float64(wait) / float64(step)
		}
		out = append(out, r)
	}
	if err := st.Free("bench_image"); err != nil {
		return nil, err
	}
	return out, st.Free("bench_label")
}

func rowName(rb int) string {
	switch {
	case rb >= 1<<20:
		return fmt.Sprintf("%d MiB", rb>>20)
	case rb >= 100<<10:
		return fmt.Sprintf("%d KB", rb>>10)
	default:
		return fmt.Sprintf("%.1f KB", float64(rb)/1024)
	}
}

func printTables(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "ddstore bench: %d ranks; config %s%s\n", rep.World, rep.Config, map[bool]string{true: " (quick)"}[rep.Quick])
	if len(rep.BenchGet) > 0 {
		fmt.Fprintln(w, "\nbench_get: µs per row, single Get / GetBatch of 128 (rank 0 reads rank 1's rows, random order)")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		var paths []string
		seen := map[string]bool{}
		get := map[string]float64{}
		gpuCols := false
		for _, r := range rep.BenchGet {
			if !seen[r.Path] {
				seen[r.Path] = true
				paths = append(paths, r.Path)
			}
			get[fmt.Sprint(r.Path, r.Row, r.Batch, r.Dest)] = r.USPerRow
			if r.Dest == "gpu" {
				gpuCols = true
			}
		}
		fmt.Fprint(tw, "row")
		for _, p := range paths {
			fmt.Fprintf(tw, "\t%s, 1 / 128", p)
			if gpuCols {
				fmt.Fprintf(tw, "\t%s, GPU 128 (GPU÷host)", p)
			}
		}
		fmt.Fprintln(tw)
		for _, rb := range rowSizes {
			fmt.Fprint(tw, rowName(rb))
			for _, p := range paths {
				host := get[fmt.Sprint(p, rb, 128, "")]
				fmt.Fprintf(tw, "\t%.2f / %.2f", get[fmt.Sprint(p, rb, 1, "")], host)
				if gpuCols {
					g := get[fmt.Sprint(p, rb, 128, "gpu")]
					fmt.Fprintf(tw, "\t%.2f (%.2f×)", g, g/max(host, 1e-9))
				}
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
	if len(rep.BenchThreads) > 0 {
		fmt.Fprintln(w, "\nbench_threads: tcp, GetBatch of 64 in a loop, rows/s (speedup over 1 reader)")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "row\treaders\tshared store (lock)\town reader each")
		base := map[string]float64{}
		val := map[string]float64{}
		var rbs []int
		for _, r := range rep.BenchThreads {
			val[fmt.Sprint(r.Row, r.Mode, r.Readers)] = r.RowsPerS
			if r.Readers == 1 {
				base[fmt.Sprint(r.Row, r.Mode)] = r.RowsPerS
				if r.Mode == "shared" {
					rbs = append(rbs, r.Row)
				}
			}
		}
		sort.Ints(rbs)
		for _, rb := range rbs {
			for _, n := range []int{1, 2, 4} {
				fmt.Fprintf(tw, "%s\t%d", rowName(rb), n)
				for _, mode := range []string{"shared", "own"} {
					v := val[fmt.Sprint(rb, mode, n)]
					fmt.Fprintf(tw, "\t%.0f (%.2f×)", v, v/max(base[fmt.Sprint(rb, mode)], 1e-9))
				}
				fmt.Fprintln(tw)
			}
		}
		tw.Flush()
	}
	if len(rep.Loader) > 0 {
		fmt.Fprintln(w, "\nloader: tcp, S=1, batch 64, MLP(64), prefetch 2, rank 0, s/epoch (epochs after the first)")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "workers\tfetch\tcompute\tfetch wait / step")
		for _, r := range rep.Loader {
			fmt.Fprintf(tw, "%d\t%.4f\t%.4f\t%.4f\n", r.Workers, r.FetchS, r.ComputeS, r.WaitStep)
		}
		tw.Flush()
	}
}
