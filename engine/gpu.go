package engine

// The store's GPU: its options (machine.gpu and gpu.* in the config), the
// device opened at the first device read, and the GPUDirect decision. The
// device read path itself is device.go.

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/gpu"
)

// GPUDeviceAuto is GPUOptions.Device's default: CUDA, else HIP, on the
// local rank's device (config machine.gpu: auto).
const GPUDeviceAuto = "auto:$LOCAL_RANK"

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
	// SpinWait: how long a wait for the reader's copies polls the GPU
	// before it sleeps in the runtime (gpu.Options.SpinWait); 0 means
	// gpu.DefaultSpinWait (100µs), negative never polls. Config
	// gpu.spin_wait.
	SpinWait time.Duration
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
	g.Device = cmp.Or(g.Device, GPUDeviceAuto)
	g.Sync = cmp.Or(g.Sync, GPUSyncStream)
	g.Direct = cmp.Or(g.Direct, GPUDirectAuto)
	g.StageBytes = cmp.Or(g.StageBytes, defaultStageBytes)
	g.SpinWait = cmp.Or(g.SpinWait, gpu.DefaultSpinWait)
}

// validate checks the GPU options; zero fields are valid (defaults).
func (g *GPUOptions) validate() error {
	if _, err := parseGPUDevice(g.Device); err != nil {
		return wrapf(ErrInvalid, "options", "", err, "GPU.Device")
	}
	if err := oneOf("GPU.Sync", g.Sync, GPUSyncStream, GPUSyncDevice); err != nil {
		return err
	}
	if err := oneOf("GPU.Direct", g.Direct, GPUDirectAuto, GPUDirectOn, GPUDirectOff); err != nil {
		return err
	}
	if g.SpinWait > 10*time.Millisecond {
		return errf(ErrInvalid, "options", "", "GPU.SpinWait %v: want at most 10ms (past it a wait should sleep)", g.SpinWait)
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
	d, err := gpu.Open(gpu.Options{Runtime: t.runtime, Index: idx, WrapIndex: wrap, SpinWait: o.SpinWait, Libraries: o.Libraries})
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
