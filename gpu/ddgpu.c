// ddgpu.c: dispatch tables for the CUDA driver API and HIP, and the entry
// points package gpu calls. See ddgpu.h.
#define _GNU_SOURCE
#include "ddgpu.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// ---- CUDA driver API: hand-declared types and constants (cuda.h values) --

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;

#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_BLOCKING_SYNC 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_MEMHOSTREGISTER_PORTABLE 0x1
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76

// X(return type, name, parameter list): the table and the loader are both
// generated from this list, so a symbol's name is written exactly once.
#define DDG_CUDA_FUNCS(X)                                                              \
	X(CUresult, cuInit, (unsigned int flags))                                     \
	X(CUresult, cuDriverGetVersion, (int *version))                               \
	X(CUresult, cuDeviceGetCount, (int *count))                                   \
	X(CUresult, cuDeviceGet, (CUdevice * dev, int ordinal))                       \
	X(CUresult, cuDeviceGetName, (char *name, int len, CUdevice dev))             \
	X(CUresult, cuDeviceTotalMem_v2, (size_t *bytes, CUdevice dev))               \
	X(CUresult, cuDeviceGetPCIBusId, (char *id, int len, CUdevice dev))           \
	X(CUresult, cuDeviceGetAttribute, (int *v, int attr, CUdevice dev))           \
	X(CUresult, cuDevicePrimaryCtxRetain, (CUcontext * ctx, CUdevice dev))        \
	X(CUresult, cuDevicePrimaryCtxRelease_v2, (CUdevice dev))                     \
	X(CUresult, cuCtxPushCurrent_v2, (CUcontext ctx))                             \
	X(CUresult, cuCtxPopCurrent_v2, (CUcontext * ctx))                            \
	X(CUresult, cuCtxSynchronize, (void))                                         \
	X(CUresult, cuMemAlloc_v2, (CUdeviceptr * p, size_t n))                       \
	X(CUresult, cuMemFree_v2, (CUdeviceptr p))                                    \
	X(CUresult, cuMemHostRegister_v2, (void *p, size_t n, unsigned int flags))    \
	X(CUresult, cuMemHostUnregister, (void *p))                                   \
	X(CUresult, cuMemcpyHtoDAsync_v2,                                             \
	  (CUdeviceptr dst, const void *src, size_t n, CUstream s))                   \
	X(CUresult, cuMemcpyDtoHAsync_v2,                                             \
	  (void *dst, CUdeviceptr src, size_t n, CUstream s))                         \
	X(CUresult, cuMemsetD8Async,                                                  \
	  (CUdeviceptr p, unsigned char v, size_t n, CUstream s))                     \
	X(CUresult, cuStreamCreate, (CUstream * s, unsigned int flags))               \
	X(CUresult, cuStreamDestroy_v2, (CUstream s))                                 \
	X(CUresult, cuStreamSynchronize, (CUstream s))                                \
	X(CUresult, cuStreamWaitEvent, (CUstream s, CUevent e, unsigned int flags))   \
	X(CUresult, cuEventCreate, (CUevent * e, unsigned int flags))                 \
	X(CUresult, cuEventRecord, (CUevent e, CUstream s))                           \
	X(CUresult, cuEventSynchronize, (CUevent e))                                  \
	X(CUresult, cuEventQuery, (CUevent e))                                        \
	X(CUresult, cuEventDestroy_v2, (CUevent e))                                   \
	X(CUresult, cuModuleLoadData, (CUmodule * m, const void *image))              \
	X(CUresult, cuModuleGetFunction, (CUfunction * f, CUmodule m, const char *n)) \
	X(CUresult, cuModuleUnload, (CUmodule m))                                     \
	X(CUresult, cuLaunchKernel,                                                   \
	  (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,           \
	   unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,     \
	   CUstream s, void **params, void **extra))                                  \
	X(CUresult, cuGetErrorString, (CUresult code, const char **text))

// ---- HIP: hand-declared types and constants (hip_runtime_api.h values) ---

typedef int hipError_t;
typedef int hipDevice_t;
typedef void *hipDeviceptr_t;
typedef struct ihipStream_t *hipStream_t;
typedef struct ihipEvent_t *hipEvent_t;

#define hipStreamNonBlocking 0x1
#define hipEventBlockingSync 0x1
#define hipEventDisableTiming 0x2
#define hipHostRegisterPortable 0x1

