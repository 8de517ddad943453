package engine

// This file is the data loader: a DistributedSampler-style per-epoch
// shuffle over the caller's width group, batching, worker goroutines with
// their own Readers, order-aware prefetch and direct ("fast") collation into
// reused per-batch buffers.

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ddstore/ddstore/gpu"
	"github.com/ddstore/ddstore/telemetry"
)

// ErrLoader is the class of the loader's errors: invalid options,
// variables that cannot be served together, and failures of its reads
// (the read's own *Error, with its class, is the cause).
var ErrLoader = errors.New("ddstore: loader")

// ErrNotReady is what Epoch.NextWithin returns when the next batch is not
// ready within its wait slice; nothing is lost, call it again.
var ErrNotReady = errors.New("ddstore: loader: next batch not ready yet")

// loaderErr returns an *Error of class ErrLoader about variable name
// ("" when none) with cause err (nil when none).
func loaderErr(name string, err error, format string, args ...any) error {
	return &Error{Op: "Loader", Var: name, Kind: ErrLoader, Detail: fmt.Sprintf(format, args...), Err: err}
}

// LoaderOptions configure NewLoader.
type LoaderOptions struct {
	// Vars are the variables served; every one must have the same number of
	// global rows. Batch.Data[i] holds Vars[i]. Required.
	Vars []string
	// BatchSize is the number of rows per batch on this rank. Required (> 0).
	BatchSize int
	// Seed of the shuffle; epoch e is shuffled with Seed+e. Default 0.
	Seed int64
	// Shuffle permutes the global rows every epoch; false keeps them in order.
	Shuffle bool
	// DropLast truncates the permutation so that every rank of the group gets
	// floor(rows/width) rows (no padding), and drops a last partial batch.
	// false pads by wrapping around the permutation, like torch's
	// DistributedSampler, so every rank gets ceil(rows/width) rows.
	DropLast bool
	// Workers is the number of worker goroutines; 0 (default) reads on the
	// caller's goroutine inside Next, without prefetch.
	Workers int
	// Prefetch is the number of batches in flight ahead of the consumer
	// (being read or ready) when Workers > 0. Default 2; raised to Workers
	// so that every worker can be busy. PrefetchAuto lets the loader
	// choose it from the fetch and step times it measures (Loader.Depth).
	Prefetch int
	// BatchGet reads a batch with one GetBatch per variable; false makes one
	// Get per sample (the seed's DDSTORE_BATCH_GET=0).
	BatchGet bool
	// FastCollate reads rows straight into the batch buffer; false reads
	// into per-sample (or per-call) buffers first and copies (the seed's
	// DDSTORE_FAST_COLLATE=0).
	FastCollate bool
	// ThreadReaders gives every worker its own Reader (endpoint and CQ);
	// false makes workers share the store's default path.
	ThreadReaders bool
	// Replicas and Rank override the sampler's group: Rank in [0, Replicas).
	// Zero Replicas (default) means the store's width group: the width and
	// this rank's position in its group.
	Replicas, Rank int
	// Timeout bounds one wait in Next for a worker's batch. Default 2m.
	Timeout time.Duration
	// Device puts batches in GPU memory (Store.Device) instead of host
	// memory: Batch.Device holds them and Batch.Data is nil. Each worker
	// (or, without workers, the caller) reads through a Reader of its own
	// into a ring of device batches of its own, used in batch order; the
	// copies run on the reader's stream and the consumer's stream waits on
	// the batch's event (Batch.WaitOn), then releases the batch after its
	// work on it (Batch.ReleaseOn). BatchGet, FastCollate and
	// ThreadReaders do not apply.
	Device bool
}

// DefaultLoaderTimeout is LoaderOptions.Timeout when zero.
const DefaultLoaderTimeout = 2 * time.Minute

// EnsureDefaults fills the zero fields with their documented defaults
// (Prefetch 2, and never fewer than Workers unless PrefetchAuto; Timeout
// 2m) and returns o; it checks nothing (Validate does). NewLoader calls it.
func (o *LoaderOptions) EnsureDefaults() *LoaderOptions {
	if o.Prefetch == 0 {
		o.Prefetch = 2
	}
	if o.Prefetch != PrefetchAuto && o.Prefetch < o.Workers {
		o.Prefetch = o.Workers
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultLoaderTimeout
	}
	return o
}

