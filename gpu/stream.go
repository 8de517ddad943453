package gpu

import (
	"strconv"
	"time"
)

// Stream is a queue of device work: created non-blocking, so it never
// synchronises with the legacy default stream that training kernels run
// on. One per reader; a Stream is used by one goroutine at a time.
type Stream struct {
	dev   *Device
	h     handle
	sync  handle // private blocking-sync event for Sync and ReadBack
	owned bool   // false for WrapStream
}

// maxStreamTries bounds how many streams NewStream makes before it gives
// up finding one independent of the default stream.
const maxStreamTries = 16

// probeBusy is how long the default stream is held busy while a new
// stream is probed; a stream that looks shared is probed again with
// probeBusy*probeRecheck before it is replaced.
const (
	probeBusy    = 20 * time.Millisecond
	probeRecheck = 4
)

// NewStream creates a non-blocking stream. Unless Options.NoStreamProbe,
// it checks that the stream does not share a hardware queue with the
// default stream (HIP maps streams round-robin onto GPU_MAX_HW_QUEUES
// queues, default 4, and the default stream holds one of them): it holds
// the default stream busy, runs a one-byte memset on the new stream, and
// requires that memset to finish while the default stream is still busy.
// A stream that fails is kept (so the runtime does not hand its queue out
// again), counted in ReplacedStreams, and replaced by a new one.
func (d *Device) NewStream() (*Stream, error) {
	for try := 0; try < maxStreamTries; try++ {
		s, err := d.newStream(false)
		if err != nil || !d.probe {
			return s, err
		}
		shared, err := d.sharesDefaultQueue(s)
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		if !shared {
			return s, nil
		}
		d.mu.Lock()
		d.parked = append(d.parked, s.h)
		d.replaced++
		d.mu.Unlock()
		_ = d.err(cEventDestroy(d.h, s.sync))
	}
	return nil, &Error{Runtime: d.Runtime, Device: d.Index, Op: "new stream", kind: ErrSharedQueue,
		Text:   "every new stream shared the default stream's hardware queue",
		Detail: "tried " + strconv.Itoa(maxStreamTries) + " streams; raise GPU_MAX_HW_QUEUES (HIP) or CUDA_DEVICE_MAX_CONNECTIONS (CUDA)"}
}

// newStream makes a stream without the probe; blocking makes a legacy
// stream that synchronises with the default stream (tests only).
func (d *Device) newStream(blocking bool) (*Stream, error) {
	if d.closed.Load() {
		return nil, d.errClosed("new stream")
	}
	h, r := cStreamCreate(d.h, blocking)
	if err := d.err(r); err != nil {
		return nil, err
	}
	ev, r := cEventCreate(d.h)
	if err := d.err(r); err != nil {
		_ = d.err(cStreamDestroy(d.h, h))
		return nil, err
	}
	return &Stream{dev: d, h: h, sync: ev, owned: true}, nil
}

// sharesDefaultQueue probes s behind a busy default stream, twice (the
// second time longer) before it calls s shared: a stream that finishes its
// memset while the default stream is still busy is independent for sure,
// while a slow host can make an independent stream look shared.
func (d *Device) sharesDefaultQueue(s *Stream) (bool, error) {
	for busy := probeBusy; busy <= probeBusy*probeRecheck; busy *= probeRecheck {
		shared, err := d.probeOnce(s, busy)
		if err != nil || !shared {
			return shared, err
		}
	}
	return true, nil
}

func (d *Device) probeOnce(s *Stream, busyFor time.Duration) (bool, error) {
	b, err := d.BusyDefaultStream(busyFor)
	if err != nil {
		return false, err
	}
	cell, err := d.scratchBuffer()
	if err == nil {
		err = d.err(cMemsets(d.h, cell.ptr, 1, 1, s.h, s.sync))
	}
	if err == nil {
		err = d.err(cEventSync(d.h, s.sync))
	}
	var shared bool
	if err == nil {
		shared, err = b.Done()
	}
	if werr := b.Wait(); err == nil {
		err = werr
	}
	return shared, err
}

// WrapStream wraps a stream that something else owns (a training
// framework's current stream, e.g. torch.cuda.current_stream().cuda_stream),
// so that it can wait on this package's events. Close does not destroy it.
func (d *Device) WrapStream(h uintptr) (*Stream, error) {
	if d.closed.Load() {
		return nil, d.errClosed("wrap stream")
	}
	ev, r := cEventCreate(d.h)
	if err := d.err(r); err != nil {
		return nil, err
	}
	return &Stream{dev: d, h: handle(h), sync: ev}, nil
}

// Handle is the runtime's stream handle (CUstream / hipStream_t).
func (s *Stream) Handle() uintptr { return uintptr(s.h) }

func (s *Stream) usable(op string) error {
	if s == nil {
		return invalid("", -1, op, "nil stream")
	}
	if s.sync == 0 {
		return s.dev.errClosed(op + ": stream")
	}
	if s.dev.closed.Load() {
		return s.dev.errClosed(op)
	}
	return nil
}

