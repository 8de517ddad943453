package fabric

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ddstore/ddstore/fault"
	"golang.org/x/sys/unix"
)

// Memory is a region mapped outside the Go heap (anonymous mmap, pre-faulted;
// 2 MiB huge pages when the system has them, else transparent huge pages are
// advised). The NIC may read or write it while the garbage collector runs.
type Memory struct {
	b      []byte // the requested length
	mapped []byte // the whole mapping
	id     uint64
	huge   bool
	freed  atomic.Bool
}

const hugePage = 2 << 20

// Alloc maps size bytes of zeroed memory outside the Go heap.
func Alloc(size int) (*Memory, error) {
	if size <= 0 {
		return nil, invalid("alloc", nil, "size %d must be positive", size)
	}
	m := &Memory{}
	var err error
	if size >= hugePage {
		n := (size + hugePage - 1) &^ (hugePage - 1)
		m.mapped, err = unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_HUGETLB|unix.MAP_POPULATE)
		m.huge = err == nil
	}
	if !m.huge {
		pg := unix.Getpagesize()
		n := (size + pg - 1) &^ (pg - 1)
		m.mapped, err = unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
		if err != nil {
			return nil, &fault.Error{Op: "mmap", Side: fault.Local, Detail: fmt.Sprintf("%d bytes", n), Err: err}
		}
		if n >= hugePage {
			_ = unix.Madvise(m.mapped, unix.MADV_HUGEPAGE)
		}
	}
	m.b = m.mapped[:size:size]
	registerMemory(m)
	return m, nil
}

// Bytes is the region as a slice (len = the size given to Alloc).
func (m *Memory) Bytes() []byte { return m.b }

// HugePages reports whether the region is backed by explicit huge pages.
func (m *Memory) HugePages() bool { return m.huge }

// Free unmaps the region. Exports of it must be closed first.
func (m *Memory) Free() error {
	if m.freed.Swap(true) {
		return nil
	}
	unregisterMemory(m)
	if err := unix.Munmap(m.mapped); err != nil {
		return &fault.Error{Op: "munmap", Side: fault.Local, Err: err}
	}
	m.b, m.mapped = nil, nil
	return nil
}

// The registry of live Memory regions lets readers cache registrations of
// off-heap destinations (FI_MR_LOCAL providers) without a lock on the hot
// path: readers load an immutable snapshot.
type memRange struct {
	lo, hi uintptr
	base   unsafe.Pointer // == lo; off-heap
	id     uint64
}

var (
	memMu    sync.Mutex
	memSnap  atomic.Pointer[[]memRange]
	memGen   atomic.Uint64 // bumped on every Free
	memNext  uint64
	memEmpty []memRange
)

func registerMemory(m *Memory) {
	memMu.Lock()
	defer memMu.Unlock()
	memNext++
	m.id = memNext
	old := memEmpty
	if p := memSnap.Load(); p != nil {
		old = *p
	}
	lo := uintptrOf(m.b)
	nw := append(append(make([]memRange, 0, len(old)+1), old...), memRange{lo: lo, hi: lo + uintptr(len(m.b)), base: unsafe.Pointer(unsafe.SliceData(m.b)), id: m.id})
	memSnap.Store(&nw)
}

func unregisterMemory(m *Memory) {
	memMu.Lock()
	defer memMu.Unlock()
	p := memSnap.Load()
	if p == nil {
		return
	}
	nw := make([]memRange, 0, len(*p))
	for _, r := range *p {
		if r.id != m.id {
			nw = append(nw, r)
		}
	}
	memSnap.Store(&nw)
	memGen.Add(1)
}

// findMemory returns the live region holding [a, a+n), if any.
func findMemory(a uintptr, n int) (memRange, bool) {
	p := memSnap.Load()
	if p == nil {
		return memRange{}, false
	}
	for _, r := range *p {
		if a >= r.lo && a+uintptr(n) <= r.hi {
			return r, true
		}
	}
	return memRange{}, false
}

func memoryLive(id uint64) bool {
	p := memSnap.Load()
	if p == nil {
		return false
	}
	for _, r := range *p {
		if r.id == id {
			return true
		}
	}
	return false
}