#define DDG_HIP_FUNCS(X)                                                                  \
	X(hipError_t, hipInit, (unsigned int flags))                                     \
	X(hipError_t, hipDriverGetVersion, (int *version))                               \
	X(hipError_t, hipGetDeviceCount, (int *count))                                   \
	X(hipError_t, hipDeviceGet, (hipDevice_t * dev, int ordinal))                    \
	X(hipError_t, hipDeviceGetName, (char *name, int len, hipDevice_t dev))          \
	X(hipError_t, hipDeviceTotalMem, (size_t *bytes, hipDevice_t dev))               \
	X(hipError_t, hipDeviceGetPCIBusId, (char *id, int len, int ordinal))            \
	X(hipError_t, hipDeviceComputeCapability, (int *major, int *minor, hipDevice_t)) \
	X(hipError_t, hipGetDevice, (int *ordinal))                                      \
	X(hipError_t, hipSetDevice, (int ordinal))                                       \
	X(hipError_t, hipDeviceSynchronize, (void))                                      \
	X(hipError_t, hipMalloc, (void **p, size_t n))                                   \
	X(hipError_t, hipFree, (void *p))                                                \
	X(hipError_t, hipHostRegister, (void *p, size_t n, unsigned int flags))          \
	X(hipError_t, hipHostUnregister, (void *p))                                      \
	X(hipError_t, hipMemcpyHtoDAsync,                                                \
	  (hipDeviceptr_t dst, void *src, size_t n, hipStream_t s))                      \
	X(hipError_t, hipMemcpyDtoHAsync,                                                \
	  (void *dst, hipDeviceptr_t src, size_t n, hipStream_t s))                      \
	X(hipError_t, hipMemsetD8Async,                                                  \
	  (hipDeviceptr_t p, unsigned char v, size_t n, hipStream_t s))                  \
	X(hipError_t, hipStreamCreateWithFlags, (hipStream_t * s, unsigned int flags))   \
	X(hipError_t, hipStreamDestroy, (hipStream_t s))                                 \
	X(hipError_t, hipStreamSynchronize, (hipStream_t s))                             \
	X(hipError_t, hipStreamWaitEvent, (hipStream_t s, hipEvent_t e, unsigned int f)) \
	X(hipError_t, hipEventCreateWithFlags, (hipEvent_t * e, unsigned int flags))     \
	X(hipError_t, hipEventRecord, (hipEvent_t e, hipStream_t s))                     \
	X(hipError_t, hipEventSynchronize, (hipEvent_t e))                               \
	X(hipError_t, hipEventQuery, (hipEvent_t e))                                     \
	X(hipError_t, hipEventDestroy, (hipEvent_t e))                                   \
	X(const char *, hipGetErrorString, (hipError_t code))

#define DDG_FIELD(ret, name, args) ret(*name) args;
typedef struct ddg_cuda_table {
	DDG_CUDA_FUNCS(DDG_FIELD)
} ddg_cuda_table;
typedef struct ddg_hip_table {
	DDG_HIP_FUNCS(DDG_FIELD)
} ddg_hip_table;
#undef DDG_FIELD

struct ddg_api {
	int kind;
	void *handle;
	ddg_cuda_table cu;
	ddg_hip_table hip;
};

struct ddg_dev {
	ddg_api *api;
	int ordinal;
	int dev;       // CUdevice / hipDevice_t
	CUcontext ctx; // CUDA: the retained primary context
	uint64_t spin_ns; // event waits poll this long before they block
};

static const char *ddg_resolve(ddg_api *a) {
	const char *missing = NULL;
#define DDG_RESOLVE(ret, name, args)                                 \
	if (!missing) {                                             \
		*(void **)(&t->name) = dlsym(a->handle, #name);     \
		if (!t->name) missing = #name;                      \
	}
	if (a->kind == DDG_CUDA) {
		ddg_cuda_table *t = &a->cu;
		DDG_CUDA_FUNCS(DDG_RESOLVE)
	} else {
		ddg_hip_table *t = &a->hip;
		DDG_HIP_FUNCS(DDG_RESOLVE)
	}
#undef DDG_RESOLVE
	return missing;
}

ddg_api *ddg_load(int kind, const char *path, char *err, size_t errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return NULL;
	}
	ddg_api *a = calloc(1, sizeof *a);
	if (!a) {
		snprintf(err, errlen, "out of memory");
		return NULL; // the handle stays open: drivers are never unloaded
	}
	a->kind = kind;
	a->handle = h;
	const char *missing = ddg_resolve(a);
	if (missing) {
		snprintf(err, errlen, "missing symbol %s", missing);
		free(a);
		return NULL;
	}
	return a;
}