// Validate checks the options and changes nothing; zero fields are valid
// where they have a default.
func (o *LoaderOptions) Validate() error {
	switch {
	case len(o.Vars) == 0:
		return loaderErr("", nil, "no variables")
	case o.BatchSize <= 0:
		return loaderErr("", nil, "BatchSize %d must be > 0", o.BatchSize)
	case o.Workers < 0:
		return loaderErr("", nil, "Workers %d is negative", o.Workers)
	case o.Prefetch < 0 && o.Prefetch != PrefetchAuto:
		return loaderErr("", nil, "Prefetch %d is negative (PrefetchAuto is %d)", o.Prefetch, PrefetchAuto)
	case o.Replicas < 0 || (o.Replicas > 0 && (o.Rank < 0 || o.Rank >= o.Replicas)):
		return loaderErr("", nil, "Rank %d outside [0, Replicas %d)", o.Rank, o.Replicas)
	case o.Timeout < 0:
		return loaderErr("", nil, "Timeout %v is negative", o.Timeout)
	}
	seen := map[string]bool{}
	for _, v := range o.Vars {
		if seen[v] {
			return loaderErr(v, nil, "variable listed twice")
		}
		seen[v] = true
	}
	return nil
}

// rowReader is what the loader reads through: the Store's default path
// (sharedPath) or a Reader. Variables are resolved to *Var once, in
// NewLoader, so a batch read does no name lookup.
type rowReader interface {
	GetVar(v *Var, start, count int64, dst []byte) error
	GetBatchVar(v *Var, idx []int64, dst []byte) error
}

// sharedPath reads through the store's shared default path.
type sharedPath struct{}

func (sharedPath) GetVar(v *Var, start, count int64, dst []byte) error {
	return v.Get(start, count, dst)
}

func (sharedPath) GetBatchVar(v *Var, idx []int64, dst []byte) error {
	return v.GetBatch(idx, dst)
}

// Loader serves batches of one or more variables to a training loop. Use
// one Epoch at a time; starting a new one closes the previous one.
type Loader struct {
	s          *Store
	o          LoaderOptions
	rows       int64  // global rows of every variable
	vars       []*Var // o.Vars resolved; a Free'd variable makes its reads fail
	rowBytes   []int
	replicas   int
	rank       int
	direct     rowReader   // the caller's path when Workers == 0: the store
	readers    []rowReader // per worker (ThreadReaders); else the store for all
	owned      []*Reader
	poolMu     sync.Mutex
	pool       []*Batch // unreferenced batches, cap = poolSize
	poolSize   int      // set at New: PoolSize reads it without poolMu
	poolClosed bool
	recorder   loaderRecorder
	dev        *gpu.Device // Device: the store's GPU
	rings      []*devRing  // Device: per worker (one without workers)
	depthLo    int         // PrefetchAuto: bounds of the depth
	depthHi    int
	depth      atomic.Int64 // prefetch depth in use (PrefetchAuto: chosen, kept across epochs)

	mu     sync.Mutex
	cur    *Epoch
	closed bool
}

// loaderRecorder is the telemetry hook (telemetry.Writer.RecordLoader,
// SetLoaderPrefetch).
type loaderRecorder interface {
	RecordLoader(waitNs, stepNs int64)
	SetLoaderPrefetch(depth int64)
}

// NewLoader returns a loader over o.Vars.
func (s *Store) NewLoader(o LoaderOptions) (*Loader, error) {
	if err := o.EnsureDefaults().Validate(); err != nil {
		return nil, err
	}
	l := &Loader{s: s, o: o, direct: sharedPath{}, rowBytes: make([]int, len(o.Vars)), vars: make([]*Var, len(o.Vars))}
	l.depth.Store(int64(o.Prefetch))
	if o.Prefetch == PrefetchAuto {
		l.depthLo, l.depthHi = max(o.Workers, 1), max(MaxAutoPrefetch, o.Workers)
		l.depth.Store(int64(max(2, l.depthLo)))
	}
	for i, name := range o.Vars {
		v, err := s.Var(name)
		if err != nil {
			return nil, loaderErr(name, err, "lookup")
		}
		l.vars[i] = v
		info := v.Info()
		if i == 0 {
			l.rows = info.GlobalRows
		} else if info.GlobalRows != l.rows {
			return nil, loaderErr(name, ErrMismatch, "%d rows, %q has %d", info.GlobalRows, o.Vars[0], l.rows)
		}
		l.rowBytes[i] = int(info.RowBytes)
	}
	if l.rows <= 0 {
		return nil, loaderErr(o.Vars[0], nil, "variable has no rows")
	}
	l.replicas, l.rank = o.Replicas, o.Rank
	if l.replicas == 0 {
		l.replicas, l.rank = s.Width(), s.Rank()%s.Width() // groups are consecutive ranks
	}
	if o.Workers > 0 {
		l.readers = make([]rowReader, o.Workers)
		for w := range l.readers {
			if !o.ThreadReaders || o.Device { // device batches use the rings' readers
				l.readers[w] = sharedPath{}
				continue
			}
			r, err := s.NewReader()
			if err != nil {
				l.closeReaders()
				return nil, loaderErr("", err, "reader of worker %d", w)
			}
			l.owned = append(l.owned, r)
			l.readers[w] = r
		}
	}
	if o.Device {
		if err := l.newDeviceRings(); err != nil {
			l.closeReaders()
			return nil, err
		}
	}
	l.poolSize = l.maxDepth() + o.Workers + 1
	l.pool = make([]*Batch, 0, l.poolSize)
	if t := s.Telemetry(); t != nil {
		l.recorder = t
		lc := telemetry.LoaderConfig{Workers: int64(o.Workers), Readers: telemetry.LoaderReadersShared, BatchRows: int64(o.BatchSize)}
		if o.Workers > 0 {
			lc.Prefetch = l.depth.Load()
			lc.PrefetchMax = int64(l.depthHi) // 0 unless PrefetchAuto
		}
		if o.ThreadReaders {
			lc.Readers = telemetry.LoaderReadersThread
		}
		t.SetLoaderConfig(lc)
	}
	return l, nil
}

