package engine

// The device read path against the stand-in GPU drivers (gpu/gputest):
// real ranks, real fabric, every row copied back from "device" memory and
// checked against its pattern. With DDSTORE_GPU_REAL=1 the same scenarios
// run against the real driver (examples/gpu/check.sh).

import (
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/gpu"
	"github.com/ddstore/ddstore/gpu/gputest"
	"github.com/ddstore/ddstore/telemetry"
)

func init() {
	scenarios["gpu"] = scenarioGPU
	scenarios["gpubusy"] = scenarioGPUBusy
}

// realGPU: run the device scenarios against the real driver.
func realGPU() bool { return os.Getenv("DDSTORE_GPU_REAL") == "1" }

var standins struct {
	once sync.Once
	dir  string
	libs gputest.Standins
	err  error
}

// standinLibs builds the stand-in drivers once per test process (removed
// by TestMain).
func standinLibs(t testing.TB) gputest.Standins {
	t.Helper()
	standins.once.Do(func() {
		standins.dir, standins.err = os.MkdirTemp("", "ddstore-engine-standin-")
		if standins.err == nil {
			standins.libs, standins.err = gputest.Build(standins.dir)
		}
	})
	if standins.err != nil {
		t.Fatalf("building the stand-in GPU drivers: %v", standins.err)
	}
	return standins.libs
}

func removeStandins() {
	if standins.dir != "" {
		os.RemoveAll(standins.dir)
	}
}

// gpuParams are the scenario parameters that select the GPU: a stand-in
// library (runtime cuda or hip), or with DDSTORE_GPU_REAL=1 the real
// driver and DDSTORE_GPU_DEVICE (e.g. cuda:0; default auto).
func gpuParams(t testing.TB, runtime string, params map[string]string) map[string]string {
	if realGPU() {
		params["GPUDEV"] = os.Getenv("DDSTORE_GPU_DEVICE") // "" = auto: CUDA, else HIP
		return params
	}
	libs := standinLibs(t)
	params["GPUDEV"] = runtime
	params["GPULIB"] = map[string]string{"cuda": libs.CUDA, "hip": libs.HIP}[runtime]
	return params
}

// gpuOptionsFrom are the GPU options that scenario parameters ask for
// (storeOptions applies them to every test store; device reads open the
// GPU only when called).
func gpuOptionsFrom(params map[string]string) GPUOptions {
	g := GPUOptions{Device: params["GPUDEV"], Sync: params["GPUSYNC"], Direct: params["GPUDIRECT"], StageBytes: 16 << 10}
	if v, err := strconv.Atoi(params["STAGE"]); err == nil {
		g.StageBytes = v
	}
	if lib := params["GPULIB"]; lib != "" {
		g.Libraries = []string{lib}
	}
	if d, err := time.ParseDuration(params["GPUSPIN"]); err == nil {
		g.SpinWait = d
	}
	return g
}

// deviceGetter is the device read API shared by Store and Reader.
type deviceGetter interface {
	GetBatchDevice(name string, idx []int64, dst *gpu.Buffer, off int) error
	GetDevice(name string, start, count int64, dst *gpu.Buffer, off int) error
}

// devBuf is a device buffer that reads land in at byte offset off, with a
// stream of its own that reads it back for the checks.
type devBuf struct {
	buf  *gpu.Buffer
	back *gpu.Stream
	host []byte
	off  int
}

// openDevice opens the rank's store with specs (openWith) and its device;
// on an error the store is closed.
func (w *worker) openDevice(specs ...varSpec) (*Store, *gpu.Device, error) {
	s, err := w.openWith(specs...)
	if err != nil {
		return nil, nil, err
	}
	dev, err := s.Device()
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return s, dev, nil
}

// newDevBuf allocates n bytes past off on the store's device.
func newDevBuf(s *Store, off, n int) (*devBuf, error) {
	dev, err := s.Device()
	if err != nil {
		return nil, err
	}
	d := &devBuf{off: off, host: make([]byte, off+n)}
	if d.buf, err = dev.Alloc(off + n); err != nil {
		return nil, err
	}
	if d.back, err = dev.NewStream(); err != nil {
		d.buf.Free()
		return nil, err
	}
	return d, nil
}

func (d *devBuf) close() {
	d.back.Close()
	d.buf.Free()
}

// readBack returns the first n bytes past off, copied back from the device.
func (d *devBuf) readBack(n int64) ([]byte, error) {
	b := d.host[:d.off+int(n)]
	err := d.back.ReadBack(b, d.buf, 0)
	return b[d.off:], err
}

// poison fills the n bytes past off, where the next read lands, with
// marker (through the buffer's own stream, waited for), as the host paths
// poison theirs: a row the read skips keeps the marker instead of what an
// earlier read left there.
func (d *devBuf) poison(n int64, marker byte) error {
	b := d.host[d.off : d.off+int(n)]
	for i := range b {
		b[i] = marker
	}
	if err := d.back.CopyIn(d.buf, d.off, b); err != nil {
		return err
	}
	return d.back.Sync()
}

