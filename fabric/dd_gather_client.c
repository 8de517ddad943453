// dd_gather_client.c: The reader's half of the gather protocol: requests, replies,
// copying rows out of the bounce buffer.
// Part of package fabric (compiled by cgo); see dd.h.

#include "dd_drive.h"

// dd_gather_prepare allocates the gather state once per reader: rounds
// slots with their request buffers, and the grouping arrays.
int dd_gather_prepare(dd_reader *r, int rounds) {
	if (!r->gorder) {
		r->gorder = calloc(r->cap, sizeof *r->gorder);
		r->gcount = calloc(r->maxpeers + 1, sizeof *r->gcount);
		if (!r->gorder || !r->gcount) return -FI_ENOMEM;
	}
	if (r->ngslots < rounds) {
		dd_gslot *n = realloc(r->gslots, rounds * sizeof *n);
		if (!n) return -FI_ENOMEM;
		r->gslots = n;
		for (int i = r->ngslots; i < rounds; i++) {
			memset(&n[i], 0, sizeof n[i]);
			n[i].req = malloc(DD_GREQ_MAX);
			if (!n[i].req) return -FI_ENOMEM;
			r->ngslots = i + 1;
		}
	}
	return 0;
}

int dd_gslot_of(dd_reader *r, void *ctx, int rounds, int *is_recv) {
	for (int i = 0; i < rounds; i++) {
		if (ctx == &r->gslots[i].sctx) { *is_recv = 0; return i; }
		if (ctx == &r->gslots[i].rctx) { *is_recv = 1; return i; }
	}
	return -1;
}

// dd_gather_oldest is the first op of the oldest round in flight.
int dd_gather_oldest(dd_reader *r, int rounds, int pos, int m) {
	uint64_t best = UINT64_MAX;
	int op = -1;
	for (int i = 0; i < rounds; i++)
		if (r->gslots[i].active && r->gslots[i].id < best) { best = r->gslots[i].id; op = r->gorder[r->gslots[i].first]; }
	if (op < 0 && m > 0) op = r->gorder[pos < m ? pos : m - 1];
	return op;
}

// dd_gather_iov sets up round g (ops gorder[pos..pos+cnt), bytes in all) to
// receive its reply straight into the destinations when they are at most
// r->giov-1 contiguous runs in request order (a packed batch: the engine's
// GetRanges, or a GetBatch of one peer's rows) and the first run can hold an
// error reply's text: iov[0] takes the header, the rest the rows, and no
// copy follows. Returns 1 when it did, 0 when the reply goes to the bounce
// buffer.
static int dd_gather_iov(dd_reader *r, dd_gslot *g, int pos, int cnt, uint64_t bytes) {
	if (r->giov < 2 || bytes < DD_GTEXT) return 0;
	int k = 0;
	g->iov[0].iov_base = &g->hdr;
	g->iov[0].iov_len = sizeof g->hdr;
	for (int i = 0; i < cnt; i++) {
		dd_op *op = &r->ops[r->gorder[pos + i]];
		if (k > 0 && (char *)g->iov[k].iov_base + g->iov[k].iov_len == (char *)op->dst) {
			g->iov[k].iov_len += op->len;
			continue;
		}
		if (++k == r->giov) return 0;
		g->iov[k].iov_base = op->dst;
		g->iov[k].iov_len = op->len;
	}
	if (g->iov[1].iov_len < DD_GTEXT) return 0;
	return k + 1;
}

// dd_gather_round_cap is the byte cap of a batch's rounds: cap, or less
// when the batch's total bytes would fill fewer than rounds rounds, so that
// they spread over all the rounds in flight (none below DD_GPIPE_MIN). A
// target's progress thread then packs one round while the one before is on
// the wire, instead of packing the whole batch before the first byte moves:
// 128 records of 1-16 KB (1.1 MB from one peer, tcp on lo) took 6.4 us per
// record in one 2 MiB round and 4.9-5.2 in rounds of 256-512 KiB.
#define DD_GPIPE_MIN (256u << 10)
uint64_t dd_gather_round_cap(uint64_t total, uint64_t cap, int rounds) {
	if (rounds < 2) return cap;
	uint64_t split = (total + (uint64_t)rounds - 1) / (uint64_t)rounds;
	if (split < DD_GPIPE_MIN) split = DD_GPIPE_MIN;
	return split < cap ? split : cap;
}

