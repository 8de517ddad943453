package gpu

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Runtime names a GPU runtime.
type Runtime string

const (
	CUDA Runtime = "cuda" // the NVIDIA driver API, libcuda.so.1
	HIP  Runtime = "hip"  // AMD HIP, libamdhip64.so
)

// sonames are the libraries tried for each runtime, in order.
var sonames = map[Runtime][]string{
	CUDA: {"libcuda.so.1", "libcuda.so"},
	HIP:  {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"},
}

var installHint = map[Runtime]string{
	CUDA: "install the NVIDIA driver (it provides libcuda.so.1; the CUDA toolkit is not needed) and make sure the loader finds it (ldconfig -p | grep libcuda, or LD_LIBRARY_PATH)",
	HIP:  "install ROCm's HIP runtime (libamdhip64.so, package hip-runtime-amd) and make sure the loader finds it (LD_LIBRARY_PATH=/opt/rocm/lib)",
}

// DefaultSpinWait is Options.SpinWait's default.
const DefaultSpinWait = 100 * time.Microsecond

// Options choose the runtime and the device.
type Options struct {
	// Runtime is CUDA or HIP; empty tries CUDA, then HIP.
	Runtime Runtime
	// Index is the device ordinal as the runtime counts devices (after
	// CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES).
	Index int
	// NoStreamProbe skips the check, in NewStream, that a new stream does
	// not share a hardware queue with the default stream.
	NoStreamProbe bool
	// SpinWait is how long a wait (Event.Sync, Stream.Sync, the stager's
	// waits, ReadBack) polls the event before it sleeps in the runtime's
	// blocking synchronise. A copy that ends inside it returns without the
	// sleep's wake-up (tens of µs: on an H200, a 384 KiB copy and its wait
	// took 50 µs sleeping and 17 µs polling); a longer wait costs at most
	// SpinWait of CPU, then sleeps. 0 means DefaultSpinWait; negative
	// never polls.
	SpinWait time.Duration

	// Libraries, when set, replaces the sonames tried (tests point it at
	// the stand-in drivers of package gputest; nothing else should).
	Libraries []string
	// WrapIndex takes Index modulo the number of devices, so that a local
	// rank finds its device whether the job shows every GPU of the node to
	// each rank or one (CUDA_VISIBLE_DEVICES per rank).
	WrapIndex bool
	// scratchBytes is the size of the buffer that memsets keep the
	// default stream busy with (default 64 MiB).
	scratchBytes int
}

// ParseDevice reads a device name: "cuda", "cuda:N", "hip:N" ("rocm" is
// an alias of "hip"). Without ":N" the index is 0.
func ParseDevice(s string) (Runtime, int, error) {
	name, idx, hasIdx := strings.Cut(strings.TrimSpace(s), ":")
	var rt Runtime
	switch strings.ToLower(name) {
	case "cuda":
		rt = CUDA
	case "hip", "rocm":
		rt = HIP
	default:
		return "", 0, invalid("", -1, "parse device", "%q: want cuda, cuda:N, hip or hip:N", s)
	}
	if !hasIdx {
		return rt, 0, nil
	}
	n, err := strconv.Atoi(idx)
	if err != nil || n < 0 {
		return "", 0, invalid("", -1, "parse device", "%q: device index %q is not a non-negative integer", s, idx)
	}
	return rt, n, nil
}

// library is one loaded runtime library. Libraries are never unloaded.
type library struct {
	rt   Runtime
	path string
	c    apiPtr
}

var libraries struct {
	sync.Mutex
	byPath map[string]*library
}

func loadLibrary(rt Runtime, path string) (*library, string) {
	libraries.Lock()
	defer libraries.Unlock()
	key := string(rt) + "\x00" + path
	if l := libraries.byPath[key]; l != nil {
		return l, ""
	}
	c, why := cLoad(rt, path)
	if c == nil {
		return nil, why
	}
	if libraries.byPath == nil {
		libraries.byPath = map[string]*library{}
	}
	l := &library{rt: rt, path: path, c: c}
	libraries.byPath[key] = l
	return l, ""
}

// Device is one opened GPU: its description, and the handles every
// operation goes through. Its methods are safe for concurrent use; Close
// must come after every other use.
type Device struct {
	Runtime       Runtime
	Index         int
	Name          string
	PCIBusID      string
	Major, Minor  int    // compute capability (HIP: the gcnArch major/minor)
	TotalMemory   int64  // bytes of device memory, as the runtime reports it
	DriverVersion int    // as the driver reports it: CUDA 12040 = 12.4
	Library       string // the library that was loaded

	lib    *library
	h      devPtr
	closed atomic.Bool
	probe  bool

	mu       sync.Mutex // guards what follows
	parked   []handle
	replaced int
	scratch  *Buffer // memset target for busy periods and probes
	scratchN int
	spin     spinKernel
	perSet   float64 // seconds per memset of scratch, once measured
}

// Open loads the runtime, initialises it and opens device o.Index.
func Open(o Options) (*Device, error) {
	if o.Index < 0 {
		return nil, invalid(o.Runtime, o.Index, "open", "device index %d is negative", o.Index)
	}
	switch o.Runtime {
	case CUDA, HIP:
		return open(o.Runtime, o)
	case "":
	default:
		return nil, invalid(o.Runtime, -1, "open", "unknown runtime %q (want cuda or hip)", o.Runtime)
	}
	d, err := open(CUDA, o)
	if err == nil || !errors.Is(err, ErrNoDriver) {
		return d, err
	}
	d, herr := open(HIP, o)
	if herr == nil || !errors.Is(herr, ErrNoDriver) {
		return d, herr
	}
	return nil, &Error{Device: -1, Op: "open", Text: "neither CUDA nor HIP is usable", kind: ErrNoDriver,
		Detail: err.Error() + "; " + herr.Error()}
}

func open(rt Runtime, o Options) (*Device, error) {
	paths := o.Libraries
	if paths == nil {
		paths = sonames[rt]
	}
	var tried []string
	var lib *library
	for _, p := range paths {
		l, why := loadLibrary(rt, p)
		if l != nil {
			lib = l
			break
		}
		if strings.HasPrefix(why, "missing symbol") {
			// An old driver: say so rather than trying more names.
			return nil, &Error{Runtime: rt, Device: -1, Op: "load " + p, Text: why, kind: ErrNoDriver,
				Detail: "the driver is too old for this program; " + installHint[rt]}
		}
		if !strings.HasPrefix(why, p) { // dlerror usually names the file itself
			why = p + ": " + why
		}
		tried = append(tried, why)
	}
	if lib == nil {
		return nil, &Error{Runtime: rt, Device: -1, Op: "dlopen", Text: "no library could be opened", kind: ErrNoDriver,
			Detail: "tried " + strings.Join(tried, "; ") + "; " + installHint[rt]}
	}
	version, count, r := cInit(lib.c)
	if r.failed() {
		code, op := r.codeOp()
		e := &Error{Runtime: rt, Device: -1, Op: op, Code: code, Text: cErrorString(lib.c, code), kind: ErrNoDriver,
			Detail: "initialising " + lib.path + "; " + installHint[rt]}
		if code == codeNoDevice {
			e.kind, e.Device = ErrNoDevice, o.Index
			e.Detail = fmt.Sprintf("device %d requested from %s; check that the node has a GPU and that %s does not hide it",
				o.Index, lib.path, visibleVar(rt))
		}
		return nil, e
	}
	if o.WrapIndex && count > 0 {
		o.Index %= count
	}
	if o.Index >= count {
		return nil, &Error{Runtime: rt, Device: o.Index, Op: "open", kind: ErrNoDevice,
			Text:   fmt.Sprintf("device %d requested, %d present", o.Index, count),
			Detail: fmt.Sprintf("%s reports %d devices; check %s and the job's GPU binding", lib.path, count, visibleVar(rt))}
	}
	h, info, r := cOpen(lib.c, o.Index)
	if r.failed() {
		code, op := r.codeOp()
		e := &Error{Runtime: rt, Device: o.Index, Op: op, Code: code, Text: cErrorString(lib.c, code), kind: ErrDriver}
		if code == codeNoDevice || code == codeInvalidDev {
			e.kind = ErrNoDevice
		}
		return nil, e
	}
	d := &Device{Runtime: rt, Index: o.Index, Name: info.name, PCIBusID: info.pci, Major: info.major, Minor: info.minor, TotalMemory: info.total,
		DriverVersion: version, Library: lib.path, lib: lib, h: h, probe: !o.NoStreamProbe,
		scratchN: o.scratchBytes}
	if d.scratchN <= 0 {
		d.scratchN = 64 << 20
	}
	spin := o.SpinWait
	if spin == 0 {
		spin = DefaultSpinWait
	}
	cSetSpin(h, uint64(max(spin, 0)))
	return d, nil
}

func visibleVar(rt Runtime) string {
	if rt == HIP {
		return "HIP_VISIBLE_DEVICES/ROCR_VISIBLE_DEVICES"
	}
	return "CUDA_VISIBLE_DEVICES"
}

// DriverVersionString formats DriverVersion: "12.4" for CUDA's 12040;
// HIP's number is printed as it is.
func (d *Device) DriverVersionString() string {
	if d.Runtime == CUDA {
		return fmt.Sprintf("%d.%d", d.DriverVersion/1000, d.DriverVersion%1000/10)
	}
	return strconv.Itoa(d.DriverVersion)
}

func (d *Device) String() string {
	return fmt.Sprintf("%s:%d %s (compute %d.%d, PCI %s, driver %s, %s)", d.Runtime, d.Index, d.Name,
		d.Major, d.Minor, d.PCIBusID, d.DriverVersionString(), d.Library)
}

// err turns a driver result into an *Error (nil on success).
func (d *Device) err(r result) error {
	if !r.failed() {
		return nil
	}
	code, op := r.codeOp()
	e := &Error{Runtime: d.Runtime, Device: d.Index, Op: op, Code: code, Text: cErrorString(d.lib.c, code), kind: ErrDriver}
	if code == codeOutOfMemory {
		e.kind = ErrOutOfMemory
	}
	return e
}

func (d *Device) errClosed(what string) error {
	return &Error{Runtime: d.Runtime, Device: d.Index, Op: what, Text: "closed", kind: ErrClosed}
}

// Sync waits until all work of the device's context, in every stream, has
// finished (cuCtxSynchronize / hipDeviceSynchronize). This is what the
// seed did on every call; the engine uses it only for gpu.sync: device.
func (d *Device) Sync() error {
	if d.closed.Load() {
		return d.errClosed("sync")
	}
	return d.err(cCtxSync(d.h))
}

// ReplacedStreams counts the streams NewStream found sharing a hardware
// queue with the default stream and replaced.
func (d *Device) ReplacedStreams() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.replaced
}