// checkRead poisons the buffer where rows idx of spec land, runs read (a
// device read of them into it at off, done or queued on d.back when it
// returns), reads them back and checks every row against its pattern.
func (d *devBuf) checkRead(spec varSpec, salt uint64, idx []int64, read func() error) error {
	n := int64(len(idx)) * spec.rowBytes
	marker, err := poisonFor(spec.rowBytes, salt, idx)
	if err == nil {
		err = d.poison(n, marker)
	}
	if err == nil {
		err = read()
	}
	var got []byte
	if err == nil {
		got, err = d.readBack(n)
	}
	if err == nil {
		err = checkRows(got, spec.rowBytes, salt, idx)
	}
	return err
}

// checkBatch reads rows idx of spec through g into the poisoned buffer,
// reads them back and checks every row against its pattern.
func (d *devBuf) checkBatch(g deviceGetter, spec varSpec, salt uint64, idx []int64) error {
	if err := d.checkRead(spec, salt, idx, func() error { return g.GetBatchDevice(spec.name, idx, d.buf, d.off) }); err != nil {
		return fmt.Errorf("GetBatchDevice(%s, %d rows): %w", spec.name, len(idx), err)
	}
	return nil
}

// checkRange is checkBatch of the n rows from start, through GetDevice.
func (d *devBuf) checkRange(g deviceGetter, spec varSpec, salt uint64, start, n int64) error {
	if err := d.checkRead(spec, salt, seqIdx(start, n), func() error { return g.GetDevice(spec.name, start, n, d.buf, d.off) }); err != nil {
		return fmt.Errorf("GetDevice(%s, %d, %d): %w", spec.name, start, n, err)
	}
	return nil
}

// gpuRows are the row sizes of the device scenario: odd ones, one far
// smaller than a staging half and some larger (STAGE is 16 KiB).
var gpuRows = []int64{1, 1001, 3072, 12800, 70001}

func gpuSpec(rb int64) varSpec {
	return varSpec{name: fmt.Sprintf("dev-%d", rb), dt: Uint8, rowBytes: rb, base: 40 + 5000/rb, emptyMember: 1}
}

// scenarioGPU: every row size through the Store's and a Reader's device
// path (GetBatchDevice of random rows with duplicates, GetDevice across
// every shard boundary, the async form waited on by another stream),
// batches many times the staging half; every row read back and checked;
// no allocation per call; bad input; gpu_sync in telemetry.
func scenarioGPU(w *worker) error {
	if v := w.intParam("MAXPIECE", 0); v > 0 {
		maxPieceBytes = int64(v) // reads split below a row, as 4 MiB splits larger rows
	}
	s, dev, err := w.openDevice()
	if err != nil {
		return err
	}
	defer s.Close()
	if w.rank == 0 {
		w.logf("device: %s", dev)
	}
	r, err := s.NewReader()
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewSource(int64(w.rank) + 7))
	// rows land at an odd offset into the buffer
	d, err := newDevBuf(s, 13, 2<<20+1)
	if err != nil {
		return err
	}
	defer d.close()
	buf, off := d.buf, d.off
	for _, rb := range gpuRows {
		spec := gpuSpec(rb)
		if err := addPattern(s, spec); err != nil {
			return fmt.Errorf("Add %s: %w", spec.name, err)
		}
		info, err := s.Query(spec.name)
		if err != nil {
			return err
		}
		salt := spec.salt(s.Group())
		maxRows := min(int64(buf.Len()-off)/rb, 400)
		for _, g := range []struct {
			what string
			get  deviceGetter
		}{{"store", s}, {"reader", r}} {
			// Random rows with duplicates, batches from 1 row to maxRows.
			for _, n := range []int64{1, 7, maxRows} {
				idx := make([]int64, n)
				for i := range idx {
					idx[i] = rng.Int63n(info.GlobalRows)
				}
				if n > 2 {
					idx[n-1] = idx[0]
				}
				if err := d.checkBatch(g.get, spec, salt, idx); err != nil {
					return fmt.Errorf("%s %w", g.what, err)
				}
			}
			// Ranges across every shard boundary (and the whole variable
			// when it fits).
			for _, b := range info.Shards[1 : len(info.Shards)-1] {
				start := max(b-3, 0)
				n := min(info.GlobalRows-start, 6, maxRows)
				if err := d.checkRange(g.get, spec, salt, start, n); err != nil {
					return fmt.Errorf("%s: %w", g.what, err)
				}
			}
			if err := d.checkRange(g.get, spec, salt, 0, min(info.GlobalRows, maxRows)); err != nil {
				return fmt.Errorf("%s: %w", g.what, err)
			}
		}
		// Async: a consumer stream waits on the reader's event, then reads.
		idx := make([]int64, maxRows)
		for i := range idx {
			idx[i] = info.GlobalRows - 1 - int64(i)%info.GlobalRows
		}
		if err := d.checkRead(spec, salt, idx, func() error {
			ev, err := r.GetBatchDeviceAsync(spec.name, idx, buf, off)
			if err == nil {
				err = d.back.WaitEvent(ev) // the read back is queued behind the wait
			}
			return err
		}); err != nil {
			return fmt.Errorf("GetBatchDeviceAsync(%s): %w", spec.name, err)
		}
		if err := checkDeviceAllocs(s, r, spec, buf, off); err != nil {
			return err
		}
		if err := checkDeviceErrors(s, r, spec, buf); err != nil {
			return err
		}
		// gpu_sync is a phase of the device calls.
		if err := checkGPUSyncPhase(s, spec.name, r.ID()); err != nil {
			return err
		}
	}
	if err := r.Close(); err != nil {
		return err
	}
	if err := s.Barrier(); err != nil { // nobody reads our rows any more
		return err
	}
	return s.Close()
}

