package engine

// This file is the data loader: a DistributedSampler-style per-epoch
// shuffle over the caller's width group, batching, worker goroutines with
// their own Readers, order-aware prefetch and direct ("fast") collation into
// reused per-batch buffers.

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ddstore/ddstore/fabric"
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
	// so that every worker can be busy.
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
// (Prefetch 2, and never fewer than Workers; Timeout 2m) and returns o; it
// checks nothing (Validate does). NewLoader calls it.
func (o *LoaderOptions) EnsureDefaults() *LoaderOptions {
	if o.Prefetch == 0 {
		o.Prefetch = 2
	}
	if o.Prefetch < o.Workers {
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
	case o.Prefetch < 0:
		return loaderErr("", nil, "Prefetch %d is negative", o.Prefetch)
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
	pool       []*Batch // unreferenced batches, cap = pool size
	poolClosed bool
	recorder   loaderRecorder
	dev        *gpu.Device // Device: the store's GPU
	rings      []*devRing  // Device: per worker (one without workers)

	mu     sync.Mutex
	cur    *Epoch
	closed bool
}

// loaderRecorder is the telemetry hook (telemetry.Writer.RecordLoader).
type loaderRecorder interface{ RecordLoader(waitNs, stepNs int64) }

// NewLoader returns a loader over o.Vars.
func (s *Store) NewLoader(o LoaderOptions) (*Loader, error) {
	if err := o.EnsureDefaults().Validate(); err != nil {
		return nil, err
	}
	l := &Loader{s: s, o: o, direct: sharedPath{}, rowBytes: make([]int, len(o.Vars)), vars: make([]*Var, len(o.Vars))}
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
	l.pool = make([]*Batch, 0, o.Prefetch+o.Workers+1)
	if t := s.Telemetry(); t != nil {
		l.recorder = t
		lc := telemetry.LoaderConfig{Workers: int64(o.Workers), Readers: telemetry.LoaderReadersShared, BatchRows: int64(o.BatchSize)}
		if o.Workers > 0 {
			lc.Prefetch = int64(o.Prefetch)
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

// Batch is one batch: the global rows and, per variable, their data as
// contiguous rows. The data lives in one region outside the Go heap
// (fabric.Alloc), so the fabric reads into it directly and a foreign
// runtime (the Python binding's tensors) may view it without a copy.
//
// A batch is leased: Next hands it out with one reference; Retain adds
// one, Release drops one, and the buffers return to the loader's pool
// when the last is dropped. Data must not be touched after that.
type Batch struct {
	Epoch, Number int
	Indices       []int64  // global row of each sample, in order
	Data          [][]byte // per variable (LoaderOptions.Vars order), len(Indices) rows each
	bufs          [][]byte // full-size buffers behind Data, inside mem
	mem           *fabric.Memory
	l             *Loader
	refs          atomic.Int32

	// Device holds, with LoaderOptions.Device, each variable's rows in
	// device memory (len(Indices) rows each; Data is nil). Wait for them
	// with WaitOn (a stream) or Sync (the host).
	Device []*gpu.Buffer
	slot   *devSlot
}

// batchAlign aligns every variable's buffer inside a batch's region.
const batchAlign = 64

// Retain adds a reference to the batch (a second holder): the batch is
// recycled only after one more Release. Call it only while holding a
// reference.
func (b *Batch) Retain() {
	if b != nil {
		b.refs.Add(1)
	}
}

// Refs is the number of references held (0 once recycled).
func (b *Batch) Refs() int { return int(b.refs.Load()) }

// Release drops one reference; the last returns the batch's buffers to the
// loader (or frees them when the pool is full or the loader closed).
// Releasing a batch that holds no reference is a no-op.
func (b *Batch) Release() {
	if b == nil {
		return
	}
	for {
		n := b.refs.Load()
		if n <= 0 {
			return
		}
		if b.refs.CompareAndSwap(n, n-1) {
			if n == 1 {
				if b.slot != nil {
					b.slot.free <- struct{}{} // the worker's ring may fill it again
				} else {
					b.l.recycle(b)
				}
			}
			return
		}
	}
}

// recycle parks an unreferenced batch in the pool, or frees its memory.
func (l *Loader) recycle(b *Batch) {
	l.poolMu.Lock()
	defer l.poolMu.Unlock()
	if !l.poolClosed && len(l.pool) < cap(l.pool) {
		l.pool = append(l.pool, b)
		return
	}
	b.free()
}

func (b *Batch) free() {
	if b.mem != nil {
		_ = b.mem.Free() // no read is in flight: the batch was filled or failed
		b.mem = nil
	}
	for i := range b.bufs {
		b.bufs[i], b.Data[i] = nil, nil
	}
}

// getBatch takes a batch from the pool or allocates one, with one reference.
func (l *Loader) getBatch() (*Batch, error) {
	l.poolMu.Lock()
	if n := len(l.pool); n > 0 {
		b := l.pool[n-1]
		l.pool = l.pool[:n-1]
		l.poolMu.Unlock()
		b.refs.Store(1)
		return b, nil
	}
	l.poolMu.Unlock()
	b := &Batch{l: l, Indices: make([]int64, 0, l.o.BatchSize),
		Data: make([][]byte, len(l.o.Vars)), bufs: make([][]byte, len(l.o.Vars))}
	size := 0
	for _, rb := range l.rowBytes {
		size += (rb*l.o.BatchSize + batchAlign - 1) &^ (batchAlign - 1)
	}
	mem, err := fabric.Alloc(size)
	if err != nil {
		return nil, loaderErr("", err, "batch buffer of %d bytes", size)
	}
	b.mem = mem
	buf, off := mem.Bytes(), 0
	for v, rb := range l.rowBytes {
		n := rb * l.o.BatchSize
		b.bufs[v] = buf[off : off+n : off+n]
		off += (n + batchAlign - 1) &^ (batchAlign - 1)
	}
	b.refs.Store(1)
	return b, nil
}

// PoolSize is the number of batches the loader keeps for reuse: the
// batches in flight (Prefetch, plus one per worker) and one held by the
// consumer. Batches leased beyond it are allocated and freed as needed.
func (l *Loader) PoolSize() int { return cap(l.pool) }

// closePool frees the pooled batches; batches still leased are freed at
// their last Release.
func (l *Loader) closePool() {
	l.poolMu.Lock()
	defer l.poolMu.Unlock()
	l.poolClosed = true
	for _, b := range l.pool {
		b.free()
	}
	l.pool = nil
}

// lease takes the batch that worker w (0 without workers) fills next:
// its ring's next device slot, or a host batch from the pool.
func (l *Loader) lease(w int, stop <-chan struct{}) (*Batch, error) {
	if l.rings != nil {
		return l.leaseDevice(w, stop)
	}
	return l.getBatch()
}

// fillFor fills b for worker w (-1: the caller's goroutine, no workers).
func (l *Loader) fillFor(w int, b *Batch, idx []int64) error {
	if l.rings != nil {
		return l.fillDevice(max(w, 0), b, idx)
	}
	if w < 0 {
		return l.fill(l.direct, b, idx)
	}
	return l.fill(l.readers[w], b, idx)
}

// fill reads the rows idx of every variable into b.
func (l *Loader) fill(r rowReader, b *Batch, idx []int64) error {
	b.Indices = append(b.Indices[:0], idx...)
	for v, name := range l.o.Vars {
		vr := l.vars[v]
		rb := l.rowBytes[v]
		dst := b.bufs[v][:len(idx)*rb]
		var err error
		switch {
		case l.o.BatchGet && l.o.FastCollate:
			err = r.GetBatchVar(vr, b.Indices, dst)
		case l.o.BatchGet:
			tmp := make([]byte, len(dst)) // a fresh buffer per call, then collate
			if err = r.GetBatchVar(vr, b.Indices, tmp); err == nil {
				copy(dst, tmp)
			}
		case l.o.FastCollate:
			for i, g := range idx {
				if err = r.GetVar(vr, g, 1, dst[i*rb:(i+1)*rb]); err != nil {
					err = &Error{Detail: fmt.Sprintf("row %d", g), Err: err}
					break
				}
			}
		default:
			samples := make([][]byte, len(idx)) // one buffer per sample, then collate
			for i, g := range idx {
				samples[i] = make([]byte, rb)
				if err = r.GetVar(vr, g, 1, samples[i]); err != nil {
					err = &Error{Detail: fmt.Sprintf("row %d", g), Err: err}
					break
				}
			}
			if err == nil {
				for i, s := range samples {
					copy(dst[i*rb:], s)
				}
			}
		}
		if err != nil {
			return loaderErr(name, err, "epoch %d batch %d", b.Epoch, b.Number)
		}
		b.Data[v] = dst
	}
	return nil
}

// EpochStats are the consumer-side timings of an epoch so far.
type EpochStats struct {
	Batches int           // batches returned by Next
	Rows    int           // rows in them
	Wait    time.Duration // time spent inside Next (waiting for or reading batches)
	Step    time.Duration // time between consecutive Next returns (first: its wait)
}

type result struct {
	b   *Batch
	err error
}

// Epoch iterates over one epoch's batches in order. One consumer goroutine
// calls Next; Close (directly, through Loader.Close or by starting the next
// Epoch) may come from any goroutine and wakes a blocked Next.
type Epoch struct {
	l       *Loader
	epoch   int
	indices []int64
	n       int // batches

	// workers
	k        int
	slots    []chan result
	tokens   chan struct{}
	next     atomic.Int64
	stop     chan struct{} // closed once (stopOnce) by Close or a failing Next
	stopOnce sync.Once
	wg       sync.WaitGroup
	timer    *time.Timer

	cur        int
	waitSince  time.Time // start of a wait that NextWithin's slices continue
	err        error
	closed     atomic.Bool // set by Close, Loader.Close or the next Epoch (any goroutine)
	lastReturn time.Time
	stats      EpochStats
}

// Epoch starts epoch e (closing the previous epoch if still open). With
// workers, reading starts at once.
func (l *Loader) Epoch(e int) (*Epoch, error) { return l.epoch(e, nil) }

// EpochIndices starts epoch e over the caller's own sample order (a user
// sampler): this rank reads exactly the global rows idx, in order, in
// batches of BatchSize (DropLast drops a last partial batch). Every index
// must be in [0, Rows()); the loader keeps its own copy.
func (l *Loader) EpochIndices(e int, idx []int64) (*Epoch, error) {
	for i, g := range idx {
		if g < 0 || g >= l.rows {
			return nil, loaderErr("", ErrIndex, "epoch %d: sampler index %d is row %d, outside [0,%d)", e, i, g, l.rows)
		}
	}
	return l.epoch(e, append(make([]int64, 0, len(idx)), idx...))
}

func (l *Loader) epoch(e int, idx []int64) (*Epoch, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, loaderErr("", ErrClosed, "loader closed")
	}
	prev := l.cur
	l.cur = nil
	l.mu.Unlock()
	if prev != nil {
		prev.Close()
	}
	if idx == nil {
		var err error
		idx, err = SamplerIndices(l.rows, l.replicas, l.rank, l.o.Seed, e, l.o.Shuffle, l.o.DropLast)
		if err != nil {
			return nil, loaderErr("", err, "epoch %d", e)
		}
	}
	ep := &Epoch{l: l, epoch: e, indices: idx}
	ep.n = numBatches(len(ep.indices), l.o.BatchSize, l.o.DropLast)
	if l.o.Workers > 0 {
		ep.k = l.o.Prefetch
		ep.slots = make([]chan result, ep.k)
		for i := range ep.slots {
			ep.slots[i] = make(chan result, 1)
		}
		ep.tokens = make(chan struct{}, ep.k)
		for range ep.k {
			ep.tokens <- struct{}{}
		}
		ep.stop = make(chan struct{})
		ep.timer = time.NewTimer(time.Hour)
		ep.timer.Stop()
		ep.wg.Add(l.o.Workers)
		for w := range l.o.Workers {
			go ep.work(w)
		}
	}
	l.mu.Lock()
	if l.closed { // closed while this epoch started: stop it again
		l.mu.Unlock()
		ep.Close()
		return nil, loaderErr("", ErrClosed, "loader closed while starting epoch %d", e)
	}
	prev = l.cur // another goroutine's Epoch call raced this one
	l.cur = ep
	l.mu.Unlock()
	if prev != nil {
		prev.Close()
	}
	return ep, nil
}

// Len returns the number of batches of the epoch.
func (e *Epoch) Len() int { return e.n }

// Indices returns the rows this rank reads in the epoch, in order.
func (e *Epoch) Indices() []int64 { return e.indices }

// Stats returns the consumer-side timings so far.
func (e *Epoch) Stats() EpochStats { return e.stats }

func (e *Epoch) batchIdx(b int) []int64 {
	bs := e.l.o.BatchSize
	return e.indices[b*bs : min((b+1)*bs, len(e.indices))]
}

// work is one worker: it takes a token (a free prefetch slot), the next
// batch number, fills the batch and parks it in slot number%k. Batch
// numbers in flight are always a contiguous run of at most k after the
// consumer's position, so slots never collide.
func (e *Epoch) work(w int) {
	defer e.wg.Done()
	for {
		select {
		case <-e.stop:
			return
		default:
		}
		select {
		case <-e.tokens:
		case <-e.stop:
			return
		}
		num := int(e.next.Add(1) - 1)
		if num >= e.n {
			e.tokens <- struct{}{}
			return
		}
		b, err := e.l.lease(w, e.stop)
		if err == nil {
			b.Epoch, b.Number = e.epoch, num
			if err = e.l.fillFor(w, b, e.batchIdx(num)); err != nil {
				b.Release()
				b = nil
			}
		}
		e.slots[num%e.k] <- result{b, err}
		if err != nil {
			return
		}
	}
}

// Next returns the next batch, io.EOF after the last one, or the first
// error of a worker (wrapping the store's error, with epoch, batch and
// variable). After an error every call returns it.
func (e *Epoch) Next() (*Batch, error) { return e.nextWithin(0) }

// NextWithin is Next that waits at most slice for a worker's batch: it
// returns ErrNotReady when the batch is not ready by then, and the next
// call goes on waiting for the same batch (the epoch's Timeout counts
// across slices). Foreign callers (the Python binding) wait in slices so
// that they can handle signals. slice <= 0 is Next. Without workers the
// read runs inside the call, bounded by the fabric's timeout.
func (e *Epoch) NextWithin(slice time.Duration) (*Batch, error) { return e.nextWithin(slice) }

func (e *Epoch) nextWithin(slice time.Duration) (*Batch, error) {
	if e.err != nil {
		return nil, e.err
	}
	if e.closed.Load() {
		return nil, e.errClosed()
	}
	if e.cur >= e.n {
		return nil, io.EOF
	}
	t0 := time.Now()
	if !e.waitSince.IsZero() {
		t0 = e.waitSince // a wait that earlier slices began
	}
	var b *Batch
	var now time.Time
	if e.k == 0 {
		var err error
		if b, err = e.l.lease(0, nil); err == nil {
			b.Epoch, b.Number = e.epoch, e.cur
			if err = e.l.fillFor(-1, b, e.batchIdx(e.cur)); err != nil {
				b.Release()
			}
		}
		if err != nil {
			e.err = err
			return nil, err
		}
		now = time.Now()
	} else {
		slot := e.slots[e.cur%e.k]
		var r result
		select {
		case r = <-slot: // ready: no timer
		default:
			left := e.l.o.Timeout - time.Since(t0)
			sliced := slice > 0 && slice < left
			if sliced {
				left = slice
			}
			e.timer.Reset(max(left, 0))
			select {
			case r = <-slot:
				e.timer.Stop()
			case <-e.stop: // Close (Loader.Close, the next Epoch) from another goroutine
				e.timer.Stop()
				return nil, e.errClosed()
			case <-e.timer.C:
				if sliced {
					e.waitSince = t0
					return nil, ErrNotReady
				}
				e.err = loaderErr("", ErrTimeout, "epoch %d batch %d not read within %v", e.epoch, e.cur, e.l.o.Timeout)
				e.shutdown()
				return nil, e.err
			}
		}
		now = time.Now() // the wait ends here; the token hand-off below is not waiting
		e.waitSince = time.Time{}
		if r.err != nil {
			e.err = r.err
			e.shutdown()
			return nil, r.err
		}
		b = r.b
		e.tokens <- struct{}{}
	}
	e.cur++
	wait := now.Sub(t0)
	step := wait
	if !e.lastReturn.IsZero() {
		step = now.Sub(e.lastReturn)
	}
	e.lastReturn = now
	e.stats.Batches++
	e.stats.Rows += len(b.Indices)
	e.stats.Wait += wait
	e.stats.Step += step
	if e.l.recorder != nil {
		e.l.recorder.RecordLoader(int64(wait), int64(step))
	}
	return b, nil
}

func (e *Epoch) errClosed() error {
	return loaderErr("", ErrClosed, "epoch %d closed (loader %v)", e.epoch, e.l.o.Vars)
}

// shutdown stops the workers, waits for them and recycles parked batches.
// It may run concurrently from Close (any goroutine) and from Next.
func (e *Epoch) shutdown() {
	if e.stop == nil {
		return
	}
	e.stopOnce.Do(func() { close(e.stop) })
	// Workers never block on a slot (see work), so they all return after at
	// most their current read.
	e.wg.Wait()
	for _, s := range e.slots {
		select {
		case r := <-s:
			r.b.Release() // nil-safe
		default:
		}
	}
}

// Close stops the epoch's workers and waits for them (each finishes at most
// its current batch read, which is bounded by the fabric timeout). It may be
// called from another goroutine than the consumer's: a Next blocked waiting
// for a batch then returns an error wrapping ErrClosed at once.
func (e *Epoch) Close() {
	if !e.closed.CompareAndSwap(false, true) {
		return
	}
	e.shutdown()
	e.l.mu.Lock()
	if e.l.cur == e {
		e.l.cur = nil
	}
	e.l.mu.Unlock()
}
