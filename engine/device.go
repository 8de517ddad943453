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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/gpu"
)

// GPU sync modes (GPUOptions.Sync, config gpu.sync).
const (
	// GPUSyncStream: a device read waits for its own copies only, through
	// an event on the reader's non-blocking stream (the default).
	GPUSyncStream = "stream"
	// GPUSyncDevice: every device read ends with a context-wide
	// synchronise (cuCtxSynchronize / hipDeviceSynchronize), as the seed's
	// torch.cuda.synchronize() did: it waits for the training kernels too.
	// For measuring, and for ddtop to show the pathology.
	GPUSyncDevice = "device"
)

// GPUDirect modes (GPUOptions.Direct, config gpu.direct): whether fabric
// reads may go straight into device memory. The decision is a probe
// registration of device memory with the provider (fabric.Reader.ProbeDevice),
// never the advertised capabilities, made at the first device read and
// reported by Store.GPUDirect. This build has no direct read path yet:
// every read stages through pinned host memory, and a probe that succeeds
// says so (auto) or fails the read (on).
const (
	GPUDirectAuto = "auto" // probe; stage when it fails
	GPUDirectOn   = "on"   // require it: with a fabric, a failed probe fails device reads
	GPUDirectOff  = "off"  // always stage through pinned host memory
)

// Staging halves: the default and the largest size of each of a reader's
// two halves. A half's fabric reads are one batch, so its size bounds the
// reads in flight: 16 MiB keeps 16 reads of 1 MiB rows in flight.
const (
	defaultStageBytes = 16 << 20
	maxStageBytes     = 256 << 20
)

// maxPieceBytes caps one read (one fabric op or memcpy) of the device
// path, as maxReadBytes caps Get's; a variable so tests can lower it.
var maxPieceBytes int64 = maxReadBytes

// GPUOptions configure the device read path. The device is opened at the
// first device read (or Store.Device), so a store that never reads into
// device memory never loads a GPU runtime.
type GPUOptions struct {
	// Device: "auto" ("" means auto: CUDA, else HIP), "cuda", "hip"
	// ("rocm" is an alias), each optionally ":N" for device N, or "none"
	// (device reads fail, naming the setting). Without ":N" (or with
	// ":$LOCAL_RANK") the device is the local rank modulo the number of
	// devices the process sees, which is right both when a rank sees every
	// GPU of its node and when it sees one. Config: machine.gpu and
	// gpu.device.
	Device string
	// Sync: GPUSyncStream (default; "" means stream) or GPUSyncDevice.
	Sync string
	// Direct: GPUDirectAuto (default), GPUDirectOn or GPUDirectOff.
	Direct string
	// StageBytes: size of each of a reader's two pinned staging halves,
	// 1 KiB to 256 MiB; 0 means 16 MiB. A half's reads are one fabric
	// batch: its size bounds the reads in flight for large rows.
	StageBytes int
	// Libraries replaces the GPU runtime's library names (tests point it at
	// the stand-in drivers of gpu/gputest; nothing else should).
	Libraries []string
}

// gpuTarget is a parsed GPUOptions.Device.
type gpuTarget struct {
	none    bool
	runtime gpu.Runtime // "" = CUDA, else HIP
	index   int         // -1 = the local rank, modulo the device count
}

func parseGPUDevice(s string) (gpuTarget, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	name, idx, hasIdx := strings.Cut(s, ":")
	t := gpuTarget{index: -1}
	switch name {
	case "", "auto":
	case "none":
		if hasIdx {
			return t, fmt.Errorf("%q: none takes no device index", s)
		}
		t.none = true
		return t, nil
	case "cuda":
		t.runtime = gpu.CUDA
	case "hip", "rocm":
		t.runtime = gpu.HIP
	default:
		return t, fmt.Errorf("%q: want auto, cuda, hip, rocm or none, optionally with :N", s)
	}
	if hasIdx && idx != "$local_rank" {
		n, err := strconv.Atoi(idx)
		if err != nil || n < 0 {
			return t, fmt.Errorf("%q: device index %q is not a non-negative integer or $LOCAL_RANK", s, idx)
		}
		t.index = n
	}
	return t, nil
}

// ensureDefaults fills the zero fields of the GPU options.
func (g *GPUOptions) ensureDefaults() {
	if g.Sync == "" {
		g.Sync = GPUSyncStream
	}
	if g.Direct == "" {
		g.Direct = GPUDirectAuto
	}
	if g.StageBytes == 0 {
		g.StageBytes = defaultStageBytes
	}
}