// checkDeviceAllocs: after the first call, device reads allocate nothing
// (and so register nothing: a registration would allocate its record).
func checkDeviceAllocs(s *Store, r *Reader, spec varSpec, buf *gpu.Buffer, off int) error {
	info, err := s.Query(spec.name)
	if err != nil {
		return err
	}
	n := min(info.GlobalRows, 130, int64(buf.Len()-off)/spec.rowBytes)
	idx := make([]int64, n)
	for i := range idx {
		idx[i] = (int64(i) * 7919) % info.GlobalRows
	}
	var callErr error
	for _, g := range []struct {
		what string
		get  deviceGetter
	}{{"store", s}, {"reader", r}} {
		if a, _ := hotAllocs(10, func() {
			if err := g.get.GetBatchDevice(spec.name, idx, buf, off); err != nil {
				callErr = err
			}
		}); a != 0 || callErr != nil {
			return fmt.Errorf("%s GetBatchDevice(%s, %d rows): %v allocs per call (want 0), err %v", g.what, spec.name, n, a, callErr)
		}
		if a, _ := hotAllocs(10, func() {
			if err := g.get.GetDevice(spec.name, info.GlobalRows-n, n, buf, off); err != nil {
				callErr = err
			}
		}); a != 0 || callErr != nil {
			return fmt.Errorf("%s GetDevice(%s, %d rows): %v allocs per call (want 0), err %v", g.what, spec.name, n, a, callErr)
		}
	}
	if a, _ := hotAllocs(10, func() {
		if _, err := r.GetBatchDeviceAsync(spec.name, idx, buf, off); err != nil {
			callErr = err
		}
	}); a != 0 || callErr != nil {
		return fmt.Errorf("reader GetBatchDeviceAsync(%s, %d rows): %v allocs per call (want 0), err %v", spec.name, n, a, callErr)
	}
	return nil
}

// checkDeviceErrors: bad input is a clear error, and the path still works.
func checkDeviceErrors(s *Store, r *Reader, spec varSpec, buf *gpu.Buffer) error {
	info, err := s.Query(spec.name)
	if err != nil {
		return err
	}
	want := func(what string, err, class error, frag string) error {
		if err == nil || !errors.Is(err, class) || !strings.Contains(err.Error(), frag) {
			return fmt.Errorf("%s: %v, want %v naming %q", what, err, class, frag)
		}
		return nil
	}
	dev, err := s.Device()
	if err != nil {
		return err
	}
	small, err := dev.Alloc(int(2 * spec.rowBytes))
	if err != nil {
		return err
	}
	defer small.Free()
	checks := []error{
		want("bad index", r.GetBatchDevice(spec.name, []int64{0, info.GlobalRows}, buf, 0), ErrIndex, strconv.FormatInt(info.GlobalRows, 10)),
		want("bad range", s.GetDevice(spec.name, info.GlobalRows-1, 2, buf, 0), ErrIndex, spec.name),
		want("short buffer", r.GetDevice(spec.name, 0, 2, small, 1), ErrShortBuffer, spec.name),
		want("short buffer", s.GetBatchDevice(spec.name, []int64{1, 2, 0}, small, 0), ErrShortBuffer, spec.name),
		want("nil buffer", r.GetBatchDevice(spec.name, []int64{0}, nil, 0), fault.ErrInvalid, "nil device buffer"),
		want("negative offset", s.GetBatchDevice(spec.name, []int64{0}, buf, -1), fault.ErrInvalid, "offset -1"),
		want("unknown variable", r.GetBatchDevice("nope", []int64{0}, buf, 0), ErrUnknownVar, "nope"),
	}
	return errors.Join(checks...)
}