// CopyIn queues a copy of src into dst at off on the stream. From pinned
// memory (Pinned) it returns at once and the copy is asynchronous: src
// must stay unchanged until the stream has passed it (Sync, or an event
// recorded after it). From other memory the driver first waits for the
// stream's earlier work, then stages src before returning: correct, but
// never what a reader's hot path should do. No allocation.
func (s *Stream) CopyIn(dst *Buffer, off int, src []byte) error {
	if err := s.usable("copy in"); err != nil {
		return err
	}
	p, err := dst.span("copy in", off, len(src))
	if err != nil || len(src) == 0 {
		return err
	}
	return s.dev.err(cHtoD(s.dev.h, p, src, s.h, 0))
}

// ReadBack copies len(dst) bytes of src at off into dst on the stream and
// waits for them.
func (s *Stream) ReadBack(dst []byte, src *Buffer, off int) error {
	if err := s.usable("read back"); err != nil {
		return err
	}
	p, err := src.span("read back", off, len(dst))
	if err != nil || len(dst) == 0 {
		return err
	}
	return s.dev.err(cDtoH(s.dev.h, dst, p, s.h, s.sync))
}

// Sync waits until every piece of work queued on the stream so far has
// finished, and nothing else: it records a blocking-sync event and waits
// on it, so the waiting thread sleeps instead of spinning a core.
func (s *Stream) Sync() error {
	if err := s.usable("stream sync"); err != nil {
		return err
	}
	return s.dev.err(cStreamSync(s.dev.h, s.h, s.sync))
}

// WaitEvent makes work queued on the stream after this call wait for e
// (cuStreamWaitEvent): the training stream waits on a batch's event
// without blocking the host.
func (s *Stream) WaitEvent(e *Event) error {
	if err := s.usable("stream wait event"); err != nil {
		return err
	}
	if err := e.usable("stream wait event"); err != nil {
		return err
	}
	return s.dev.err(cStreamWait(s.dev.h, s.h, e.h))
}

// Close waits for the stream's work and destroys it (a wrapped stream is
// left alone; only its private event is destroyed).
func (s *Stream) Close() error {
	if s == nil || s.sync == 0 {
		return nil
	}
	d := s.dev
	ev := s.sync
	s.sync = 0
	if d.closed.Load() {
		return nil
	}
	err := d.err(cEventDestroy(d.h, ev))
	if s.owned {
		if derr := d.err(cStreamDestroy(d.h, s.h)); err == nil {
			err = derr
		}
	}
	return err
}

// Event marks a point in a stream. Events are created blocking-sync with
// timing disabled, so Sync sleeps rather than spins and recording is cheap.
type Event struct {
	dev *Device
	h   handle
}

// NewEvent creates an event.
func (d *Device) NewEvent() (*Event, error) {
	if d.closed.Load() {
		return nil, d.errClosed("new event")
	}
	h, r := cEventCreate(d.h)
	if err := d.err(r); err != nil {
		return nil, err
	}
	return &Event{dev: d, h: h}, nil
}

func (e *Event) usable(op string) error {
	if e == nil {
		return invalid("", -1, op, "nil event")
	}
	if e.h == 0 {
		return e.dev.errClosed(op + ": event")
	}
	if e.dev.closed.Load() {
		return e.dev.errClosed(op)
	}
	return nil
}

// Handle is the runtime's event handle (CUevent / hipEvent_t).
func (e *Event) Handle() uintptr { return uintptr(e.h) }

// Record captures the work queued on s so far; the event completes when
// that work has.
func (e *Event) Record(s *Stream) error {
	if err := e.usable("event record"); err != nil {
		return err
	}
	if err := s.usable("event record"); err != nil {
		return err
	}
	return e.dev.err(cEventRecord(e.dev.h, e.h, s.h))
}

// Sync waits (sleeping) until the event has completed.
func (e *Event) Sync() error {
	if err := e.usable("event sync"); err != nil {
		return err
	}
	return e.dev.err(cEventSync(e.dev.h, e.h))
}

// Done reports whether the event has completed, without waiting.
func (e *Event) Done() (bool, error) {
	if err := e.usable("event query"); err != nil {
		return false, err
	}
	return e.dev.queryDone(e.h)
}

func (d *Device) queryDone(e handle) (bool, error) {
	r := cEventQuery(d.h, e)
	if code, _ := r.codeOp(); code == codeNotReady {
		return false, nil
	}
	return true, d.err(r)
}

// WaitUntil waits for the event until deadline, polling it with sleeps
// that grow from 20µs to 1ms; past the deadline it returns an error
// matching ErrTimeout. A zero deadline waits as long as it takes (Sync).
func (e *Event) WaitUntil(deadline time.Time) error {
	if deadline.IsZero() {
		return e.Sync()
	}
	pause := 20 * time.Microsecond
	for {
		done, err := e.Done()
		if done || err != nil {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return &Error{Runtime: e.dev.Runtime, Device: e.dev.Index, Op: "event wait", kind: ErrTimeout,
				Text: "event not complete at the deadline"}
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, time.Millisecond)
	}
}

// Close destroys the event.
func (e *Event) Close() error {
	if e == nil || e.h == 0 {
		return nil
	}
	h := e.h
	e.h = 0
	if e.dev.closed.Load() {
		return nil
	}
	return e.dev.err(cEventDestroy(e.dev.h, h))
}