// Close waits for the context's work, then releases what the device holds
// (streams parked by the probe, the scratch buffer, the spin kernel's
// module, the primary context). Buffers,
// pinned memory, streams and events made from it must be closed first.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// Nothing of ours may still run on what is freed below.
	errs := []error{d.err(cCtxSync(d.h))}
	for _, s := range d.parked {
		errs = append(errs, d.err(cStreamDestroy(d.h, s)))
	}
	d.parked = nil
	if d.scratch != nil {
		errs = append(errs, d.err(cFree(d.h, d.scratch.ptr)))
		d.scratch = nil
	}
	if d.spin.mod != 0 {
		errs = append(errs, d.err(cModuleUnload(d.h, d.spin.mod)))
		d.spin.mod = 0
	}
	cClose(d.h)
	return errors.Join(errs...)
}

// DevicePtr is a device address (CUdeviceptr / hipDeviceptr_t).
type DevicePtr uint64

// Buffer is a range of device memory: allocated by Alloc (and freed by
// Free) or wrapped by Wrap (owned elsewhere, e.g. a PyTorch tensor).
type Buffer struct {
	dev   *Device
	ptr   DevicePtr
	n     int
	owned bool
	freed atomic.Bool
}

// Alloc allocates n bytes of device memory.
func (d *Device) Alloc(n int) (*Buffer, error) {
	if d.closed.Load() {
		return nil, d.errClosed("alloc")
	}
	if n <= 0 {
		return nil, invalid(d.Runtime, d.Index, "alloc", "size %d is not positive", n)
	}
	p, r := cAlloc(d.h, n)
	if err := d.err(r); err != nil {
		return nil, err
	}
	return &Buffer{dev: d, ptr: p, n: n, owned: true}, nil
}