// telemetrySnapshot is variable name in s's telemetry segment.
func telemetrySnapshot(s *Store, name string) (*telemetry.VarSnapshot, error) {
	w := s.Telemetry()
	if w == nil {
		return nil, errors.New("telemetry is off")
	}
	seg, err := telemetry.Open(w.Path())
	if err != nil {
		return nil, err
	}
	defer seg.Close()
	snap, err := seg.Snapshot()
	if err != nil {
		return nil, err
	}
	v := snap.Var(name)
	if v == nil {
		return nil, fmt.Errorf("telemetry: no variable %q", name)
	}
	return v, nil
}

// stripe is reader id's counters in v (zero when it has none yet).
func stripe(v *telemetry.VarSnapshot, id int) telemetry.Counters {
	if id < len(v.Readers) {
		return v.Readers[id]
	}
	return telemetry.Counters{}
}

func checkGPUSyncPhase(s *Store, name string, reader int) error {
	v, err := telemetrySnapshot(s, name)
	if err != nil {
		return err
	}
	for _, id := range []int{0, reader} {
		c := stripe(v, id)
		if c.Calls == 0 || c.PhaseNs[telemetry.PhaseGPUSync] <= 0 {
			return fmt.Errorf("telemetry %s stripe %d: %d calls, gpu_sync %d ns: want device calls with gpu_sync > 0",
				name, id, c.Calls, c.PhaseNs[telemetry.PhaseGPUSync])
		}
	}
	return nil
}

func TestDeviceRead(t *testing.T) {
	// piece: the largest read, lowered so that rows and runs split into
	// several reads (as rows over 4 MiB do); stage: the staging halves.
	cases := []struct{ mode, runtime, piece, stage string }{{"local", "cuda", "", ""}, {"tcp", "cuda", "", ""},
		{"tcp-rma", "hip", "5000", "65536"}, {"shm", "cuda", "", ""}}
	if realGPU() {
		cases = cases[:2]
	}
	for _, c := range cases {
		t.Run("path="+c.mode+"/gpu="+c.runtime, func(t *testing.T) {
			params := gpuParams(t, c.runtime, map[string]string{"MODE": c.mode, "MAXPIECE": c.piece, "STAGE": c.stage})
			spawnRanks(t, 3, "gpu", params, 120*time.Second, nil)
		})
	}
}

// busyFor is how long each busy period of the default stream lasts in the
// busy scenario: far longer than a device read takes on a loaded machine,
// so "not delayed" (< busyFor/4) and "delayed" (> busyFor/2) cannot be
// confused.
const busyFor = 400 * time.Millisecond

// scenarioGPUBusy: rank 0 reads rows of rank 1 (over the fabric) into
// device memory, idle and with the default stream held busy (training
// kernels), under GPUSYNC. It prints the gpu_sync per call from telemetry
// and checks: with sync=stream the busy default stream does not delay the
// reader; with sync=device every call waits for it.
func scenarioGPUBusy(w *worker) error {
	spec := gpuSpec(3072)
	s, err := w.openWith(spec)
	if err != nil {
		return err
	}
	defer s.Close()
	if w.rank == 0 {
		if err := gpuBusyReads(w, s, spec); err != nil {
			return err
		}
	}
	if err := s.Barrier(); err != nil {
		return err
	}
	return s.Close()
}

func gpuBusyReads(w *worker, s *Store, spec varSpec) error {
	dev, err := s.Device()
	if err != nil {
		return err
	}
	r, info, err := readerAndInfo(s, spec.name)
	if err != nil {
		return err
	}
	defer r.Close()
	n := min(info.GlobalRows, 128)
	idx := make([]int64, n)
	for i := range idx {
		idx[i] = info.GlobalRows - 1 - int64(i) // rank 1's rows first
	}
	d, err := newDevBuf(s, 0, int(n*spec.rowBytes))
	if err != nil {
		return err
	}
	defer d.close()
	salt := spec.salt(s.Group())
	marker, err := poisonFor(spec.rowBytes, salt, idx)
	if err != nil {
		return err
	}
	const calls = 5
	// perCall runs calls reads (each behind a fresh busy period when busy)
	// and returns the median gpu_sync per call from telemetry.
	perCall := func(busy bool) (time.Duration, error) {
		var syncs []time.Duration
		for k := 0; k < calls; k++ {
			if err := d.poison(n*spec.rowBytes, marker); err != nil { // before the busy period
				return 0, err
			}
			var b *gpu.Busy
			if busy {
				if b, err = dev.BusyDefaultStream(busyFor); err != nil {
					return 0, err
				}
			}
			before, err := telemetrySnapshot(s, spec.name)
			if err != nil {
				return 0, err
			}
			callErr := r.GetBatchDevice(spec.name, idx, d.buf, 0)
			after, err := telemetrySnapshot(s, spec.name)
			if err != nil {
				return 0, err
			}
			if b != nil {
				if err := b.Wait(); err != nil {
					return 0, err
				}
			}
			if callErr != nil {
				return 0, callErr
			}
			got, err := d.readBack(n * spec.rowBytes)
			if err == nil {
				err = checkRows(got, spec.rowBytes, salt, idx)
			}
			if err != nil {
				return 0, err
			}
			c0, c1 := stripe(before, r.ID()), stripe(after, r.ID())
			if c1.Calls != c0.Calls+1 {
				return 0, fmt.Errorf("telemetry: %d calls recorded for one", c1.Calls-c0.Calls)
			}
			syncs = append(syncs, time.Duration(c1.PhaseNs[telemetry.PhaseGPUSync]-c0.PhaseNs[telemetry.PhaseGPUSync]))
		}
		slices.Sort(syncs)
		return syncs[len(syncs)/2], nil
	}
	if _, err := perCall(false); err != nil { // warm-up: stream, staging, connections
		return err
	}
	idle, err := perCall(false)
	if err != nil {
		return err
	}
	busy, err := perCall(true)
	if err != nil {
		return err
	}
	mode := s.opts.GPU.Sync
	fmt.Printf("GPU BUSY: sync=%s gpu_sync per call idle %v busy %v busy/idle %.2f (default stream busy %v per call)\n",
		mode, idle, busy, float64(busy)/float64(max(idle, 1)), busyFor)
	switch mode {
	case GPUSyncStream:
		if busy > busyFor/4 {
			return fmt.Errorf("sync=stream: gpu_sync %v per call with the default stream busy for %v: the reader waited for it", busy, busyFor)
		}
	case GPUSyncDevice:
		if busy < busyFor/2 {
			return fmt.Errorf("sync=device: gpu_sync %v per call with the default stream busy for %v: the context sync did not wait for it", busy, busyFor)
		}
	}
	return nil
}