const char *ddg_error_string(ddg_api *a, int code) {
	const char *s = NULL;
	if (a->kind == DDG_CUDA) {
		if (a->cu.cuGetErrorString(code, &s) != 0) s = NULL;
	} else {
		s = a->hip.hipGetErrorString(code);
	}
	return s ? s : "unknown error";
}

#define DDG_OK ((ddg_rc){0, NULL})
#define DDG_TRY(call, name)                                 \
	do {                                               \
		int ddg_code_ = (call);                     \
		if (ddg_code_ != 0) return (ddg_rc){ddg_code_, name}; \
	} while (0)

ddg_rc ddg_init(ddg_api *a, int *driver_version, int *count) {
	*count = 0;
	if (a->kind == DDG_CUDA) {
		DDG_TRY(a->cu.cuInit(0), "cuInit");
		DDG_TRY(a->cu.cuDriverGetVersion(driver_version), "cuDriverGetVersion");
		DDG_TRY(a->cu.cuDeviceGetCount(count), "cuDeviceGetCount");
	} else {
		DDG_TRY(a->hip.hipInit(0), "hipInit");
		DDG_TRY(a->hip.hipDriverGetVersion(driver_version), "hipDriverGetVersion");
		DDG_TRY(a->hip.hipGetDeviceCount(count), "hipGetDeviceCount");
	}
	return DDG_OK;
}

ddg_rc ddg_open(ddg_api *a, int ordinal, ddg_dev **out, char *name, int namelen,
              char *pci, int pcilen, int *major, int *minor, size_t *total) {
	ddg_dev *d = calloc(1, sizeof *d);
	if (!d) return (ddg_rc){DDG_OUT_OF_MEMORY, "calloc"};
	d->api = a;
	d->ordinal = ordinal;
	ddg_rc rc = DDG_OK;
#define DDG_STEP(call, op)                                             \
	if (rc.code == 0) {                                           \
		int c_ = (call);                                      \
		if (c_ != 0) rc = (ddg_rc){c_, op};                    \
	}
	if (a->kind == DDG_CUDA) {
		DDG_STEP(a->cu.cuDeviceGet(&d->dev, ordinal), "cuDeviceGet");
		DDG_STEP(a->cu.cuDeviceGetName(name, namelen, d->dev), "cuDeviceGetName");
		DDG_STEP(a->cu.cuDeviceTotalMem_v2(total, d->dev), "cuDeviceTotalMem_v2");
		DDG_STEP(a->cu.cuDeviceGetPCIBusId(pci, pcilen, d->dev), "cuDeviceGetPCIBusId");
		DDG_STEP(a->cu.cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev),
		        "cuDeviceGetAttribute");
		DDG_STEP(a->cu.cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev),
		        "cuDeviceGetAttribute");
		DDG_STEP(a->cu.cuDevicePrimaryCtxRetain(&d->ctx, d->dev), "cuDevicePrimaryCtxRetain");
	} else {
		DDG_STEP(a->hip.hipDeviceGet(&d->dev, ordinal), "hipDeviceGet");
		DDG_STEP(a->hip.hipDeviceGetName(name, namelen, d->dev), "hipDeviceGetName");
		DDG_STEP(a->hip.hipDeviceTotalMem(total, d->dev), "hipDeviceTotalMem");
		DDG_STEP(a->hip.hipDeviceGetPCIBusId(pci, pcilen, ordinal), "hipDeviceGetPCIBusId");
		DDG_STEP(a->hip.hipDeviceComputeCapability(major, minor, d->dev), "hipDeviceComputeCapability");
	}
#undef DDG_STEP
	if (rc.code != 0) {
		free(d);
		return rc;
	}
	*out = d;
	return DDG_OK;
}

void ddg_close(ddg_dev *d) {
	if (d->api->kind == DDG_CUDA) d->api->cu.cuDevicePrimaryCtxRelease_v2(d->dev);
	free(d);
}

// ---- the current device, per OS thread ----------------------------------

typedef struct ddg_scope {
	int prev; // HIP: the caller's device, restored on leave
} ddg_scope;

