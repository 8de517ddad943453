// Command train is a data-parallel trainer on synthetic data that embeds the
// ddstore engine. Each rank adds its shard of an image variable ((28·S)²
// float32 per row) and a label variable (int64) to the store, then trains
// a small MLP (or softmax regression) with the engine's Loader reading any global row.
//
// Data parallelism: every rank starts from the same model; after each
// --sync-every steps (default 1, i.e. every step, which equals averaging
// gradients as DDP does) the ranks average their models with the store's
// AllReduceFloat32 (a sum in rank order, the same bits on every rank)
// divided by the world size. The printed loss is the mean over all ranks'
// samples of the epoch, summed in rank order, so it is bit-identical across
// loader workers, prefetch, batched vs per-sample reads, reader mode and
// node mode. DDSTORE_PROFILE=1 (config key profile) makes every rank's
// store print its per-phase profile table to stderr at Close.
//
// Run it under any launcher: ddrun -n 4 train, mpiexec.mpich -n 4 train, srun train.
//
// Switches that cause the pathologies ddtop diagnoses, for real (README):
// --workers 4 --thread-readers=false (lock wait on the shared reader),
// --batch-get=false (one row per call), --throttle-rank R (rank R is
// stopped part of every period, like a CPU-throttled node: a straggler
// target), --register-dst --fast-collate=false (a registration per call),
// --workers 0 --node-mode fabric --image-scale 4 (slow reads, no prefetch).
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/ddstore/ddstore/engine"
	"github.com/ddstore/ddstore/examples/train/model"
)

func main() {
	if throttleMain() {
		return
	}
	if err := newCommand(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		os.Exit(1)
	}
}

// flags are the command line; loader and read switches left unset keep the
// config's values.
type flags struct {
	config      string
	epochs      int
	batchSize   int
	scale       int
	rowsPerRank int
	workers     int
	prefetch    int
	batchGet    bool
	threadRead  bool
	fastCollate bool
	nodeMode    string
	json        bool
	seed        int64
	lr          float32
	syncEvery   int
	noProgress  bool
	hidden      int
	check       bool
	storage     bool
	writeShards string
	shards      int
	registerDst bool
	showAddr    bool
	skipClose   bool
	throttle    throttleFlags
}

