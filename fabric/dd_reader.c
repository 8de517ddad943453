// dd_reader.c: Reader endpoints, the batched fi_read loop, and the plain C
// reference loop of the benchmarks.
// Part of package fabric (compiled by cgo); see dd.h.

#include "dd_drive.h"

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
	r->peer_rank = calloc(maxpeers, sizeof *r->peer_rank);
	if (!r->peers || !r->ops || !r->ctx || !r->slot_op || !r->free_slots || !r->peer_rank) {
		free(r->peers); free(r->ops); free(r->ctx); free(r->slot_op); free(r->free_slots); free(r->peer_rank); free(r);
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

void dd_reader_free(dd_reader *r) {
	dd_wd_unregister(r);
	dd_reader_teardown(r);
	for (int i = 0; i < r->ngslots; i++) { free(r->gslots[i].req); free(r->gslots[i].bounce); }
	free(r->gslots); free(r->gorder); free(r->gcount);
	free(r->peers); free(r->ops); free(r->ctx); free(r->slot_op); free(r->free_slots); free(r->peer_rank);
	free(r);
}

// dd_av_insert_n inserts n addresses of addrlen bytes each, packed at
// addrs, as peers idx0.. (ranks[i] their ranks) in one fi_av_insert. On
// failure the AV may hold some of them (n > 1): the caller tears the
// endpoint down.
int dd_av_insert_n(dd_reader *r, int idx0, int n, const int32_t *ranks, const void *addrs) {
	if (idx0 < 0 || n <= 0 || idx0 + n > r->maxpeers) return -FI_EINVAL;
	int rc = fi_av_insert(r->av, addrs, (size_t)n, r->peers + idx0, 0, NULL);
	if (rc != n) return rc < 0 ? rc : -FI_EINVAL;
	for (int i = 0; i < n; i++) r->peer_rank[idx0 + i] = ranks[i];
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

// The one-sided reads as a protocol of dd_drive: r->ops[0..n), at most
// r->window in flight, each in a slot whose context is r->ctx[slot].
typedef struct {
	int n, next, inflight, nfree;
} dd_rb;

static int rb_busy(void *st) {
	dd_rb *b = st;
	return b->next < b->n || b->inflight > 0;
}

// rb_post posts reads while slots are free; -FI_EAGAIN leaves the rest for
// after the next CQ poll (which also progresses).
static int rb_post(dd_reader *r, void *st, int64_t *t, int64_t deadline) {
	(void)deadline;
	dd_rb *b = st;
	dd_result *res = &r->res;
	while (b->next < b->n && b->inflight < r->window) {
		int slot = r->free_slots[--b->nfree];
		dd_op *op = &r->ops[b->next];
		r->slot_op[slot] = b->next;
		r->wd_op = b->next; // named if this call never returns
		ssize_t rc = fi_read(r->ep, op->dst, op->len, op->desc, r->peers[op->peer], op->addr, op->key, &r->ctx[slot]);
		int64_t t2 = dd_now();
		res->post_ns += t2 - *t;
		*t = t2;
		if (rc == 0) { b->next++; b->inflight++; continue; }
		r->slot_op[slot] = -1;
		r->free_slots[b->nfree++] = slot;
		if (rc == -FI_EAGAIN) break;
		res->failed_op = b->next; res->err = (int)-rc; res->stage = DD_POST;
		return -1;
	}
	return 0;
}

// rb_slot is the slot of a completion's context, or -1.
static int rb_slot(dd_reader *r, void *ctx) {
	if (!ctx) return -1;
	int slot = (int)((struct fi_context2 *)ctx - r->ctx);
	return slot >= 0 && slot < r->window && r->slot_op[slot] >= 0 ? slot : -1;
}

static int rb_complete(dd_reader *r, void *st, void *ctx, int64_t *t, int64_t t0) {
	dd_rb *b = st;
	int slot = rb_slot(r, ctx);
	if (slot < 0) return 0;
	r->ops[r->slot_op[slot]].done = 1;
	r->ops[r->slot_op[slot]].done_t = (uint32_t)((*t - t0) >> 4);
	r->slot_op[slot] = -1;
	r->free_slots[b->nfree++] = slot;
	b->inflight--;
	r->res.done++;
	return 0;
}

static int rb_oldest(dd_reader *r, void *st) {
	dd_rb *b = st;
	return dd_oldest(r, b->next, b->n);
}

// rb_blame: some providers (shm) report errors without the op's context:
// then the oldest read still in flight is blamed.
static void rb_blame(dd_reader *r, void *st, void *ctx) {
	dd_rb *b = st;
	int slot = rb_slot(r, ctx);
	if (slot >= 0) {
		r->res.failed_op = r->slot_op[slot];
		b->inflight--;
		return;
	}
	r->res.failed_op = rb_oldest(r, st);
	r->res.guessed = 1;
}

static int rb_inflight(void *st) { return ((dd_rb *)st)->inflight; }

static const dd_proto dd_read_proto = { rb_busy, rb_post, rb_complete, rb_blame, rb_oldest, rb_inflight };

// dd_read_batch posts r->ops[0..n) with at most r->window in flight and
// waits for all of them (dd_drive). -FI_EAGAIN from fi_read drains the CQ
// (which also progresses) before retrying. The first error stops posting;
// what is in flight is still drained. At the deadline the endpoint is torn
// down before returning, so no read can land in a destination afterwards.
int dd_read_batch(dd_reader *r, int n, int64_t timeout_ns) {
	dd_result_reset(&r->res);
	if (!r->ep) { r->res.stage = DD_NOEP; return -1; }
	dd_rb b = { .n = n };
	r->batch_n = n;
	for (int i = 0; i < r->window; i++) { r->free_slots[b.nfree++] = r->window - 1 - i; r->slot_op[i] = -1; }
	return dd_drive(r, &dd_read_proto, &b, timeout_ns);
}

typedef struct { int n; int64_t timeout_ns; } dd_rb_args;

static int rb_call(dd_reader *r, void *arg) {
	dd_rb_args *a = arg;
	return dd_read_batch(r, a->n, a->timeout_ns);
}

// dd_guarded_read_batch is dd_read_batch under the watchdog (dd_wd_guard).
int dd_guarded_read_batch(dd_reader *r, int n, int64_t timeout_ns) {
	dd_rb_args a = { n, timeout_ns };
	return dd_wd_guard(r, timeout_ns, rb_call, &a);
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

int dd_reader_waitfd(dd_reader *r) { return r->waitfd; }
