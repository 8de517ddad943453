package engine

// The device read path: Get and GetBatch into GPU memory (package gpu).
//
// Rows land in the reader's two pinned staging halves (one fabric.Alloc
// region, registered with the fabric's MR cache and the GPU driver once):
// local rows by memcpy, remote rows by fabric reads. A full half is copied
// to the device on the reader's own non-blocking stream while the next
// half fills, so the reads of chunk k+1 overlap the copy of chunk k. The
// call then waits for its own stream only (gpu.sync: stream) or, as the
// seed did, for the whole device (gpu.sync: device); that wait is the
// telemetry phase gpu_sync. The async forms skip the wait and return an
// event that the training stream waits on (cuStreamWaitEvent).
//
// Per reader the stream, the stager and the event are made at its first
// device call; later calls allocate nothing and register nothing.

import (
	"errors"
	"fmt"

	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/gpu"
)

// maxPieceBytes caps one read (one fabric op or memcpy) of the device
// path, as maxReadBytes caps Get's; a variable so tests can lower it.
var maxPieceBytes int64 = maxReadBytes

// devCtx is one reader's device path: its stream, its two staging halves
// (fabric memory, so fabric reads land there with a cached registration)
// and the event the async calls return. Used by one goroutine at a time.
type devCtx struct {
	dev    *gpu.Device
	stream *gpu.Stream
	mem    *fabric.Memory
	st     *gpu.Stager
	done   *gpu.Event
	sync   bool // GPUSyncDevice
}

func (s *Store) newDevCtx() (*devCtx, error) {
	dev, err := s.Device()
	if err != nil {
		return nil, err
	}
	if err := s.decideDirect(dev); err != nil {
		return nil, err
	}
	n := s.opts.GPU.StageBytes
	dc := &devCtx{dev: dev, sync: s.opts.GPU.Sync == GPUSyncDevice}
	fail := func(what string, err error) (*devCtx, error) {
		return nil, errors.Join(gpuError("new device reader", "", what, err), dc.close())
	}
	if dc.stream, err = dev.NewStream(); err != nil {
		return fail("reader stream", err)
	}
	if dc.mem, err = fabric.Alloc(2 * n); err != nil {
		return fail(fmt.Sprintf("staging memory, 2 × %d bytes", n), err)
	}
	b := dc.mem.Bytes()
	if dc.st, err = dc.stream.NewStagerOn([2][]byte{b[:n:n], b[n:]}); err != nil {
		return fail("registering the staging memory", err)
	}
	if dc.done, err = dev.NewEvent(); err != nil {
		return fail("completion event", err)
	}
	return dc, nil
}

// close waits for the context's copies and releases it.
func (dc *devCtx) close() error {
	if dc == nil {
		return nil
	}
	var errs []error
	if dc.st != nil {
		errs = append(errs, dc.st.Close())
		dc.st = nil
	}
	if dc.done != nil {
		errs = append(errs, dc.done.Close())
		dc.done = nil
	}
	if dc.stream != nil {
		errs = append(errs, dc.stream.Close())
		dc.stream = nil
	}
	if dc.mem != nil {
		errs = append(errs, dc.mem.Free())
		dc.mem = nil
	}
	return errors.Join(errs...)
}

// sharedDevCtx is the Store-level device path, made at its first use.
func (s *Store) sharedDevCtx() (*devCtx, error) {
	g := &s.gpu
	g.mu.Lock()
	dc := g.shared
	g.mu.Unlock()
	if dc != nil {
		return dc, nil
	}
	dc, err := s.newDevCtx()
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shared != nil || s.closed.Load() { // another goroutine won, or Close came
		err := dc.close()
		if g.shared == nil {
			return nil, errors.Join(fault.New(fault.ErrClosed, "device read", "the store is closed"), err)
		}
		return g.shared, nil
	}
	g.shared = dc
	return dc, nil
}

// readerDevCtx is the Reader's device path, made at its first use.
func (r *Reader) devCtx() (*devCtx, error) {
	if r.dc != nil {
		return r.dc, nil
	}
	dc, err := r.s.newDevCtx()
	if err != nil {
		return nil, err
	}
	r.dc = dc
	return dc, nil
}

// devRead is one device read: rows idx[i] (GetBatch) or, when idx is nil,
// rows [start, start+rows) (Get).
type devRead struct {
	op    string // "GetBatchDevice", "GetDevice", ...
	idx   []int64
	start int64
	rows  int64
	dst   *gpu.Buffer
	off   int
	async bool // return the event instead of waiting
}

