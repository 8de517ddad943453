package engine

// The loader's batches (loader.go): off-heap buffers from a per-loader
// pool, reference-counted, filled straight from the store (fast collate).

import (
	"fmt"
	"sync/atomic"

	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/gpu"
)

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
// (Not cap(l.pool): the workers rewrite that slice under poolMu.)
func (l *Loader) PoolSize() int { return l.poolSize }

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