static ddg_rc ddg_enter(ddg_dev *d, ddg_scope *sc) {
	sc->prev = -1;
	if (d->api->kind == DDG_CUDA) {
		DDG_TRY(d->api->cu.cuCtxPushCurrent_v2(d->ctx), "cuCtxPushCurrent_v2");
	} else {
		// Set even when hipGetDevice already says ordinal: a thread that
		// never chose a device reports 0 without having one set.
		if (d->api->hip.hipGetDevice(&sc->prev) != 0) sc->prev = -1;
		DDG_TRY(d->api->hip.hipSetDevice(d->ordinal), "hipSetDevice");
	}
	return DDG_OK;
}

static ddg_rc ddg_leave(ddg_dev *d, ddg_scope *sc, ddg_rc rc) {
	if (d->api->kind == DDG_CUDA) {
		CUcontext popped;
		d->api->cu.cuCtxPopCurrent_v2(&popped);
	} else if (sc->prev >= 0 && sc->prev != d->ordinal) {
		d->api->hip.hipSetDevice(sc->prev);
	}
	return rc;
}

// DDG_DO runs the call of the device's runtime (cucall on CUDA, hipcall
// on HIP) while rc is still success, and sets rc to its failure, named.
#define DDG_DO(d, rc, cucall, cuname, hipcall, hipname)                                  \
	do {                                                                            \
		if ((rc).code == 0) {                                                   \
			int cuda_ = (d)->api->kind == DDG_CUDA;                         \
			int c_ = cuda_ ? (cucall) : (hipcall);                          \
			if (c_ != 0) (rc) = (ddg_rc){c_, cuda_ ? (cuname) : (hipname)}; \
		}                                                                       \
	} while (0)

// DDG_ENTER makes the device current for the rest of the function (rc is
// its result so far); DDG_LEAVE restores the caller's device and returns rc.
#define DDG_ENTER(d)                        \
	ddg_scope sc_;                      \
	ddg_rc rc = ddg_enter(d, &sc_);      \
	if (rc.code != 0) return rc
#define DDG_LEAVE(d) return ddg_leave(d, &sc_, rc)

// DDG_CALL runs one driver call of each runtime inside the device's scope.
#define DDG_CALL(d, cucall, cuname, hipcall, hipname)            \
	do {                                                    \
		DDG_ENTER(d);                                   \
		DDG_DO(d, rc, cucall, cuname, hipcall, hipname); \
		DDG_LEAVE(d);                                   \
	} while (0)

#define CU (&d->api->cu)
#define HIP (&d->api->hip)

ddg_rc ddg_alloc(ddg_dev *d, size_t n, uint64_t *ptr) {
	CUdeviceptr cp = 0;
	void *hp = NULL;
	DDG_ENTER(d);
	DDG_DO(d, rc, CU->cuMemAlloc_v2(&cp, n), "cuMemAlloc_v2", HIP->hipMalloc(&hp, n), "hipMalloc");
	*ptr = d->api->kind == DDG_CUDA ? cp : (uint64_t)(uintptr_t)hp;
	DDG_LEAVE(d);
}

ddg_rc ddg_free(ddg_dev *d, uint64_t ptr) {
	DDG_CALL(d, CU->cuMemFree_v2(ptr), "cuMemFree_v2",
	        HIP->hipFree((void *)(uintptr_t)ptr), "hipFree");
}

ddg_rc ddg_register(ddg_dev *d, void *p, size_t n) {
	DDG_CALL(d, CU->cuMemHostRegister_v2(p, n, CU_MEMHOSTREGISTER_PORTABLE), "cuMemHostRegister_v2",
	        HIP->hipHostRegister(p, n, hipHostRegisterPortable), "hipHostRegister");
}

ddg_rc ddg_unregister(ddg_dev *d, void *p) {
	DDG_CALL(d, CU->cuMemHostUnregister(p), "cuMemHostUnregister",
	        HIP->hipHostUnregister(p), "hipHostUnregister");
}

ddg_rc ddg_stream_create(ddg_dev *d, ddg_handle *s, int blocking) {
	DDG_CALL(d, CU->cuStreamCreate((CUstream *)s, blocking ? 0 : CU_STREAM_NON_BLOCKING), "cuStreamCreate",
	        HIP->hipStreamCreateWithFlags((hipStream_t *)s, blocking ? 0 : hipStreamNonBlocking),
	        "hipStreamCreateWithFlags");
}

