package engine

// The loader's device mode (LoaderOptions.Device): batches land in GPU
// memory. Every worker owns a ring of device slots, used strictly in the
// order of the batches it fills: its j-th batch goes into slot j mod the
// ring size, and a slot is filled again only after the batch it held was
// released, on the host (Release) and, with ReleaseOn, on the consumer's
// stream (the filling stream waits on that stream's event). No slot is
// ever handed out in the order of whoever takes a lock first, the seed's
// corrupting pool. The batch's copies are queued on the worker's own
// stream and end with the batch's event; the consumer's stream waits on
// it (Batch.WaitOn), so neither the worker nor the consumer blocks on the
// device.

import (
	"errors"
	"fmt"
	"time"

	"github.com/ddstore/ddstore/gpu"
)

// devSlot is one device batch of a worker's ring.
type devSlot struct {
	b        *Batch      // the Batch handed out for this slot, reused
	mem      *gpu.Buffer // every variable's rows, one allocation
	offs     []int       // each variable's offset in mem
	ready    *gpu.Event  // recorded after the batch's copies on the worker's stream
	released *gpu.Event  // recorded on the consumer's stream by ReleaseOn
	waitRel  bool        // released was recorded for the batch last held
	free     chan struct{}
}

// devRing is one worker's slots and the Reader that fills them.
type devRing struct {
	r     *Reader
	slots []*devSlot
	next  int // the slot of the worker's next batch
}

// deviceRingSlots is how many slots a worker's ring has: enough that a
// worker never waits for a consumer that releases each batch before its
// next Next (Prefetch batches in flight, one being filled, one held, one
// spare for a consumer that releases just after Next).
func (l *Loader) deviceRingSlots() int { return l.maxDepth() + 3 }

// newDeviceRings makes a ring per worker (one for the caller's goroutine
// without workers) with its own Reader; slots are allocated at first use.
func (l *Loader) newDeviceRings() error {
	dev, err := l.s.Device()
	if err != nil {
		return loaderErr("", err, "device batches")
	}
	l.dev = dev
	n := max(l.o.Workers, 1)
	l.rings = make([]*devRing, n)
	for w := range l.rings {
		r, err := l.s.NewReader()
		if err != nil {
			return loaderErr("", err, "device reader of worker %d", w)
		}
		l.owned = append(l.owned, r)
		l.rings[w] = &devRing{r: r, slots: make([]*devSlot, l.deviceRingSlots())}
	}
	return nil
}

// newSlot allocates one slot: device memory for a full batch of every
// variable, the views handed out as Batch.Device, and the events.
func (l *Loader) newSlot() (*devSlot, error) {
	s := &devSlot{offs: make([]int, len(l.rowBytes)), free: make(chan struct{}, 1)}
	size := 0
	for v, rb := range l.rowBytes {
		s.offs[v] = size
		size += (rb*l.o.BatchSize + batchAlign - 1) &^ (batchAlign - 1)
	}
	var err error
	fail := func(what string, err error) (*devSlot, error) {
		return nil, errors.Join(loaderErr("", gpuError("Loader", "", what, err), "device batch"), s.close())
	}
	if s.mem, err = l.dev.Alloc(size); err != nil {
		return fail(fmt.Sprintf("%d bytes of device memory", size), err)
	}
	if s.ready, err = l.dev.NewEvent(); err != nil {
		return fail("batch event", err)
	}
	if s.released, err = l.dev.NewEvent(); err != nil {
		return fail("release event", err)
	}
	s.b = &Batch{l: l, slot: s, Indices: make([]int64, 0, l.o.BatchSize), Device: make([]*gpu.Buffer, len(l.rowBytes))}
	for v, rb := range l.rowBytes {
		if s.b.Device[v], err = l.dev.Wrap(s.mem.Ptr()+gpu.DevicePtr(s.offs[v]), rb*l.o.BatchSize); err != nil {
			return fail("batch view", err)
		}
	}
	s.free <- struct{}{}
	return s, nil
}

func (s *devSlot) close() error {
	var errs []error
	for _, e := range []*gpu.Event{s.ready, s.released} {
		if e != nil {
			errs = append(errs, e.Close())
		}
	}
	if s.mem != nil {
		errs = append(errs, s.mem.Free())
	}
	return errors.Join(errs...)
}

