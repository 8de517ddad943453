package gpu

// This is the only file of the package that imports "C". The C side
// (ddgpu.c) opens the runtimes with dlopen and holds their dispatch tables;
// the functions here are thin calls into it. C never keeps a Go pointer:
// host memory that a copy may still read or write after the call returns
// is off the Go heap (AllocPinned, or memory the caller mapped and
// registered); Go memory is only handed to calls that finish with it
// before returning (pageable copies, which the drivers stage or complete
// synchronously, and ReadBack, which waits).

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "ddgpu.h"
*/
import "C"

import (
	"unsafe"
)

type (
	apiPtr = *C.ddg_api
	devPtr = *C.ddg_dev
)

const (
	codeOutOfMemory   = int(C.DDG_OUT_OF_MEMORY)
	codeNoDevice      = int(C.DDG_NO_DEVICE)
	codeInvalidDev    = int(C.DDG_INVALID_DEVICE)
	codeNotReady      = int(C.DDG_NOT_READY)
	kindCUDA, kindHIP = C.DDG_CUDA, C.DDG_HIP
)

func cKind(rt Runtime) C.int {
	if rt == HIP {
		return kindHIP
	}
	return kindCUDA
}

// cLoad opens path as rt's library; on failure it returns the dlerror text
// or "missing symbol NAME".
func cLoad(rt Runtime, path string) (apiPtr, string) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var buf [512]C.char
	a := C.ddg_load(cKind(rt), cpath, &buf[0], C.size_t(len(buf)))
	if a == nil {
		return nil, C.GoString(&buf[0])
	}
	return a, ""
}

func cErrorString(a apiPtr, code int) string { return C.GoString(C.ddg_error_string(a, C.int(code))) }

// result is a driver call's code (0 = success) and the driver function
// that returned it.
type result struct {
	code int
	op   *C.char
}

func res(r C.ddg_rc) result { return result{int(r.code), r.op} }

func (r result) failed() bool { return r.code != 0 }
func (r result) codeOp() (int, string) {
	if r.op == nil {
		return r.code, ""
	}
	return r.code, C.GoString(r.op)
}

func cInit(a apiPtr) (version, count int, r result) {
	var v, n C.int
	r = res(C.ddg_init(a, &v, &n))
	return int(v), int(n), r
}

// openInfo is what cOpen reads of a device.
type openInfo struct {
	name, pci    string
	major, minor int
	total        int64
}

// cOpen opens device ordinal and reads its name, PCI bus id, compute
// capability and total memory.
func cOpen(a apiPtr, ordinal int) (d devPtr, info openInfo, r result) {
	var nameBuf [256]C.char
	var pciBuf [64]C.char
	var maj, min C.int
	var total C.size_t
	r = res(C.ddg_open(a, C.int(ordinal), &d, &nameBuf[0], C.int(len(nameBuf)), &pciBuf[0], C.int(len(pciBuf)), &maj, &min, &total))
	if r.failed() {
		return nil, info, r
	}
	return d, openInfo{C.GoString(&nameBuf[0]), C.GoString(&pciBuf[0]), int(maj), int(min), int64(total)}, r
}

func cClose(d devPtr) { C.ddg_close(d) }

func cSetSpin(d devPtr, ns uint64) { C.ddg_set_spin(d, C.uint64_t(ns)) }

func cAlloc(d devPtr, n int) (DevicePtr, result) {
	var p C.uint64_t
	r := res(C.ddg_alloc(d, C.size_t(n), &p))
	return DevicePtr(p), r
}

func cFree(d devPtr, p DevicePtr) result { return res(C.ddg_free(d, C.uint64_t(p))) }

func cRegister(d devPtr, b []byte) result {
	return res(C.ddg_register(d, unsafe.Pointer(unsafe.SliceData(b)), C.size_t(len(b))))
}

func cUnregister(d devPtr, b []byte) result {
	return res(C.ddg_unregister(d, unsafe.Pointer(unsafe.SliceData(b))))
}

// handle is a stream, event, module or function of the runtime.
type handle uintptr

func cStreamCreate(d devPtr, blocking bool) (handle, result) {
	var s C.ddg_handle
	b := C.int(0)
	if blocking {
		b = 1
	}
	r := res(C.ddg_stream_create(d, &s, b))
	return handle(s), r
}

func cEventCreate(d devPtr) (handle, result) {
	var e C.ddg_handle
	r := res(C.ddg_event_create(d, &e))
	return handle(e), r
}

func h(x handle) C.ddg_handle { return C.ddg_handle(x) }

func cStreamDestroy(d devPtr, s handle) result  { return res(C.ddg_stream_destroy(d, h(s))) }
func cEventDestroy(d devPtr, e handle) result   { return res(C.ddg_event_destroy(d, h(e))) }
func cEventRecord(d devPtr, e, s handle) result { return res(C.ddg_event_record(d, h(e), h(s))) }
func cEventSync(d devPtr, e handle) result      { return res(C.ddg_event_sync(d, h(e))) }
func cEventQuery(d devPtr, e handle) result     { return res(C.ddg_event_query(d, h(e))) }
func cStreamWait(d devPtr, s, e handle) result  { return res(C.ddg_stream_wait(d, h(s), h(e))) }
func cStreamSync(d devPtr, s, e handle) result  { return res(C.ddg_stream_sync(d, h(s), h(e))) }
func cCtxSync(d devPtr) result                  { return res(C.ddg_ctx_sync(d)) }
func cModuleUnload(d devPtr, m handle) result   { return res(C.ddg_module_unload(d, h(m))) }
func cSpin(d devPtr, fn handle, ns uint64, e handle) result {
	return res(C.ddg_spin(d, h(fn), C.uint64_t(ns), h(e)))
}

// cHtoD queues a copy of src to dst on s and records e (if not nil).
func cHtoD(d devPtr, dst DevicePtr, src []byte, s, e handle) result {
	return res(C.ddg_htod(d, C.uint64_t(dst), unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)), h(s), h(e)))
}

// cDtoH copies src to dst on s and waits for it through e.
func cDtoH(d devPtr, dst []byte, src DevicePtr, s, e handle) result {
	return res(C.ddg_dtoh(d, unsafe.Pointer(unsafe.SliceData(dst)), C.uint64_t(src), C.size_t(len(dst)), h(s), h(e)))
}

func cMemsets(d devPtr, p DevicePtr, n, count int, s, e handle) result {
	return res(C.ddg_memsets(d, C.uint64_t(p), C.size_t(n), C.int(count), h(s), h(e)))
}

func cModuleLoad(d devPtr, image, fname string) (mod, fn handle, r result) {
	cimg := C.CString(image)
	defer C.free(unsafe.Pointer(cimg))
	cfn := C.CString(fname)
	defer C.free(unsafe.Pointer(cfn))
	var m, f C.ddg_handle
	r = res(C.ddg_module_load(d, cimg, cfn, &m, &f))
	return handle(m), handle(f), r
}
