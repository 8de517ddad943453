// ddgpu.c: dispatch tables for the CUDA driver API and HIP, and the entry
// points package gpu calls. See ddgpu.h.
#define _GNU_SOURCE
#include "ddgpu.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
#define DD_CUDA_FUNCS(X)                                                              \
	X(CUresult, cuInit, (unsigned int flags))                                     \
	X(CUresult, cuDriverGetVersion, (int *version))                               \
	X(CUresult, cuDeviceGetCount, (int *count))                                   \
	X(CUresult, cuDeviceGet, (CUdevice * dev, int ordinal))                       \
	X(CUresult, cuDeviceGetName, (char *name, int len, CUdevice dev))             \
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

#define DD_HIP_FUNCS(X)                                                                  \
	X(hipError_t, hipInit, (unsigned int flags))                                     \
	X(hipError_t, hipDriverGetVersion, (int *version))                               \
	X(hipError_t, hipGetDeviceCount, (int *count))                                   \
	X(hipError_t, hipDeviceGet, (hipDevice_t * dev, int ordinal))                    \
	X(hipError_t, hipDeviceGetName, (char *name, int len, hipDevice_t dev))          \
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

#define DD_FIELD(ret, name, args) ret(*name) args;
typedef struct dd_cuda_table {
	DD_CUDA_FUNCS(DD_FIELD)
} dd_cuda_table;
typedef struct dd_hip_table {
	DD_HIP_FUNCS(DD_FIELD)
} dd_hip_table;
#undef DD_FIELD

struct dd_api {
	int kind;
	void *handle;
	dd_cuda_table cu;
	dd_hip_table hip;
};

struct dd_dev {
	dd_api *api;
	int ordinal;
	int dev;       // CUdevice / hipDevice_t
	CUcontext ctx; // CUDA: the retained primary context
};

static const char *dd_resolve(dd_api *a) {
	const char *missing = NULL;
#define DD_RESOLVE(ret, name, args)                                 \
	if (!missing) {                                             \
		*(void **)(&t->name) = dlsym(a->handle, #name);     \
		if (!t->name) missing = #name;                      \
	}
	if (a->kind == DD_CUDA) {
		dd_cuda_table *t = &a->cu;
		DD_CUDA_FUNCS(DD_RESOLVE)
	} else {
		dd_hip_table *t = &a->hip;
		DD_HIP_FUNCS(DD_RESOLVE)
	}
#undef DD_RESOLVE
	return missing;
}

dd_api *dd_load(int kind, const char *path, char *err, size_t errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return NULL;
	}
	dd_api *a = calloc(1, sizeof *a);
	if (!a) {
		snprintf(err, errlen, "out of memory");
		return NULL; // the handle stays open: drivers are never unloaded
	}
	a->kind = kind;
	a->handle = h;
	const char *missing = dd_resolve(a);
	if (missing) {
		snprintf(err, errlen, "missing symbol %s", missing);
		free(a);
		return NULL;
	}
	return a;
}

const char *dd_error_string(dd_api *a, int code) {
	const char *s = NULL;
	if (a->kind == DD_CUDA) {
		if (a->cu.cuGetErrorString(code, &s) != 0) s = NULL;
	} else {
		s = a->hip.hipGetErrorString(code);
	}
	return s ? s : "unknown error";
}

#define DD_OK ((dd_rc){0, NULL})
#define DD_TRY(call, name)                                 \
	do {                                               \
		int dd_code_ = (call);                     \
		if (dd_code_ != 0) return (dd_rc){dd_code_, name}; \
	} while (0)

dd_rc dd_init(dd_api *a, int *driver_version, int *count) {
	*count = 0;
	if (a->kind == DD_CUDA) {
		DD_TRY(a->cu.cuInit(0), "cuInit");
		DD_TRY(a->cu.cuDriverGetVersion(driver_version), "cuDriverGetVersion");
		DD_TRY(a->cu.cuDeviceGetCount(count), "cuDeviceGetCount");
	} else {
		DD_TRY(a->hip.hipInit(0), "hipInit");
		DD_TRY(a->hip.hipDriverGetVersion(driver_version), "hipDriverGetVersion");
		DD_TRY(a->hip.hipGetDeviceCount(count), "hipGetDeviceCount");
	}
	return DD_OK;
}