func TestDeviceSyncBusy(t *testing.T) {
	for _, mode := range []string{GPUSyncStream, GPUSyncDevice} {
		t.Run("sync="+mode, func(t *testing.T) {
			params := gpuParams(t, "cuda", map[string]string{"MODE": "tcp", "GPUSYNC": mode})
			spawnRanks(t, 2, "gpubusy", params, 120*time.Second, nil) // -v shows rank 0's GPU BUSY line
		})
	}
}

// openSingleGPU opens a one-rank store with GPU options g.
func openSingleGPU(t *testing.T, tag string, g GPUOptions) *Store {
	t.Helper()
	return openSingle(t, tag, func(o *Options) { o.GPU = g })
}

// TestDeviceOpenErrors: what goes wrong opening the GPU is a clear error at
// the first device read (and every later one), naming what was tried;
// host reads are unaffected.
func TestDeviceOpenErrors(t *testing.T) {
	libs := standinLibs(t)
	missing := filepath.Join(t.TempDir(), "libcuda.so.1")
	cases := []struct {
		name  string
		g     GPUOptions
		env   map[string]string
		kinds []error
		frags []string
	}{
		{"no library", GPUOptions{Device: "cuda", Libraries: []string{missing}},
			nil, []error{fault.ErrNoLibrary, gpu.ErrNoDriver}, []string{missing, "install the NVIDIA driver", `GPU.Device "cuda"`}},
		{"missing symbol", GPUOptions{Device: "cuda", Libraries: []string{libs.CUDANoSym}},
			nil, []error{fault.ErrNoLibrary, gpu.ErrNoDriver}, []string{"missing symbol cuMemcpyHtoDAsync_v2", "too old"}},
		{"init failure", GPUOptions{Device: "hip", Libraries: []string{libs.HIP}},
			map[string]string{"DDSTORE_STANDIN_INIT_ERROR": "35"}, []error{fault.ErrNoLibrary, gpu.ErrNoDriver}, []string{"hipInit", "error 35"}},
		{"no such device", GPUOptions{Device: "cuda:3", Libraries: []string{libs.CUDA}},
			nil, []error{fault.ErrNoLibrary, gpu.ErrNoDevice}, []string{"device 3 requested, 1 present"}},
		{"none", GPUOptions{Device: "none"},
			nil, []error{fault.ErrInvalid}, []string{"machine.gpu", "none"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			s := openSingleGPU(t, "gpuerr", c.g)
			spec := gpuSpec(100)
			if err := addPattern(s, spec); err != nil {
				t.Fatal(err)
			}
			host := make([]byte, 2*spec.rowBytes)
			if err := s.GetBatch(spec.name, []int64{1, 0}, host); err != nil {
				t.Fatalf("host read: %v", err)
			}
			r, err := s.NewReader()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for i, err := range []error{s.GetBatchDevice(spec.name, []int64{0}, nil, 0), r.GetDevice(spec.name, 0, 1, nil, 0)} {
				t.Logf("call %d: %v", i, err)
				for _, k := range c.kinds {
					if !errors.Is(err, k) {
						t.Fatalf("call %d: %v, want %v", i, err, k)
					}
				}
				for _, f := range c.frags {
					if !strings.Contains(err.Error(), f) {
						t.Fatalf("call %d: %q does not name %q", i, err, f)
					}
				}
			}
			if _, err := s.Device(); !errors.Is(err, c.kinds[0]) {
				t.Fatalf("Device(): %v, want %v", err, c.kinds[0])
			}
		})
	}
	// Options are checked at Open.
	for _, c := range []struct {
		g    GPUOptions
		want string
	}{
		{GPUOptions{Device: "tpu"}, `GPU.Device: "tpu"`},
		{GPUOptions{Device: "cuda:x"}, `GPU.Device: "cuda:x"`},
		{GPUOptions{Sync: "always"}, `GPU.Sync "always"`},
		{GPUOptions{Direct: "maybe"}, `GPU.Direct "maybe"`},
		{GPUOptions{StageBytes: 100}, "GPU.StageBytes 100"},
	} {
		o := DefaultOptions()
		o.GPU = c.g
		if err := wantInvalid(o.Validate(), c.want); err != nil {
			t.Errorf("%+v: %v", c.g, err)
		}
	}
}

