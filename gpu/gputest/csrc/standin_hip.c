// standin_hip.c: a stand-in libamdhip64.so for package gpu's tests (see
// standin.h). Streams map round-robin onto GPU_MAX_HW_QUEUES hardware
// queues (default 4) with the null stream on queue 0, as measured on
// Frontier: the 1st, 5th, 9th, ... stream created shares the default
// stream's queue. Stricter than HIP in one way: a thread must set its
// device (hipSetDevice) before other calls, so that a missing
// per-thread device shows up in tests.
#include "standin.h"

typedef int hipError_t;

#define hipEventBlockingSync 0x1
#define hipStreamNonBlocking 0x1

static __thread int si_thread_dev = -1;

#define NEED_DEV()                                                      \
	do {                                                            \
		if (!si_inited) return SI_NOT_INITIALIZED;              \
		if (si_thread_dev < 0) return SI_INVALID_CONTEXT;       \
	} while (0)

hipError_t hipInit(unsigned int flags) {
	SI_FAILPOINT("hipInit");
	if (flags != 0) return SI_INVALID_VALUE;
	return si_init("GPU_MAX_HW_QUEUES", 4);
}

hipError_t hipDriverGetVersion(int *v) {
	SI_FAILPOINT("hipDriverGetVersion");
	if (!v) return SI_INVALID_VALUE;
	*v = 60342134;
	return 0;
}

hipError_t hipGetDeviceCount(int *n) {
	SI_FAILPOINT("hipGetDeviceCount");
	if (!si_inited) return SI_NOT_INITIALIZED;
	*n = si_devices;
	return 0;
}

hipError_t hipDeviceGet(int *d, int ordinal) {
	SI_FAILPOINT("hipDeviceGet");
	int rc = si_check_ordinal(ordinal);
	if (!rc) *d = ordinal;
	return rc;
}

hipError_t hipDeviceGetName(char *name, int len, int d) {
	SI_FAILPOINT("hipDeviceGetName");
	int rc = si_check_ordinal(d);
	return rc ? rc : si_copy_string(name, len, "ddstore stand-in HIP GPU");
}

// Device d reports (64 + d) GiB.
hipError_t hipDeviceTotalMem(size_t *bytes, int d) {
	SI_FAILPOINT("hipDeviceTotalMem");
	int rc = si_check_ordinal(d);
	if (!rc) *bytes = (size_t)(64 + d) << 30;
	return rc;
}

hipError_t hipDeviceGetPCIBusId(char *id, int len, int d) {
	SI_FAILPOINT("hipDeviceGetPCIBusId");
	int rc = si_check_ordinal(d);
	if (rc) return rc;
	char buf[32];
	snprintf(buf, sizeof buf, "0000:%02x:00.0", 0xc1 + d);
	return si_copy_string(id, len, buf);
}

hipError_t hipDeviceComputeCapability(int *major, int *minor, int d) {
	SI_FAILPOINT("hipDeviceComputeCapability");
	int rc = si_check_ordinal(d);
	if (rc) return rc;
	*major = 9;
	*minor = 0;
	return 0;
}

hipError_t hipGetDevice(int *d) {
	if (!d) return SI_INVALID_VALUE;
	*d = si_thread_dev < 0 ? 0 : si_thread_dev;
	return 0;
}

hipError_t hipSetDevice(int d) {
	SI_FAILPOINT("hipSetDevice");
	int rc = si_check_ordinal(d);
	if (!rc) si_thread_dev = d;
	return rc;
}

hipError_t hipDeviceSynchronize(void) {
	SI_FAILPOINT("hipDeviceSynchronize");
	NEED_DEV();
	return si_ctx_sync();
}

hipError_t hipMalloc(void **p, size_t n) {
	SI_FAILPOINT("hipMalloc");
	NEED_DEV();
	return si_alloc(p, n);
}

hipError_t hipFree(void *p) {
	SI_FAILPOINT("hipFree");
	NEED_DEV();
	return si_free(p);
}

hipError_t hipHostRegister(void *p, size_t n, unsigned int flags) {
	SI_FAILPOINT("hipHostRegister");
	NEED_DEV();
	(void)flags;
	return si_register(p, n);
}

hipError_t hipHostUnregister(void *p) {
	SI_FAILPOINT("hipHostUnregister");
	NEED_DEV();
	return si_unregister(p);
}

hipError_t hipMemcpyHtoDAsync(void *dst, void *src, size_t n, void *s) {
	SI_FAILPOINT("hipMemcpyHtoDAsync");
	NEED_DEV();
	return si_copy(s, dst, src, n, 1);
}

hipError_t hipMemcpyDtoHAsync(void *dst, void *src, size_t n, void *s) {
	SI_FAILPOINT("hipMemcpyDtoHAsync");
	NEED_DEV();
	return si_copy(s, dst, src, n, 0);
}

hipError_t hipMemsetD8Async(void *p, unsigned char v, size_t n, void *s) {
	SI_FAILPOINT("hipMemsetD8Async");
	NEED_DEV();
	return si_memset(s, p, v, n);
}

hipError_t hipStreamCreateWithFlags(void **s, unsigned int flags) {
	SI_FAILPOINT("hipStreamCreateWithFlags");
	NEED_DEV();
	return si_stream_create(s, !(flags & hipStreamNonBlocking));
}

hipError_t hipStreamDestroy(void *s) {
	SI_FAILPOINT("hipStreamDestroy");
	NEED_DEV();
	return si_stream_destroy(s);
}

hipError_t hipStreamSynchronize(void *s) {
	SI_FAILPOINT("hipStreamSynchronize");
	NEED_DEV();
	return si_stream_sync(s);
}

hipError_t hipStreamWaitEvent(void *s, void *e, unsigned int flags) {
	SI_FAILPOINT("hipStreamWaitEvent");
	NEED_DEV();
	if (flags != 0) return SI_INVALID_VALUE;
	return si_stream_wait_event(s, e);
}

hipError_t hipEventCreateWithFlags(void **e, unsigned int flags) {
	SI_FAILPOINT("hipEventCreateWithFlags");
	NEED_DEV();
	return si_event_create(e, flags);
}

hipError_t hipEventRecord(void *e, void *s) {
	SI_FAILPOINT("hipEventRecord");
	NEED_DEV();
	return si_event_record(e, s);
}

hipError_t hipEventSynchronize(void *e) {
	SI_FAILPOINT("hipEventSynchronize");
	NEED_DEV();
	return si_event_sync(e, hipEventBlockingSync);
}

hipError_t hipEventQuery(void *e) {
	NEED_DEV();
	return si_event_query(e);
}

hipError_t hipEventDestroy(void *e) {
	SI_FAILPOINT("hipEventDestroy");
	NEED_DEV();
	return si_event_destroy(e);
}

const char *hipGetErrorString(hipError_t code) {
	const char *s = si_errstr(code);
	return s ? s : "unknown error";
}
