// dd_reader.c: Reader endpoints, the batched fi_read loop, and the plain C
// reference loop of the benchmarks.
// Part of package fabric (compiled by cgo); see dd.h.

#include "dd.h"

dd_reader *dd_reader_new(struct fid_fabric *fab, struct fid_domain *dom, struct fi_info *info, int window, int cap, int maxpeers, size_t av_count) {
	dd_reader *r = calloc(1, sizeof *r);
	if (!r) return NULL;
	r->fabric = fab;
	r->domain = dom;
	r->info = info;
	r->window = window;
	r->cap = cap;
	r->maxpeers = maxpeers;
	r->av_count = av_count;
	r->spin_ns = 2000000;
	r->waitfd = -1;
	r->peers = calloc(maxpeers, sizeof *r->peers);
	r->ops = calloc(cap, sizeof *r->ops);
	r->ctx = calloc(window, sizeof *r->ctx);
	r->slot_op = calloc(window, sizeof *r->slot_op);
	r->free_slots = calloc(window, sizeof *r->free_slots);
	if (!r->peers || !r->ops || !r->ctx || !r->slot_op || !r->free_slots) {
		free(r->peers); free(r->ops); free(r->ctx); free(r->slot_op); free(r->free_slots); free(r);
		return NULL;
	}
	return r;
}

int dd_reader_teardown(dd_reader *r);

