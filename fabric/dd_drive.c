// dd_drive.c: the helpers of the one batch loop (dd_drive.h): the CQ, the
// batch's result, failure, and how a reader waits between progress steps.
// Part of package fabric (compiled by cgo); see dd.h.

#include "dd_drive.h"

// Spinning on a CQ is the fastest wait while cores are free, and the worst
// when they are not: on software-RMA providers the target's progress thread
// needs a core to answer, and several spinning readers starve it (2 cores,
// 4 readers spinning: a quarter of one reader's rate). So readers spin only
// while at most dd_spin_limit readers of the process are inside a batch
// (half the online CPUs, at least 1); beyond that they all sleep on their
// CQ's wait fd.
atomic_int dd_active;
int dd_spin_limit;

void dd_active_enter(dd_reader *r) {
	if (__atomic_load_n(&dd_spin_limit, __ATOMIC_RELAXED) == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		__atomic_store_n(&dd_spin_limit, n >= 4 ? (int)(n / 2) : 1, __ATOMIC_RELAXED);
	}
	if (!r->active) { atomic_fetch_add(&dd_active, 1); r->active = 1; }
}

void dd_active_leave(dd_reader *r) {
	if (r->active) { atomic_fetch_sub(&dd_active, 1); r->active = 0; }
}

// dd_result_reset clears res for a new batch (copy_ns is dd_gather's own).
void dd_result_reset(dd_result *res) {
	res->post_ns = 0; res->wait_ns = 0; res->done = 0; res->stage = DD_OK;
	res->failed_op = -1; res->err = 0; res->prov_errno = 0; res->torn_down = 0; res->text[0] = 0;
	res->guessed = 0; res->teardown_rc = 0; res->inflight_at_fail = 0;
}

// dd_set_fail records where a batch failed: stage, positive errno, op.
void dd_set_fail(dd_result *res, int stage, int err, int op) {
	res->stage = stage; res->err = err; res->failed_op = op;
}

// dd_cq_readerr reads the error entry behind -FI_EAVAIL into *e and returns
// fi_cq_readerr's result. -FI_EAGAIN (an error announced but not readable)
// becomes FI_EIO; shm's negative codes are made positive.
ssize_t dd_cq_readerr(dd_reader *r, struct fi_cq_err_entry *e) {
	memset(e, 0, sizeof *e);
	ssize_t rr = fi_cq_readerr(r->cq, e, 0);
	if (rr == -FI_EAGAIN) e->err = FI_EIO;
	if (e->err < 0) e->err = -e->err;
	return rr;
}

// dd_cq_poll reads up to 64 completions into comp, adds the time since *t
// to the batch's wait time and moves *t to now.
ssize_t dd_cq_poll(dd_reader *r, struct fi_cq_entry *comp, dd_result *res, int64_t *t) {
	ssize_t got = fi_cq_read(r->cq, comp, 64);
	int64_t t2 = dd_now();
	res->wait_ns += t2 - *t;
	*t = t2;
	return got;
}

// dd_batch_fail ends a failed batch (dd_read_batch, dd_gather): any failure
// closes the endpoint, since fi_close cancels what is in flight (nothing
// lands in a destination after we return) and drops broken connections; the
// next call opens a fresh one. inflight is what was outstanding. Returns -1.
int dd_batch_fail(dd_reader *r, dd_result *res, int inflight) {
	dd_active_leave(r);
	res->inflight_at_fail = inflight;
	res->teardown_rc = dd_reader_teardown(r);
	res->torn_down = 1;
	return -1;
}

dd_deadset *dd_deadset_new(void) { return calloc(1, sizeof(dd_deadset)); }

// dd_deadset_mark declares rank dead (ranks beyond DD_DEAD_RANKS are not
// tracked: their reads end at the deadline, as before).
void dd_deadset_mark(dd_deadset *d, int rank) {
	if (rank < 0 || rank >= DD_DEAD_RANKS) return;
	atomic_fetch_or(&d->bits[rank / 8], (unsigned char)(1u << (rank % 8)));
	atomic_fetch_add(&d->gen, 1);
}