// validate checks the GPU options; zero fields are valid (defaults).
func (g *GPUOptions) validate() error {
	if _, err := parseGPUDevice(g.Device); err != nil {
		return wrapf(ErrInvalid, "options", "", err, "GPU.Device")
	}
	switch g.Sync {
	case "", GPUSyncStream, GPUSyncDevice:
	default:
		return errf(ErrInvalid, "options", "", "GPU.Sync %q: want %q or %q", g.Sync, GPUSyncStream, GPUSyncDevice)
	}
	switch g.Direct {
	case "", GPUDirectAuto, GPUDirectOn, GPUDirectOff:
	default:
		return errf(ErrInvalid, "options", "", "GPU.Direct %q: want %q, %q or %q", g.Direct, GPUDirectAuto, GPUDirectOn, GPUDirectOff)
	}
	if g.StageBytes != 0 && (g.StageBytes < 1<<10 || g.StageBytes > maxStageBytes) {
		return errf(ErrInvalid, "options", "", "GPU.StageBytes %d: want 1 KiB to %d bytes", g.StageBytes, maxStageBytes)
	}
	return nil
}

// storeGPU is the store's device: opened once, at the first device read.
type storeGPU struct {
	dev atomic.Pointer[gpu.Device] // set once opened

	mu     sync.Mutex // guards opening, err and closing
	tried  bool
	err    error   // why the device could not be opened
	shared *devCtx // the Store's own device path, made at its first use

	sharedMu sync.Mutex // serialises Store-level device reads (timed as lock wait)

	directDone bool   // the GPUDirect decision is made (under mu)
	direct     bool   // fabric reads go straight to device memory
	directWhy  string // why (not)
	directErr  error  // gpu.direct: on and the probe said no
}

// Device returns the store's GPU, opening it at the first call as
// GPUOptions.Device says. Allocate destination buffers on it. A failure
// is returned by every later call too; it matches fault.ErrNoLibrary when
// no GPU runtime could be loaded (the text names the libraries tried and
// what to install), and the gpu package's sentinels (gpu.ErrNoDriver,
// gpu.ErrNoDevice) with errors.Is.
func (s *Store) Device() (*gpu.Device, error) {
	if d := s.gpu.dev.Load(); d != nil {
		return d, nil
	}
	g := &s.gpu
	g.mu.Lock()
	defer g.mu.Unlock()
	if s.closed.Load() {
		return nil, fault.New(fault.ErrClosed, "open GPU", "the store is closed")
	}
	if d := g.dev.Load(); d != nil {
		return d, nil
	}
	if g.tried {
		return nil, g.err
	}
	g.tried = true
	d, err := s.openDevice()
	if err != nil {
		g.err = err
		return nil, err
	}
	g.dev.Store(d)
	return d, nil
}

func (s *Store) openDevice() (*gpu.Device, error) {
	o := s.opts.GPU
	t, err := parseGPUDevice(o.Device)
	if err != nil { // Validate has checked it
		return nil, fault.New(fault.ErrInvalid, "open GPU", "%v", err)
	}
	if t.none {
		return nil, fault.New(fault.ErrInvalid, "open GPU",
			"device reads need a GPU, and GPU.Device (config machine.gpu) is none; set it to cuda, hip or auto")
	}
	idx, wrap := t.index, false
	if idx < 0 {
		idx, wrap = s.localRank, true
	}
	d, err := gpu.Open(gpu.Options{Runtime: t.runtime, Index: idx, WrapIndex: wrap, Libraries: o.Libraries})
	if err != nil {
		want := "auto (CUDA, else HIP)"
		if t.runtime != "" {
			want = string(t.runtime)
		}
		at := fmt.Sprintf("device %d", idx)
		if wrap {
			at = fmt.Sprintf("local rank %d's device (rank modulo the device count)", idx)
		}
		return nil, gpuError("open GPU", "", fmt.Sprintf("GPU.Device %q: runtime %s, %s", o.Device, want, at), err)
	}
	return d, nil
}

// gpuError is a *fault.Error for a failure of package gpu: a missing or
// unusable runtime matches fault.ErrNoLibrary, bad arguments
// fault.ErrInvalid, a closed object fault.ErrClosed, a wait past its
// deadline fault.ErrTimeout; the gpu error stays in the chain.
func gpuError(op, name, detail string, err error) error {
	var kind error
	switch {
	case errors.Is(err, gpu.ErrNoDriver), errors.Is(err, gpu.ErrNoDevice):
		kind = fault.ErrNoLibrary
	case errors.Is(err, gpu.ErrInvalid):
		kind = fault.ErrInvalid
	case errors.Is(err, gpu.ErrClosed):
		kind = fault.ErrClosed
	case errors.Is(err, gpu.ErrTimeout):
		kind = fault.ErrTimeout
	}
	return &fault.Error{Op: op, Var: name, Side: fault.Local, Kind: kind, Detail: detail, Err: err}
}

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

// GPUDirect reports whether device reads go straight from the fabric into
// device memory, and why (not). The decision is made at the first device
// read (gpu.direct: auto probes, on requires the probe to succeed, off
// stages always); before that, the reason says so.
func (s *Store) GPUDirect() (bool, string) {
	g := &s.gpu
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.directDone {
		return false, "not decided: no device read yet"
	}
	return g.direct, g.directWhy
}