// row is the global index of the read's i-th row.
func (rd *devRead) row(i int64) int64 {
	if rd.idx != nil {
		return rd.idx[i]
	}
	return rd.start + i
}

// readDevice runs rd through dc. c is the Reader's fabric context, or nil
// for the Store's shared path (then dc is the Store's, taken under
// sharedMu here, and the variable's shared fabric reader is locked at the
// first remote row).
func (v *Var) readDevice(c *readCtx, dc *devCtx, rd *devRead) (ev *gpu.Event, err error) {
	var st callStats
	if err = v.begin(&st, c, rd.op, rd.rows); err != nil {
		return nil, err
	}
	defer func() { v.end(&st, err) }()
	if c == nil {
		t := st.now()
		v.s.gpu.sharedMu.Lock()
		defer v.s.gpu.sharedMu.Unlock()
		st.lockWait += st.now() - t
	}

	rb := v.rowBytes
	if err = v.checkDeviceDst(dc, rd); err != nil {
		return nil, err
	}
	if rd.idx != nil {
		for _, g := range rd.idx {
			if g < 0 || g >= v.global {
				return nil, v.errIndex(g)
			}
		}
	} else if rd.start < 0 || rd.rows < 0 || rd.start > v.global-rd.rows {
		return nil, v.errRange(rd.start, rd.rows)
	}
	if c != nil {
		c.reset()
	}
	h := v.s.health
	total := rd.rows * rb
	var i, inrow int64 // the next row to place, and how many of its bytes are placed
	for pos := int64(0); pos < total; {
		t := st.now()
		buf, gerr := dc.st.Next() // waits for this half's last copy
		st.gpuSync += st.now() - t
		if gerr != nil {
			return nil, gpuError(rd.op, v.name, "staging", gerr)
		}
		n := min(int64(len(buf)), total-pos)
		for p := int64(0); p < n; {
			// The run: the rest of row i, extended over the following rows
			// that continue it (GetBatch: consecutive indices), as far as
			// one piece can reach; placement cuts it.
			g := rd.row(i)
			run := min(rb-inrow, n-p)
			for j := i + 1; run < min(n-p, maxPieceBytes) && j < rd.rows && rd.row(j) == g+(j-i); j++ {
				run = min(run+rb, n-p)
			}
			pc := v.lay.Place(h, g, inrow, run, maxPieceBytes)
			rowsStarted := (inrow+pc.Len+rb-1)/rb - 1 // rows entered after row i
			if inrow == 0 {
				rowsStarted++
			}
			i, inrow = i+(inrow+pc.Len)/rb, (inrow+pc.Len)%rb
			if c, err = v.serve(c, &st, pc, buf[p:p+pc.Len], rowsStarted); err != nil {
				return nil, err
			}
			p += pc.Len
		}
		if c != nil && len(c.ops) > 0 {
			if err = v.flush(c, &st); err != nil {
				return nil, err
			}
		}
		// Queued on the reader's stream; the next half fills meanwhile.
		if gerr := dc.st.Send(rd.dst, rd.off+int(pos), int(n)); gerr != nil {
			return nil, gpuError(rd.op, v.name, "copy to the device", gerr)
		}
		pos += n
	}
	t := st.now()
	var gerr error
	switch {
	case dc.sync:
		gerr = dc.dev.Sync() // the seed's context-wide synchronise
	case rd.async:
		gerr = dc.done.Record(dc.stream)
	default:
		gerr = dc.st.Wait()
	}
	if gerr == nil && rd.async && dc.sync {
		gerr = dc.done.Record(dc.stream)
	}
	st.end = st.now()
	st.gpuSync += st.end - t
	st.copyTime = st.end - st.start - st.lockWait - st.fabTime - st.gpuSync + int64(st.fab.Copy)
	if gerr != nil {
		return nil, gpuError(rd.op, v.name, "waiting for the copies", gerr)
	}
	if err = v.deadErr(&st); err != nil {
		return nil, err
	}
	if rd.async {
		return dc.done, nil
	}
	return nil, nil
}