dd_rc dd_open(dd_api *a, int ordinal, dd_dev **out, char *name, int namelen,
              char *pci, int pcilen, int *major, int *minor) {
	dd_dev *d = calloc(1, sizeof *d);
	if (!d) return (dd_rc){DD_OUT_OF_MEMORY, "calloc"};
	d->api = a;
	d->ordinal = ordinal;
	dd_rc rc = DD_OK;
#define DD_STEP(call, op)                                             \
	if (rc.code == 0) {                                           \
		int c_ = (call);                                      \
		if (c_ != 0) rc = (dd_rc){c_, op};                    \
	}
	if (a->kind == DD_CUDA) {
		DD_STEP(a->cu.cuDeviceGet(&d->dev, ordinal), "cuDeviceGet");
		DD_STEP(a->cu.cuDeviceGetName(name, namelen, d->dev), "cuDeviceGetName");
		DD_STEP(a->cu.cuDeviceGetPCIBusId(pci, pcilen, d->dev), "cuDeviceGetPCIBusId");
		DD_STEP(a->cu.cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev),
		        "cuDeviceGetAttribute");
		DD_STEP(a->cu.cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev),
		        "cuDeviceGetAttribute");
		DD_STEP(a->cu.cuDevicePrimaryCtxRetain(&d->ctx, d->dev), "cuDevicePrimaryCtxRetain");
	} else {
		DD_STEP(a->hip.hipDeviceGet(&d->dev, ordinal), "hipDeviceGet");
		DD_STEP(a->hip.hipDeviceGetName(name, namelen, d->dev), "hipDeviceGetName");
		DD_STEP(a->hip.hipDeviceGetPCIBusId(pci, pcilen, ordinal), "hipDeviceGetPCIBusId");
		DD_STEP(a->hip.hipDeviceComputeCapability(major, minor, d->dev), "hipDeviceComputeCapability");
	}
#undef DD_STEP
	if (rc.code != 0) {
		free(d);
		return rc;
	}
	*out = d;
	return DD_OK;
}

void dd_close(dd_dev *d) {
	if (d->api->kind == DD_CUDA) d->api->cu.cuDevicePrimaryCtxRelease_v2(d->dev);
	free(d);
}

// ---- the current device, per OS thread ----------------------------------

typedef struct dd_scope {
	int prev; // HIP: the caller's device, restored on leave
} dd_scope;

static dd_rc dd_enter(dd_dev *d, dd_scope *sc) {
	sc->prev = -1;
	if (d->api->kind == DD_CUDA) {
		DD_TRY(d->api->cu.cuCtxPushCurrent_v2(d->ctx), "cuCtxPushCurrent_v2");
	} else {
		// Set even when hipGetDevice already says ordinal: a thread that
		// never chose a device reports 0 without having one set.
		if (d->api->hip.hipGetDevice(&sc->prev) != 0) sc->prev = -1;
		DD_TRY(d->api->hip.hipSetDevice(d->ordinal), "hipSetDevice");
	}
	return DD_OK;
}

static dd_rc dd_leave(dd_dev *d, dd_scope *sc, dd_rc rc) {
	if (d->api->kind == DD_CUDA) {
		CUcontext popped;
		d->api->cu.cuCtxPopCurrent_v2(&popped);
	} else if (sc->prev >= 0 && sc->prev != d->ordinal) {
		d->api->hip.hipSetDevice(sc->prev);
	}
	return rc;
}

