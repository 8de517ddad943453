package fabric

import (
	"runtime"
	"sync"
	"unsafe"

	"github.com/ddstore/ddstore/fault"
)

// Export is a registered region that peers can read.
type Export struct {
	f    *Fabric
	mr   *cStructFidMr
	key  uint64
	base uint64
	size int
	pin  runtime.Pinner // keeps a Go-heap b in place while registered (no-op off-heap)
}

// Export registers b for remote reads (FI_REMOTE_READ only). b should be
// outside the Go heap (Alloc, or a file mapping) and must stay mapped until
// the Export is closed: the NIC reads it at any time. Go memory is pinned
// for the Export's lifetime, since the provider keeps its address.
func (f *Fabric) Export(b []byte) (*Export, error) {
	if len(b) == 0 {
		return nil, invalid("export", nil, "zero-length region")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, &fault.Error{Op: "export", Kind: fault.ErrClosed, Detail: "fabric is closed"}
	}
	req := uint64(0)
	if !f.inf.MRProvKey {
		req = f.nextKey.Add(1)
	}
	var mr *cStructFidMr
	var key cUint64T
	var desc unsafe.Pointer
	bind := cInt(0)
	if f.inf.MREndpoint {
		bind = 1
	}
	e := &Export{f: f, size: len(b)}
	e.pin.Pin(&b[0])
	ddServerLock(f.srv)
	rc := ddMrReg(f.dom, f.srv.ep, unsafe.Pointer(&b[0]), cSizeT(len(b)), fiRemoteRead, cUint64T(req), bind, &mr, &key, &desc)
	if rc == 0 {
		var base cUint64T
		if f.inf.MRVirtAddr {
			base = cUint64T(uintptr(unsafe.Pointer(&b[0])))
		}
		if rc = ddGsrvAddExport(f.srv, key, base, unsafe.Pointer(&b[0]), cUint64T(len(b))); rc != 0 {
			ddCloseMr(mr)
		}
	}
	ddServerUnlock(f.srv)
	if rc != 0 {
		e.pin.Unpin()
		return nil, localErr("fi_mr_reg(export)", int(rc), "%d bytes, provider %s", len(b), f.inf.Provider)
	}
	e.mr, e.key = mr, uint64(key)
	if f.inf.MRVirtAddr {
		e.base = uint64(uintptr(unsafe.Pointer(&b[0])))
	}
	f.exports[e] = struct{}{}
	return e, nil
}

// Exports whose MR failed to close stay pinned, and reachable (an unreachable
// Pinner with live pins makes the runtime panic).
var (
	stuckMu      sync.Mutex
	stuckExports []*Export
)

// Key is the remote key a reader passes in ReadOp.Key.
func (e *Export) Key() uint64 { return e.key }

// Base is the remote address of the region's first byte: its virtual address
// with FI_MR_VIRT_ADDR, else 0 (offsets).
func (e *Export) Base() uint64 { return e.base }

// Size is the registered length.
func (e *Export) Size() int { return e.size }

// Close deregisters the region. f.mu is held throughout, so a concurrent
// Fabric.Close cannot free the server (or close the domain) under it.
func (e *Export) Close() error {
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.mr == nil {
		return nil
	}
	delete(f.exports, e)
	mr := e.mr
	e.mr = nil
	ddServerLock(f.srv)
	ddGsrvDelExport(f.srv, cUint64T(e.key)) // no gather copies from it after this
	rc := ddCloseMr(mr)
	ddServerUnlock(f.srv)
	if rc != 0 {
		// The provider may still hold the address: keep b pinned (and
		// the Pinner reachable) for the process's lifetime.
		stuckMu.Lock()
		stuckExports = append(stuckExports, e)
		stuckMu.Unlock()
		return fiErr("fi_close(export mr)", rc)
	}
	e.pin.Unpin()
	return nil
}
