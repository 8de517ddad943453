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

enum { DD_CUDA = 1, DD_HIP = 2 };

// Result of a call: the driver's code (0 = success) and the name of the
// driver function that returned it. op is a static string.
typedef struct dd_rc {
	int code;
	const char *op;
} dd_rc;

typedef struct dd_api dd_api; // one loaded library and its table
// Streams, events, modules and functions cross into Go as integers.
typedef uintptr_t dd_handle;
typedef struct dd_dev dd_dev; // one opened device

// Codes shared by CUDA and HIP that the Go side classifies.
enum {
	DD_OUT_OF_MEMORY = 2,
	DD_NO_DEVICE = 100,
	DD_INVALID_DEVICE = 101,
	DD_NOT_READY = 600,
};

// dd_load opens path and resolves every symbol. On failure it returns NULL
// and writes the dlerror text or "missing symbol NAME" into err.
dd_api *dd_load(int kind, const char *path, char *err, size_t errlen);
const char *dd_error_string(dd_api *a, int code);

dd_rc dd_init(dd_api *a, int *driver_version, int *count);
dd_rc dd_open(dd_api *a, int ordinal, dd_dev **out, char *name, int namelen,
              char *pci, int pcilen, int *major, int *minor);
void dd_close(dd_dev *d);

dd_rc dd_alloc(dd_dev *d, size_t n, uint64_t *ptr);
dd_rc dd_free(dd_dev *d, uint64_t ptr);
dd_rc dd_register(dd_dev *d, void *p, size_t n);
dd_rc dd_unregister(dd_dev *d, void *p);

// dd_stream_create makes a non-blocking stream (blocking: a legacy one,
// for tests that show the difference).
dd_rc dd_stream_create(dd_dev *d, dd_handle *s, int blocking);
dd_rc dd_stream_destroy(dd_dev *d, dd_handle s);
dd_rc dd_event_create(dd_dev *d, dd_handle *e);
dd_rc dd_event_destroy(dd_dev *d, dd_handle e);
dd_rc dd_event_record(dd_dev *d, dd_handle e, dd_handle s);
dd_rc dd_event_sync(dd_dev *d, dd_handle e);
dd_rc dd_event_query(dd_dev *d, dd_handle e); // code DD_NOT_READY while pending
dd_rc dd_stream_wait(dd_dev *d, dd_handle s, dd_handle e);
dd_rc dd_stream_sync(dd_dev *d, dd_handle s, dd_handle e); // record e on s, then wait on e
dd_rc dd_ctx_sync(dd_dev *d);

// dd_htod queues a host-to-device copy on s and, when e is not NULL,
// records e after it.
dd_rc dd_htod(dd_dev *d, uint64_t dst, const void *src, size_t n, dd_handle s, dd_handle e);
// dd_dtoh copies device to host on s and waits for it (through e).
dd_rc dd_dtoh(dd_dev *d, void *dst, uint64_t src, size_t n, dd_handle s, dd_handle e);
// dd_memsets queues count memsets of [p, p+n) on s, then records e on s.
dd_rc dd_memsets(dd_dev *d, uint64_t p, size_t n, int count, dd_handle s, dd_handle e);

dd_rc dd_module_load(dd_dev *d, const char *image, const char *fname, dd_handle *mod, dd_handle *fn);
dd_rc dd_module_unload(dd_dev *d, dd_handle mod);
// dd_spin launches fn(ns) with one thread on the legacy default stream and
// records e after it.
dd_rc dd_spin(dd_dev *d, dd_handle fn, uint64_t ns, dd_handle e);

#endif