// checkDeviceDst checks that the destination is a buffer of the store's
// device with room for the rows at its offset.
func (v *Var) checkDeviceDst(dc *devCtx, rd *devRead) error {
	if rd.dst == nil {
		return fault.New(fault.ErrInvalid, rd.op, "variable %q: nil device buffer", v.name)
	}
	if rd.dst.Device() != dc.dev {
		return fault.New(fault.ErrInvalid, rd.op, "variable %q: the destination buffer belongs to another gpu.Device than the store's (%s); allocate it with Store.Device()",
			v.name, dc.dev)
	}
	if rd.off < 0 || rd.off > rd.dst.Len() {
		return fault.New(fault.ErrInvalid, rd.op, "variable %q: offset %d outside the %d-byte device buffer", v.name, rd.off, rd.dst.Len())
	}
	if need := rd.rows * v.rowBytes; int64(rd.dst.Len()-rd.off) < need {
		return v.errShort(rd.op, rd.rows, need, rd.dst.Len()-rd.off)
	}
	return nil
}

// storeDevice runs a device read on the Store's shared path.
func (s *Store) storeDevice(name string, rd *devRead) error {
	v := (*s.vars.Load())[name]
	if v == nil {
		return s.errLookup(rd.op, name)
	}
	dc, err := s.sharedDevCtx()
	if err != nil {
		return err
	}
	_, err = v.readDevice(nil, dc, rd)
	return err
}

// GetBatchDevice is GetBatch into device memory: global rows idx[i] of
// variable name land at dst[off+i*rowBytes:], and the call returns when
// they are there. dst must be memory of Store.Device(). The Store's
// device path is shared by all goroutines (one at a time, timed as lock
// wait); a Reader has its own.
func (s *Store) GetBatchDevice(name string, idx []int64, dst *gpu.Buffer, off int) error {
	return s.storeDevice(name, &devRead{op: "GetBatchDevice", idx: idx, rows: int64(len(idx)), dst: dst, off: off})
}

// GetDevice is Get into device memory: rows [start, start+count) land at
// dst[off:], and the call returns when they are there.
func (s *Store) GetDevice(name string, start, count int64, dst *gpu.Buffer, off int) error {
	return s.storeDevice(name, &devRead{op: "GetDevice", start: start, rows: count, dst: dst, off: off})
}

// readerDevice runs a device read through the Reader's own endpoint,
// stream and staging.
func (r *Reader) readerDevice(v *Var, name string, rd *devRead) (*gpu.Event, error) {
	if r.closed.Load() {
		return nil, errReaderClosed
	}
	if v == nil {
		var err error
		if v, err = r.lookup(rd.op, name); err != nil {
			return nil, err
		}
	}
	dc, err := r.devCtx()
	if err != nil {
		return nil, err
	}
	return v.readDevice(r.c, dc, rd)
}

// GetBatchDevice is Store.GetBatchDevice through this reader's endpoint,
// stream and staging halves.
func (r *Reader) GetBatchDevice(name string, idx []int64, dst *gpu.Buffer, off int) error {
	_, err := r.readerDevice(nil, name, &devRead{op: "GetBatchDevice", idx: idx, rows: int64(len(idx)), dst: dst, off: off})
	return err
}

// GetDevice is Store.GetDevice through this reader.
func (r *Reader) GetDevice(name string, start, count int64, dst *gpu.Buffer, off int) error {
	_, err := r.readerDevice(nil, name, &devRead{op: "GetDevice", start: start, rows: count, dst: dst, off: off})
	return err
}

// GetBatchDeviceAsync is GetBatchDevice without the wait: it returns once
// every copy is queued on the reader's stream, with an event that
// completes when the rows are in dst. Make the training stream wait on it
// (gpu.Stream.WaitEvent, i.e. cuStreamWaitEvent; wrap a framework's
// stream with Device.WrapStream) before the reader's next device call:
// the event is the reader's and is recorded again by that call. The
// host never blocks (with gpu.sync: device the call still synchronises
// the device, as the seed did).
func (r *Reader) GetBatchDeviceAsync(name string, idx []int64, dst *gpu.Buffer, off int) (*gpu.Event, error) {
	return r.readerDevice(nil, name, &devRead{op: "GetBatchDeviceAsync", idx: idx, rows: int64(len(idx)), dst: dst, off: off, async: true})
}

// GetDeviceAsync is GetDevice without the wait; see GetBatchDeviceAsync.
func (r *Reader) GetDeviceAsync(name string, start, count int64, dst *gpu.Buffer, off int) (*gpu.Event, error) {
	return r.readerDevice(nil, name, &devRead{op: "GetDeviceAsync", start: start, rows: count, dst: dst, off: off, async: true})
}
