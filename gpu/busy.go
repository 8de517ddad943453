package gpu

import (
	"math"
	"time"
)

// spinPTX is one kernel, ddstore_spin(u64 ns), that loops on %globaltimer
// until ns nanoseconds have passed. Launched with one thread on the legacy
// default stream it stands for training kernels: the default stream is
// busy for exactly that long while the GPU stays nearly idle. PTX is JIT
// compiled by the driver for whatever GPU is present; no toolkit needed.
const spinPTX = `.version 6.0
.target sm_50
.address_size 64

.visible .entry ddstore_spin(.param .u64 ddstore_spin_ns)
{
	.reg .pred %p<2>;
	.reg .b64 %rd<5>;
	ld.param.u64 %rd1, [ddstore_spin_ns];
	mov.u64 %rd2, %globaltimer;
$L_spin:
	mov.u64 %rd3, %globaltimer;
	sub.s64 %rd4, %rd3, %rd2;
	setp.lt.u64 %p1, %rd4, %rd1;
	@%p1 bra $L_spin;
	ret;
}
`

const spinName = "ddstore_spin"

// maxBusyMemsets bounds the memsets one busy period queues (the launch
// queue blocks the host when it fills).
const maxBusyMemsets = 4096

type spinKernel struct {
	tried   bool
	mod, fn handle
	why     string // why memsets are used instead
}

// Busy is a period of work on the legacy default stream, queued by
// BusyDefaultStream: what a training step looks like to a data reader.
type Busy struct {
	dev *Device
	ev  handle
	// Method says how the stream is kept busy: "ptx spin kernel", or
	// memsets of a scratch buffer and why the kernel is not used.
	Method string
	// Planned is how long the queued work should take (memsets: as
	// measured once per device, and at most maxBusyMemsets of them).
	Planned time.Duration
}

// BusyDefaultStream queues about dur of work on the legacy default stream
// and returns at once. CUDA launches the spin kernel (loaded once with
// cuModuleLoadData); where that fails, and on HIP, it queues memsets of a
// scratch buffer, as many as a first measurement says fill dur.
func (d *Device) BusyDefaultStream(dur time.Duration) (*Busy, error) {
	if d.closed.Load() {
		return nil, d.errClosed("busy default stream")
	}
	if dur <= 0 {
		return nil, invalid(d.Runtime, d.Index, "busy default stream", "duration %v is not positive", dur)
	}
	ev, r := cEventCreate(d.h)
	if err := d.err(r); err != nil {
		return nil, err
	}
	b := &Busy{dev: d, ev: ev, Planned: dur}
	d.mu.Lock()
	err := d.queueBusy(b, dur)
	d.mu.Unlock()
	if err != nil {
		_ = d.err(cEventDestroy(d.h, ev))
		return nil, err
	}
	return b, nil
}

// queueBusy queues the busy work and records b.ev after it. d.mu is held.
func (d *Device) queueBusy(b *Busy, dur time.Duration) error {
	d.loadSpin()
	if d.spin.fn != 0 {
		b.Method = "ptx spin kernel"
		return d.err(cSpin(d.h, d.spin.fn, uint64(dur), b.ev))
	}
	b.Method = "memsets (" + d.spin.why + ")"
	scratch, err := d.scratchLocked()
	if err != nil {
		return err
	}
	if d.perSet == 0 {
		per, err := d.calibrateMemsets(scratch, b.ev)
		if err != nil {
			return err
		}
		d.perSet = per
	}
	count := int(math.Min(math.Ceil(dur.Seconds()/d.perSet), maxBusyMemsets))
	b.Planned = time.Duration(float64(count) * d.perSet * float64(time.Second))
	return d.err(cMemsets(d.h, scratch.ptr, scratch.n, count, 0, b.ev))
}

// calibrateMemsets measures how long one memset of scratch takes: it
// doubles the count until a run lasts calibrateFor (so that the fixed cost
// of queueing and waking is spread thin), then keeps the fastest of three
// runs (a descheduled host thread only ever adds time). d.mu is held.
func (d *Device) calibrateMemsets(scratch *Buffer, ev handle) (float64, error) {
	const calibrateFor = 10 * time.Millisecond
	run := func(count int) (time.Duration, error) {
		start := time.Now()
		if err := d.err(cMemsets(d.h, scratch.ptr, scratch.n, count, 0, ev)); err != nil {
			return 0, err
		}
		err := d.err(cEventSync(d.h, ev))
		return time.Since(start), err
	}
	count := 4
	best, err := run(count)
	for err == nil && best < calibrateFor && count < maxBusyMemsets {
		count *= 2
		best, err = run(count)
	}
	for i := 0; i < 2 && err == nil; i++ {
		var took time.Duration
		if took, err = run(count); took < best {
			best = took
		}
	}
	return max(best.Seconds()/float64(count), 1e-7), err
}

// loadSpin loads the spin kernel once (CUDA only). d.mu is held.
func (d *Device) loadSpin() {
	if d.spin.tried {
		return
	}
	d.spin.tried = true
	if d.Runtime != CUDA {
		d.spin.why = "HIP: no spin kernel"
		return
	}
	mod, fn, r := cModuleLoad(d.h, spinPTX, spinName)
	if err := d.err(r); err != nil {
		d.spin.why = "spin kernel unavailable: " + err.Error()
		return
	}
	d.spin.mod, d.spin.fn = mod, fn
}

// scratchBuffer is the device buffer that busy memsets and stream probes
// write, allocated on first use.
func (d *Device) scratchBuffer() (*Buffer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.scratchLocked()
}

func (d *Device) scratchLocked() (*Buffer, error) {
	if d.scratch == nil {
		p, r := cAlloc(d.h, d.scratchN)
		if err := d.err(r); err != nil {
			return nil, err
		}
		d.scratch = &Buffer{dev: d, ptr: p, n: d.scratchN}
	}
	return d.scratch, nil
}

// Done reports whether the busy period is over.
func (b *Busy) Done() (bool, error) {
	if b.ev == 0 {
		return true, nil
	}
	if b.dev.closed.Load() {
		return false, b.dev.errClosed("busy query")
	}
	return b.dev.queryDone(b.ev)
}

// Wait waits (sleeping) until the busy period is over and releases it.
func (b *Busy) Wait() error {
	if b.ev == 0 {
		return nil
	}
	ev := b.ev
	b.ev = 0
	if b.dev.closed.Load() {
		return b.dev.errClosed("busy wait")
	}
	err := b.dev.err(cEventSync(b.dev.h, ev))
	if derr := b.dev.err(cEventDestroy(b.dev.h, ev)); err == nil {
		err = derr
	}
	return err
}