// Options returns the options in use (defaults filled).
func (l *Loader) Options() LoaderOptions { return l.o }

// Depth returns the prefetch depth in use: Prefetch, or with PrefetchAuto
// the one the loader chose last (it is kept from one epoch to the next).
func (l *Loader) Depth() int { return int(l.depth.Load()) }

// maxDepth is the deepest prefetch the loader may use: what slots, the
// batch pool and device rings are sized for.
func (l *Loader) maxDepth() int {
	if l.o.Prefetch == PrefetchAuto {
		return l.depthHi
	}
	return l.o.Prefetch
}

// Rows returns the global rows of the served variables.
func (l *Loader) Rows() int64 { return l.rows }

// Len returns the number of rows this rank gets per epoch.
func (l *Loader) Len() int {
	n, _ := samplerCounts(l.rows, int64(l.replicas), l.o.DropLast)
	return int(n)
}

// Batches returns the number of batches per epoch on this rank.
func (l *Loader) Batches() int { return numBatches(l.Len(), l.o.BatchSize, l.o.DropLast) }

func numBatches(n, bs int, dropLast bool) int {
	if dropLast {
		return n / bs
	}
	return (n + bs - 1) / bs
}

func (l *Loader) closeReaders() error {
	var first error
	for _, r := range l.owned {
		if err := r.Close(); err != nil && first == nil {
			first = err
		}
	}
	l.owned = nil
	return first
}

// Close stops the current epoch and closes the workers' readers. Call it
// before closing the store.
func (l *Loader) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	cur := l.cur
	l.cur = nil
	l.mu.Unlock()
	if cur != nil {
		cur.Close()
	}
	l.closePool()
	err := l.closeReaders() // drains the readers' streams
	return errors.Join(err, l.closeRings())
}

// samplerCounts returns the rows per rank and the padded/truncated total.
func samplerCounts(n, r int64, dropLast bool) (perRank, total int64) {
	if dropLast {
		perRank = n / r
	} else {
		perRank = (n + r - 1) / r
	}
	return perRank, perRank * r
}

// SamplerIndices returns the global rows rank (of replicas) reads in epoch,
// in order: DistributedSampler semantics. The permutation of [0, n) is a
// Fisher–Yates shuffle seeded with seed+epoch (identity when !shuffle); it
// is truncated (dropLast) or padded by wrapping to a multiple of replicas,
// and rank takes every replicas-th entry starting at rank.
//
// It returns an error wrapping ErrLoader when n < 0, replicas <= 0 or rank
// is outside [0, replicas). n == 0 gives an empty slice.
func SamplerIndices(n int64, replicas, rank int, seed int64, epoch int, shuffle, dropLast bool) ([]int64, error) {
	switch {
	case n < 0:
		return nil, loaderErr("", nil, "SamplerIndices: %d rows is negative", n)
	case replicas <= 0:
		return nil, loaderErr("", nil, "SamplerIndices: replicas %d must be > 0", replicas)
	case rank < 0 || rank >= replicas:
		return nil, loaderErr("", nil, "SamplerIndices: rank %d outside [0, replicas %d)", rank, replicas)
	case !dropLast && n > math.MaxInt64-int64(replicas):
		return nil, loaderErr("", nil, "SamplerIndices: %d rows overflow padding to %d replicas", n, replicas)
	}
	perRank, total := samplerCounts(n, int64(replicas), dropLast)
	perm := make([]int64, n, max(n, total))
	for i := range perm {
		perm[i] = int64(i)
	}
	if shuffle {
		rng := rand.New(rand.NewPCG(uint64(seed+int64(epoch)), 0x9e3779b97f4a7c15))
		for i := n - 1; i > 0; i-- {
			j := int64(rng.Uint64N(uint64(i + 1)))
			perm[i], perm[j] = perm[j], perm[i]
		}
	}
	for int64(len(perm)) < total { // pad by wrapping
		perm = append(perm, perm[:min(int64(len(perm)), total-int64(len(perm)))]...)
	}
	perm = perm[:total]
	mine := make([]int64, 0, perRank)
	for i := int64(rank); i < total; i += int64(replicas) {
		mine = append(mine, perm[i])
	}
	return mine, nil
}
