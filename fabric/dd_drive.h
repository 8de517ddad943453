// dd_drive.h: the one batch loop of a reader. It posts what a protocol has
// ready, polls the CQ, hands each completion to the protocol, turns CQ
// errors and the deadline into the batch's result, and spins or sleeps in
// between (dd_reader_wait). Its two protocols are the one-sided reads
// (dd_reader.c) and the gather client (dd_gather_client.c).
//
// dd_drive is static inline and each protocol passes a constant dd_proto:
// the compiler inlines the protocol's functions into its own copy of the
// loop, so the loop costs what the two hand-written loops it replaces did.
// The helpers it calls live in dd_drive.c.
// Part of package fabric (compiled by cgo); see dd.h.

#ifndef DD_DRIVE_H
#define DD_DRIVE_H

#include "dd.h"

// dd_proto is a batch protocol over the reader's endpoint. st is its state.
typedef struct dd_proto {
	// busy: work is posted, or still to post.
	int (*busy)(void *st);
	// post posts what it can (stopping at -FI_EAGAIN), adding its time to
	// res->post_ns through *t; -1 when a post failed (res filled).
	int (*post)(dd_reader *r, void *st, int64_t *t, int64_t deadline);
	// complete takes one completion (its op_context) at time *t (t0: the
	// batch's start); -1 when the batch failed (res filled).
	int (*complete)(dd_reader *r, void *st, void *ctx, int64_t *t, int64_t t0);
	// blame names the op of a CQ error entry's context (NULL or unknown:
	// the oldest op in flight, res->guessed set) in res->failed_op.
	void (*blame)(dd_reader *r, void *st, void *ctx);
	// oldest: the oldest op in flight, else the next to post.
	int (*oldest)(dd_reader *r, void *st);
	// inflight: how many ops or rounds are outstanding.
	int (*inflight)(void *st);
} dd_proto;

// dd_drive runs a batch of protocol p until it is done (0), failed, past
// timeout_ns, or waiting on a rank declared dead (dd_dead_op) (-1; the
// endpoint is torn down, see dd_batch_fail).
static inline __attribute__((always_inline)) int dd_drive(dd_reader *r, const dd_proto *p, void *st, int64_t timeout_ns) {
	dd_result *res = &r->res;
	struct fi_cq_entry comp[64];
	int64_t t = dd_now();
	const int64_t t0 = t;
	int64_t deadline = t + timeout_ns;
	int64_t last_done = t;
	int64_t sleep_ns = 20000;
	uint64_t dead_seen = 0;
	int busy = 0;
	dd_active_enter(r);
	int dead = dd_dead_op(r, &dead_seen); // an op for a rank already dead: fail before posting
	if (dead >= 0) {
		dd_set_fail(res, DD_PEERDEAD, FI_ECONNABORTED, dead);
		goto fail;
	}
	while (p->busy(st)) {
		if (p->post(r, st, &t, deadline)) goto fail;
		if (!p->busy(st)) break;

		ssize_t got = dd_cq_poll(r, comp, res, &t);
		if (got > 0) {
			for (ssize_t i = 0; i < got; i++)
				if (p->complete(r, st, comp[i].op_context, &t, t0)) goto fail;
			last_done = t;
			sleep_ns = 20000;
		} else if (got == -FI_EAVAIL) {
			struct fi_cq_err_entry e;
			ssize_t rr = dd_cq_readerr(r, &e);
			if (rr > 0 || rr == -FI_EAGAIN) {
				dd_record_cq_error(r, &e, res);
				p->blame(r, st, e.op_context);
				goto fail;
			}
			dd_set_fail(res, DD_CQREAD, (int)(rr < 0 ? -rr : FI_EIO), p->oldest(r, st));
			goto fail;
		} else if (got != -FI_EAGAIN) {
			dd_set_fail(res, DD_CQREAD, (int)-got, p->oldest(r, st));
			goto fail;
		}
		if (t >= deadline && p->busy(st)) {
			dd_set_fail(res, DD_TIMEOUT, FI_ETIMEDOUT, p->oldest(r, st));
			goto fail;
		}
		if (got <= 0) {
			dead = dd_dead_op(r, &dead_seen);
			if (dead >= 0) {
				dd_set_fail(res, DD_PEERDEAD, FI_ECONNABORTED, dead);
				goto fail;
			}
			t = dd_reader_wait(r, t, last_done, deadline, &sleep_ns, &busy, &res->wait_ns);
		}
	}
	dd_active_leave(r);
	return 0;
fail:
	return dd_batch_fail(r, res, p->inflight(st));
}

#endif