// leaseDevice takes worker w's next slot once its last batch is released
// (or stop closes, or the loader's Timeout passes).
func (l *Loader) leaseDevice(w int, stop <-chan struct{}) (*Batch, error) {
	ring := l.rings[w]
	k := ring.next
	if ring.slots[k] == nil {
		s, err := l.newSlot()
		if err != nil {
			return nil, err
		}
		ring.slots[k] = s
	}
	s := ring.slots[k]
	select {
	case <-s.free:
	default:
		t := time.NewTimer(l.o.Timeout)
		defer t.Stop()
		select {
		case <-s.free:
		case <-stop:
			return nil, loaderErr("", ErrClosed, "stopped while waiting for a device batch to be released")
		case <-t.C:
			return nil, loaderErr("", ErrTimeout, "device batch of epoch %d batch %d (worker %d's slot %d of %d) not released within %v: release batches (Release or ReleaseOn) before holding %d of them",
				s.b.Epoch, s.b.Number, w, k, len(ring.slots), l.o.Timeout, len(ring.slots))
		}
	}
	ring.next = (k + 1) % len(ring.slots)
	s.b.refs.Store(1)
	return s.b, nil
}

// fillDevice queues the reads of rows idx of every variable into b's slot
// on worker w's stream, after the consumer's release of the slot's last
// batch, and records the batch's event after them.
func (l *Loader) fillDevice(w int, b *Batch, idx []int64) error {
	s, r := b.slot, l.rings[w].r
	b.Indices = append(b.Indices[:0], idx...)
	dc, err := r.devCtx()
	if err != nil {
		return loaderErr("", err, "epoch %d batch %d", b.Epoch, b.Number)
	}
	if s.waitRel {
		s.waitRel = false
		if err := dc.stream.WaitEvent(s.released); err != nil {
			return loaderErr("", gpuError("Loader", "", "waiting for the consumer's release", err), "epoch %d batch %d", b.Epoch, b.Number)
		}
	}
	for v, vr := range l.vars {
		n := len(idx) * l.rowBytes[v]
		if err := b.Device[v].Rebind(s.mem.Ptr()+gpu.DevicePtr(s.offs[v]), max(n, 1)); err != nil {
			return loaderErr(vr.name, err, "epoch %d batch %d", b.Epoch, b.Number)
		}
		rd := devRead{op: "Loader", idx: b.Indices, rows: int64(len(idx)), dst: b.Device[v], async: true}
		if _, err := r.readerDevice(vr, "", &rd); err != nil {
			return loaderErr(vr.name, err, "epoch %d batch %d", b.Epoch, b.Number)
		}
	}
	if err := s.ready.Record(dc.stream); err != nil {
		return loaderErr("", gpuError("Loader", "", "batch event", err), "epoch %d batch %d", b.Epoch, b.Number)
	}
	return nil
}

// closeRings frees the device slots; batches must have been released.
func (l *Loader) closeRings() error {
	var errs []error
	for _, ring := range l.rings {
		for i, s := range ring.slots {
			if s != nil {
				errs = append(errs, s.close())
				ring.slots[i] = nil
			}
		}
	}
	return errors.Join(errs...)
}

// WaitOn makes work queued on s after this call wait until the batch's
// rows are in device memory (cuStreamWaitEvent): the consumer's stream
// waits, the host does not. Device batches only.
func (b *Batch) WaitOn(s *gpu.Stream) error {
	if b.slot == nil {
		return loaderErr("", ErrInvalid, "WaitOn: a host batch (LoaderOptions.Device is off)")
	}
	if err := s.WaitEvent(b.slot.ready); err != nil {
		return gpuError("Batch.WaitOn", "", "", err)
	}
	return nil
}

// Sync waits on the host until the batch's rows are in device memory.
func (b *Batch) Sync() error {
	if b.slot == nil {
		return nil
	}
	if err := b.slot.ready.Sync(); err != nil {
		return gpuError("Batch.Sync", "", "", err)
	}
	return nil
}

// ReleaseOn is Release for a batch whose device memory work queued on s
// still reads: the slot is filled again only after that work (the filling
// stream waits on an event recorded on s now). Without it, Release says
// the device is done with the batch too.
func (b *Batch) ReleaseOn(s *gpu.Stream) error {
	if b.slot == nil {
		b.Release()
		return nil
	}
	if err := b.slot.released.Record(s); err != nil {
		return gpuError("Batch.ReleaseOn", "", "", err)
	}
	b.slot.waitRel = true
	b.Release()
	return nil
}