// The gather client as a protocol of dd_drive: rounds of one peer's ops
// (gorder[first..first+count)), each a tagged request and its reply, up to
// rounds in flight.
typedef struct {
	int rounds, active, pos, m;
	uint64_t cap;
} dd_gc;

static int gc_busy(void *st) {
	dd_gc *g = st;
	return g->pos < g->m || g->active > 0;
}

// gc_post posts new rounds while slots are free: the reply's receive
// first, then the request.
static int gc_post(dd_reader *r, void *st, int64_t *t, int64_t deadline) {
	dd_gc *gc = st;
	dd_result *res = &r->res;
	for (int si = 0; si < gc->rounds && gc->pos < gc->m; si++) {
		dd_gslot *g = &r->gslots[si];
		if (g->active) continue;
		int pos = gc->pos;
		uint32_t peer = r->ops[r->gorder[pos]].peer;
		uint64_t bytes = 0;
		int cnt = 0;
		while (pos + cnt < gc->m && cnt < DD_GMAX_ENT) {
			dd_op *op = &r->ops[r->gorder[pos + cnt]];
			if (op->peer != peer || (cnt > 0 && bytes + op->len > gc->cap)) break;
			bytes += op->len;
			cnt++;
		}
		int niov = dd_gather_iov(r, g, pos, cnt, bytes);
		size_t need = sizeof(dd_grep_hdr) + (bytes > DD_GTEXT ? bytes : DD_GTEXT);
		if (!niov && g->bcap < need) {
			char *nb = realloc(g->bounce, need);
			if (!nb) { res->stage = DD_NOMEM; res->err = FI_ENOMEM; res->failed_op = r->gorder[pos]; return -1; }
			g->bounce = nb; g->bcap = need;
		}
		dd_greq_hdr *h = (dd_greq_hdr *)g->req;
		h->magic = DD_GMAGIC_REQ; h->nent = cnt; h->id = ++r->gnext_id & 0x0000ffffffffffffULL;
		h->namelen = (uint32_t)r->namelen; h->pad = 0; h->total = bytes; h->gkey = r->gkey;
		memcpy(g->req + sizeof *h, r->name, r->namelen);
		dd_gent *ent = (dd_gent *)(g->req + sizeof *h + DD_ALIGN8(r->namelen));
		for (int k = 0; k < cnt; k++) {
			dd_op *op = &r->ops[r->gorder[pos + k]];
			ent[k].key = op->key; ent[k].addr = op->addr; ent[k].len = op->len;
		}
		size_t reqlen = sizeof *h + DD_ALIGN8(r->namelen) + cnt * sizeof(dd_gent);
		r->wd_op = r->gorder[pos]; // named if this call never returns
		ssize_t rc = niov ? fi_trecvv(r->ep, g->iov, NULL, niov, FI_ADDR_UNSPEC, DD_GREP_BIT | h->id, 0, &g->rctx)
			: fi_trecv(r->ep, g->bounce, need, NULL, FI_ADDR_UNSPEC, DD_GREP_BIT | h->id, 0, &g->rctx);
		if (rc == -FI_EAGAIN) break;
		if (rc) { res->failed_op = r->gorder[pos]; res->err = (int)-rc; res->stage = DD_POST; strcpy(res->text, "fi_trecv"); return -1; }
		g->active = 1; g->sent = 0; g->recvd = 0; g->id = h->id; g->bytes = bytes; g->direct = niov > 0;
		g->first = pos; g->count = cnt; g->peer = peer;
		gc->active++;
		gc->pos += cnt;
		for (;;) {
			rc = fi_tsend(r->ep, g->req, reqlen, NULL, r->peers[peer], DD_GREQ_TAG, &g->sctx);
			if (rc != -FI_EAGAIN) break;
			fi_cq_read(r->cq, NULL, 0); // progress, then retry
			if (dd_now() >= deadline) break;
		}
		int64_t t2 = dd_now();
		res->post_ns += t2 - *t;
		*t = t2;
		if (rc) {
			res->failed_op = r->gorder[g->first]; res->err = rc == -FI_EAGAIN ? FI_ETIMEDOUT : (int)-rc;
			res->stage = rc == -FI_EAGAIN ? DD_TIMEOUT : DD_POST;
			if (rc != -FI_EAGAIN) strcpy(res->text, "fi_tsend");
			return -1;
		}
	}
	return 0;
}