// TestDeviceWrongDevice: a destination of another gpu.Device than the
// store's is refused.
func TestDeviceWrongDevice(t *testing.T) {
	libs := standinLibs(t)
	s := openSingleGPU(t, "gpudev", GPUOptions{Device: "cuda", Libraries: []string{libs.CUDA}})
	spec := gpuSpec(64)
	if err := addPattern(s, spec); err != nil {
		t.Fatal(err)
	}
	other, err := gpu.Open(gpu.Options{Runtime: gpu.HIP, Libraries: []string{libs.HIP}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	buf, err := other.Alloc(1024)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	if err := s.GetBatchDevice(spec.name, []int64{0}, buf, 0); !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), "another gpu.Device") {
		t.Fatalf("destination on another device: %v", err)
	}
}

// TestGPUConfig: machine.gpu and the gpu section reach GPUOptions, the
// environment overrides them, bad values name the key, and the default
// device is the local rank modulo the devices the rank sees.
func TestGPUConfig(t *testing.T) {
	clearConfigEnv(t)
	t.Setenv("NERSC_HOST", "perlmutter")
	c, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	g := c.StoreOptions().GPU
	if g.Device != "cuda:$LOCAL_RANK" || g.Sync != GPUSyncStream || g.Direct != GPUDirectAuto || g.StageBytes != 16<<20 || g.SpinWait != 100*time.Microsecond {
		t.Fatalf("perlmutter GPU options: %+v", g)
	}
	clearConfigEnv(t)
	t.Setenv("LMOD_SYSTEM_NAME", "frontier")
	t.Setenv("DDSTORE_GPU_DEVICE", "2")
	t.Setenv("DDSTORE_GPU_SYNC", "device")
	t.Setenv("DDSTORE_GPU_DIRECT", "off")
	t.Setenv("DDSTORE_GPU_STAGE_BYTES", "64KiB")
	t.Setenv("DDSTORE_GPU_SPIN_WAIT", "0")
	if c, err = LoadConfig(""); err != nil {
		t.Fatal(err)
	}
	o := c.StoreOptions()
	if g := o.GPU; g.Device != "hip:2" || g.Sync != GPUSyncDevice || g.Direct != GPUDirectOff || g.StageBytes != 64<<10 || g.SpinWait >= 0 {
		t.Fatalf("frontier GPU options with overrides: %+v", g)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	clearConfigEnv(t)
	if c, err = LoadConfig(""); err != nil || c.StoreOptions().GPU.Device != "auto:$LOCAL_RANK" {
		t.Fatalf("local GPU device: %q, %v", c.StoreOptions().GPU.Device, err)
	}
	for env, val := range map[string]string{"DDSTORE_GPU": "tpu", "DDSTORE_GPU_DEVICE": "first", "DDSTORE_GPU_SYNC": "never",
		"DDSTORE_GPU_DIRECT": "yes", "DDSTORE_GPU_STAGE_BYTES": "512MiB", "DDSTORE_GPU_SPIN_WAIT": "1s"} {
		clearConfigEnv(t)
		t.Setenv(env, val)
		_, err := LoadConfig("")
		key := map[string]string{"DDSTORE_GPU": "machine.gpu"}[env]
		if key == "" {
			key = "gpu." + strings.ToLower(strings.TrimPrefix(env, "DDSTORE_GPU_"))
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%s: %v, want ErrConfig naming %s", env, val, err, key)
		}
	}
	// The local rank modulo the device count: TestDeviceRead's ranks 1 and
	// 2 find the stand-in's one device that way.
}

func init() { scenarios["gpuloader"] = scenarioGPULoader }

// scenarioGPULoader: the loader's Device mode over two variables of odd
// row sizes, with workers (WORKERS) and without, two epochs: batches come
// in order, cover the epoch's indices, and every row, read back on the
// consumer's stream after WaitOn, matches its pattern. One batch is held
// across the next three and checked again: its slot was not reused.
func scenarioGPULoader(w *worker) error {
	specs := []varSpec{gpuSpec(1001), gpuSpec(12800)}
	specs[0].base, specs[1].base = 90, 90 // equal global rows
	s, dev, err := w.openDevice(specs...)
	if err != nil {
		return err
	}
	defer s.Close()
	cs, err := dev.NewStream() // the consumer's (training) stream
	if err != nil {
		return err
	}
	defer cs.Close()
	workers := w.intParam("WORKERS", 2)
	l, err := s.NewLoader(LoaderOptions{Vars: []string{specs[0].name, specs[1].name}, BatchSize: 37, Shuffle: true,
		Seed: 5, Workers: workers, Prefetch: 2, Device: true})
	if err != nil {
		return err
	}
	host := make([]byte, 37*12800)
	check := func(b *Batch) error {
		for v, spec := range specs {
			got := host[:len(b.Indices)*int(spec.rowBytes)]
			if b.Device[v].Len() != len(got) {
				return fmt.Errorf("batch %d var %s: device view of %d bytes, want %d", b.Number, spec.name, b.Device[v].Len(), len(got))
			}
			if err := cs.ReadBack(got, b.Device[v], 0); err != nil {
				return err
			}
			if err := checkRows(got, spec.rowBytes, spec.salt(s.Group()), b.Indices); err != nil {
				return fmt.Errorf("epoch %d batch %d var %s: %w", b.Epoch, b.Number, spec.name, err)
			}
		}
		return nil
	}
	for epoch := 0; epoch < 2; epoch++ {
		ep, err := l.Epoch(epoch)
		if err != nil {
			return err
		}
		var seen []int64
		var held *Batch
		for n := 0; ; n++ {
			b, err := ep.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			if b.Number != n || b.Data != nil {
				return fmt.Errorf("epoch %d: batch %d came as number %d (host data %v)", epoch, n, b.Number, b.Data != nil)
			}
			if err := b.WaitOn(cs); err != nil {
				return err
			}
			if err := check(b); err != nil {
				return err
			}
			seen = append(seen, b.Indices...)
			switch {
			case n == 1:
				held = b // held across three more batches
				continue
			case n == 4 && held != nil:
				if err := check(held); err != nil {
					return fmt.Errorf("held batch after three more: %w", err)
				}
				if err := held.ReleaseOn(cs); err != nil {
					return err
				}
				held = nil
			}
			if err := b.ReleaseOn(cs); err != nil {
				return err
			}
		}
		if held != nil {
			held.Release()
		}
		if !slices.Equal(seen, ep.Indices()) {
			return fmt.Errorf("epoch %d: batches hold %d rows, not the epoch's %d indices in order", epoch, len(seen), len(ep.Indices()))
		}
		ep.Close()
	}
	if err := l.Close(); err != nil {
		return err
	}
	if workers == 0 {
		// A consumer that keeps every batch: the ring's slots are never
		// handed out again while held, so the batch after the ring's size
		// times out naming the cause instead of overwriting one.
		l, err := s.NewLoader(LoaderOptions{Vars: []string{specs[0].name}, BatchSize: 5, Prefetch: 2, Device: true, Timeout: 300 * time.Millisecond})
		if err != nil {
			return err
		}
		ep, err := l.Epoch(0)
		if err != nil {
			return err
		}
		var kept []*Batch
		slots := l.deviceRingSlots()
		for n := 0; n <= slots; n++ {
			b, err := ep.Next()
			if n < slots {
				if err != nil {
					return fmt.Errorf("held batch %d of %d slots: %w", n, slots, err)
				}
				kept = append(kept, b)
				continue
			}
			if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "not released") {
				return fmt.Errorf("batch %d with all %d slots held: %v, want a timeout naming the held batch", n, slots, err)
			}
		}
		for _, b := range kept {
			if err := b.Sync(); err != nil {
				return err
			}
			spec := specs[0]
			got := host[:len(b.Indices)*int(spec.rowBytes)]
			if err := cs.ReadBack(got, b.Device[0], 0); err != nil {
				return err
			}
			if err := checkRows(got, spec.rowBytes, spec.salt(s.Group()), b.Indices); err != nil {
				return fmt.Errorf("held batch %d: %w", b.Number, err)
			}
			b.Release()
		}
		if err := l.Close(); err != nil {
			return err
		}
	}
	if err := s.Barrier(); err != nil {
		return err
	}
	return s.Close()
}