// ddg_stream_destroy waits for the stream's work first, so that no copy
// lands in memory its owner is about to free.
ddg_rc ddg_stream_destroy(ddg_dev *d, ddg_handle s) {
	DDG_ENTER(d);
	DDG_DO(d, rc, CU->cuStreamSynchronize((CUstream)s), "cuStreamSynchronize",
	       HIP->hipStreamSynchronize((hipStream_t)s), "hipStreamSynchronize");
	ddg_rc destroyed = DDG_OK; // destroyed also when the wait failed
	DDG_DO(d, destroyed, CU->cuStreamDestroy_v2((CUstream)s), "cuStreamDestroy_v2",
	       HIP->hipStreamDestroy((hipStream_t)s), "hipStreamDestroy");
	if (rc.code == 0) rc = destroyed;
	DDG_LEAVE(d);
}

ddg_rc ddg_event_create(ddg_dev *d, ddg_handle *e) {
	DDG_CALL(d, CU->cuEventCreate((CUevent *)e, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING), "cuEventCreate",
	        HIP->hipEventCreateWithFlags((hipEvent_t *)e, hipEventBlockingSync | hipEventDisableTiming),
	        "hipEventCreateWithFlags");
}

ddg_rc ddg_event_destroy(ddg_dev *d, ddg_handle e) {
	DDG_CALL(d, CU->cuEventDestroy_v2((CUevent)e), "cuEventDestroy_v2", HIP->hipEventDestroy((hipEvent_t)e), "hipEventDestroy");
}

ddg_rc ddg_event_record(ddg_dev *d, ddg_handle e, ddg_handle s) {
	DDG_CALL(d, CU->cuEventRecord((CUevent)e, (CUstream)s), "cuEventRecord", HIP->hipEventRecord((hipEvent_t)e, (hipStream_t)s), "hipEventRecord");
}

void ddg_set_spin(ddg_dev *d, uint64_t ns) { d->spin_ns = ns; }

static uint64_t ddg_now_ns(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t); // vDSO: no system call
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

// ddg_wait_event waits for e: it polls for up to d->spin_ns (a short copy
// ends well inside it, and a blocking-sync event's wake-up would cost tens
// of microseconds), then sleeps in the runtime's blocking synchronise.
static ddg_rc ddg_wait_event(ddg_dev *d, ddg_handle e) {
	int cuda = d->api->kind == DDG_CUDA, c;
	if (d->spin_ns) {
		uint64_t end = ddg_now_ns() + d->spin_ns;
		do {
			c = cuda ? CU->cuEventQuery((CUevent)e) : HIP->hipEventQuery((hipEvent_t)e);
			if (c == 0) return DDG_OK;
			if (c != DDG_NOT_READY) return (ddg_rc){c, cuda ? "cuEventQuery" : "hipEventQuery"};
		} while (ddg_now_ns() < end);
	}
	ddg_rc rc = DDG_OK;
	DDG_DO(d, rc, CU->cuEventSynchronize((CUevent)e), "cuEventSynchronize",
	       HIP->hipEventSynchronize((hipEvent_t)e), "hipEventSynchronize");
	return rc;
}

ddg_rc ddg_event_sync(ddg_dev *d, ddg_handle e) {
	DDG_ENTER(d);
	rc = ddg_wait_event(d, e);
	DDG_LEAVE(d);
}

ddg_rc ddg_event_query(ddg_dev *d, ddg_handle e) {
	DDG_CALL(d, CU->cuEventQuery((CUevent)e), "cuEventQuery", HIP->hipEventQuery((hipEvent_t)e), "hipEventQuery");
}

ddg_rc ddg_stream_wait(ddg_dev *d, ddg_handle s, ddg_handle e) {
	DDG_CALL(d, CU->cuStreamWaitEvent((CUstream)s, (CUevent)e, 0), "cuStreamWaitEvent",
	        HIP->hipStreamWaitEvent((hipStream_t)s, (hipEvent_t)e, 0), "hipStreamWaitEvent");
}

ddg_rc ddg_ctx_sync(ddg_dev *d) {
	DDG_CALL(d, CU->cuCtxSynchronize(), "cuCtxSynchronize",
	        HIP->hipDeviceSynchronize(), "hipDeviceSynchronize");
}

// record e on s (if e), then, if wait, block on e.
static ddg_rc ddg_record_wait(ddg_dev *d, ddg_handle s, ddg_handle e, int wait) {
	ddg_rc rc = DDG_OK;
	if (!e) return rc;
	DDG_DO(d, rc, CU->cuEventRecord((CUevent)e, (CUstream)s), "cuEventRecord",
	       HIP->hipEventRecord((hipEvent_t)e, (hipStream_t)s), "hipEventRecord");
	if (wait && rc.code == 0) rc = ddg_wait_event(d, e);
	return rc;
}