int dd_reader_setup(dd_reader *r, const char **stage) {
	int got_fd = 0;
	size_t cqsz = r->window < 64 ? 128 : (size_t)r->window * 2;
	int rc = dd_endpoint(r->domain, r->info, cqsz, r->av_count, 1, FI_CQ_FORMAT_CONTEXT, &r->ep, &r->cq, &r->av, &got_fd, stage);
	if (rc) return rc;
	r->waitfd = -1;
	if (got_fd) {
		int fd = -1;
		if (fi_control(&r->cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0) r->waitfd = fd;
	}
	r->giov = 1;
	if (r->info->rx_attr) r->giov = r->info->rx_attr->iov_limit < DD_GIOV ? (int)r->info->rx_attr->iov_limit : DD_GIOV;
	r->namelen = sizeof r->name;
	*stage = "fi_getname";
	rc = fi_getname(&r->ep->fid, r->name, &r->namelen);
	if (rc) { dd_reader_teardown(r); return rc; }
	struct fi_cq_entry e[4];
	fi_cq_read(r->cq, e, 4); // progress once before the first read
	return 0;
}

// dd_reader_teardown closes the endpoint first: fi_close cancels whatever is
// still outstanding, so nothing writes into a destination afterwards. It
// returns the first failure (the endpoint's, else the AV's or CQ's).
int dd_reader_teardown(dd_reader *r) {
	int rc = 0, rc2;
	if (r->fail_close && r->ep) { // tests: a close that fails leaves everything open
		r->ep = NULL; r->av = NULL; r->cq = NULL; r->waitfd = -1;
		atomic_fetch_add(&dd_leaked_eps, 1);
		return -FI_EBUSY;
	}
	if (r->ep) rc = fi_close(&r->ep->fid);
	if (r->av && (rc2 = fi_close(&r->av->fid)) != 0 && rc == 0) rc = rc2;
	if (r->cq && (rc2 = fi_close(&r->cq->fid)) != 0 && rc == 0) rc = rc2;
	r->ep = NULL; r->av = NULL; r->cq = NULL;
	r->waitfd = -1;
	if (rc) atomic_fetch_add(&dd_leaked_eps, 1);
	return rc;
}

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

void dd_reader_free(dd_reader *r) {
	dd_wd_unregister(r);
	dd_reader_teardown(r);
	for (int i = 0; i < r->ngslots; i++) { free(r->gslots[i].req); free(r->gslots[i].bounce); }
	free(r->gslots); free(r->gorder); free(r->gcount);
	free(r->peers); free(r->ops); free(r->ctx); free(r->slot_op); free(r->free_slots);
	free(r);
}

int dd_av_insert(dd_reader *r, int idx, void *addr) {
	fi_addr_t fa = FI_ADDR_UNSPEC;
	int rc = fi_av_insert(r->av, addr, 1, &fa, 0, NULL);
	if (rc != 1) return rc < 0 ? rc : -FI_EINVAL;
	r->peers[idx] = fa;
	return 0;
}

// dd_oldest is the lowest-numbered op in flight, else the next to post.
int dd_oldest(dd_reader *r, int next, int n) {
	int victim = -1;
	for (int s = 0; s < r->window; s++)
		if (r->slot_op[s] >= 0 && (victim < 0 || r->slot_op[s] < victim)) victim = r->slot_op[s];
	if (victim < 0) victim = next < n ? next : n - 1;
	return victim;
}

void dd_record_cq_error(dd_reader *r, struct fi_cq_err_entry *e, dd_result *res, int slot) {
	res->failed_op = slot >= 0 ? r->slot_op[slot] : -1;
	res->err = e->err != 0 ? e->err : FI_EIO; // never report "Success"
	res->prov_errno = e->prov_errno;
	res->stage = DD_CQERR;
	res->text[0] = 0;
	const char *t = fi_cq_strerror(r->cq, e->prov_errno, e->err_data, NULL, 0);
	if (t) { strncpy(res->text, t, sizeof res->text - 1); res->text[sizeof res->text - 1] = 0; }
}

// dd_read_batch posts r->ops[0..n) with at most r->window in flight and
// waits for all of them. -FI_EAGAIN from fi_read drains the CQ (which also
// progresses) before retrying. The first error stops posting; what is in
// flight is still drained. At the deadline the endpoint is torn down before
// returning, so no read can land in a destination afterwards.
int dd_read_batch(dd_reader *r, int n, int64_t timeout_ns) {
	dd_result *res = &r->res;
	struct fi_cq_entry comp[64];
	int64_t t = dd_now();
	const int64_t t0 = t;
	int64_t deadline = t + timeout_ns;
	int64_t last_done = t;
	int64_t sleep_ns = 20000;
	int busy = 0;
	int next = 0, inflight = 0, nfree = 0;
	dd_result_reset(res);
	if (!r->ep) { res->stage = DD_NOEP; return -1; }
	dd_active_enter(r);
	for (int i = 0; i < r->window; i++) { r->free_slots[nfree++] = r->window - 1 - i; r->slot_op[i] = -1; }

	while (next < n || inflight > 0) {
		while (next < n && inflight < r->window) {
			int slot = r->free_slots[--nfree];
			dd_op *op = &r->ops[next];
			r->slot_op[slot] = next;
			r->wd_op = next; // named if this call never returns
			ssize_t rc = fi_read(r->ep, op->dst, op->len, op->desc, r->peers[op->peer], op->addr, op->key, &r->ctx[slot]);
			int64_t t2 = dd_now();
			res->post_ns += t2 - t;
			t = t2;
			if (rc == 0) { next++; inflight++; continue; }
			r->slot_op[slot] = -1;
			r->free_slots[nfree++] = slot;
			if (rc == -FI_EAGAIN) break;
			res->failed_op = next; res->err = (int)-rc; res->stage = DD_POST;
			goto fail;
		}
		if (inflight == 0 && next >= n) break;

		ssize_t got = dd_cq_poll(r, comp, res, &t);
		if (got > 0) {
			for (ssize_t i = 0; i < got; i++) {
				int slot = (int)((struct fi_context2 *)comp[i].op_context - r->ctx);
				if (slot < 0 || slot >= r->window || r->slot_op[slot] < 0) continue;
				r->ops[r->slot_op[slot]].done = 1;
				r->ops[r->slot_op[slot]].done_t = (uint32_t)((t - t0) >> 4);
				r->slot_op[slot] = -1;
				r->free_slots[nfree++] = slot;
				inflight--;
				res->done++;
			}
			last_done = t;
			sleep_ns = 20000;
		} else if (got == -FI_EAVAIL) {
			struct fi_cq_err_entry e;
			ssize_t rr = dd_cq_readerr(r, &e);
			if (rr > 0 || rr == -FI_EAGAIN) {
				int slot = e.op_context ? (int)((struct fi_context2 *)e.op_context - r->ctx) : -1;
				int valid = slot >= 0 && slot < r->window && r->slot_op[slot] >= 0;
				dd_record_cq_error(r, &e, res, valid ? slot : -1);
				// Some providers (shm) report errors without the op's
				// context: blame the oldest read still in flight.
				if (!valid) { res->failed_op = dd_oldest(r, next, n); res->guessed = 1; }
				if (valid) inflight--;
				goto fail;
			}
			dd_set_fail(res, DD_CQREAD, (int)(rr < 0 ? -rr : FI_EIO), dd_oldest(r, next, n));
			goto fail;
		} else if (got != -FI_EAGAIN) {
			dd_set_fail(res, DD_CQREAD, (int)-got, dd_oldest(r, next, n));
			goto fail;
		}
		if (t >= deadline && (inflight > 0 || next < n)) {
			dd_set_fail(res, DD_TIMEOUT, FI_ETIMEDOUT, dd_oldest(r, next, n));
			goto fail;
		}
		if (got <= 0) t = dd_reader_wait(r, t, last_done, deadline, &sleep_ns, &busy, &res->wait_ns);
	}
	dd_active_leave(r);
	return 0;
fail:
	return dd_batch_fail(r, res, inflight);
}

// dd_baseline is the plain C reference loop used by BenchmarkReadBaselineC:
// n reads of len bytes at base+offs[i] into dst+(i%slots)*len with at most
// window in flight, spinning on the CQ. Returns elapsed ns, or -errno.
int64_t dd_baseline(dd_reader *r, uint32_t peer, char *dst, uint64_t len, int slots,
		const uint64_t *offs, int n, int window, uint64_t base, uint64_t key, int64_t timeout_ns) {
	struct fi_cq_entry comp[64];
	struct fi_context2 *ctx = calloc(window, sizeof *ctx);
	if (!ctx) return -FI_ENOMEM;
	fi_addr_t fa = r->peers[peer];
	int64_t t0 = dd_now();
	int posted = 0, done = 0;
	int64_t rc = 0;
	while (done < n) {
		while (posted < n && posted - done < window) {
			ssize_t prc = fi_read(r->ep, dst + (uint64_t)(posted % slots) * len, len, NULL, fa,
				base + offs[posted], key, &ctx[posted % window]);
			if (prc == -FI_EAGAIN) break;
			if (prc) { rc = prc; goto fail; }
			posted++;
		}
		ssize_t got = fi_cq_read(r->cq, comp, 64);
		if (got > 0) done += (int)got;
		else if (got != -FI_EAGAIN) { rc = got == -FI_EAVAIL ? -FI_EIO : got; goto fail; }
		else if (dd_now() - t0 > timeout_ns) { rc = -FI_ETIMEDOUT; goto fail; }
	}
	int64_t el = dd_now() - t0;
	free(ctx);
	return el;
fail:
	// Cancel what is in flight before ctx is freed and dst unpinned.
	dd_reader_teardown(r);
	free(ctx);
	return rc;
}

int dd_active_readers(void) { return atomic_load(&dd_active); }
int dd_reader_waitfd(dd_reader *r) { return r->waitfd; }
