package gpu

import (
	"errors"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Pinned is host memory registered with the driver (page-locked, usable by
// the copy engines), so that copies from it are truly asynchronous.
// Register once and keep it: registration costs milliseconds.
type Pinned struct {
	dev    *Device
	mem    []byte
	mapped bool // AllocPinned's own mapping, unmapped by Close
	closed atomic.Bool
}

// Register pins mem, which must lie outside the Go heap (mmap'd, such as
// an engine shard or a fabric.Alloc region): the driver keeps its address
// until Close.
func (d *Device) Register(mem []byte) (*Pinned, error) {
	if d.closed.Load() {
		return nil, d.errClosed("register")
	}
	if len(mem) == 0 {
		return nil, invalid(d.Runtime, d.Index, "register", "empty host range")
	}
	if err := d.err(cRegister(d.h, mem)); err != nil {
		return nil, err
	}
	return &Pinned{dev: d, mem: mem}, nil
}

// AllocPinned maps n bytes of anonymous memory and registers them.
func (d *Device) AllocPinned(n int) (*Pinned, error) {
	if n <= 0 {
		return nil, invalid(d.Runtime, d.Index, "alloc pinned", "size %d is not positive", n)
	}
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		e := &Error{Runtime: d.Runtime, Device: d.Index, Op: "mmap", Text: err.Error(), kind: ErrOutOfMemory}
		return nil, e
	}
	p, err := d.Register(mem)
	if err != nil {
		_ = unix.Munmap(mem)
		return nil, err
	}
	p.mapped = true
	return p, nil
}

// Bytes is the pinned memory.
func (p *Pinned) Bytes() []byte { return p.mem }

// Close unregisters the memory (and unmaps it if AllocPinned mapped it).
// No copy from it may be pending.
func (p *Pinned) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	var err error
	if !p.dev.closed.Load() {
		err = p.dev.err(cUnregister(p.dev.h, p.mem))
	}
	if p.mapped {
		err = errors.Join(err, unix.Munmap(p.mem))
	}
	return err
}