func newCommand(stdout, stderr io.Writer) *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:   "train",
		Short: "data-parallel trainer on synthetic data, reading batches through ddstore",
		Long: `train: every rank holds --rows-per-rank rows of a synthetic image set in the
store and trains a small MLP on batches of any global rows.
Loader and read switches default to the config (--config, DDSTORE_CONFIG,
the detected machine, else the embedded local.yaml; DDSTORE_* overrides).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd, f, stdout, stderr)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "config file or embedded name (local, frontier, perlmutter)")
	fl.IntVar(&f.epochs, "epochs", 3, "epochs")
	fl.IntVar(&f.batchSize, "batch-size", 64, "rows per batch per rank")
	fl.IntVar(&f.scale, "image-scale", 1, "S: images are (28·S)² float32 (S=1: 3 KB, S=2: 12.5 KB)")
	fl.IntVar(&f.rowsPerRank, "rows-per-rank", 1024, "rows of each rank's shard")
	fl.IntVar(&f.workers, "workers", 0, "loader worker goroutines (default: config loader.workers)")
	fl.IntVar(&f.prefetch, "prefetch", 2, "batches in flight (default: config loader.prefetch)")
	fl.BoolVar(&f.batchGet, "batch-get", true, "one GetBatch per batch; false: one Get per sample (default: config)")
	fl.BoolVar(&f.threadRead, "thread-readers", true, "each worker owns a Reader (default: config)")
	fl.BoolVar(&f.fastCollate, "fast-collate", true, "read straight into the batch buffer (default: config)")
	fl.StringVar(&f.nodeMode, "node-mode", "", "auto | fabric (default: config store.node_mode)")
	fl.BoolVar(&f.json, "json", false, "one JSON object per epoch per rank on stdout")
	fl.Int64Var(&f.seed, "seed", 1, "seed of the shuffle and of the model's initialisation")
	fl.Float32Var(&f.lr, "lr", 0.002, "learning rate")
	fl.IntVar(&f.syncEvery, "sync-every", 1, "average models across ranks every N steps (1 = DDP gradient averaging; 0 = at epoch end)")
	fl.IntVar(&f.hidden, "hidden", 64, "hidden units of the MLP (0: softmax regression)")
	fl.BoolVar(&f.noProgress, "no-progress", false, "no progress bar even on a terminal")
	fl.BoolVar(&f.check, "check", false, "check every row of every batch against the pattern of its global index")
	fl.BoolVar(&f.storage, "storage", false, "read image and label from storage-only ranks (DDSTORE_STORAGE_*) instead of adding them")
	fl.StringVar(&f.writeShards, "write-shards", "", "write the data set as --shards shard files of --rows-per-rank rows into this directory (for storage ranks) and exit")
	fl.IntVar(&f.shards, "shards", 2, "shards written by --write-shards")
	fl.BoolVar(&f.skipClose, "exit-without-close", false, "end with os.Exit(0) after the last epoch, closing nothing (a program that never closes its store)")
	fl.BoolVar(&f.showAddr, "print-fabric-addr", false, "print this rank's fabric address (hex) to stderr after Open (examples/netns: the gather stranger's target)")
	fl.BoolVar(&f.registerDst, "register-dst", false, "the fabric registers every read destination, as FI_MR_LOCAL providers need (registration costs on tcp)")
	fl.IntVar(&f.throttle.rank, "throttle-rank", -1, "stop this rank --throttle-duty of every --throttle-period (a throttled node: a straggler)")
	fl.Float64Var(&f.throttle.duty, "throttle-duty", 0.5, "share of each period the throttled rank is stopped, in (0, 1)")
	fl.DurationVar(&f.throttle.period, "throttle-period", 20*time.Millisecond, "throttling period")
	return cmd
}

// epochResult is one line of --json output.
type epochResult struct {
	Epoch    int     `json:"epoch"`
	Rank     int     `json:"rank"`
	Rows     int     `json:"rows"`
	FetchS   float64 `json:"fetch_s"`
	ComputeS float64 `json:"compute_s"`
	SyncS    float64 `json:"sync_s"`
	StepS    float64 `json:"step_s"`
	WaitStep float64 `json:"wait_per_step"`
	Loss     float64 `json:"loss"`
	// Failovers: row reads this rank has had served by another replica
	// group since Open (store.width < world); Dead: ranks it knows dead.
	Failovers  int64         `json:"failovers"`
	FailedFrom map[int]int64 `json:"failed_from,omitempty"` // failovers by owner rank
	Dead       []int         `json:"dead"`
	Checked    int64         `json:"checked,omitempty"` // rows checked against the pattern (--check)
	// Control: the store's control plane ("mesh", "tree"; "" for one
	// rank), CtrlConns the control connections this rank holds, CtrlAgent
	// whether it is its node's agent (tree).
	Control   string `json:"control,omitempty"`
	CtrlConns int    `json:"ctrl_conns"`
	CtrlAgent bool   `json:"ctrl_agent,omitempty"`
	Pid       int    `json:"pid"` // this rank's process (a test kills it)
}

func run(cmd *cobra.Command, f flags, stdout, stderr io.Writer) (err error) {
	cfg, err := engine.LoadConfig(f.config)
	if err != nil {
		return err
	}
	ch := cmd.Flags().Changed
	if ch("workers") {
		cfg.Loader.Workers = f.workers
	}
	if ch("prefetch") {
		cfg.Loader.Prefetch = f.prefetch
	}
	if ch("batch-get") {
		cfg.Reads.BatchGet = f.batchGet
	}
	if ch("thread-readers") {
		cfg.Reads.ThreadReaders = f.threadRead
	}
	if ch("fast-collate") {
		cfg.Reads.FastCollate = f.fastCollate
	}
	if ch("node-mode") {
		cfg.Store.NodeMode = f.nodeMode
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("flags: %w", err)
	}
	switch {
	case f.epochs < 1 || f.batchSize < 1 || f.scale < 1 || f.rowsPerRank < 1 || f.syncEvery < 0 || f.hidden < 0:
		return errors.New("--epochs, --batch-size, --image-scale and --rows-per-rank must be ≥ 1, --sync-every and --hidden ≥ 0")
	case f.throttle.rank >= 0 && (f.throttle.duty <= 0 || f.throttle.duty >= 1 || f.throttle.period < time.Millisecond):
		return errors.New("--throttle-duty must be in (0, 1) and --throttle-period ≥ 1ms")
	}

	if f.writeShards != "" {
		return writeShards(f.writeShards, f.shards, f.rowsPerRank, f.scale)
	}
	so := cfg.StoreOptions()
	so.Fabric.RegisterDst = f.registerDst
	st, err := engine.Open(so)
	if err != nil {
		return err
	}
	defer st.Close()
	// Ctrl-C: abandon the store and end as the launcher reports an
	// interrupt (exit 130 under mpiexec, SIGINT elsewhere). A call that
	// failed because the store was abandoned reports nothing: the failure
	// report below calls stopInterrupt first, which then waits for the end.
	stopInterrupt := engine.EndOnInterrupt(st)
	defer stopInterrupt()
	rank, width := st.Rank(), st.Width()
	if fb := st.Fabric(); f.showAddr && fb != nil {
		fmt.Fprintf(stderr, "train: rank %d fabric address %x\n", rank, fb.Address())
	}
	if rank == f.throttle.rank {
		stop, err := startThrottle(f.throttle)
		if err != nil {
			return err
		}
		defer stop()
	}
	// With store.width < world every group of width ranks holds the whole
	// data set (member m of each group the same rows), so a read can fail
	// over to another group; the model is still averaged over the world.
	px := model.Pixels(f.scale)
	if !f.storage {
		first := int64(rank%width) * int64(f.rowsPerRank)
		img := make([]byte, f.rowsPerRank*px*4)
		lab := make([]byte, f.rowsPerRank*8)
		model.FillImages(img, first, f.scale)
		model.FillLabels(lab, first)
		if err := st.Add("image", engine.Float32, px, img); err != nil {
			return err
		}
		if err := st.Add("label", engine.Int64, 1, lab); err != nil {
			return err
		}
	} else if _, err := st.Query("image"); err != nil {
		return fmt.Errorf("--storage: %w (do the storage ranks hold image and label?)", err)
	}

	lo := cfg.LoaderOptions([]string{"image", "label"}, f.batchSize, f.seed)
	ld, err := st.NewLoader(lo)
	if err != nil {
		return err
	}
	defer ld.Close()
	// A failure (a dead peer, say) is reported the moment it happens, with
	// its time, before the cleanup above waits for reads in flight.
	defer func() {
		if err != nil {
			stopInterrupt()
			fmt.Fprintf(stderr, "train: rank %d failed at %d ns (unix): %v\n", rank, time.Now().UnixNano(), err)
		}
	}()

	m := model.New(px, f.hidden, f.seed)
	tty := rank == 0 && !f.json && !f.noProgress && isTerminal(os.Stderr)
	if rank == 0 && !f.json {
		pre := fmt.Sprint(cfg.Loader.Prefetch)
		if cfg.Loader.Prefetch == engine.PrefetchAuto {
			pre = "auto"
		}
		fmt.Fprintf(stderr, "train: %d ranks, %d rows of %d B, batch %d, workers %d, prefetch %s, batch-get %v, thread-readers %v, fast-collate %v, node-mode %s; config %s\n",
			st.World(), ld.Rows(), px*4, f.batchSize, cfg.Loader.Workers, pre,
			cfg.Reads.BatchGet, cfg.Reads.ThreadReaders, cfg.Reads.FastCollate, cfg.Store.NodeMode, cfg.Source)
	}
	step := 0
	var checked int64
	for epoch := range f.epochs {
		ep, err := ld.Epoch(epoch)
		if err != nil {
			return err
		}
		var compute, syncT time.Duration
		var lossSum float64
		rows := 0
		for bi := 0; ; bi++ {
			b, err := ep.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			if f.check {
				if err := checkBatch(b.Indices, b.Data[0], b.Data[1], f.scale); err != nil {
					return fmt.Errorf("epoch %d batch %d: %w", epoch, bi, err)
				}
				checked += int64(len(b.Indices))
			}
			t0 := time.Now()
			lossSum += m.Step(b.Data[0], b.Data[1], f.lr)
			rows += len(b.Indices)
			b.Release()
			t1 := time.Now()
			compute += t1.Sub(t0)
			step++
			if f.syncEvery > 0 && step%f.syncEvery == 0 {
				if err := average(st, m); err != nil {
					return err
				}
				syncT += time.Since(t1)
			}
			if tty {
				progress(stderr, epoch, bi+1, ep.Len())
			}
		}
		t1 := time.Now()
		if f.syncEvery == 0 {
			if err := average(st, m); err != nil {
				return err
			}
		}
		loss, err := globalLoss(st, lossSum, rows)
		if err != nil {
			return err
		}
		syncT += time.Since(t1)
		stats := ep.Stats()
		res := epochResult{Epoch: epoch, Rank: rank, Rows: rows, FetchS: stats.Wait.Seconds(),
			ComputeS: (compute + syncT).Seconds(), SyncS: syncT.Seconds(), StepS: stats.Step.Seconds(), Loss: loss}
		if stats.Step > 0 {
			res.WaitStep = float64(stats.Wait) / float64(stats.Step)
		}
		fo := st.Failovers()
		res.Failovers, res.FailedFrom, res.Dead, res.Checked = fo.Reads, fo.From, fo.Dead, checked
		ci := st.Control()
		res.Control, res.CtrlConns, res.CtrlAgent, res.Pid = ci.Kind, ci.Conns, ci.Agent, os.Getpid()
		if tty {
			fmt.Fprint(stderr, "\r\033[K")
		}
		if f.json {
			line, _ := json.Marshal(res)
			fmt.Fprintln(stdout, string(line))
		} else if rank == 0 {
			fmt.Fprintf(stdout, "epoch %d: fetch %.4f s, compute %.4f s (sync %.4f s), fetch wait/step %.4f, loss %s\n",
				epoch, res.FetchS, res.ComputeS, res.SyncS, res.WaitStep, formatLoss(loss))
		}
	}
	if f.skipClose {
		os.Exit(0)
	}
	if err := ld.Close(); err != nil {
		return err
	}
	return st.Close()
}

// formatLoss prints every digit of the float64 (shortest exact form).
func formatLoss(l float64) string { return fmt.Sprint(l) }

func progress(w io.Writer, epoch, done, total int) {
	const width = 30
	fill := width * done / max(total, 1)
	fmt.Fprintf(w, "\repoch %d [%s%s] %d/%d", epoch, strings.Repeat("=", fill), strings.Repeat(" ", width-fill), done, total)
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// writeShards writes the data set (image and label, rows of global index
// 0..shards·rows) as .npy shard files, the layout storage ranks load:
// dir/image/shard-<o>.npy (float32, shape (rows, 28S, 28S)) and
// dir/label/shard-<o>.npy (int64, shape (rows,)).
func writeShards(dir string, shards, rows, scale int) error {
	px := model.Pixels(scale)
	side := 28 * scale
	for o := range shards {
		first := int64(o) * int64(rows)
		img := make([]byte, rows*px*4)
		lab := make([]byte, rows*8)
		model.FillImages(img, first, scale)
		model.FillLabels(lab, first)
		for _, v := range []struct {
			name, descr, shape string
			data               []byte
		}{{"image", "<f4", fmt.Sprintf("(%d, %d, %d)", rows, side, side), img}, {"label", "<i8", fmt.Sprintf("(%d,)", rows), lab}} {
			if err := os.MkdirAll(filepath.Join(dir, v.name), 0o755); err != nil {
				return err
			}
			hdr := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", v.descr, v.shape)
			hdr += strings.Repeat(" ", 63-(10+len(hdr))%64) + "\n" // data starts on a 64-byte boundary
			b := append([]byte("\x93NUMPY\x01\x00"), byte(len(hdr)), byte(len(hdr)>>8))
			b = append(append(b, hdr...), v.data...)
			if err := os.WriteFile(filepath.Join(dir, v.name, fmt.Sprintf("shard-%d.npy", o)), b, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkBatch compares every row of a batch (images and labels) with the
// pattern of its global index.
func checkBatch(idx []int64, img, lab []byte, scale int) error {
	px := model.Pixels(scale)
	wantImg := make([]byte, px*4)
	wantLab := make([]byte, 8)
	for i, g := range idx {
		model.FillImages(wantImg, g, scale)
		model.FillLabels(wantLab, g)
		if !bytes.Equal(img[i*px*4:(i+1)*px*4], wantImg) {
			return fmt.Errorf("row %d (global %d): image differs from its pattern", i, g)
		}
		if !bytes.Equal(lab[i*8:(i+1)*8], wantLab) {
			return fmt.Errorf("row %d (global %d): label differs from its pattern", i, g)
		}
	}
	return nil
}

// average replaces the model by the mean of every rank's model: the sum
// in rank order (AllReduceFloat32), divided by the world size.
func average(st *engine.Store, m *model.Model) error {
	if err := st.AllReduceFloat32("train.average", m.Params); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	w := float32(st.World())
	for i := range m.Params {
		m.Params[i] /= w
	}
	return nil
}

// globalLoss is the mean loss over all ranks' samples: every rank's loss
// sum and row count, gathered and summed in rank order.
func globalLoss(st *engine.Store, lossSum float64, rows int) (float64, error) {
	mine := make([]byte, 16)
	binary.LittleEndian.PutUint64(mine, math.Float64bits(lossSum))
	binary.LittleEndian.PutUint64(mine[8:], uint64(rows))
	all, err := st.AllGather("train.loss", mine)
	if err != nil {
		return 0, fmt.Errorf("sync: %w", err)
	}
	var sum float64
	var n uint64
	for r, b := range all {
		if len(b) != 16 {
			return 0, fmt.Errorf("sync: rank %d sent a loss record of %d bytes, want 16", r, len(b))
		}
		sum += math.Float64frombits(binary.LittleEndian.Uint64(b))
		n += binary.LittleEndian.Uint64(b[8:])
	}
	return sum / float64(n), nil
}
