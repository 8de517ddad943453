// ddgpu.h: the C side of package gpu. The NVIDIA driver API (libcuda.so.1)
// and HIP (libamdhip64.so) are opened with dlopen; their functions live in
// tables of function pointers with hand-declared prototypes and the exact,
// versioned symbol names (cuMemAlloc_v2, cuStreamDestroy_v2, ...; never the
// per-thread-default-stream _ptsz/_ptds/_spt variants). No CUDA or HIP
// header is needed to build.
//
// Every entry point that touches a device makes the device current on the
// calling OS thread itself (CUDA: cuCtxPushCurrent_v2 of the device's
// primary context, popped before returning; HIP: hipSetDevice, the caller's
// device restored before returning), so a goroutine that moves between
// threads between calls never finds another thread's context.
#ifndef DDGPU_H
#define DDGPU_H

#include <stddef.h>
#include <stdint.h>

enum { DDG_CUDA = 1, DDG_HIP = 2 };

// Result of a call: the driver's code (0 = success) and the name of the
// driver function that returned it. op is a static string.
typedef struct ddg_rc {
	int code;
	const char *op;
} ddg_rc;

typedef struct ddg_api ddg_api; // one loaded library and its table
// Streams, events, modules and functions cross into Go as integers.
typedef uintptr_t ddg_handle;
typedef struct ddg_dev ddg_dev; // one opened device

// Codes shared by CUDA and HIP that the Go side classifies.
enum {
	DDG_OUT_OF_MEMORY = 2,
	DDG_NO_DEVICE = 100,
	DDG_INVALID_DEVICE = 101,
	DDG_NOT_READY = 600,
};

// ddg_load opens path and resolves every symbol. On failure it returns NULL
// and writes the dlerror text or "missing symbol NAME" into err.
ddg_api *ddg_load(int kind, const char *path, char *err, size_t errlen);
const char *ddg_error_string(ddg_api *a, int code);

ddg_rc ddg_init(ddg_api *a, int *driver_version, int *count);
// ddg_open also reads the device's name, PCI bus id, compute capability
// and total memory in bytes.
ddg_rc ddg_open(ddg_api *a, int ordinal, ddg_dev **out, char *name, int namelen,
              char *pci, int pcilen, int *major, int *minor, size_t *total);
void ddg_close(ddg_dev *d);

ddg_rc ddg_alloc(ddg_dev *d, size_t n, uint64_t *ptr);
ddg_rc ddg_free(ddg_dev *d, uint64_t ptr);
ddg_rc ddg_register(ddg_dev *d, void *p, size_t n);
ddg_rc ddg_unregister(ddg_dev *d, void *p);

// ddg_stream_create makes a non-blocking stream (blocking: a legacy one,
// for tests that show the difference).
ddg_rc ddg_stream_create(ddg_dev *d, ddg_handle *s, int blocking);
ddg_rc ddg_stream_destroy(ddg_dev *d, ddg_handle s);
ddg_rc ddg_event_create(ddg_dev *d, ddg_handle *e);
ddg_rc ddg_event_destroy(ddg_dev *d, ddg_handle e);
ddg_rc ddg_event_record(ddg_dev *d, ddg_handle e, ddg_handle s);
ddg_rc ddg_event_sync(ddg_dev *d, ddg_handle e);
ddg_rc ddg_event_query(ddg_dev *d, ddg_handle e); // code DDG_NOT_READY while pending
// ddg_set_spin sets how long event waits (ddg_event_sync, ddg_stream_sync,
// ddg_dtoh) poll before they block; 0 blocks at once.
void ddg_set_spin(ddg_dev *d, uint64_t ns);
ddg_rc ddg_stream_wait(ddg_dev *d, ddg_handle s, ddg_handle e);
ddg_rc ddg_stream_sync(ddg_dev *d, ddg_handle s, ddg_handle e); // record e on s, then wait on e
ddg_rc ddg_ctx_sync(ddg_dev *d);

// ddg_htod queues a host-to-device copy on s and, when e is not NULL,
// records e after it.
ddg_rc ddg_htod(ddg_dev *d, uint64_t dst, const void *src, size_t n, ddg_handle s, ddg_handle e);
// ddg_dtoh copies device to host on s and waits for it (through e).
ddg_rc ddg_dtoh(ddg_dev *d, void *dst, uint64_t src, size_t n, ddg_handle s, ddg_handle e);
// ddg_memsets queues count memsets of [p, p+n) on s, then records e on s.
ddg_rc ddg_memsets(ddg_dev *d, uint64_t p, size_t n, int count, ddg_handle s, ddg_handle e);

ddg_rc ddg_module_load(ddg_dev *d, const char *image, const char *fname, ddg_handle *mod, ddg_handle *fn);
ddg_rc ddg_module_unload(ddg_dev *d, ddg_handle mod);
// ddg_spin launches fn(ns) with one thread on the legacy default stream and
// records e after it.
ddg_rc ddg_spin(ddg_dev *d, ddg_handle fn, uint64_t ns, ddg_handle e);

#endif