// Wrap describes n bytes of device memory at p that something else owns.
// Free on it does nothing.
func (d *Device) Wrap(p DevicePtr, n int) (*Buffer, error) {
	if p == 0 || n <= 0 {
		return nil, invalid(d.Runtime, d.Index, "wrap", "device pointer %#x with %d bytes", uint64(p), n)
	}
	return &Buffer{dev: d, ptr: p, n: n}, nil
}

// Rebind points a wrapped buffer at other memory owned elsewhere (a new
// tensor per call through the Python ABI) without allocating. Copies
// already queued keep the address they were given.
func (b *Buffer) Rebind(p DevicePtr, n int) error {
	if b.owned || p == 0 || n <= 0 {
		return invalid(b.dev.Runtime, b.dev.Index, "rebind", "device pointer %#x with %d bytes, owned=%v: only wrapped buffers move", uint64(p), n, b.owned)
	}
	b.ptr, b.n = p, n
	b.freed.Store(false)
	return nil
}

func (b *Buffer) Ptr() DevicePtr { return b.ptr }

// Device is the device the buffer belongs to.
func (b *Buffer) Device() *Device { return b.dev }
func (b *Buffer) Len() int        { return b.n }

// Free releases memory from Alloc; it does nothing for wrapped memory.
func (b *Buffer) Free() error {
	if b.freed.Swap(true) || !b.owned {
		return nil
	}
	if b.dev.closed.Load() {
		return b.dev.errClosed("free")
	}
	return b.dev.err(cFree(b.dev.h, b.ptr))
}

// span checks that [off, off+n) lies in b and returns its address.
func (b *Buffer) span(op string, off, n int) (DevicePtr, error) {
	if b == nil {
		return 0, invalid("", -1, op, "nil device buffer")
	}
	if b.freed.Load() {
		return 0, b.dev.errClosed(op + ": buffer freed")
	}
	if off < 0 || n < 0 || off > b.n || n > b.n-off {
		return 0, invalid(b.dev.Runtime, b.dev.Index, op, "range [%d, %d) outside the %d-byte device buffer", off, off+n, b.n)
	}
	return b.ptr + DevicePtr(off), nil
}