// dd_grep_take checks the reply to a round of count ops, ops[order[0..count)],
// asked with id for bytes in all: rh is its header and src what follows it
// (at least max(bytes, DD_GTEXT) bytes). A good reply's rows are copied from
// src to the ops' destinations (unless direct: they are in place), each op
// marked done at done_t. Otherwise no destination is written, and res says
// why: DD_REJECT (the target's status, the entry it named and its text) or
// DD_BADREPLY. Returns 0 or -1. Pure: no libfabric call.
int dd_grep_take(const dd_grep_hdr *rh, const char *src, uint64_t id, uint64_t bytes,
		dd_op *ops, const int32_t *order, int count, int direct, uint32_t done_t, dd_result *res) {
	if (rh->magic != DD_GMAGIC_REP || rh->id != id) {
		res->stage = DD_BADREPLY; res->err = FI_EIO; res->failed_op = order[0];
		snprintf(res->text, sizeof res->text, "malformed reply (magic %#x, id %llu, want %llu)",
			rh->magic, (unsigned long long)rh->id, (unsigned long long)id);
		return -1;
	}
	if (rh->status) {
		res->stage = DD_REJECT; res->err = rh->status;
		uint32_t e = rh->entry < (uint32_t)count ? rh->entry : 0;
		res->failed_op = order[e];
		size_t tl = rh->textlen < DD_GTEXT ? rh->textlen : DD_GTEXT; // both buffers hold DD_GTEXT
		memcpy(res->text, src, tl);
		res->text[tl] = 0;
		return -1;
	}
	if (rh->bytes != bytes) {
		res->stage = DD_BADREPLY; res->err = FI_EIO; res->failed_op = order[0];
		snprintf(res->text, sizeof res->text, "reply of %llu bytes, want %llu",
			(unsigned long long)rh->bytes, (unsigned long long)bytes);
		return -1;
	}
	for (int k = 0; k < count; k++) {
		dd_op *op = &ops[order[k]];
		if (!direct) memcpy(op->dst, src, op->len);
		op->done = 1;
		op->done_t = done_t;
		src += op->len;
	}
	res->done += count;
	return 0;
}

// gc_reply checks round g's reply and copies its rows out of the bounce
// buffer (a direct reply is in place already).
static int gc_reply(dd_reader *r, dd_gslot *g, int64_t *t, int64_t t0) {
	const dd_grep_hdr *rh = g->direct ? &g->hdr : (const dd_grep_hdr *)g->bounce;
	const char *src = g->direct ? (const char *)g->iov[1].iov_base : g->bounce + sizeof *rh;
	if (dd_grep_take(rh, src, g->id, g->bytes, r->ops, r->gorder + g->first, g->count, g->direct,
			(uint32_t)((*t - t0) >> 4), &r->res))
		return -1;
	int64_t t3 = dd_now();
	r->res.copy_ns += t3 - *t;
	*t = t3;
	return 0;
}