// dd_dead_op is the first op of the batch not done whose peer's rank is
// dead, or -1. It looks only when the set changed since *seen (0 at the
// start of a batch): one atomic load per wait while nobody died.
int dd_dead_op(dd_reader *r, uint64_t *seen) {
	if (!r->dead) return -1;
	uint64_t g = atomic_load_explicit(&r->dead->gen, memory_order_acquire);
	if (g == *seen) return -1;
	*seen = g;
	for (int i = 0; i < r->batch_n; i++) {
		dd_op *o = &r->ops[i];
		if (o->done || o->skip || (int)o->peer >= r->maxpeers) continue;
		int32_t rk = r->peer_rank[o->peer];
		if (rk >= 0 && rk < DD_DEAD_RANKS &&
			(atomic_load_explicit(&r->dead->bits[rk / 8], memory_order_relaxed) >> (rk % 8)) & 1) return i;
	}
	return -1;
}

// dd_reader_wait is called after a progress step found nothing. Within
// spin_ns of the last completion, while few readers are active (see
// dd_active), it returns at once: the reader spins. Otherwise it sleeps
// until the provider has work: fi_trywait, then ppoll on the CQ wait fd for
// at most 1ms (a missed wake-up costs no more than the back-off it
// replaces) or the time left.
// Without a wait fd (shm), or while fi_trywait keeps reporting work, it
// sleeps with back-off (*sleep_ns, doubling to 1ms). The time slept is
// added to *wait_ns; it returns the current time.
int64_t dd_reader_wait(dd_reader *r, int64_t t, int64_t last_done, int64_t deadline, int64_t *sleep_ns, int *busy, int64_t *wait_ns) {
	if (t >= deadline) return t;
	// Without a wait fd (shm) every reader spins, as there is no cheap
	// wake-up to hand the core over with.
	if (t - last_done <= r->spin_ns &&
		(r->waitfd < 0 || atomic_load_explicit(&dd_active, memory_order_relaxed) <= dd_spin_limit)) return t;
	int64_t left = deadline - t;
	if (r->waitfd >= 0 && *busy < 16) {
		struct fid *f = &r->cq->fid;
		int rc = fi_trywait(r->fabric, &f, 1);
		if (rc == -FI_EAGAIN) { (*busy)++; return t; } // work pending: progress again
		if (rc == FI_SUCCESS) {
			*busy = 0;
			int64_t ns = left < 1000000 ? left : 1000000;
			struct pollfd p = { r->waitfd, POLLIN, 0 };
			struct timespec ts = { ns / 1000000000LL, ns % 1000000000LL };
			ppoll(&p, 1, &ts, NULL);
			int64_t t2 = dd_now();
			*wait_ns += t2 - t;
			return t2;
		}
	}
	*busy = 0;
	dd_sleep_ns(*sleep_ns < left ? *sleep_ns : left);
	*sleep_ns *= 2;
	if (*sleep_ns > 1000000) *sleep_ns = 1000000;
	int64_t t2 = dd_now();
	*wait_ns += t2 - t;
	return t2;
}

// dd_record_cq_error records a CQ error entry in res (the protocol's
// blame names the op).
void dd_record_cq_error(dd_reader *r, struct fi_cq_err_entry *e, dd_result *res) {
	res->failed_op = -1;
	res->err = e->err != 0 ? e->err : FI_EIO; // never report "Success"
	res->prov_errno = e->prov_errno;
	res->stage = DD_CQERR;
	res->text[0] = 0;
	const char *t = fi_cq_strerror(r->cq, e->prov_errno, e->err_data, NULL, 0);
	if (t) { strncpy(res->text, t, sizeof res->text - 1); res->text[sizeof res->text - 1] = 0; }
}

int dd_active_readers(void) { return atomic_load(&dd_active); }
