// dd_watchdog.c: deadlines for provider calls that never return. A stopped
// or killed shm peer can leave a reader spinning forever inside fi_read on a
// lock in the peer's shared region; no deadline checked between C calls can
// fire then. A guarded call (dd_wd_guard) records its deadline; a watchdog
// thread that finds a call still inside the provider DD_WD_GRACE_NS past its
// deadline abandons it: it sends the reader's thread DD_WD_SIGNAL, whose
// handler siglongjmps out of the provider back into dd_wd_guard, which
// returns DD_STUCK. The reader is then quarantined by the Go side: its
// endpoint, CQ, AV, domain, buffers and registrations are never used, closed
// or freed again (the provider may still hold its locks or write its
// buffers), and the count is exported (dd_quarantined).
// Part of package fabric (compiled by cgo); see dd.h.

#include "dd.h"
#include <setjmp.h>
#include <signal.h>

#define DD_WD_MAX       4096
#define DD_WD_PERIOD_NS 50000000LL   // watchdog scan period

static __thread sigjmp_buf *dd_wd_env;
static __thread volatile sig_atomic_t dd_wd_armed;

static _Atomic(dd_reader *) dd_wd_slots[DD_WD_MAX];
static pthread_once_t dd_wd_once = PTHREAD_ONCE_INIT;
static int dd_wd_ok;
atomic_ullong dd_quarantined;  // readers abandoned inside a provider call
atomic_ullong dd_leaked_eps;   // endpoints whose close failed (kept, with their buffers)

static void dd_wd_handler(int sig, siginfo_t *si, void *uc) {
	(void)sig; (void)si; (void)uc;
	if (dd_wd_armed && dd_wd_env) {
		dd_wd_armed = 0;
		siglongjmp(*dd_wd_env, 1);
	}
}

static void *dd_wd_run(void *arg) {
	(void)arg;
	for (;;) {
		dd_sleep_ns(DD_WD_PERIOD_NS);
		int64_t now = dd_now();
		for (int i = 0; i < DD_WD_MAX; i++) {
			dd_reader *r = atomic_load(&dd_wd_slots[i]);
			if (!r) continue;
			int64_t d = atomic_load(&r->wd_deadline);
			if (d && now > d + DD_WD_GRACE_NS && !atomic_exchange(&r->wd_fired, 1))
				pthread_kill(r->wd_thread, DD_WD_SIGNAL);
		}
	}
	return NULL;
}

static void dd_wd_init(void) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = dd_wd_handler;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(DD_WD_SIGNAL, &sa, NULL) != 0) return;
	pthread_t t;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &a, dd_wd_run, NULL) == 0) dd_wd_ok = 1;
	pthread_attr_destroy(&a);
}

// dd_wd_register puts r under the watchdog; 0, or -1 when it cannot run.
int dd_wd_register(dd_reader *r) {
	pthread_once(&dd_wd_once, dd_wd_init);
	if (!dd_wd_ok) return -1;
	for (int i = 0; i < DD_WD_MAX; i++) {
		dd_reader *none = NULL;
		if (atomic_compare_exchange_strong(&dd_wd_slots[i], &none, r)) { r->wd_slot = i; r->guarded = 1; return 0; }
	}
	return -1;
}

// dd_wd_unregister takes r off the watchdog (before it is freed).
void dd_wd_unregister(dd_reader *r) {
	if (r->guarded) { atomic_store(&dd_wd_slots[r->wd_slot], NULL); r->guarded = 0; }
}

// dd_test_stuck counts the guarded calls still to get stuck: each such
// call spins as a provider call stuck on a stopped peer's lock would, until
// the watchdog abandons it (fault-injection tests).
atomic_int dd_test_stuck;

// dd_take_test_stuck takes one of dd_test_stuck's calls; 1 if it got one.
static int dd_take_test_stuck(void) {
	int n = atomic_load(&dd_test_stuck);
	while (n > 0 && !atomic_compare_exchange_weak(&dd_test_stuck, &n, n - 1)) { }
	return n > 0;
}

// dd_wd_guard runs call(r, arg) under the watchdog with a deadline of
// timeout_ns (a reader that is not registered runs it plainly): if the
// watchdog abandons it, the reader's result says DD_STUCK and it returns
// -1. The watchdog knows nothing of what it guards: the reads and the
// gather client pass themselves (dd_guarded_read_batch, dd_guarded_gather).
int dd_wd_guard(dd_reader *r, int64_t timeout_ns, int (*call)(dd_reader *r, void *arg), void *arg) {
	if (!r->guarded) return call(r, arg);
	sigjmp_buf env;
	if (sigsetjmp(env, 0)) {
		dd_wd_env = NULL;
		atomic_store(&r->wd_deadline, 0);
		atomic_fetch_add(&dd_quarantined, 1);
		dd_active_leave(r);
		r->res.stage = DD_STUCK; r->res.err = FI_ETIMEDOUT; r->res.failed_op = r->wd_op;
		return -1;
	}
	r->wd_thread = pthread_self();
	r->wd_op = 0;
	atomic_store(&r->wd_fired, 0);
	dd_wd_env = &env;
	atomic_store(&r->wd_deadline, dd_now() + timeout_ns);
	dd_wd_armed = 1;
	if (dd_take_test_stuck()) for (;;) { }  // until the watchdog's signal
	int rc = call(r, arg);
	dd_wd_armed = 0;
	dd_wd_env = NULL;
	atomic_store(&r->wd_deadline, 0);
	return rc;
}

uint64_t dd_quarantined_count(void) { return atomic_load(&dd_quarantined); }
uint64_t dd_leaked_eps_count(void) { return atomic_load(&dd_leaked_eps); }
void dd_set_test_stuck(int n) { atomic_store(&dd_test_stuck, n); }