// gc_complete: a round ends when both its request's send and its reply
// have completed (the send's completion may come later).
static int gc_complete(dd_reader *r, void *st, void *ctx, int64_t *t, int64_t t0) {
	dd_gc *gc = st;
	int is_recv = 0;
	int si = dd_gslot_of(r, ctx, gc->rounds, &is_recv);
	if (si < 0 || !r->gslots[si].active) return 0;
	dd_gslot *g = &r->gslots[si];
	if (is_recv) g->recvd = 1; else g->sent = 1;
	if (!g->recvd) return 0;
	if (g->recvd == 1) {
		g->recvd = 2;
		if (gc_reply(r, g, t, t0)) return -1;
	}
	if (g->sent) { g->active = 0; gc->active--; }
	return 0;
}

static int gc_oldest(dd_reader *r, void *st) {
	dd_gc *gc = st;
	return dd_gather_oldest(r, gc->rounds, gc->pos, gc->m);
}

static void gc_blame(dd_reader *r, void *st, void *ctx) {
	dd_gc *gc = st;
	int is_recv = 0;
	int si = ctx ? dd_gslot_of(r, ctx, gc->rounds, &is_recv) : -1;
	if (si >= 0 && r->gslots[si].active) { r->res.failed_op = r->gorder[r->gslots[si].first]; return; }
	r->res.failed_op = gc_oldest(r, st);
	r->res.guessed = 1;
}

static int gc_inflight(void *st) { return ((dd_gc *)st)->active; }

static const dd_proto dd_gather_proto = { gc_busy, gc_post, gc_complete, gc_blame, gc_oldest, gc_inflight };

// dd_gather reads r->ops[0..n) (those without skip) with one tagged request
// per round: a round holds ops of one peer, at most DD_GMAX_ENT of them and
// cap bytes (less for a large batch: dd_gather_round_cap); up to rounds are
// in flight (dd_drive). Rows are copied from the reply's bounce buffer to
// their destinations when it arrives. Failures and the deadline tear the
// endpoint down, like dd_read_batch.
int dd_gather(dd_reader *r, int n, uint64_t cap, int rounds, int64_t timeout_ns) {
	dd_result *res = &r->res;
	dd_result_reset(res);
	res->copy_ns = 0;
	if (!r->ep) { res->stage = DD_NOEP; return -1; }
	int prc = dd_gather_prepare(r, rounds);
	if (prc) { res->stage = DD_NOMEM; res->err = -prc; res->failed_op = 0; return -1; }

	// Group the ops by peer (counting sort, stable).
	memset(r->gcount, 0, (r->maxpeers + 1) * sizeof *r->gcount);
	for (int i = 0; i < n; i++) if (!r->ops[i].skip) r->gcount[r->ops[i].peer + 1]++;
	for (int p = 0; p < r->maxpeers; p++) r->gcount[p + 1] += r->gcount[p];
	for (int i = 0; i < n; i++) if (!r->ops[i].skip) r->gorder[r->gcount[r->ops[i].peer]++] = i;
	dd_gc gc = { .rounds = rounds };
	r->batch_n = n;
	uint64_t total = 0;
	for (int i = 0; i < n; i++) if (!r->ops[i].skip) { gc.m++; total += r->ops[i].len; }
	for (int i = 0; i < rounds; i++) r->gslots[i].active = 0;
	gc.cap = dd_gather_round_cap(total, cap, rounds);
	if (dd_drive(r, &dd_gather_proto, &gc, timeout_ns) == 0) return 0;
	for (int i = 0; i < rounds; i++) r->gslots[i].active = 0;
	return -1;
}

typedef struct { int n; uint64_t cap; int rounds; int64_t timeout_ns; } dd_gc_args;

static int gc_call(dd_reader *r, void *arg) {
	dd_gc_args *a = arg;
	return dd_gather(r, a->n, a->cap, a->rounds, a->timeout_ns);
}

// dd_guarded_gather is dd_gather under the watchdog (dd_wd_guard).
int dd_guarded_gather(dd_reader *r, int n, uint64_t cap, int rounds, int64_t timeout_ns) {
	dd_gc_args a = { n, cap, rounds, timeout_ns };
	return dd_wd_guard(r, timeout_ns, gc_call, &a);
}