ddg_rc ddg_stream_sync(ddg_dev *d, ddg_handle s, ddg_handle e) {
	DDG_ENTER(d);
	rc = ddg_record_wait(d, s, e, 1);
	DDG_LEAVE(d);
}

ddg_rc ddg_htod(ddg_dev *d, uint64_t dst, const void *src, size_t n, ddg_handle s, ddg_handle e) {
	DDG_ENTER(d);
	DDG_DO(d, rc, CU->cuMemcpyHtoDAsync_v2(dst, src, n, (CUstream)s), "cuMemcpyHtoDAsync_v2",
	       HIP->hipMemcpyHtoDAsync((hipDeviceptr_t)(uintptr_t)dst, (void *)src, n, (hipStream_t)s), "hipMemcpyHtoDAsync");
	if (rc.code == 0) rc = ddg_record_wait(d, s, e, 0);
	DDG_LEAVE(d);
}

ddg_rc ddg_dtoh(ddg_dev *d, void *dst, uint64_t src, size_t n, ddg_handle s, ddg_handle e) {
	DDG_ENTER(d);
	DDG_DO(d, rc, CU->cuMemcpyDtoHAsync_v2(dst, src, n, (CUstream)s), "cuMemcpyDtoHAsync_v2",
	       HIP->hipMemcpyDtoHAsync(dst, (hipDeviceptr_t)(uintptr_t)src, n, (hipStream_t)s), "hipMemcpyDtoHAsync");
	if (rc.code == 0) rc = ddg_record_wait(d, s, e, 1);
	DDG_LEAVE(d);
}

ddg_rc ddg_memsets(ddg_dev *d, uint64_t p, size_t n, int count, ddg_handle s, ddg_handle e) {
	DDG_ENTER(d);
	for (int i = 0; i < count && rc.code == 0; i++)
		DDG_DO(d, rc, CU->cuMemsetD8Async(p, (unsigned char)i, n, (CUstream)s), "cuMemsetD8Async",
		       HIP->hipMemsetD8Async((hipDeviceptr_t)(uintptr_t)p, (unsigned char)i, n, (hipStream_t)s),
		       "hipMemsetD8Async");
	if (rc.code == 0) rc = ddg_record_wait(d, s, e, 0);
	DDG_LEAVE(d);
}

// HIP has no module entry points here: there is no portable code object
// to load, so HIP keeps its default stream busy with memsets.
#define DDG_CUDA_ONLY(d, op) \
	if ((d)->api->kind != DDG_CUDA) return (ddg_rc){801, op " (CUDA only)"}

ddg_rc ddg_module_load(ddg_dev *d, const char *image, const char *fname, ddg_handle *mod, ddg_handle *fn) {
	DDG_CUDA_ONLY(d, "cuModuleLoadData");
	DDG_ENTER(d);
	int c;
	*mod = 0;
	if ((c = CU->cuModuleLoadData((CUmodule *)mod, image)) != 0) {
		rc = (ddg_rc){c, "cuModuleLoadData"};
	} else if ((c = CU->cuModuleGetFunction((CUfunction *)fn, (CUmodule)*mod, fname)) != 0) {
		rc = (ddg_rc){c, "cuModuleGetFunction"};
		CU->cuModuleUnload((CUmodule)*mod);
		*mod = 0;
	}
	DDG_LEAVE(d);
}

ddg_rc ddg_module_unload(ddg_dev *d, ddg_handle mod) {
	DDG_CUDA_ONLY(d, "cuModuleUnload");
	DDG_CALL(d, CU->cuModuleUnload((CUmodule)mod), "cuModuleUnload", 0, "");
}

ddg_rc ddg_spin(ddg_dev *d, ddg_handle fn, uint64_t ns, ddg_handle e) {
	DDG_CUDA_ONLY(d, "cuLaunchKernel");
	DDG_ENTER(d);
	void *params[] = {&ns};
	int c = CU->cuLaunchKernel((CUfunction)fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
	if (c != 0) rc = (ddg_rc){c, "cuLaunchKernel"};
	else rc = ddg_record_wait(d, 0, e, 0);
	DDG_LEAVE(d);
}
