// dd_gather_server.c: The gather service: the target's half of the gather protocol
// (validates requests against the exports and answers them).
// Part of package fabric (compiled by cgo); see dd.h.

#include "dd.h"

int dd_gsrv_post_recv(dd_server *s, int i) {
	dd_gsrv *g = s->g;
	ssize_t rc = fi_trecv(s->ep, g->rbuf[i], DD_GREQ_MAX, NULL, FI_ADDR_UNSPEC, DD_GREQ_TAG, 0, &g->rctx[i]);
	g->rstate[i] = rc == 0 ? DD_R_POSTED : DD_R_REPOST;
	return (int)rc;
}

int dd_gsrv_start(dd_server *s, size_t av_count) {
	dd_gsrv *g = calloc(1, sizeof *g);
	if (!g) return -FI_ENOMEM;
	s->g = g;
	g->cappeers = av_count > 0 && av_count < 4096 ? (int)av_count : 1024;
	g->peers = calloc(g->cappeers, sizeof *g->peers);
	if (!g->peers) return -FI_ENOMEM;
	for (int i = 0; i < DD_GSRV_RECVS; i++) {
		g->rbuf[i] = malloc(DD_GREQ_MAX);
		if (!g->rbuf[i]) return -FI_ENOMEM;
		int rc = dd_gsrv_post_recv(s, i);
		if (rc && rc != -FI_EAGAIN) return rc;
	}
	return 0;
}

void dd_gsrv_free(dd_server *s) {
	dd_gsrv *g = s->g;
	if (!g) return;
	for (int i = 0; i < DD_GSRV_RECVS; i++) free(g->rbuf[i]);
	for (int i = 0; i < DD_GSRV_SENDS; i++) free(g->sbuf[i]);
	free(g->ex); free(g->peers); free(g);
	s->g = NULL;
}

// Exports are added and removed under the server lock, the same lock the
// progress thread holds while it copies rows: once removal returns, no
// reply reads the region any more.
int dd_gsrv_add_export(dd_server *s, uint64_t key, uint64_t base, void *ptr, uint64_t size) {
	dd_gsrv *g = s->g;
	if (!g) return 0;
	if (g->nex == g->capex) {
		int nc = g->capex ? g->capex * 2 : 16;
		dd_gexport *n = realloc(g->ex, nc * sizeof *n);
		if (!n) return -FI_ENOMEM;
		g->ex = n; g->capex = nc;
	}
	g->ex[g->nex++] = (dd_gexport){ key, base, size, ptr };
	return 0;
}

void dd_gsrv_del_export(dd_server *s, uint64_t key) {
	dd_gsrv *g = s->g;
	if (!g) return;
	for (int i = 0; i < g->nex; i++)
		if (g->ex[i].key == key) { g->ex[i] = g->ex[--g->nex]; return; }
}

// dd_gsrv_peer finds or inserts the reader's endpoint name; when the cache
// is full an idle entry is evicted (fi_av_remove).
int dd_gsrv_peer(dd_server *s, const char *name, uint32_t len) {
	dd_gsrv *g = s->g;
	for (int i = 0; i < g->npeers; i++)
		if (g->peers[i].used && g->peers[i].namelen == len && memcmp(g->peers[i].name, name, len) == 0) return i;
	int slot = -1;
	if (g->npeers < g->cappeers) slot = g->npeers++;
	else {
		for (int k = 0; k < g->cappeers && slot < 0; k++) {
			int i = (g->victim + k) % g->cappeers;
			if (g->peers[i].inflight == 0) slot = i;
		}
		if (slot < 0) return -1;
		g->victim = (slot + 1) % g->cappeers;
		fi_av_remove(s->av, &g->peers[slot].fa, 1, 0);
		g->peers[slot].used = 0;
	}
	fi_addr_t fa = FI_ADDR_UNSPEC;
	if (fi_av_insert(s->av, name, 1, &fa, 0, NULL) != 1) {
		if (slot == g->npeers - 1) g->npeers--;
		return -1;
	}
	dd_gpeer *p = &g->peers[slot];
	memcpy(p->name, name, len); p->namelen = len; p->fa = fa; p->inflight = 0; p->used = 1;
	return slot;
}

int dd_gsrv_post_send(dd_server *s, int k) {
	dd_gsrv *g = s->g;
	ssize_t rc = fi_tsend(s->ep, g->sbuf[k], g->slen[k], NULL, g->peers[g->speer[k]].fa, g->stag[k], &g->sctx[k]);
	if (rc == 0) { g->sstate[k] = DD_S_INFLIGHT; return 0; }
	if (rc == -FI_EAGAIN) { g->sstate[k] = DD_S_PENDING; return 0; }
	// The reader is unreachable: drop the reply; its deadline reports it.
	g->sstate[k] = DD_S_FREE;
	g->peers[g->speer[k]].inflight--;
	atomic_fetch_add(&s->errors, 1);
	return (int)rc;
}