// DD_CALL runs one driver call of each runtime inside the device's scope.
#define DD_CALL(d, cucall, cuname, hipcall, hipname)                          \
	do {                                                                  \
		dd_scope sc_;                                                 \
		dd_rc rc_ = dd_enter(d, &sc_);                                \
		if (rc_.code != 0) return rc_;                                \
		int c_ = (d)->api->kind == DD_CUDA ? (cucall) : (hipcall);    \
		if (c_ != 0) rc_ = (dd_rc){c_, (d)->api->kind == DD_CUDA ? cuname : hipname}; \
		return dd_leave(d, &sc_, rc_);                                \
	} while (0)

#define CU (&d->api->cu)
#define HIP (&d->api->hip)

dd_rc dd_alloc(dd_dev *d, size_t n, uint64_t *ptr) {
	CUdeviceptr cp = 0;
	void *hp = NULL;
	dd_scope sc;
	dd_rc rc = dd_enter(d, &sc);
	if (rc.code != 0) return rc;
	if (d->api->kind == DD_CUDA) {
		int c = CU->cuMemAlloc_v2(&cp, n);
		if (c != 0) rc = (dd_rc){c, "cuMemAlloc_v2"};
		*ptr = cp;
	} else {
		int c = HIP->hipMalloc(&hp, n);
		if (c != 0) rc = (dd_rc){c, "hipMalloc"};
		*ptr = (uint64_t)(uintptr_t)hp;
	}
	return dd_leave(d, &sc, rc);
}

dd_rc dd_free(dd_dev *d, uint64_t ptr) {
	DD_CALL(d, CU->cuMemFree_v2(ptr), "cuMemFree_v2",
	        HIP->hipFree((void *)(uintptr_t)ptr), "hipFree");
}

dd_rc dd_register(dd_dev *d, void *p, size_t n) {
	DD_CALL(d, CU->cuMemHostRegister_v2(p, n, CU_MEMHOSTREGISTER_PORTABLE), "cuMemHostRegister_v2",
	        HIP->hipHostRegister(p, n, hipHostRegisterPortable), "hipHostRegister");
}

dd_rc dd_unregister(dd_dev *d, void *p) {
	DD_CALL(d, CU->cuMemHostUnregister(p), "cuMemHostUnregister",
	        HIP->hipHostUnregister(p), "hipHostUnregister");
}

dd_rc dd_stream_create(dd_dev *d, dd_handle *s, int blocking) {
	DD_CALL(d, CU->cuStreamCreate((CUstream *)s, blocking ? 0 : CU_STREAM_NON_BLOCKING), "cuStreamCreate",
	        HIP->hipStreamCreateWithFlags((hipStream_t *)s, blocking ? 0 : hipStreamNonBlocking),
	        "hipStreamCreateWithFlags");
}

// dd_stream_destroy waits for the stream's work first, so that no copy
// lands in memory its owner is about to free.
dd_rc dd_stream_destroy(dd_dev *d, dd_handle s) {
	dd_scope sc;
	dd_rc rc = dd_enter(d, &sc);
	if (rc.code != 0) return rc;
	int c;
	if (d->api->kind == DD_CUDA) {
		if ((c = CU->cuStreamSynchronize((CUstream)s)) != 0) rc = (dd_rc){c, "cuStreamSynchronize"};
		if ((c = CU->cuStreamDestroy_v2((CUstream)s)) != 0 && rc.code == 0) rc = (dd_rc){c, "cuStreamDestroy_v2"};
	} else {
		if ((c = HIP->hipStreamSynchronize((hipStream_t)s)) != 0) rc = (dd_rc){c, "hipStreamSynchronize"};
		if ((c = HIP->hipStreamDestroy((hipStream_t)s)) != 0 && rc.code == 0) rc = (dd_rc){c, "hipStreamDestroy"};
	}
	return dd_leave(d, &sc, rc);
}

dd_rc dd_event_create(dd_dev *d, dd_handle *e) {
	DD_CALL(d, CU->cuEventCreate((CUevent *)e, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING), "cuEventCreate",
	        HIP->hipEventCreateWithFlags((hipEvent_t *)e, hipEventBlockingSync | hipEventDisableTiming),
	        "hipEventCreateWithFlags");
}

