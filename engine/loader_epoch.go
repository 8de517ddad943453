package engine

// One epoch of the loader (loader.go): its workers fill batches in order,
// k ahead of the trainer (prefetch), and Next hands them out with a
// deadline.

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ddstore/ddstore/telemetry"
)

// EpochStats are the consumer-side timings of an epoch so far.
type EpochStats struct {
	Batches int           // batches returned by Next
	Rows    int           // rows in them
	Wait    time.Duration // time spent inside Next (waiting for or reading batches)
	Step    time.Duration // time between consecutive Next returns (first: its wait)
	// Startup is the first batch's wait (part of Wait and Step): the
	// epoch's start-up (a new loader's readers connect on their first
	// reads), which no prefetch depth hides.
	Startup time.Duration
}

type result struct {
	b       *Batch
	err     error
	fetchNs int64 // the worker's time filling b
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
	k        int // slots: the deepest prefetch (Loader.maxDepth)
	slots    []chan result
	tokens   chan struct{} // depth tokens circulate (fewer while owe > 0)
	owe      int           // tokens to withhold: the depth was lowered
	auto     bool          // PrefetchAuto: ds decides the depth
	ds       depthState
	win      depthStats
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
		ep.k = l.maxDepth()
		ep.slots = make([]chan result, ep.k)
		for i := range ep.slots {
			ep.slots[i] = make(chan result, 1)
		}
		ep.tokens = make(chan struct{}, ep.k)
		depth := l.Depth()
		for range depth {
			ep.tokens <- struct{}{}
		}
		if l.o.Prefetch == PrefetchAuto {
			ep.auto = true
			ep.ds = depthState{Depth: depth, Lo: l.depthLo, Hi: l.depthHi}
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
// numbers in flight are always a contiguous run of at most depth <= k
// after the consumer's position, so slots never collide.
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
		var fetch int64
		if err == nil {
			b.Epoch, b.Number = e.epoch, num
			var t0 int64
			if e.auto {
				t0 = telemetry.Nanotime()
			}
			if err = e.l.fillFor(w, b, e.batchIdx(num)); err != nil {
				b.Release()
				b = nil
			}
			if e.auto {
				fetch = telemetry.Nanotime() - t0
			}
		}
		e.slots[num%e.k] <- result{b, err, fetch}
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
		if e.owe > 0 {
			e.owe-- // the depth was lowered: this token leaves circulation
		} else {
			e.tokens <- struct{}{}
		}
		if e.auto {
			e.win.MaxFetchNs = max(e.win.MaxFetchNs, r.fetchNs)
		}
	}
	e.cur++
	wait := now.Sub(t0)
	step := wait
	first := e.lastReturn.IsZero()
	if !first {
		step = now.Sub(e.lastReturn)
	}
	e.lastReturn = now
	e.stats.Batches++
	e.stats.Rows += len(b.Indices)
	e.stats.Wait += wait
	e.stats.Step += step
	if first {
		e.stats.Startup = wait
	}
	if e.l.recorder != nil {
		e.l.recorder.RecordLoader(int64(wait), int64(step))
	}
	if e.auto && !first { // the first batch's wait is the epoch's start-up: no depth hides it
		e.tune(wait, step)
	}
	return b, nil
}

// tune adds a batch's timings to the window and, every depthWindow
// batches or at once after a stall (windowDone), applies nextDepth's
// answer: a deeper prefetch puts tokens into circulation at once, a
// shallower one withholds returned tokens.
func (e *Epoch) tune(wait, step time.Duration) {
	e.win.Batches++
	e.win.WaitNs += int64(wait)
	e.win.StepNs += int64(step)
	if !windowDone(e.win) {
		return
	}
	old := e.ds.Depth
	e.ds = nextDepth(e.ds, e.win)
	e.win = depthStats{}
	for d := old; d < e.ds.Depth; d++ {
		if e.owe > 0 {
			e.owe--
			continue
		}
		select {
		case e.tokens <- struct{}{}: // never blocks: at most k tokens exist
		default:
		}
	}
	e.owe += max(old-e.ds.Depth, 0)
	if e.ds.Depth != old {
		e.l.depth.Store(int64(e.ds.Depth))
		if e.l.recorder != nil {
			e.l.recorder.SetLoaderPrefetch(int64(e.ds.Depth))
		}
	}
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