func TestDeviceLoader(t *testing.T) {
	for _, workers := range []string{"2", "0"} {
		t.Run("workers="+workers, func(t *testing.T) {
			params := gpuParams(t, "cuda", map[string]string{"MODE": "tcp", "WORKERS": workers})
			spawnRanks(t, 2, "gpuloader", params, 120*time.Second, nil)
		})
	}
}

func init() { scenarios["gpudirect"] = scenarioGPUDirect }

// scenarioGPUDirect: the GPUDirect decision (GPUDIRECT) against this
// machine's providers, none of which can register device memory: auto
// stages and says why (WHY), on fails the device read naming the probe's
// answer (unless no fabric read is needed at all); host reads work
// either way.
func scenarioGPUDirect(w *worker) error {
	spec := gpuSpec(3072)
	s, dev, err := w.openDevice(spec)
	if err != nil {
		return err
	}
	defer s.Close()
	buf, err := dev.Alloc(4 * 3072)
	if err != nil {
		return err
	}
	defer buf.Free()
	if on, why := s.GPUDirect(); on || !strings.Contains(why, "not decided") {
		return fmt.Errorf("before any device read: GPUDirect() = %v, %q", on, why)
	}
	info, err := s.Query(spec.name)
	if err != nil {
		return err
	}
	idx := []int64{info.GlobalRows - 1, 0, 1, info.GlobalRows - 2}
	readErr := s.GetBatchDevice(spec.name, idx, buf, 0)
	on, why := s.GPUDirect()
	w.logf("gpu.direct %s: read %v; GPUDirect() = %v, %q", w.param("GPUDIRECT", "auto"), readErr, on, why)
	if on || !strings.Contains(why, w.param("WHY", "")) {
		return fmt.Errorf("GPUDirect() = %v, %q: want false naming %q", on, why, w.param("WHY", ""))
	}
	switch w.param("GPUDIRECT", "auto") + "/" + w.mode {
	case GPUDirectOn + "/tcp", GPUDirectOn + "/shm":
		if !errors.Is(readErr, fault.ErrInvalid) || !strings.Contains(readErr.Error(), "gpu.direct is on") || !strings.Contains(readErr.Error(), w.param("WHY", "")) {
			return fmt.Errorf("gpu.direct on: device read: %v, want an error naming the probe's answer", readErr)
		}
	default:
		if readErr != nil {
			return readErr
		}
		host := make([]byte, buf.Len())
		check, err := dev.NewStream()
		if err != nil {
			return err
		}
		defer check.Close()
		if err := check.ReadBack(host, buf, 0); err != nil {
			return err
		}
		if err := checkRows(host, spec.rowBytes, spec.salt(s.Group()), idx); err != nil {
			return err
		}
	}
	host := make([]byte, len(idx)*3072)
	if err := s.GetBatch(spec.name, idx, host); err != nil {
		return err
	}
	if err := checkRows(host, spec.rowBytes, spec.salt(s.Group()), idx); err != nil {
		return err
	}
	if err := s.Barrier(); err != nil {
		return err
	}
	return s.Close()
}