// dd_gsrv_handle serves the request in receive buffer i with send buffer k.
// dd_greq_parse and dd_greq_check (dd_gcheck.c) validate it first: nothing
// outside the received bytes is read, and nothing outside an export copied.
void dd_gsrv_handle(dd_server *s, int i, int k) {
	dd_gsrv *g = s->g;
	dd_greq_view v;
	g->rstate[i] = DD_R_REPOST;
	int prc = dd_greq_parse(g->rbuf[i], g->rlen[i], g->namelen, s->gkey, &v);
	if (prc == DD_GREQ_STRANGER) {
		// Not the job's key: no reply, and its name never enters the AV.
		atomic_fetch_add(&g->strangers, 1);
		atomic_fetch_add(&dd_gather_strangers, 1);
		return;
	}
	if (prc != 0) {
		atomic_fetch_add(&g->rejected, 1); // not ours, or garbled: nobody to answer
		return;
	}
	int pi = dd_gsrv_peer(s, v.name, v.namelen);
	if (pi < 0) { atomic_fetch_add(&g->rejected, 1); return; }
	char text[DD_GTEXT];
	uint32_t bad = 0;
	uint64_t total = 0;
	int status = dd_greq_check(&v, g->ex, g->nex, DD_GMAX_BYTES, &total, &bad, text, sizeof text);
	size_t need = dd_grep_size(status, total, text);
	if (g->scap[k] < need) {
		char *nb = realloc(g->sbuf[k], need);
		if (!nb) {
			status = FI_ENOMEM; bad = 0;
			snprintf(text, sizeof text, "target out of memory for a %llu-byte reply", (unsigned long long)total);
			need = dd_grep_size(status, total, text);
			if (g->scap[k] < need) { atomic_fetch_add(&g->rejected, 1); return; }
		} else {
			g->sbuf[k] = nb; g->scap[k] = need;
		}
	}
	dd_grep_build(g->sbuf[k], &v, g->ex, g->nex, status, bad, total, text);
	atomic_fetch_add(status ? &g->rejected : &g->served, 1);
	g->slen[k] = need;
	g->speer[k] = pi;
	g->stag[k] = DD_GREP_BIT | v.h->id;
	g->peers[pi].inflight++;
	dd_gsrv_post_send(s, k);
}

// dd_gsrv_kick retries what could not be posted and serves ready requests
// while send buffers are free. It returns 1 when something is still stuck.
int dd_gsrv_kick(dd_server *s) {
	dd_gsrv *g = s->g;
	int stuck = 0;
	for (int k = 0; k < DD_GSRV_SENDS; k++)
		if (g->sstate[k] == DD_S_PENDING) { dd_gsrv_post_send(s, k); stuck |= g->sstate[k] == DD_S_PENDING; }
	for (int i = 0; i < DD_GSRV_RECVS; i++) {
		if (g->rstate[i] == DD_R_READY) {
			int k = 0;
			while (k < DD_GSRV_SENDS && g->sstate[k] != DD_S_FREE) k++;
			if (k == DD_GSRV_SENDS) continue; // wait for a send to complete
			dd_gsrv_handle(s, i, k);
		}
		if (g->rstate[i] == DD_R_REPOST) { dd_gsrv_post_recv(s, i); stuck |= g->rstate[i] == DD_R_REPOST; }
	}
	return stuck;
}

void dd_gsrv_complete(dd_server *s, void *ctx, size_t len) {
	dd_gsrv *g = s->g;
	for (int i = 0; i < DD_GSRV_RECVS; i++)
		if (ctx == &g->rctx[i]) { g->rstate[i] = DD_R_READY; g->rlen[i] = len; return; }
	for (int k = 0; k < DD_GSRV_SENDS; k++)
		if (ctx == &g->sctx[k] && g->sstate[k] == DD_S_INFLIGHT) {
			g->sstate[k] = DD_S_FREE;
			g->peers[g->speer[k]].inflight--;
			return;
		}
}

int dd_gsrv_progress(dd_server *s, struct fi_cq_tagged_entry *e, ssize_t n) {
	for (ssize_t i = 0; i < n; i++) dd_gsrv_complete(s, e[i].op_context, e[i].len);
	return dd_gsrv_kick(s);
}

int dd_gsrv_error(dd_server *s, struct fi_cq_err_entry *err) {
	dd_gsrv *g = s->g;
	for (int i = 0; i < DD_GSRV_RECVS; i++)
		if (err->op_context == &g->rctx[i]) { g->rstate[i] = DD_R_REPOST; return dd_gsrv_kick(s); } // e.g. truncated: drop it
	dd_gsrv_complete(s, err->op_context, 0); // a failed send frees its buffer
	return dd_gsrv_kick(s);
}

uint64_t dd_gsrv_served(dd_server *s) { return s->g ? atomic_load(&s->g->served) : 0; }
uint64_t dd_gsrv_rejected(dd_server *s) { return s->g ? atomic_load(&s->g->rejected) : 0; }
uint64_t dd_gsrv_strangers(dd_server *s) { return s->g ? atomic_load(&s->g->strangers) : 0; }

// dd_gather_strangers counts, process-wide, the gather requests every
// server of this process dropped for a wrong key (telemetry's
// gather_strangers).
atomic_ullong dd_gather_strangers;
uint64_t dd_gather_strangers_count(void) { return atomic_load(&dd_gather_strangers); }
