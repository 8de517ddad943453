// standin_cuda.c: a stand-in libcuda.so.1 for package gpu's tests (see
// standin.h). It exports only the exact symbol names package gpu must use
// (cuMemAlloc_v2, not cuMemAlloc; no _ptsz variants), requires a current
// context on the calling thread as the real driver does, and keeps the
// context stack per thread. Build with -DSTANDIN_OMIT_HTOD to leave out
// cuMemcpyHtoDAsync_v2 (a "too old" driver).
#include "standin.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_BLOCKING_SYNC 0x1
#define CU_STREAM_LEGACY ((void *)0x1)
#define CU_STREAM_PER_THREAD ((void *)0x2)

typedef struct si_ctx {
	unsigned magic;
	int dev;
	int refs;
} si_ctx;
#define SI_CTX_MAGIC 0x43545854U
static si_ctx si_ctxs[16];

static __thread si_ctx *si_ctx_stack[16];
static __thread int si_ctx_depth;

#define NEED_CTX()                                                       \
	do {                                                             \
		if (!si_inited) return SI_NOT_INITIALIZED;               \
		if (si_ctx_depth == 0) return SI_INVALID_CONTEXT;        \
	} while (0)

// stream handle: NULL and CU_STREAM_LEGACY are the legacy default stream;
// the per-thread default stream is refused (package gpu never uses it).
#define STREAM(h) ((h) == CU_STREAM_LEGACY ? NULL : (h))
#define NOT_PER_THREAD(h)                                              \
	do {                                                           \
		if ((h) == CU_STREAM_PER_THREAD) return SI_INVALID_HANDLE; \
	} while (0)

CUresult cuInit(unsigned int flags) {
	SI_FAILPOINT("cuInit");
	if (flags != 0) return SI_INVALID_VALUE;
	return si_init("CUDA_DEVICE_MAX_CONNECTIONS", 0);
}

CUresult cuDriverGetVersion(int *v) {
	SI_FAILPOINT("cuDriverGetVersion");
	if (!v) return SI_INVALID_VALUE;
	*v = 12080;
	return 0;
}

CUresult cuDeviceGetCount(int *n) {
	SI_FAILPOINT("cuDeviceGetCount");
	if (!si_inited) return SI_NOT_INITIALIZED;
	*n = si_devices;
	return 0;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal) {
	SI_FAILPOINT("cuDeviceGet");
	int rc = si_check_ordinal(ordinal);
	if (!rc) *d = ordinal;
	return rc;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
	SI_FAILPOINT("cuDeviceGetName");
	int rc = si_check_ordinal(d);
	return rc ? rc : si_copy_string(name, len, "ddstore stand-in CUDA GPU");
}

// Device d reports (80 + d) GiB.
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
	SI_FAILPOINT("cuDeviceTotalMem_v2");
	int rc = si_check_ordinal(d);
	if (!rc) *bytes = (size_t)(80 + d) << 30;
	return rc;
}

CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d) {
	SI_FAILPOINT("cuDeviceGetPCIBusId");
	int rc = si_check_ordinal(d);
	if (rc) return rc;
	char buf[32];
	snprintf(buf, sizeof buf, "0000:%02x:00.0", 0x10 + d);
	return si_copy_string(id, len, buf);
}

CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
	SI_FAILPOINT("cuDeviceGetAttribute");
	int rc = si_check_ordinal(d);
	if (rc) return rc;
	switch (attr) {
	case 75: *v = 9; return 0; // compute capability major
	case 76: *v = 0; return 0; // minor
	default: return SI_INVALID_VALUE;
	}
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice d) {
	SI_FAILPOINT("cuDevicePrimaryCtxRetain");
	int rc = si_check_ordinal(d);
	if (rc) return rc;
	pthread_mutex_lock(&si_mu);
	si_ctxs[d].magic = SI_CTX_MAGIC;
	si_ctxs[d].dev = d;
	si_ctxs[d].refs++;
	pthread_mutex_unlock(&si_mu);
	*ctx = &si_ctxs[d];
	return 0;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
	int rc = si_check_ordinal(d);
	if (rc) return rc;
	pthread_mutex_lock(&si_mu);
	rc = si_ctxs[d].refs > 0 ? (si_ctxs[d].refs--, 0) : SI_INVALID_CONTEXT;
	pthread_mutex_unlock(&si_mu);
	return rc;
}

CUresult cuCtxPushCurrent_v2(void *ctx) {
	si_ctx *c = ctx;
	if (!c || c->magic != SI_CTX_MAGIC || c->refs <= 0) return SI_INVALID_CONTEXT;
	if (si_ctx_depth == 16) return SI_UNKNOWN;
	si_ctx_stack[si_ctx_depth++] = c;
	return 0;
}

CUresult cuCtxPopCurrent_v2(void **ctx) {
	if (si_ctx_depth == 0) return SI_INVALID_CONTEXT;
	si_ctx *c = si_ctx_stack[--si_ctx_depth];
	if (ctx) *ctx = c;
	return 0;
}

CUresult cuCtxSynchronize(void) {
	SI_FAILPOINT("cuCtxSynchronize");
	NEED_CTX();
	return si_ctx_sync();
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	SI_FAILPOINT("cuMemAlloc_v2");
	NEED_CTX();
	void *m;
	int rc = si_alloc(&m, n);
	if (!rc) *p = (CUdeviceptr)(uintptr_t)m;
	return rc;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
	SI_FAILPOINT("cuMemFree_v2");
	NEED_CTX();
	return si_free((void *)(uintptr_t)p);
}

CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags) {
	SI_FAILPOINT("cuMemHostRegister_v2");
	NEED_CTX();
	(void)flags;
	return si_register(p, n);
}

CUresult cuMemHostUnregister(void *p) {
	SI_FAILPOINT("cuMemHostUnregister");
	NEED_CTX();
	return si_unregister(p);
}

#ifndef STANDIN_OMIT_HTOD
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s) {
	SI_FAILPOINT("cuMemcpyHtoDAsync_v2");
	NEED_CTX();
	NOT_PER_THREAD(s);
	return si_copy(STREAM(s), (void *)(uintptr_t)dst, src, n, 1);
}
#endif

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s) {
	SI_FAILPOINT("cuMemcpyDtoHAsync_v2");
	NEED_CTX();
	NOT_PER_THREAD(s);
	return si_copy(STREAM(s), dst, (const void *)(uintptr_t)src, n, 0);
}

CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void *s) {
	SI_FAILPOINT("cuMemsetD8Async");
	NEED_CTX();
	NOT_PER_THREAD(s);
	return si_memset(STREAM(s), (void *)(uintptr_t)p, v, n);
}

CUresult cuStreamCreate(void **s, unsigned int flags) {
	SI_FAILPOINT("cuStreamCreate");
	NEED_CTX();
	return si_stream_create(s, !(flags & CU_STREAM_NON_BLOCKING));
}

CUresult cuStreamDestroy_v2(void *s) {
	SI_FAILPOINT("cuStreamDestroy_v2");
	NEED_CTX();
	return si_stream_destroy(s);
}

CUresult cuStreamSynchronize(void *s) {
	SI_FAILPOINT("cuStreamSynchronize");
	NEED_CTX();
	NOT_PER_THREAD(s);
	return si_stream_sync(STREAM(s));
}

CUresult cuStreamWaitEvent(void *s, void *e, unsigned int flags) {
	SI_FAILPOINT("cuStreamWaitEvent");
	NEED_CTX();
	NOT_PER_THREAD(s);
	if (flags != 0) return SI_INVALID_VALUE;
	return si_stream_wait_event(STREAM(s), e);
}

CUresult cuEventCreate(void **e, unsigned int flags) {
	SI_FAILPOINT("cuEventCreate");
	NEED_CTX();
	return si_event_create(e, flags);
}

CUresult cuEventRecord(void *e, void *s) {
	SI_FAILPOINT("cuEventRecord");
	NEED_CTX();
	NOT_PER_THREAD(s);
	return si_event_record(e, STREAM(s));
}

CUresult cuEventSynchronize(void *e) {
	SI_FAILPOINT("cuEventSynchronize");
	NEED_CTX();
	return si_event_sync(e, CU_EVENT_BLOCKING_SYNC);
}

CUresult cuEventQuery(void *e) {
	NEED_CTX();
	return si_event_query(e);
}

CUresult cuEventDestroy_v2(void *e) {
	SI_FAILPOINT("cuEventDestroy_v2");
	NEED_CTX();
	return si_event_destroy(e);
}

// The only kernel: package gpu's spin kernel, recognised by its entry name
// and its use of %globaltimer; it runs as a timed busy period.
#define SI_MODULE_MAGIC 0x4d4f4455U
typedef struct si_module {
	unsigned magic;
	unsigned fn_magic; // the function handle points here
} si_module;
#define SI_FN_MAGIC 0x46554e43U

CUresult cuModuleLoadData(void **m, const void *image) {
	SI_FAILPOINT("cuModuleLoadData");
	NEED_CTX();
	if (!m || !image) return SI_INVALID_VALUE;
	if (si_no_ptx) return SI_INVALID_PTX;
	if (!strstr(image, ".entry ddstore_spin") || !strstr(image, "%globaltimer")) return SI_INVALID_IMAGE;
	si_module *mod = calloc(1, sizeof *mod);
	if (!mod) return SI_OUT_OF_MEMORY;
	mod->magic = SI_MODULE_MAGIC;
	mod->fn_magic = SI_FN_MAGIC;
	*m = mod;
	return 0;
}

CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
	SI_FAILPOINT("cuModuleGetFunction");
	NEED_CTX();
	si_module *mod = m;
	if (!mod || mod->magic != SI_MODULE_MAGIC) return SI_INVALID_HANDLE;
	if (strcmp(name, "ddstore_spin") != 0) return SI_NOT_FOUND;
	*f = &mod->fn_magic;
	return 0;
}

CUresult cuModuleUnload(void *m) {
	NEED_CTX();
	si_module *mod = m;
	if (!mod || mod->magic != SI_MODULE_MAGIC) return SI_INVALID_HANDLE;
	mod->magic = 0;
	free(mod);
	return 0;
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shmem, void *s, void **params, void **extra) {
	SI_FAILPOINT("cuLaunchKernel");
	NEED_CTX();
	NOT_PER_THREAD(s);
	(void)shmem;
	if (!f || *(unsigned *)f != SI_FN_MAGIC) return SI_INVALID_HANDLE;
	if (!gx || !gy || !gz || !bx || !by || !bz || !params || extra) return SI_INVALID_VALUE;
	uint64_t ns = *(uint64_t *)params[0];
	return si_busy(STREAM(s), (int64_t)ns);
}

CUresult cuGetErrorString(CUresult code, const char **text) {
	const char *s = si_errstr(code);
	if (!s) return SI_INVALID_VALUE;
	*text = s;
	return 0;
}