func TestGPUDirect(t *testing.T) {
	for _, c := range []struct{ mode, direct, why string }{
		{"tcp", GPUDirectAuto, "fi_getinfo with FI_HMEM"},
		{"shm", GPUDirectAuto, "fi_mr_regattr of device memory"}, // shm offers FI_HMEM; the probe says no
		{"tcp", GPUDirectOn, "fi_getinfo with FI_HMEM"},
		{"shm", GPUDirectOff, "gpu.direct is off"},
		{"local", GPUDirectOn, "no fabric"},
	} {
		t.Run(c.mode+"/direct="+c.direct, func(t *testing.T) {
			params := gpuParams(t, "cuda", map[string]string{"MODE": c.mode, "GPUDIRECT": c.direct, "WHY": c.why})
			spawnRanks(t, 2, "gpudirect", params, 60*time.Second, nil)
		})
	}
}

// TestDeviceConcurrent: goroutines opening the device, making Readers and
// reading into device memory at once, through Readers and through the
// Store's shared device path (make test runs it under -race).
func TestDeviceConcurrent(t *testing.T) {
	libs := standinLibs(t)
	s := openSingleGPU(t, "gpuconc", GPUOptions{Device: "cuda", Libraries: []string{libs.CUDA}, StageBytes: 4 << 10})
	spec := gpuSpec(1001)
	if err := addPattern(s, spec); err != nil {
		t.Fatal(err)
	}
	info, err := s.Query(spec.name)
	if err != nil {
		t.Fatal(err)
	}
	salt := spec.salt(s.Group())
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				d, err := newDevBuf(s, 0, 20*1001)
				if err != nil {
					return err
				}
				defer d.close()
				var get deviceGetter = s
				if g%2 == 1 {
					r, err := s.NewReader()
					if err != nil {
						return err
					}
					defer r.Close()
					get = r
				}
				rng := rand.New(rand.NewSource(int64(g)))
				for it := 0; it < 30; it++ {
					idx := make([]int64, 1+rng.Intn(20))
					for i := range idx {
						idx[i] = rng.Int63n(info.GlobalRows)
					}
					if err := d.checkBatch(get, spec, salt, idx); err != nil {
						return fmt.Errorf("goroutine %d iteration %d: %w", g, it, err)
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
