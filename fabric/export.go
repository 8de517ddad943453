package fabric

/*
#include "dd.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"unsafe"

	"github.com/ddstore/ddstore/fault"
)

// Export is a registered region that peers can read.
type Export struct {
	f    *Fabric
	mr   *C.struct_fid_mr
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
		return nil, &fault.Error{Op: "export", Kind: ErrClosed, Detail: "fabric is closed"}
	}
	req := uint64(0)
	if !f.inf.MRProvKey {
		req = f.nextKey.Add(1)
	}
	var mr *C.struct_fid_mr
	var key C.uint64_t
	var desc unsafe.Pointer
	bind := C.int(0)
	if f.inf.MREndpoint {
		bind = 1
	}
	e := &Export{f: f, size: len(b)}
	e.pin.Pin(&b[0])
	C.dd_server_lock(f.srv)
	rc := C.dd_mr_reg(f.dom, f.srv.ep, unsafe.Pointer(&b[0]), C.size_t(len(b)), C.FI_REMOTE_READ, C.uint64_t(req), bind, &mr, &key, &desc)
	if rc == 0 {
		var base C.uint64_t
		if f.inf.MRVirtAddr {
			base = C.uint64_t(uintptr(unsafe.Pointer(&b[0])))
		}
		if rc = C.dd_gsrv_add_export(f.srv, key, base, unsafe.Pointer(&b[0]), C.uint64_t(len(b))); rc != 0 {
			C.dd_close_mr(mr)
		}
	}
	C.dd_server_unlock(f.srv)
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
	C.dd_server_lock(f.srv)
	C.dd_gsrv_del_export(f.srv, C.uint64_t(e.key)) // no gather copies from it after this
	rc := C.dd_close_mr(mr)
	C.dd_server_unlock(f.srv)
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
