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

// dd_set_rxm_eager sets FI_OFI_RXM_EAGER_LIMIT to DD_RXM_EAGER_LIMIT
// unless the environment already has it. rxm over tcp sends a message above
// its eager limit (16 KiB by default) by rendezvous: a request, an RMA read
// by the receiver, an acknowledgement. libfabric 1.17's rxm tears a
// connection down by closing its endpoint first and draining the shared
// completion queue after, so a rendezvous request still queued there is
// answered with a read on the freed endpoint: a reader that gave up a gather
// batch when a peer died crashed that way (SIGSEGV in rxm's teardown, under
// fi_close of the reader's endpoint; upstream fixed the order later).
// Gather replies are the only large messages sent here. Above the largest
// reply, every reply goes eager, as one message that tcp's dynamic receive
// buffers place straight into the reader's buffers, and the rendezvous path
// is never entered. rxm reads the value when an endpoint opens and only over
// tcp (dynamic receive buffers and direct send), and rejects a connection
// between endpoints whose limits differ, so it is one constant for every
// rank; set it in the environment of every rank, or of none.
void dd_set_rxm_eager(void) {
	char v[32];
	snprintf(v, sizeof v, "%llu", (unsigned long long)DD_RXM_EAGER_LIMIT);
	setenv("FI_OFI_RXM_EAGER_LIMIT", v, 0);
}

// dd_dlopen_keeping_signals dlopens path and puts back every signal
// handler that the libraries' constructors replaced. libinfinipath (PSM,
// a dependency of Debian's libfabric) installs its own handlers for SIGINT,
// SIGTERM, SIGSEGV, SIGBUS, SIGILL and SIGABRT, which print a backtrace and
// exit(1), over the program's: Go's runtime then no longer saw its own
// faults, and a Ctrl-C or a launcher's SIGTERM ended a rank with exit
// code 1 instead of by the signal, which the launcher misreports.
static void *dd_dlopen_keeping_signals(const char *path) {
	struct sigaction before[NSIG];
	for (int s = 1; s < NSIG; s++) sigaction(s, NULL, &before[s]);
	void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	for (int s = 1; s < NSIG; s++) {
		struct sigaction now;
		if (sigaction(s, NULL, &now) == 0 && now.sa_handler != before[s].sa_handler)
			sigaction(s, &before[s], NULL);
	}
	return h;
}

// dd_load dlopens libfabric.so.1 and resolves its real symbols. Returns 0,
// or -1 with the reason in err. Called once (under a Go sync.Once).
int dd_load(char *err, size_t n) {
	if (dd_lib) return 0;
	dd_set_rxm_eager();
	void *h = dd_dlopen_keeping_signals(DD_LIBFABRIC);
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