dd_rc dd_event_destroy(dd_dev *d, dd_handle e) {
	DD_CALL(d, CU->cuEventDestroy_v2((CUevent)e), "cuEventDestroy_v2", HIP->hipEventDestroy((hipEvent_t)e), "hipEventDestroy");
}

dd_rc dd_event_record(dd_dev *d, dd_handle e, dd_handle s) {
	DD_CALL(d, CU->cuEventRecord((CUevent)e, (CUstream)s), "cuEventRecord", HIP->hipEventRecord((hipEvent_t)e, (hipStream_t)s), "hipEventRecord");
}

dd_rc dd_event_sync(dd_dev *d, dd_handle e) {
	DD_CALL(d, CU->cuEventSynchronize((CUevent)e), "cuEventSynchronize",
	        HIP->hipEventSynchronize((hipEvent_t)e), "hipEventSynchronize");
}

dd_rc dd_event_query(dd_dev *d, dd_handle e) {
	DD_CALL(d, CU->cuEventQuery((CUevent)e), "cuEventQuery", HIP->hipEventQuery((hipEvent_t)e), "hipEventQuery");
}

dd_rc dd_stream_wait(dd_dev *d, dd_handle s, dd_handle e) {
	DD_CALL(d, CU->cuStreamWaitEvent((CUstream)s, (CUevent)e, 0), "cuStreamWaitEvent",
	        HIP->hipStreamWaitEvent((hipStream_t)s, (hipEvent_t)e, 0), "hipStreamWaitEvent");
}

dd_rc dd_ctx_sync(dd_dev *d) {
	DD_CALL(d, CU->cuCtxSynchronize(), "cuCtxSynchronize",
	        HIP->hipDeviceSynchronize(), "hipDeviceSynchronize");
}

// record e on s (if e), then, if wait, block on e.
static dd_rc dd_record_wait(dd_dev *d, dd_handle s, dd_handle e, int wait) {
	int c;
	if (!e) return DD_OK;
	if (d->api->kind == DD_CUDA) {
		if ((c = CU->cuEventRecord((CUevent)e, (CUstream)s)) != 0) return (dd_rc){c, "cuEventRecord"};
		if (wait && (c = CU->cuEventSynchronize((CUevent)e)) != 0) return (dd_rc){c, "cuEventSynchronize"};
	} else {
		if ((c = HIP->hipEventRecord((hipEvent_t)e, (hipStream_t)s)) != 0) return (dd_rc){c, "hipEventRecord"};
		if (wait && (c = HIP->hipEventSynchronize((hipEvent_t)e)) != 0) return (dd_rc){c, "hipEventSynchronize"};
	}
	return DD_OK;
}

dd_rc dd_stream_sync(dd_dev *d, dd_handle s, dd_handle e) {
	dd_scope sc;
	dd_rc rc = dd_enter(d, &sc);
	if (rc.code != 0) return rc;
	return dd_leave(d, &sc, dd_record_wait(d, s, e, 1));
}

dd_rc dd_htod(dd_dev *d, uint64_t dst, const void *src, size_t n, dd_handle s, dd_handle e) {
	dd_scope sc;
	dd_rc rc = dd_enter(d, &sc);
	if (rc.code != 0) return rc;
	int c;
	if (d->api->kind == DD_CUDA) {
		if ((c = CU->cuMemcpyHtoDAsync_v2(dst, src, n, (CUstream)s)) != 0) rc = (dd_rc){c, "cuMemcpyHtoDAsync_v2"};
	} else {
		if ((c = HIP->hipMemcpyHtoDAsync((hipDeviceptr_t)(uintptr_t)dst, (void *)src, n, (hipStream_t)s)) != 0)
			rc = (dd_rc){c, "hipMemcpyHtoDAsync"};
	}
	if (rc.code == 0) rc = dd_record_wait(d, s, e, 0);
	return dd_leave(d, &sc, rc);
}

