// dd_lib.c: libfabric loaded at run time. Most of libfabric's API is inline
// calls through the ops tables of the objects it returns; only a handful of
// functions are real symbols. They are looked up here with dlopen/dlsym, so
// a program that embeds ddstore starts (and runs single-node) on a machine
// without libfabric; only the headers are needed at build time.
// Part of package fabric (compiled by cgo); see dd.h.

#include "dd.h"
#include <dlfcn.h>
#include <stdio.h>

dd_fi_api dd_fi;
static void *dd_lib;

// dd_load dlopens libfabric.so.1 and resolves its real symbols. Returns 0,
// or -1 with the reason in err. Called once (under a Go sync.Once).
int dd_load(char *err, size_t n) {
	if (dd_lib) return 0;
	void *h = dlopen(DD_LIBFABRIC, RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(err, n, "%s", e ? e : "dlopen failed");
		return -1;
	}
	dd_fi_api a;
	memset(&a, 0, sizeof a);
#define DD_SYM(field, name) \
	if (!(*(void **)&a.field = dlsym(h, name))) { \
		snprintf(err, n, "%s: symbol %s missing", DD_LIBFABRIC, name); dlclose(h); return -1; }
	DD_SYM(getinfo, "fi_getinfo")
	DD_SYM(freeinfo, "fi_freeinfo")
	DD_SYM(dupinfo, "fi_dupinfo")
	DD_SYM(fabric, "fi_fabric")
	DD_SYM(strerror, "fi_strerror")
	DD_SYM(version, "fi_version")
#undef DD_SYM
	dd_fi = a;
	dd_lib = h;
	return 0;
}

// dd_lib_version is fi_version() of the loaded library, 0 when none is.
uint32_t dd_lib_version(void) { return dd_lib ? dd_fi.version() : 0; }

void dd_freeinfo(struct fi_info *i) { if (i) dd_fi.freeinfo(i); }

// dd_lib_path writes the file the loaded libfabric came from into buf.
int dd_lib_path(char *buf, size_t n) {
	Dl_info di;
	if (!dd_lib || !dladdr(*(void **)&dd_fi.getinfo, &di) || !di.dli_fname) return -1;
	snprintf(buf, n, "%s", di.dli_fname);
	return 0;
}