// decideDirect makes the GPUDirect decision once: the capabilities are not
// trusted, a probe registration of device memory with the provider
// decides (fabric.Reader.ProbeDevice). The direct data path itself is not
// implemented yet, so a successful probe still stages (auto) or fails
// (on) saying so; every read stages through pinned host memory.
func (s *Store) decideDirect(dev *gpu.Device) error {
	g := &s.gpu
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.directDone {
		return g.directErr
	}
	g.directDone = true
	mode := s.opts.GPU.Direct
	why, probed := "", false
	switch {
	case mode == GPUDirectOff:
		why = "gpu.direct is off"
	case s.fab == nil:
		why = "no fabric: every peer's rows are mapped on this node"
	default:
		why, probed = s.probeDirect(dev), true
	}
	if probed && why == "" {
		why = fmt.Sprintf("provider %s can register %s memory, but this build has no direct read path yet: reads stage through pinned host memory",
			s.fab.Info().Provider, dev.Runtime)
	}
	g.directWhy = why
	if mode == GPUDirectOn && probed { // with no fabric, there is no fabric read to make direct
		g.directErr = fault.New(fault.ErrInvalid, "GPUDirect", "gpu.direct is on: %s", why)
	}
	return g.directErr
}

// probeDirect registers a scratch device buffer with a throwaway fabric
// reader; "" means the probe succeeded, else why it failed.
func (s *Store) probeDirect(dev *gpu.Device) string {
	buf, err := dev.Alloc(64 << 10)
	if err != nil {
		return "probe: " + err.Error()
	}
	defer buf.Free()
	fr, err := s.fab.NewReader()
	if err != nil {
		return "probe: " + err.Error()
	}
	defer fr.Close()
	if err := fr.ProbeDevice(uint64(buf.Ptr()), buf.Len(), string(dev.Runtime), dev.Index); err != nil {
		return "probe failed: " + err.Error()
	}
	return ""
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

// closeGPU releases the Store's device path and the device; after the
// readers' (Store.release).
func (g *storeGPU) close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	if g.shared != nil {
		errs = append(errs, g.shared.close())
		g.shared = nil
	}
	if d := g.dev.Swap(nil); d != nil {
		errs = append(errs, d.Close())
	}
	g.tried, g.err = true, fault.New(fault.ErrClosed, "open GPU", "the store is closed")
	if err := errors.Join(errs...); err != nil {
		return wrapf(nil, "Close", "", err, "GPU")
	}
	return nil
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

// readDevice runs rd through dc. c is the Reader's fabric context, or nil
// for the Store's shared path (then dc is the Store's, taken under
// sharedMu here, and the variable's shared fabric reader is locked at the
// first remote row).
func (v *Var) readDevice(c *readCtx, dc *devCtx, rd *devRead) (ev *gpu.Event, err error) {
	if err = v.enter(rd.op); err != nil {
		return nil, err
	}
	defer v.inflight.Add(-1)
	st := callStats{timed: v.telID >= 0 && v.s.tel != nil} // telID is stable while entered
	st.start = st.now()
	tel := int32(0)
	if c != nil {
		tel = c.tel
	}
	defer func() { v.finish(tel, &st, rd.rows, err) }()
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
	s := v.s
	deadRank := -1
	if c != nil {
		c.reset()
	}
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
			// One piece: the rest of row i, extended over following rows
			// that continue it in the same shard, up to the half's end.
			g := rd.start + i
			if rd.idx != nil {
				g = rd.idx[i]
			}
			o := v.owner(g)
			rank := v.home[o]
			soff := (g-v.offsets[o])*rb + inrow
			rowsStarted := int64(0)
			if inrow == 0 {
				rowsStarted = 1
			}
			l := min(rb-inrow, n-p, maxPieceBytes)
			if inrow += l; inrow == rb {
				i, inrow = i+1, 0
			}
			for inrow == 0 && p+l < n && i < rd.rows && g+1 < v.offsets[o+1] {
				next := rd.start + i
				if rd.idx != nil {
					next = rd.idx[i]
				}
				if next != g+1 {
					break
				}
				take := min(rb, n-p-l, maxPieceBytes-l)
				if take <= 0 {
					break
				}
				g = next
				l += take
				rowsStarted++
				if take == rb {
					i++
				} else {
					inrow = take
				}
			}
			st.targets.Add(rank, rowsStarted)
			d := buf[p : p+l]
			p += l
			if rank != s.rank && s.dead.has(rank) {
				if deadRank < 0 {
					deadRank = rank
				}
				continue
			}
			if src := v.src[o]; src != nil {
				copy(d, src[soff:soff+l])
				st.localRows += rowsStarted
				continue
			}
			st.remoteRows += rowsStarted
			if c == nil {
				c = v.lockShared(&st) // first remote row of a Store call
			}
			op := fabric.ReadOp{Dst: d, Peer: c.rpeers[rank], Addr: v.remote[o].base + uint64(soff), Key: v.remote[o].key}
			if err = v.enqueue(c, &st, op, rank, o, soff); err != nil {
				return nil, err
			}
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
	if deadRank >= 0 {
		return nil, v.errDead(deadRank)
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
		if v = (*r.s.vars.Load())[name]; v == nil {
			return nil, r.s.errLookup(rd.op, name)
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