dd_rc dd_dtoh(dd_dev *d, void *dst, uint64_t src, size_t n, dd_handle s, dd_handle e) {
	dd_scope sc;
	dd_rc rc = dd_enter(d, &sc);
	if (rc.code != 0) return rc;
	int c;
	if (d->api->kind == DD_CUDA) {
		if ((c = CU->cuMemcpyDtoHAsync_v2(dst, src, n, (CUstream)s)) != 0) rc = (dd_rc){c, "cuMemcpyDtoHAsync_v2"};
	} else {
		if ((c = HIP->hipMemcpyDtoHAsync(dst, (hipDeviceptr_t)(uintptr_t)src, n, (hipStream_t)s)) != 0)
			rc = (dd_rc){c, "hipMemcpyDtoHAsync"};
	}
	if (rc.code == 0) rc = dd_record_wait(d, s, e, 1);
	return dd_leave(d, &sc, rc);
}

dd_rc dd_memsets(dd_dev *d, uint64_t p, size_t n, int count, dd_handle s, dd_handle e) {
	dd_scope sc;
	dd_rc rc = dd_enter(d, &sc);
	if (rc.code != 0) return rc;
	for (int i = 0; i < count && rc.code == 0; i++) {
		int c;
		if (d->api->kind == DD_CUDA) {
			if ((c = CU->cuMemsetD8Async(p, (unsigned char)i, n, (CUstream)s)) != 0) rc = (dd_rc){c, "cuMemsetD8Async"};
		} else {
			if ((c = HIP->hipMemsetD8Async((hipDeviceptr_t)(uintptr_t)p, (unsigned char)i, n, (hipStream_t)s)) != 0)
				rc = (dd_rc){c, "hipMemsetD8Async"};
		}
	}
	if (rc.code == 0) rc = dd_record_wait(d, s, e, 0);
	return dd_leave(d, &sc, rc);
}

// HIP has no module entry points here: there is no portable code object
// to load, so HIP keeps its default stream busy with memsets.
#define DD_CUDA_ONLY(d, op) \
	if ((d)->api->kind != DD_CUDA) return (dd_rc){801, op " (CUDA only)"}

dd_rc dd_module_load(dd_dev *d, const char *image, const char *fname, dd_handle *mod, dd_handle *fn) {
	DD_CUDA_ONLY(d, "cuModuleLoadData");
	dd_scope sc;
	dd_rc rc = dd_enter(d, &sc);
	if (rc.code != 0) return rc;
	int c;
	*mod = 0;
	if ((c = CU->cuModuleLoadData((CUmodule *)mod, image)) != 0) {
		rc = (dd_rc){c, "cuModuleLoadData"};
	} else if ((c = CU->cuModuleGetFunction((CUfunction *)fn, (CUmodule)*mod, fname)) != 0) {
		rc = (dd_rc){c, "cuModuleGetFunction"};
		CU->cuModuleUnload((CUmodule)*mod);
		*mod = 0;
	}
	return dd_leave(d, &sc, rc);
}

dd_rc dd_module_unload(dd_dev *d, dd_handle mod) {
	DD_CUDA_ONLY(d, "cuModuleUnload");
	DD_CALL(d, CU->cuModuleUnload((CUmodule)mod), "cuModuleUnload", 0, "");
}

dd_rc dd_spin(dd_dev *d, dd_handle fn, uint64_t ns, dd_handle e) {
	DD_CUDA_ONLY(d, "cuLaunchKernel");
	dd_scope sc;
	dd_rc rc = dd_enter(d, &sc);
	if (rc.code != 0) return rc;
	void *params[] = {&ns};
	int c = CU->cuLaunchKernel((CUfunction)fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
	if (c != 0) rc = (dd_rc){c, "cuLaunchKernel"};
	else rc = dd_record_wait(d, 0, e, 0);
	return dd_leave(d, &sc, rc);
}
