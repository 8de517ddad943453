package engine

// Readers: one per goroutine, each with its own fabric endpoint and
// completion queue (and, for device reads, its own stream and staging), so
// readers never wait for each other. Each open Reader owns a telemetry
// reader stripe.

import "sync/atomic"

// errReaderClosed is returned by the methods of a closed Reader.
var errReaderClosed error = &Error{Kind: ErrClosed, Op: "Reader", Detail: "reader closed"}

// Reader reads with its own fabric endpoint and completion queue, so
// readers never wait for each other or for the store's shared reader.
// Use one Reader per goroutine; its methods must not be called concurrently.
type Reader struct {
	s      *Store
	c      *readCtx
	dc     *devCtx     // device path, made at the first device read
	closed atomic.Bool // set by Close or Store.Close (another goroutine)
}

// NewReader returns a Reader with its own fabric endpoint. Close it when done
// (Store.Close closes any left open).
func (s *Store) NewReader() (*Reader, error) {
	if s.closed.Load() {
		return nil, errf(ErrClosed, "NewReader", "", "store closed")
	}
	c, err := s.newReadCtx(maxTelReaders - 1)
	if err != nil {
		return nil, err
	}
	r := &Reader{s: s, c: c}
	s.readersMu.Lock()
	defer s.readersMu.Unlock()
	if s.closed.Load() {
		c.close()
		return nil, errf(ErrClosed, "NewReader", "", "store closed")
	}
	c.tel = s.freeTelReader()
	s.readers[r] = struct{}{}
	return r, nil
}

// maxTelReaders is the number of telemetry reader stripes per variable
// (telemetry.WriterOptions.MaxReaders' default). Stripe 0 is the store's
// shared path; 1 .. maxTelReaders-2 are owned by one open Reader each;
// maxTelReaders-1 is shared by the Readers beyond those (recorded with
// atomic adds).
const maxTelReaders = 64

// freeTelReader returns the lowest reader stripe no open Reader owns, or
// the shared last stripe when all are taken. Closing a Reader frees its
// stripe (it leaves s.readers). Call with s.readersMu held: the mutex
// also orders a closed Reader's last Record before the next owner's first.
func (s *Store) freeTelReader() int32 {
	var used [maxTelReaders]bool
	for r := range s.readers {
		used[r.c.tel] = true
	}
	for id := int32(1); id < maxTelReaders-1; id++ {
		if !used[id] {
			return id
		}
	}
	return maxTelReaders - 1
}

// ID is the reader's telemetry id (stripe); the store's shared path is 0,
// and Readers beyond the first maxTelReaders-2 open at once share the last.
func (r *Reader) ID() int { return int(r.c.tel) }

// lookup is the variable of an open reader's call to op.
func (r *Reader) lookup(op, name string) (*Var, error) {
	if r.closed.Load() {
		return nil, errReaderClosed
	}
	if v := (*r.s.vars.Load())[name]; v != nil {
		return v, nil
	}
	return nil, r.s.errLookup(op, name)
}

// Get is Store.Get through this reader's endpoint.
func (r *Reader) Get(name string, start, count int64, dst []byte) error {
	v, err := r.lookup("Get", name)
	if err != nil {
		return err
	}
	return v.get(r.c, start, count, dst)
}

// GetBatch is Store.GetBatch through this reader's endpoint.
func (r *Reader) GetBatch(name string, idx []int64, dst []byte) error {
	v, err := r.lookup("GetBatch", name)
	if err != nil {
		return err
	}
	return v.getBatch(r.c, idx, dst)
}

// GetRanges is Store.GetRanges through this reader's endpoint.
func (r *Reader) GetRanges(name string, starts, counts []int64, dst []byte) error {
	v, err := r.lookup("GetRanges", name)
	if err != nil {
		return err
	}
	return v.getRanges(r.c, starts, counts, dst)
}

// GetVar is Get on a variable handle, skipping the name lookup.
func (r *Reader) GetVar(v *Var, start, count int64, dst []byte) error {
	if r.closed.Load() {
		return errReaderClosed
	}
	return v.get(r.c, start, count, dst)
}

// GetBatchVar is GetBatch on a variable handle, skipping the name lookup.
func (r *Reader) GetBatchVar(v *Var, idx []int64, dst []byte) error {
	if r.closed.Load() {
		return errReaderClosed
	}
	return v.getBatch(r.c, idx, dst)
}

// Close releases the reader's endpoint.
func (r *Reader) Close() error {
	r.s.readersMu.Lock()
	defer r.s.readersMu.Unlock()
	if r.closed.Load() {
		return nil
	}
	delete(r.s.readers, r)
	return r.release()
}

// release closes the reader's endpoint and its device path (stream,
// staging), whose error it returns.
func (r *Reader) release() error {
	r.closed.Store(true)
	r.c.close()
	err := r.dc.close()
	r.dc = nil
	if err != nil {
		return gpuError("Reader.Close", "", "device path", err)
	}
	return nil
}
