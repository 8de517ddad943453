package gpu

import "errors"

// Stager moves host bytes into device memory through two pinned halves on
// one stream: while one half is being copied to the device, the caller
// fills the other (reads from the fabric, local memcpy). It is the
// engine's per-reader staging; it is used by one goroutine at a time.
//
//	buf, _ := st.Next()          // a free half (waits for its last copy)
//	n := fill(buf)               // up to len(buf) bytes
//	st.Send(dst, off, n)         // queued on the stream; returns at once
//	...
//	st.Wait()                    // every Send has landed
type Stager struct {
	s    *Stream
	half [2]*Pinned
	ev   [2]*Event
	busy [2]bool // half i has a copy in flight
	cur  int     // the half Next hands out
	last int     // the half sent last, -1 when none is in flight
	size int
}

// NewStager allocates two pinned halves of chunk bytes each for s.
func (s *Stream) NewStager(chunk int) (*Stager, error) {
	return s.newStager(chunk, func(int) (*Pinned, error) { return s.dev.AllocPinned(chunk) })
}

// NewStagerOn makes a stager whose halves are the caller's memory, which
// must lie outside the Go heap (mmap'd, such as a fabric.Alloc region that
// the fabric also reads into) and stay mapped until Close; the halves are
// registered with the driver here, once, and unregistered by Close. Both
// halves must have the same length.
func (s *Stream) NewStagerOn(halves [2][]byte) (*Stager, error) {
	if err := s.usable("new stager"); err != nil {
		return nil, err
	}
	if len(halves[0]) == 0 || len(halves[0]) != len(halves[1]) {
		return nil, invalid(s.dev.Runtime, s.dev.Index, "new stager", "halves of %d and %d bytes: want two equal, non-empty halves", len(halves[0]), len(halves[1]))
	}
	return s.newStager(len(halves[0]), func(i int) (*Pinned, error) { return s.dev.Register(halves[i]) })
}

// newStager makes a stager of chunk-byte halves that pin(i) provides.
func (s *Stream) newStager(chunk int, pin func(i int) (*Pinned, error)) (*Stager, error) {
	if err := s.usable("new stager"); err != nil {
		return nil, err
	}
	st := &Stager{s: s, last: -1, size: chunk}
	for i := range st.half {
		p, err := pin(i)
		if err != nil {
			return nil, errors.Join(err, st.Close())
		}
		st.half[i] = p
		e, err := s.dev.NewEvent()
		if err != nil {
			return nil, errors.Join(err, st.Close())
		}
		st.ev[i] = e
	}
	return st, nil
}

// Chunk is the size of each half.
func (st *Stager) Chunk() int { return st.size }

// Next returns the half to fill next, once its previous copy has finished.
func (st *Stager) Next() ([]byte, error) {
	if st.half[st.cur] == nil {
		return nil, invalid("", -1, "stager next", "stager is closed")
	}
	if st.busy[st.cur] {
		if err := st.ev[st.cur].Sync(); err != nil {
			return nil, err
		}
		st.busy[st.cur] = false
		if st.last == st.cur {
			st.last = -1
		}
	}
	return st.half[st.cur].Bytes(), nil
}

// Send queues a copy of the first n bytes of the half from Next into dst
// at off, and makes the other half the next one.
func (st *Stager) Send(dst *Buffer, off, n int) error {
	h := st.half[st.cur]
	if h == nil {
		return invalid("", -1, "stager send", "stager is closed")
	}
	if n < 0 || n > len(h.Bytes()) {
		return invalid(st.s.dev.Runtime, st.s.dev.Index, "stager send", "%d bytes do not fit a %d-byte half", n, len(h.Bytes()))
	}
	if st.busy[st.cur] {
		return invalid(st.s.dev.Runtime, st.s.dev.Index, "stager send", "half sent twice without Next")
	}
	p, err := dst.span("stager send", off, n)
	if err != nil || n == 0 {
		return err
	}
	if err := st.s.usable("stager send"); err != nil {
		return err
	}
	d := st.s.dev
	if err := d.err(cHtoD(d.h, p, h.Bytes()[:n], st.s.h, st.ev[st.cur].h)); err != nil {
		return err
	}
	st.busy[st.cur] = true
	st.last = st.cur
	st.cur ^= 1
	return nil
}

// Wait waits until every copy sent so far has landed. The stream runs in
// order, so waiting for the last one is enough.
func (st *Stager) Wait() error {
	if st.last < 0 {
		return nil
	}
	if err := st.ev[st.last].Sync(); err != nil {
		return err
	}
	st.busy = [2]bool{}
	st.last = -1
	return nil
}

// Write copies src into dst at off through the halves, chunk by chunk,
// and waits for it to land.
func (st *Stager) Write(dst *Buffer, off int, src []byte) error {
	if _, err := dst.span("stager write", off, len(src)); err != nil {
		return err
	}
	for len(src) > 0 {
		buf, err := st.Next()
		if err != nil {
			return err
		}
		n := copy(buf, src)
		if err := st.Send(dst, off, n); err != nil {
			return err
		}
		src, off = src[n:], off+n
	}
	return st.Wait()
}

// Close waits for copies in flight and frees the halves.
func (st *Stager) Close() error {
	var errs []error
	if st.half[0] != nil && !st.s.dev.closed.Load() {
		errs = append(errs, st.Wait())
	}
	for i := range st.half {
		if st.ev[i] != nil {
			errs = append(errs, st.ev[i].Close())
			st.ev[i] = nil
		}
		if st.half[i] != nil {
			errs = append(errs, st.half[i].Close())
			st.half[i] = nil
		}
	}
	return errors.Join(errs...)
}
