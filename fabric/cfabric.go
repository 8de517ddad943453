package fabric

// This is the only file of the package that imports "C". The preamble holds
// the C side: provider discovery, the server endpoint and its progress loop,
// reader endpoints and the batched read loop (posting and CQ draining stay in
// C so that a batch costs one cgo call). C never keeps a Go pointer after the
// call that received it returns: destinations are either off-heap or pinned
// by the Go caller for the duration of the call.

/*
#cgo LDFLAGS: -lfabric
#define _GNU_SOURCE
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <poll.h>
#include <time.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <errno.h>
#include <stdatomic.h>

static inline int64_t dd_now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// dd_thread_cpu is this thread's CPU time (ns): unlike the monotonic clock
// it does not advance while the thread is descheduled.
static inline int64_t dd_thread_cpu(void) {
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void dd_sleep_ns(int64_t ns) {
	struct timespec ts = { ns / 1000000000LL, ns % 1000000000LL };
	nanosleep(&ts, NULL);
}

#define DD_CAPS (FI_RMA | FI_READ | FI_REMOTE_READ | FI_MSG | FI_TAGGED)
#define DD_MR_MODES (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT)

// dd_getinfo lists every provider/domain that can do one-sided reads on a
// reliable datagram endpoint with the memory-registration modes we handle.
// Data progress is left unspecified on purpose (asking for AUTO drops shm).
static int dd_getinfo(struct fi_info **out) {
	struct fi_info *hints = fi_allocinfo();
	if (!hints) return -FI_ENOMEM;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = DD_CAPS;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->mr_mode = DD_MR_MODES;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	int rc = fi_getinfo(FI_VERSION(1, 11), NULL, NULL, 0, hints, out);
	fi_freeinfo(hints);
	return rc;
}

typedef struct dd_infodesc {
	const char *prov;
	const char *domain;
	const char *fabric;
	uint64_t mr_mode;
	uint64_t mode;
	uint64_t caps;
	int threading;
	int data_progress;
	int control_progress;
	int av_type;
	uint64_t tx_size;
	uint64_t rx_size;
	uint64_t ep_cnt;
	uint64_t cq_cnt;
	uint64_t max_msg_size;
	uint64_t mr_key_size;
	uint32_t addr_format;
} dd_infodesc;

static void dd_describe(struct fi_info *i, dd_infodesc *d) {
	memset(d, 0, sizeof *d);
	d->prov = i->fabric_attr && i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "";
	d->fabric = i->fabric_attr && i->fabric_attr->name ? i->fabric_attr->name : "";
	d->domain = i->domain_attr && i->domain_attr->name ? i->domain_attr->name : "";
	d->mode = i->mode;
	d->caps = i->caps;
	d->addr_format = i->addr_format;
	if (i->domain_attr) {
		d->mr_mode = (uint64_t)i->domain_attr->mr_mode;
		d->threading = i->domain_attr->threading;
		d->data_progress = i->domain_attr->data_progress;
		d->control_progress = i->domain_attr->control_progress;
		d->av_type = i->domain_attr->av_type;
		d->ep_cnt = i->domain_attr->ep_cnt;
		d->cq_cnt = i->domain_attr->cq_cnt;
		d->mr_key_size = i->domain_attr->mr_key_size;
	}
	if (i->tx_attr) d->tx_size = i->tx_attr->size;
	if (i->rx_attr) d->rx_size = i->rx_attr->size;
	if (i->ep_attr) d->max_msg_size = i->ep_attr->max_msg_size;
}

static struct fi_info *dd_info_next(struct fi_info *i) { return i->next; }

static struct fi_info *dd_dupinfo(struct fi_info *i) {
	struct fi_info *next = i->next;
	i->next = NULL;
	struct fi_info *d = fi_dupinfo(i);
	i->next = next;
	return d;
}

// ---- fabric + domain ------------------------------------------------------

static int dd_open_fabric(struct fi_info *info, struct fid_fabric **fab) {
	return fi_fabric(info->fabric_attr, fab, NULL);
}

static int dd_open_domain(struct fid_fabric *fab, struct fi_info *info, struct fid_domain **dom) {
	return fi_domain(fab, info, dom, NULL);
}

static int dd_close(struct fid *f) { return f ? fi_close(f) : 0; }
static int dd_close_fabric(struct fid_fabric *f) { return f ? fi_close(&f->fid) : 0; }
static int dd_close_domain(struct fid_domain *d) { return d ? fi_close(&d->fid) : 0; }
static int dd_close_mr(struct fid_mr *m) { return m ? fi_close(&m->fid) : 0; }

// dd_endpoint opens an endpoint with its own CQ and AV. wait_fd asks for a
// CQ with an FI_WAIT_FD wait object; if the provider refuses (shm: -38) the
// CQ is opened without one and *got_fd is left 0.
static int dd_endpoint(struct fid_domain *dom, struct fi_info *info, size_t cq_size, size_t av_count,
		int wait_fd, struct fid_ep **ep, struct fid_cq **cq, struct fid_av **av, int *got_fd, const char **stage) {
	struct fi_cq_attr cqa;
	struct fi_av_attr ava;
	int rc;
	*ep = NULL; *cq = NULL; *av = NULL; *got_fd = 0;
	memset(&cqa, 0, sizeof cqa);
	cqa.format = FI_CQ_FORMAT_CONTEXT;
	cqa.size = cq_size;
	cqa.wait_obj = FI_WAIT_NONE;
	rc = -FI_ENOSYS;
	if (wait_fd) {
		cqa.wait_obj = FI_WAIT_FD;
		rc = fi_cq_open(dom, &cqa, cq, NULL);
		if (rc == 0) *got_fd = 1;
	}
	if (rc != 0) {
		cqa.wait_obj = FI_WAIT_NONE;
		*stage = "fi_cq_open";
		rc = fi_cq_open(dom, &cqa, cq, NULL);
		if (rc) goto fail;
	}
	memset(&ava, 0, sizeof ava);
	ava.type = info->domain_attr->av_type;
	ava.count = av_count;
	*stage = "fi_av_open";
	rc = fi_av_open(dom, &ava, av, NULL);
	if (rc) goto fail;
	*stage = "fi_endpoint";
	rc = fi_endpoint(dom, info, ep, NULL);
	if (rc) goto fail;
	*stage = "fi_ep_bind(cq)";
	rc = fi_ep_bind(*ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV);
	if (rc) goto fail;
	*stage = "fi_ep_bind(av)";
	rc = fi_ep_bind(*ep, &(*av)->fid, 0);
	if (rc) goto fail;
	*stage = "fi_enable";
	rc = fi_enable(*ep);
	if (rc) goto fail;
	return 0;
fail:
	if (*ep) fi_close(&(*ep)->fid);
	if (*av) fi_close(&(*av)->fid);
	if (*cq) fi_close(&(*cq)->fid);
	*ep = NULL; *cq = NULL; *av = NULL;
	return rc;
}

// dd_mr_reg registers [buf, buf+len). With FI_MR_ENDPOINT the MR is bound to
// ep and enabled.
static int dd_mr_reg(struct fid_domain *dom, struct fid_ep *ep, void *buf, size_t len, uint64_t access,
		uint64_t key, int bind_ep, struct fid_mr **mr, uint64_t *out_key, void **desc) {
	int rc = fi_mr_reg(dom, buf, len, access, 0, key, 0, mr, NULL);
	if (rc) { *mr = NULL; return rc; }
	if (bind_ep) {
		rc = fi_mr_bind(*mr, &ep->fid, 0);
		if (rc == 0) rc = fi_mr_enable(*mr);
		if (rc) { fi_close(&(*mr)->fid); *mr = NULL; return rc; }
	}
	*out_key = fi_mr_key(*mr);
	*desc = fi_mr_desc(*mr);
	return 0;
}

// ---- server endpoint and its progress loop ---------------------------------

typedef struct dd_server {
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	int waitfd;      // CQ wait fd, or -1 when the provider has none
	int stopfd;      // eventfd that wakes the progress loop for Close
	atomic_int stop;
	pthread_mutex_t lock; // serialises domain use (FI_THREAD_DOMAIN providers)
	atomic_ullong wakeups;
	atomic_ullong errors;
	int64_t min_sleep_ns, max_sleep_ns; // back-off while recently active
	int64_t idle_after_ns, idle_sleep_ns; // and once idle this long
	struct dd_gsrv *g;    // gather service (software-RMA providers), else NULL
} dd_server;

static int dd_gsrv_start(dd_server *s, size_t av_count);
static int dd_gsrv_progress(dd_server *s, struct fi_cq_entry *e, ssize_t n);
static int dd_gsrv_error(dd_server *s, struct fi_cq_err_entry *err);
static void dd_gsrv_free(dd_server *s);

static dd_server *dd_server_new(void) {
	dd_server *s = calloc(1, sizeof *s);
	if (!s) return NULL;
	s->waitfd = -1;
	s->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->stopfd < 0) { free(s); return NULL; } // Close could never wake the loop
	pthread_mutex_init(&s->lock, NULL);
	s->min_sleep_ns = 50000;
	s->max_sleep_ns = 2000000;
	s->idle_after_ns = 200000000;
	s->idle_sleep_ns = 10000000;
	return s;
}

static int dd_server_open(dd_server *s, struct fi_info *info, size_t av_count, int gather, char *name, size_t *namelen, const char **stage) {
	int got_fd = 0;
	int rc = dd_endpoint(s->domain, info, 1024, av_count, 1, &s->ep, &s->cq, &s->av, &got_fd, stage);
	if (rc) return rc;
	if (gather) {
		*stage = "gather service (fi_trecv)";
		rc = dd_gsrv_start(s, av_count);
		if (rc) return rc;
	}
	if (got_fd) {
		int fd = -1;
		*stage = "fi_control(FI_GETWAIT)";
		rc = fi_control(&s->cq->fid, FI_GETWAIT, &fd);
		if (rc == 0 && fd >= 0) s->waitfd = fd;
	}
	*stage = "fi_getname";
	rc = fi_getname(&s->ep->fid, name, namelen);
	if (rc) return rc;
	// Progress once before anyone reads from us (shm first-contact).
	struct fi_cq_entry e[4];
	fi_cq_read(s->cq, e, 4);
	return 0;
}

// dd_server_poll runs one progress step under the domain lock. It returns
// the number of completions read (or the negative error), and sets
// *can_sleep to 1 when fi_trywait says the wait fd may be slept on, 0 when
// it says there is work (-FI_EAGAIN), and -1 when sleeping on the fd is not
// possible (fi_cq_read or fi_trywait failed otherwise): back off then.
static ssize_t dd_server_poll(dd_server *s, int *can_sleep) {
	struct fi_cq_entry e[16];
	ssize_t n;
	*can_sleep = 0;
	pthread_mutex_lock(&s->lock);
	int stuck = 0;
	n = fi_cq_read(s->cq, e, 16);
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err;
		memset(&err, 0, sizeof err);
		if (fi_cq_readerr(s->cq, &err, 0) > 0 && s->g) stuck = dd_gsrv_error(s, &err);
		atomic_fetch_add(&s->errors, 1);
		n = 1;
	} else if (s->g) {
		stuck = dd_gsrv_progress(s, e, n);
	}
	if (stuck && n == -FI_EAGAIN) {
		// A reply or receive could not be posted (-FI_EAGAIN): back off
		// and retry rather than sleep on the fd.
		*can_sleep = -1;
	} else if (n == -FI_EAGAIN && s->waitfd >= 0) {
		struct fid *f = &s->cq->fid;
		int rc = fi_trywait(s->fabric, &f, 1);
		*can_sleep = rc == FI_SUCCESS ? 1 : rc == -FI_EAGAIN ? 0 : -1;
	} else if (n < 0 && n != -FI_EAGAIN) {
		atomic_fetch_add(&s->errors, 1);
		*can_sleep = -1;
	}
	pthread_mutex_unlock(&s->lock);
	return n;
}

// A progress step that burns at least this much of its thread's CPU may
// have done work: on shm it frees the command slots of remote reads, which
// yield no completion on the target. An idle shm step costs about 2 µs; a
// step serving a busy reader, typically 100 µs to milliseconds.
#define DD_STEP_WORK_CPU_NS 20000

// dd_server_run is the progress loop; it returns when dd_server_stop is
// called. With a wait fd it sleeps in poll() until the provider has work.
// Without one it polls with exponential back-off (min..max sleep, and a
// longer sleep once idle for idle_after_ns).
//
// Only real work resets the back-off: a step that read completions, or two
// steps in a row that each spent DD_STEP_WORK_CPU_NS of the thread's CPU.
// The step is measured on the thread's CPU clock, not the wall clock, since
// a step that merely waited to be scheduled on a loaded machine did no
// work. One costly step alone (a cold cache after preemption costs up to
// ~80 µs on a loaded 2-core machine) only buys a quick second look, after
// which the loop returns to the sleep it had: an idle rank stays at its idle
// rate however loaded the machine is.
static void dd_server_run(dd_server *s) {
	int64_t sleep_ns = s->min_sleep_ns;
	int64_t confirm_ns = 0; // after one costly step: the sleep to return to if the next step is idle
	int64_t last_work = dd_now();
	while (!atomic_load(&s->stop)) {
		int can_sleep = 0;
		int64_t c0 = s->waitfd < 0 ? dd_thread_cpu() : -1; // only the back-off path needs it
		ssize_t n = dd_server_poll(s, &can_sleep);
		int64_t t1 = dd_now();
		if (n > 0) { sleep_ns = s->min_sleep_ns; confirm_ns = 0; last_work = t1; continue; }
		if (s->waitfd >= 0 && can_sleep >= 0) {
			if (!can_sleep) continue; // fi_trywait: work pending, progress again
			struct pollfd p[2] = { { s->waitfd, POLLIN, 0 }, { s->stopfd, POLLIN, 0 } };
			poll(p, 2, -1);
			atomic_fetch_add(&s->wakeups, 1);
			continue;
		}
		// No wait fd (shm), or the CQ/fi_trywait failed: back off instead
		// of spinning.
		int costly = can_sleep >= 0 && c0 >= 0 && dd_thread_cpu() - c0 > DD_STEP_WORK_CPU_NS;
		if (costly && confirm_ns) { // the second costly step in a row: work
			last_work = t1;
			confirm_ns = 0;
			sleep_ns = s->min_sleep_ns;
		} else if (costly) {        // look again soon before believing it
			confirm_ns = sleep_ns;
			sleep_ns = s->min_sleep_ns;
		} else if (confirm_ns) {    // it was noise: back to the sleep we had
			sleep_ns = confirm_ns;
			confirm_ns = 0;
		}
		int64_t cap = t1 - last_work > s->idle_after_ns ? s->idle_sleep_ns : s->max_sleep_ns;
		if (sleep_ns > cap) sleep_ns = cap;
		struct pollfd p = { s->stopfd, POLLIN, 0 };
		struct timespec ts = { sleep_ns / 1000000000LL, sleep_ns % 1000000000LL };
		ppoll(&p, 1, &ts, NULL);
		atomic_fetch_add(&s->wakeups, 1);
		if (!confirm_ns) sleep_ns *= 2;
	}
}

static void dd_server_stop(dd_server *s) {
	uint64_t one = 1;
	atomic_store(&s->stop, 1);
	if (write(s->stopfd, &one, sizeof one) < 0) { }
}

static void dd_server_lock(dd_server *s) { pthread_mutex_lock(&s->lock); }
static void dd_server_unlock(dd_server *s) { pthread_mutex_unlock(&s->lock); }

static int dd_server_close(dd_server *s, int close_domain) {
	int rc = 0;
	if (s->ep) rc = fi_close(&s->ep->fid);
	if (s->av) fi_close(&s->av->fid);
	if (s->cq) fi_close(&s->cq->fid);
	s->ep = NULL; s->av = NULL; s->cq = NULL;
	dd_gsrv_free(s); // after the endpoint: nothing posted references its buffers
	if (close_domain && s->domain) { fi_close(&s->domain->fid); s->domain = NULL; }
	if (s->stopfd >= 0) close(s->stopfd);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return rc;
}

// ---- gather: batched reads served by the target's CPU ----------------------
//
// On software-RMA providers (tcp, sockets, udp, net) every fi_read is a
// request the target's progress thread answers anyway, so a batch is cheaper
// as one tagged request per peer: the reader sends its endpoint name, a
// request id and the (key, address, length) list to the server endpoint; the
// server validates every entry against its exports, packs the rows into a
// send buffer and fi_tsend's them back with tag DD_GREP_BIT|id. An invalid
// entry gets an error reply naming it, never an out-of-bounds copy.

#define DD_GREQ_TAG   0x0DD0000000000000ULL // requests (to server endpoints)
#define DD_GREP_BIT   0x4000000000000000ULL // replies: DD_GREP_BIT | request id
#define DD_GMAGIC_REQ 0x51524444u
#define DD_GMAGIC_REP 0x50524444u
#define DD_GMAX_ENT   1024           // entries per request
#define DD_GMAX_NAME  256            // endpoint name bytes
#define DD_GMAX_BYTES (64ULL << 20)  // largest reply a server builds
#define DD_GSRV_RECVS 4              // requests a server keeps receives posted for
#define DD_GSRV_SENDS 4              // replies a server keeps in flight
#define DD_GTEXT      240            // error text in a reply

typedef struct dd_greq_hdr { uint32_t magic, nent; uint64_t id; uint32_t namelen, pad; uint64_t total; } dd_greq_hdr;
typedef struct dd_gent { uint64_t key, addr, len; } dd_gent;
typedef struct dd_grep_hdr { uint32_t magic; int32_t status; uint64_t id; uint64_t bytes; uint32_t textlen, entry; } dd_grep_hdr;

#define DD_ALIGN8(x) (((x) + 7) & ~(size_t)7)
#define DD_GREQ_MAX (sizeof(dd_greq_hdr) + DD_GMAX_NAME + DD_GMAX_ENT * sizeof(dd_gent))

typedef struct dd_gexport { uint64_t key, base, size; char *ptr; } dd_gexport;
typedef struct dd_gpeer { char name[DD_GMAX_NAME]; uint32_t namelen; fi_addr_t fa; int inflight; int used; } dd_gpeer;

enum { DD_R_POSTED = 0, DD_R_READY = 1, DD_R_REPOST = 2 };
enum { DD_S_FREE = 0, DD_S_INFLIGHT = 1, DD_S_PENDING = 2 };

typedef struct dd_gsrv {
	struct fi_context2 rctx[DD_GSRV_RECVS];
	char *rbuf[DD_GSRV_RECVS];
	int rstate[DD_GSRV_RECVS];
	struct fi_context2 sctx[DD_GSRV_SENDS];
	char *sbuf[DD_GSRV_SENDS];
	size_t scap[DD_GSRV_SENDS], slen[DD_GSRV_SENDS];
	int sstate[DD_GSRV_SENDS], speer[DD_GSRV_SENDS];
	uint64_t stag[DD_GSRV_SENDS];
	dd_gexport *ex; int nex, capex;
	dd_gpeer *peers; int npeers, cappeers, victim;
	atomic_ullong served, rejected;
} dd_gsrv;

static int dd_gsrv_post_recv(dd_server *s, int i) {
	dd_gsrv *g = s->g;
	ssize_t rc = fi_trecv(s->ep, g->rbuf[i], DD_GREQ_MAX, NULL, FI_ADDR_UNSPEC, DD_GREQ_TAG, 0, &g->rctx[i]);
	g->rstate[i] = rc == 0 ? DD_R_POSTED : DD_R_REPOST;
	return (int)rc;
}

static int dd_gsrv_start(dd_server *s, size_t av_count) {
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

static void dd_gsrv_free(dd_server *s) {
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
static int dd_gsrv_add_export(dd_server *s, uint64_t key, uint64_t base, void *ptr, uint64_t size) {
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

static void dd_gsrv_del_export(dd_server *s, uint64_t key) {
	dd_gsrv *g = s->g;
	if (!g) return;
	for (int i = 0; i < g->nex; i++)
		if (g->ex[i].key == key) { g->ex[i] = g->ex[--g->nex]; return; }
}

// dd_gsrv_peer finds or inserts the reader's endpoint name; when the cache
// is full an idle entry is evicted (fi_av_remove).
static int dd_gsrv_peer(dd_server *s, const char *name, uint32_t len) {
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

static int dd_gsrv_post_send(dd_server *s, int k) {
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
static void dd_gsrv_handle(dd_server *s, int i, int k) {
	dd_gsrv *g = s->g;
	char *b = g->rbuf[i];
	dd_greq_hdr *h = (dd_greq_hdr *)b;
	g->rstate[i] = DD_R_REPOST;
	if (h->magic != DD_GMAGIC_REQ || h->namelen == 0 || h->namelen > DD_GMAX_NAME || h->nent > DD_GMAX_ENT) {
		atomic_fetch_add(&g->rejected, 1); // not ours, or garbled: nobody to answer
		return;
	}
	int pi = dd_gsrv_peer(s, b + sizeof *h, h->namelen);
	if (pi < 0) { atomic_fetch_add(&g->rejected, 1); return; }
	const dd_gent *ent = (const dd_gent *)(b + sizeof *h + DD_ALIGN8(h->namelen));
	char text[DD_GTEXT];
	int status = 0;
	uint32_t bad = 0;
	uint64_t total = 0;
	int last = -1;
	text[0] = 0;
	for (uint32_t e = 0; e < h->nent && !status; e++) {
		const dd_gent *x = &ent[e];
		dd_gexport *ex = last >= 0 && g->ex[last].key == x->key ? &g->ex[last] : NULL;
		for (int j = 0; !ex && j < g->nex; j++)
			if (g->ex[j].key == x->key) { ex = &g->ex[j]; last = j; }
		if (!ex) {
			status = FI_EINVAL; bad = e;
			snprintf(text, sizeof text, "entry %u: no exported region with key %#llx", e, (unsigned long long)x->key);
		} else if (x->len == 0 || x->addr < ex->base || x->addr - ex->base > ex->size || x->len > ex->size - (x->addr - ex->base)) {
			status = FI_EINVAL; bad = e;
			snprintf(text, sizeof text, "entry %u: %llu bytes at address %#llx outside region key %#llx [%#llx, +%llu)", e,
				(unsigned long long)x->len, (unsigned long long)x->addr, (unsigned long long)x->key,
				(unsigned long long)ex->base, (unsigned long long)ex->size);
		} else if ((total += x->len) > DD_GMAX_BYTES) {
			status = FI_EMSGSIZE; bad = e;
			snprintf(text, sizeof text, "entry %u: reply exceeds the target's limit of %llu bytes", e, (unsigned long long)DD_GMAX_BYTES);
		}
	}
	size_t need = sizeof(dd_grep_hdr) + (status ? strlen(text) + 1 : total);
	if (g->scap[k] < need) {
		char *nb = realloc(g->sbuf[k], need);
		if (!nb) {
			status = FI_ENOMEM; bad = 0;
			snprintf(text, sizeof text, "target out of memory for a %llu-byte reply", (unsigned long long)total);
			need = sizeof(dd_grep_hdr) + strlen(text) + 1;
			if (g->scap[k] < need) { atomic_fetch_add(&g->rejected, 1); return; }
		} else {
			g->sbuf[k] = nb; g->scap[k] = need;
		}
	}
	dd_grep_hdr *rh = (dd_grep_hdr *)g->sbuf[k];
	rh->magic = DD_GMAGIC_REP; rh->status = status; rh->id = h->id; rh->entry = bad;
	char *out = g->sbuf[k] + sizeof *rh;
	if (status) {
		rh->textlen = (uint32_t)strlen(text) + 1; rh->bytes = 0;
		memcpy(out, text, rh->textlen);
		atomic_fetch_add(&g->rejected, 1);
	} else {
		rh->textlen = 0; rh->bytes = total;
		last = -1;
		for (uint32_t e = 0; e < h->nent; e++) {
			const dd_gent *x = &ent[e];
			dd_gexport *ex = last >= 0 && g->ex[last].key == x->key ? &g->ex[last] : NULL;
			for (int j = 0; !ex && j < g->nex; j++)
				if (g->ex[j].key == x->key) { ex = &g->ex[j]; last = j; }
			memcpy(out, ex->ptr + (x->addr - ex->base), x->len);
			out += x->len;
		}
		atomic_fetch_add(&g->served, 1);
	}
	g->slen[k] = need;
	g->speer[k] = pi;
	g->stag[k] = DD_GREP_BIT | h->id;
	g->peers[pi].inflight++;
	dd_gsrv_post_send(s, k);
}

// dd_gsrv_kick retries what could not be posted and serves ready requests
// while send buffers are free. It returns 1 when something is still stuck.
static int dd_gsrv_kick(dd_server *s) {
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

static void dd_gsrv_complete(dd_server *s, void *ctx) {
	dd_gsrv *g = s->g;
	for (int i = 0; i < DD_GSRV_RECVS; i++)
		if (ctx == &g->rctx[i]) { g->rstate[i] = DD_R_READY; return; }
	for (int k = 0; k < DD_GSRV_SENDS; k++)
		if (ctx == &g->sctx[k] && g->sstate[k] == DD_S_INFLIGHT) {
			g->sstate[k] = DD_S_FREE;
			g->peers[g->speer[k]].inflight--;
			return;
		}
}

static int dd_gsrv_progress(dd_server *s, struct fi_cq_entry *e, ssize_t n) {
	for (ssize_t i = 0; i < n; i++) dd_gsrv_complete(s, e[i].op_context);
	return dd_gsrv_kick(s);
}

static int dd_gsrv_error(dd_server *s, struct fi_cq_err_entry *err) {
	dd_gsrv *g = s->g;
	for (int i = 0; i < DD_GSRV_RECVS; i++)
		if (err->op_context == &g->rctx[i]) { g->rstate[i] = DD_R_REPOST; return dd_gsrv_kick(s); } // e.g. truncated: drop it
	dd_gsrv_complete(s, err->op_context); // a failed send frees its buffer
	return dd_gsrv_kick(s);
}

static uint64_t dd_gsrv_served(dd_server *s) { return s->g ? atomic_load(&s->g->served) : 0; }
static uint64_t dd_gsrv_rejected(dd_server *s) { return s->g ? atomic_load(&s->g->rejected) : 0; }

// ---- readers ---------------------------------------------------------------

typedef struct dd_op {
	void *dst;
	uint64_t len;
	uint64_t addr;
	uint64_t key;
	void *desc;
	uint32_t peer;
	uint32_t skip;   // gather: not part of the gather (read with fi_read instead)
} dd_op;

enum { DD_OK = 0, DD_POST = 1, DD_CQERR = 2, DD_TIMEOUT = 3, DD_CQREAD = 4, DD_NOEP = 5, DD_REJECT = 6, DD_BADREPLY = 7, DD_NOMEM = 8 };

// One gather round in flight: a request to one peer and its reply.
typedef struct dd_gslot {
	struct fi_context2 sctx, rctx;
	char *req;          // DD_GREQ_MAX bytes
	char *bounce;       // reply buffer, grow-only up to header + cap
	size_t bcap;
	int first, count;   // range of r->gorder
	uint32_t peer;
	int active, sent, recvd;
	uint64_t id, bytes;
} dd_gslot;

typedef struct dd_result {
	int64_t post_ns;
	int64_t wait_ns;
	int32_t done;
	int32_t stage;
	int32_t failed_op;
	int32_t err;
	int32_t prov_errno;
	int32_t inflight_at_fail;
	int32_t torn_down;
	int32_t guessed;     // failed_op is a guess: the provider gave no op context
	int32_t teardown_rc; // fi_close(endpoint) result when torn down
	int32_t pad;
	int64_t copy_ns;     // gather: copying rows out of the bounce buffer
	char text[256];
} dd_result;

typedef struct dd_reader {
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fi_info *info;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	size_t av_count;
	fi_addr_t *peers;
	int npeers, maxpeers;
	dd_op *ops;
	int cap;
	int window;
	struct fi_context2 *ctx;
	int32_t *slot_op;   // op index of each context slot, -1 when free
	int32_t *free_slots;
	dd_result res;
	int64_t spin_ns;    // spin on the CQ this long without completions, then wait
	int waitfd;         // CQ wait fd (sleep on it between progress steps), or -1
	int active;         // counted in dd_active (inside a batch)
	char name[DD_GMAX_NAME]; // endpoint name, sent with gather requests
	size_t namelen;
	int32_t *gorder;    // gather: op indices grouped by peer
	int32_t *gcount;    // gather: per-peer counts (maxpeers+1)
	dd_gslot *gslots;
	int ngslots;
	uint64_t gnext_id;
} dd_reader;

static dd_reader *dd_reader_new(struct fid_fabric *fab, struct fid_domain *dom, struct fi_info *info, int window, int cap, int maxpeers, size_t av_count) {
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

static int dd_reader_teardown(dd_reader *r);

static int dd_reader_setup(dd_reader *r, const char **stage) {
	int got_fd = 0;
	size_t cqsz = r->window < 64 ? 128 : (size_t)r->window * 2;
	int rc = dd_endpoint(r->domain, r->info, cqsz, r->av_count, 1, &r->ep, &r->cq, &r->av, &got_fd, stage);
	if (rc) return rc;
	r->waitfd = -1;
	if (got_fd) {
		int fd = -1;
		if (fi_control(&r->cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0) r->waitfd = fd;
	}
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
static int dd_reader_teardown(dd_reader *r) {
	int rc = 0, rc2;
	if (r->ep) rc = fi_close(&r->ep->fid);
	if (r->av && (rc2 = fi_close(&r->av->fid)) != 0 && rc == 0) rc = rc2;
	if (r->cq && (rc2 = fi_close(&r->cq->fid)) != 0 && rc == 0) rc = rc2;
	r->ep = NULL; r->av = NULL; r->cq = NULL;
	r->waitfd = -1;
	return rc;
}

// Spinning on a CQ is the fastest wait while cores are free, and the worst
// when they are not: on software-RMA providers the target's progress thread
// needs a core to answer, and several spinning readers starve it (2 cores,
// 4 readers spinning: a quarter of one reader's rate). So readers spin only
// while at most dd_spin_limit readers of the process are inside a batch
// (half the online CPUs, at least 1); beyond that they all sleep on their
// CQ's wait fd.
static atomic_int dd_active;
static int dd_spin_limit;

static void dd_active_enter(dd_reader *r) {
	if (__atomic_load_n(&dd_spin_limit, __ATOMIC_RELAXED) == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		__atomic_store_n(&dd_spin_limit, n >= 4 ? (int)(n / 2) : 1, __ATOMIC_RELAXED);
	}
	if (!r->active) { atomic_fetch_add(&dd_active, 1); r->active = 1; }
}

static void dd_active_leave(dd_reader *r) {
	if (r->active) { atomic_fetch_sub(&dd_active, 1); r->active = 0; }
}

// dd_result_reset clears res for a new batch (copy_ns is dd_gather's own).
static void dd_result_reset(dd_result *res) {
	res->post_ns = 0; res->wait_ns = 0; res->done = 0; res->stage = DD_OK;
	res->failed_op = -1; res->err = 0; res->prov_errno = 0; res->torn_down = 0; res->text[0] = 0;
	res->guessed = 0; res->teardown_rc = 0; res->inflight_at_fail = 0;
}

// dd_set_fail records where a batch failed: stage, positive errno, op.
static void dd_set_fail(dd_result *res, int stage, int err, int op) {
	res->stage = stage; res->err = err; res->failed_op = op;
}

// dd_cq_readerr reads the error entry behind -FI_EAVAIL into *e and returns
// fi_cq_readerr's result. -FI_EAGAIN (an error announced but not readable)
// becomes FI_EIO; shm's negative codes are made positive.
static ssize_t dd_cq_readerr(dd_reader *r, struct fi_cq_err_entry *e) {
	memset(e, 0, sizeof *e);
	ssize_t rr = fi_cq_readerr(r->cq, e, 0);
	if (rr == -FI_EAGAIN) e->err = FI_EIO;
	if (e->err < 0) e->err = -e->err;
	return rr;
}

// dd_cq_poll reads up to 64 completions into comp, adds the time since *t
// to the batch's wait time and moves *t to now.
static ssize_t dd_cq_poll(dd_reader *r, struct fi_cq_entry *comp, dd_result *res, int64_t *t) {
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
static int dd_batch_fail(dd_reader *r, dd_result *res, int inflight) {
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
static int64_t dd_reader_wait(dd_reader *r, int64_t t, int64_t last_done, int64_t deadline, int64_t *sleep_ns, int *busy, int64_t *wait_ns) {
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

static void dd_reader_free(dd_reader *r) {
	dd_reader_teardown(r);
	for (int i = 0; i < r->ngslots; i++) { free(r->gslots[i].req); free(r->gslots[i].bounce); }
	free(r->gslots); free(r->gorder); free(r->gcount);
	free(r->peers); free(r->ops); free(r->ctx); free(r->slot_op); free(r->free_slots);
	free(r);
}

static int dd_av_insert(dd_reader *r, int idx, void *addr) {
	fi_addr_t fa = FI_ADDR_UNSPEC;
	int rc = fi_av_insert(r->av, addr, 1, &fa, 0, NULL);
	if (rc != 1) return rc < 0 ? rc : -FI_EINVAL;
	r->peers[idx] = fa;
	return 0;
}

// dd_oldest is the lowest-numbered op in flight, else the next to post.
static int dd_oldest(dd_reader *r, int next, int n) {
	int victim = -1;
	for (int s = 0; s < r->window; s++)
		if (r->slot_op[s] >= 0 && (victim < 0 || r->slot_op[s] < victim)) victim = r->slot_op[s];
	if (victim < 0) victim = next < n ? next : n - 1;
	return victim;
}

static void dd_record_cq_error(dd_reader *r, struct fi_cq_err_entry *e, dd_result *res, int slot) {
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
static int dd_read_batch(dd_reader *r, int n, int64_t timeout_ns) {
	dd_result *res = &r->res;
	struct fi_cq_entry comp[64];
	int64_t t = dd_now();
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

// dd_gather_prepare allocates the gather state once per reader: rounds
// slots with their request buffers, and the grouping arrays.
static int dd_gather_prepare(dd_reader *r, int rounds) {
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

static int dd_gslot_of(dd_reader *r, void *ctx, int rounds, int *is_recv) {
	for (int i = 0; i < rounds; i++) {
		if (ctx == &r->gslots[i].sctx) { *is_recv = 0; return i; }
		if (ctx == &r->gslots[i].rctx) { *is_recv = 1; return i; }
	}
	return -1;
}

// dd_gather_oldest is the first op of the oldest round in flight.
static int dd_gather_oldest(dd_reader *r, int rounds, int pos, int m) {
	uint64_t best = UINT64_MAX;
	int op = -1;
	for (int i = 0; i < rounds; i++)
		if (r->gslots[i].active && r->gslots[i].id < best) { best = r->gslots[i].id; op = r->gorder[r->gslots[i].first]; }
	if (op < 0 && m > 0) op = r->gorder[pos < m ? pos : m - 1];
	return op;
}

// dd_gather reads r->ops[0..n) (those without skip) with one tagged request
// per round: a round holds ops of one peer, at most DD_GMAX_ENT of them and
// cap bytes; up to rounds are in flight. Rows are copied from the reply's
// bounce buffer to their destinations when it arrives. Failures and the
// deadline tear the endpoint down, like dd_read_batch.
static int dd_gather(dd_reader *r, int n, uint64_t cap, int rounds, int64_t timeout_ns) {
	dd_result *res = &r->res;
	struct fi_cq_entry comp[64];
	int64_t t = dd_now();
	int64_t deadline = t + timeout_ns;
	int64_t last_done = t;
	int64_t sleep_ns = 20000;
	int busy = 0;
	int active = 0, pos = 0, m = 0;
	dd_result_reset(res);
	res->copy_ns = 0;
	if (!r->ep) { res->stage = DD_NOEP; return -1; }
	int prc = dd_gather_prepare(r, rounds);
	if (prc) { res->stage = DD_NOMEM; res->err = -prc; res->failed_op = 0; return -1; }
	dd_active_enter(r);

	// Group the ops by peer (counting sort, stable).
	memset(r->gcount, 0, (r->maxpeers + 1) * sizeof *r->gcount);
	for (int i = 0; i < n; i++) if (!r->ops[i].skip) r->gcount[r->ops[i].peer + 1]++;
	for (int p = 0; p < r->maxpeers; p++) r->gcount[p + 1] += r->gcount[p];
	for (int i = 0; i < n; i++) if (!r->ops[i].skip) r->gorder[r->gcount[r->ops[i].peer]++] = i;
	m = 0;
	for (int i = 0; i < n; i++) if (!r->ops[i].skip) m++;
	for (int i = 0; i < rounds; i++) r->gslots[i].active = 0;

	while (pos < m || active > 0) {
		// Post new rounds while slots are free.
		for (int si = 0; si < rounds && pos < m; si++) {
			dd_gslot *g = &r->gslots[si];
			if (g->active) continue;
			uint32_t peer = r->ops[r->gorder[pos]].peer;
			uint64_t bytes = 0;
			int cnt = 0;
			while (pos + cnt < m && cnt < DD_GMAX_ENT) {
				dd_op *op = &r->ops[r->gorder[pos + cnt]];
				if (op->peer != peer || (cnt > 0 && bytes + op->len > cap)) break;
				bytes += op->len;
				cnt++;
			}
			size_t need = sizeof(dd_grep_hdr) + (bytes > DD_GTEXT ? bytes : DD_GTEXT);
			if (g->bcap < need) {
				char *nb = realloc(g->bounce, need);
				if (!nb) { res->stage = DD_NOMEM; res->err = FI_ENOMEM; res->failed_op = r->gorder[pos]; goto fail; }
				g->bounce = nb; g->bcap = need;
			}
			dd_greq_hdr *h = (dd_greq_hdr *)g->req;
			h->magic = DD_GMAGIC_REQ; h->nent = cnt; h->id = ++r->gnext_id & 0x0000ffffffffffffULL;
			h->namelen = (uint32_t)r->namelen; h->pad = 0; h->total = bytes;
			memcpy(g->req + sizeof *h, r->name, r->namelen);
			dd_gent *ent = (dd_gent *)(g->req + sizeof *h + DD_ALIGN8(r->namelen));
			for (int k = 0; k < cnt; k++) {
				dd_op *op = &r->ops[r->gorder[pos + k]];
				ent[k].key = op->key; ent[k].addr = op->addr; ent[k].len = op->len;
			}
			size_t reqlen = sizeof *h + DD_ALIGN8(r->namelen) + cnt * sizeof(dd_gent);
			ssize_t rc = fi_trecv(r->ep, g->bounce, need, NULL, FI_ADDR_UNSPEC, DD_GREP_BIT | h->id, 0, &g->rctx);
			if (rc == -FI_EAGAIN) break;
			if (rc) { res->failed_op = r->gorder[pos]; res->err = (int)-rc; res->stage = DD_POST; strcpy(res->text, "fi_trecv"); goto fail; }
			g->active = 1; g->sent = 0; g->recvd = 0; g->id = h->id; g->bytes = bytes;
			g->first = pos; g->count = cnt; g->peer = peer;
			active++;
			pos += cnt;
			for (;;) {
				rc = fi_tsend(r->ep, g->req, reqlen, NULL, r->peers[peer], DD_GREQ_TAG, &g->sctx);
				if (rc != -FI_EAGAIN) break;
				fi_cq_read(r->cq, NULL, 0); // progress, then retry
				if (dd_now() >= deadline) break;
			}
			int64_t t2 = dd_now();
			res->post_ns += t2 - t;
			t = t2;
			if (rc) {
				res->failed_op = r->gorder[g->first]; res->err = rc == -FI_EAGAIN ? FI_ETIMEDOUT : (int)-rc;
				res->stage = rc == -FI_EAGAIN ? DD_TIMEOUT : DD_POST;
				if (rc != -FI_EAGAIN) strcpy(res->text, "fi_tsend");
				goto fail;
			}
		}
		if (active == 0 && pos >= m) break;

		ssize_t got = dd_cq_poll(r, comp, res, &t);
		if (got > 0) {
			for (ssize_t i = 0; i < got; i++) {
				int is_recv = 0;
				int si = dd_gslot_of(r, comp[i].op_context, rounds, &is_recv);
				if (si < 0 || !r->gslots[si].active) continue;
				dd_gslot *g = &r->gslots[si];
				if (is_recv) g->recvd = 1; else g->sent = 1;
				if (!g->recvd) continue;
				// The reply is here (the send's completion may come later;
				// the round stays active until both are in).
				if (g->recvd == 1) {
					dd_grep_hdr *rh = (dd_grep_hdr *)g->bounce;
					g->recvd = 2;
					if (rh->magic != DD_GMAGIC_REP || rh->id != g->id) {
						res->stage = DD_BADREPLY; res->err = FI_EIO; res->failed_op = r->gorder[g->first];
						snprintf(res->text, sizeof res->text, "malformed reply (magic %#x, id %llu, want %llu)",
							rh->magic, (unsigned long long)rh->id, (unsigned long long)g->id);
						goto fail;
					}
					if (rh->status) {
						res->stage = DD_REJECT; res->err = rh->status;
						uint32_t e = rh->entry < (uint32_t)g->count ? rh->entry : 0;
						res->failed_op = r->gorder[g->first + e];
						size_t tl = rh->textlen < sizeof res->text ? rh->textlen : sizeof res->text;
						memcpy(res->text, g->bounce + sizeof *rh, tl);
						res->text[sizeof res->text - 1] = 0;
						goto fail;
					}
					if (rh->bytes != g->bytes) {
						res->stage = DD_BADREPLY; res->err = FI_EIO; res->failed_op = r->gorder[g->first];
						snprintf(res->text, sizeof res->text, "reply of %llu bytes, want %llu",
							(unsigned long long)rh->bytes, (unsigned long long)g->bytes);
						goto fail;
					}
					const char *src = g->bounce + sizeof *rh;
					for (int k = 0; k < g->count; k++) {
						dd_op *op = &r->ops[r->gorder[g->first + k]];
						memcpy(op->dst, src, op->len);
						src += op->len;
					}
					res->done += g->count;
					int64_t t3 = dd_now();
					res->copy_ns += t3 - t;
					t = t3;
				}
				if (g->sent) { g->active = 0; active--; }
			}
			last_done = t;
			sleep_ns = 20000;
		} else if (got == -FI_EAVAIL) {
			struct fi_cq_err_entry e;
			ssize_t rr = dd_cq_readerr(r, &e);
			if (rr > 0 || rr == -FI_EAGAIN) {
				int is_recv = 0;
				int si = e.op_context ? dd_gslot_of(r, e.op_context, rounds, &is_recv) : -1;
				dd_record_cq_error(r, &e, res, -1);
				if (si >= 0 && r->gslots[si].active) res->failed_op = r->gorder[r->gslots[si].first];
				else { res->failed_op = dd_gather_oldest(r, rounds, pos, m); res->guessed = 1; }
				goto fail;
			}
			dd_set_fail(res, DD_CQREAD, (int)(rr < 0 ? -rr : FI_EIO), dd_gather_oldest(r, rounds, pos, m));
			goto fail;
		} else if (got != -FI_EAGAIN) {
			dd_set_fail(res, DD_CQREAD, (int)-got, dd_gather_oldest(r, rounds, pos, m));
			goto fail;
		}
		if (t >= deadline && (active > 0 || pos < m)) {
			dd_set_fail(res, DD_TIMEOUT, FI_ETIMEDOUT, dd_gather_oldest(r, rounds, pos, m));
			goto fail;
		}
		if (got <= 0) t = dd_reader_wait(r, t, last_done, deadline, &sleep_ns, &busy, &res->wait_ns);
	}
	dd_active_leave(r);
	return 0;
fail:
	dd_batch_fail(r, res, active);
	for (int i = 0; i < rounds; i++) r->gslots[i].active = 0;
	return -1;
}

// dd_baseline is the plain C reference loop used by BenchmarkReadBaselineC:
// n reads of len bytes at base+offs[i] into dst+(i%slots)*len with at most
// window in flight, spinning on the CQ. Returns elapsed ns, or -errno.
static int64_t dd_baseline(dd_reader *r, uint32_t peer, char *dst, uint64_t len, int slots,
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

static const char *dd_strerror(int err) { return fi_strerror(err); }
static uint64_t dd_server_wakeups(dd_server *s) { return atomic_load(&s->wakeups); }
static int dd_active_readers(void) { return atomic_load(&dd_active); }
static int dd_reader_waitfd(dd_reader *r) { return r->waitfd; }
static uint64_t dd_gather_max_bytes(void) { return DD_GMAX_BYTES; }
static uint64_t dd_gather_max_ent(void) { return DD_GMAX_ENT; }
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Provider preference when Options.Provider is empty.
var defaultOrder = []string{"cxi", "verbs;ofi_rxm", "tcp;ofi_rxm", "shm"}

// chunkOps is how many ops one cgo call handles; longer batches are split.
const chunkOps = 4096

func fiErr(op string, rc C.int) error {
	code := int(rc)
	if code < 0 {
		code = -code
	}
	return &Error{Op: op, Code: code, Text: C.GoString(C.dd_strerror(C.int(code))), Peer: -1}
}

type candidate struct {
	info *C.struct_fi_info
	desc C.dd_infodesc
}

func describe(i *C.struct_fi_info) Info {
	var d C.dd_infodesc
	C.dd_describe(i, &d)
	return infoFromDesc(&d)
}

func infoFromDesc(d *C.dd_infodesc) Info {
	mr := uint64(d.mr_mode)
	return Info{
		Provider:       C.GoString(d.prov),
		Fabric:         C.GoString(d.fabric),
		Domain:         C.GoString(d.domain),
		MRLocal:        mr&C.FI_MR_LOCAL != 0,
		MRVirtAddr:     mr&C.FI_MR_VIRT_ADDR != 0,
		MRProvKey:      mr&C.FI_MR_PROV_KEY != 0,
		MRAllocated:    mr&C.FI_MR_ALLOCATED != 0,
		MREndpoint:     mr&C.FI_MR_ENDPOINT != 0,
		ManualProgress: d.data_progress == C.FI_PROGRESS_MANUAL,
		Threading:      threadingName(int(d.threading)),
		TxSize:         int(d.tx_size),
		MaxPeers:       int(d.ep_cnt),
		MaxMsgSize:     uint64(d.max_msg_size),
		threading:      int(d.threading),
	}
}

func threadingName(t int) string {
	switch t {
	case C.FI_THREAD_SAFE:
		return "FI_THREAD_SAFE"
	case C.FI_THREAD_FID:
		return "FI_THREAD_FID"
	case C.FI_THREAD_DOMAIN:
		return "FI_THREAD_DOMAIN"
	case C.FI_THREAD_COMPLETION:
		return "FI_THREAD_COMPLETION"
	case C.FI_THREAD_ENDPOINT:
		return "FI_THREAD_ENDPOINT"
	}
	return "FI_THREAD_UNSPEC"
}

// selectInfo walks the fi_getinfo list and picks the provider/domain asked
// for (the domain hint is ignored by some providers, so we match ourselves).
func selectInfo(o Options) (*C.struct_fi_info, error) {
	var list *C.struct_fi_info
	if rc := C.dd_getinfo(&list); rc != 0 {
		if -rc == C.FI_ENODATA {
			return nil, &Error{Op: "fi_getinfo", Code: int(-rc), Text: "no provider offers FI_EP_RDM with FI_RMA reads", Peer: -1, kind: ErrNoProvider}
		}
		return nil, fiErr("fi_getinfo", rc)
	}
	defer C.fi_freeinfo(list)
	var cands []candidate
	for i := list; i != nil; i = C.dd_info_next(i) {
		var c candidate
		c.info = i
		C.dd_describe(i, &c.desc)
		cands = append(cands, c)
	}
	provs := []string{}
	for _, c := range cands {
		p := C.GoString(c.desc.prov)
		if !contains(provs, p) {
			provs = append(provs, p)
		}
	}
	want := []string{o.Provider}
	if o.Provider == "" {
		want = defaultOrder
	}
	for _, w := range want {
		names := []string{w}
		if !strings.Contains(w, ";") {
			names = append(names, w+";ofi_rxm")
		}
		var ofProv []candidate
		for _, n := range names {
			for _, c := range cands {
				if C.GoString(c.desc.prov) == n {
					ofProv = append(ofProv, c)
				}
			}
			if len(ofProv) > 0 {
				break
			}
		}
		if len(ofProv) == 0 {
			continue
		}
		for _, c := range ofProv {
			if o.Domain == "" || C.GoString(c.desc.domain) == o.Domain || C.GoString(c.desc.fabric) == o.Domain {
				dup := C.dd_dupinfo(c.info)
				if dup == nil {
					return nil, &Error{Op: "fi_dupinfo", Code: int(C.FI_ENOMEM), Text: "out of memory", Peer: -1}
				}
				return dup, nil
			}
		}
		var doms []string
		for _, c := range ofProv {
			d := C.GoString(c.desc.domain)
			if !contains(doms, d) {
				doms = append(doms, d)
			}
		}
		return nil, &Error{Op: "select domain", Code: int(C.FI_ENODATA), Peer: -1, kind: ErrNoDomain,
			Text: fmt.Sprintf("provider %q has no domain %q; available: %s", C.GoString(ofProv[0].desc.prov), o.Domain, strings.Join(doms, ", "))}
	}
	what := fmt.Sprintf("provider %q", o.Provider)
	if o.Provider == "" {
		what = "none of the default providers " + strings.Join(defaultOrder, ", ")
	}
	return nil, &Error{Op: "select provider", Code: int(C.FI_ENODATA), Peer: -1, kind: ErrNoProvider,
		Text: fmt.Sprintf("%s is not available for FI_EP_RDM with FI_RMA reads; available: %s", what, strings.Join(provs, ", "))}
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// Fabric is one opened provider/domain plus the "server" endpoint that
// exports memory. The server endpoint is progressed by its own goroutine on a
// locked OS thread, so a rank that is busy computing still serves reads.
type Fabric struct {
	opts     Options
	info     *C.struct_fi_info
	inf      Info
	fab      *C.struct_fid_fabric
	dom      *C.struct_fid_domain
	srv      *C.dd_server // nil once closed (under mu)
	addr     []byte
	avCount  int
	ownDom   bool // readers get their own domain (threading weaker than FI_THREAD_SAFE)
	progDone chan struct{}
	nextKey  atomic.Uint64

	mu       sync.Mutex
	closed   bool
	exports  map[*Export]struct{}
	readers  map[*Reader]struct{}
	lastWake uint64 // ProgressWakeups once closed

	// forceLocalMR makes readers register destinations as if the provider
	// required FI_MR_LOCAL (tests exercise the registration cache with it).
	forceLocalMR bool
}

// Open selects a provider and domain, opens them and starts the server
// endpoint with its progress goroutine.
func Open(o Options) (*Fabric, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	info, err := selectInfo(o)
	if err != nil {
		return nil, err
	}
	f := &Fabric{opts: o, info: info, exports: map[*Export]struct{}{}, readers: map[*Reader]struct{}{}}
	f.inf = describe(info)
	if f.inf.TxSize > 0 && f.opts.Window > f.inf.TxSize {
		f.opts.Window = f.inf.TxSize
	}
	f.inf.Window = f.opts.Window
	f.avCount = o.MaxPeers
	if f.avCount == 0 {
		f.avCount = 1024
	}
	if f.inf.MaxPeers > 0 && f.avCount > f.inf.MaxPeers {
		f.avCount = f.inf.MaxPeers
	}
	f.inf.AVCount = f.avCount
	switch f.inf.threading {
	case C.FI_THREAD_FID, C.FI_THREAD_DOMAIN, C.FI_THREAD_COMPLETION, C.FI_THREAD_ENDPOINT:
		// Readers register destinations (fi_mr_reg on the domain) while
		// the progress goroutine and Export use the server's domain.
		f.ownDom = true
	}
	f.inf.ReaderDomains = f.ownDom
	f.inf.SoftwareRMA = softwareRMA(f.inf.Provider)
	f.inf.GatherMaxBytes = f.opts.GatherMaxBytes
	f.inf.GatherRounds = f.opts.GatherRounds
	f.nextKey.Store(1)

	if rc := C.dd_open_fabric(info, &f.fab); rc != 0 {
		C.fi_freeinfo(info)
		return nil, f.wrapOpenErr("fi_fabric", rc)
	}
	if rc := C.dd_open_domain(f.fab, info, &f.dom); rc != 0 {
		C.dd_close_fabric(f.fab)
		C.fi_freeinfo(info)
		return nil, f.wrapOpenErr("fi_domain", rc)
	}
	f.srv = C.dd_server_new()
	if f.srv == nil {
		f.closeBase()
		return nil, &Error{Op: "server alloc", Code: int(C.FI_ENOMEM), Text: "out of memory", Peer: -1}
	}
	f.srv.fabric = f.fab
	f.srv.domain = f.dom
	var name [256]C.char
	namelen := C.size_t(len(name))
	var stage *C.char
	gather := C.int(0)
	if f.inf.SoftwareRMA {
		gather = 1
	}
	if rc := C.dd_server_open(f.srv, info, C.size_t(f.avCount), gather, &name[0], &namelen, &stage); rc != 0 {
		C.dd_server_close(f.srv, 0)
		f.srv = nil
		f.closeBase()
		return nil, f.wrapOpenErr("server "+C.GoString(stage), rc)
	}
	f.addr = C.GoBytes(unsafe.Pointer(&name[0]), C.int(namelen))
	f.inf.WaitFD = f.srv.waitfd >= 0
	f.progDone = make(chan struct{})
	go f.progress()
	return f, nil
}

func (f *Fabric) wrapOpenErr(op string, rc C.int) error {
	e := fiErr(op, rc).(*Error)
	e.Text += fmt.Sprintf(" (provider %s, domain %s)", f.inf.Provider, f.inf.Domain)
	return e
}

func (f *Fabric) closeBase() {
	if f.dom != nil {
		C.dd_close_domain(f.dom)
		f.dom = nil
	}
	if f.fab != nil {
		C.dd_close_fabric(f.fab)
		f.fab = nil
	}
	if f.info != nil {
		C.fi_freeinfo(f.info)
		f.info = nil
	}
}

func (f *Fabric) progress() {
	runtime.LockOSThread()
	defer close(f.progDone)
	C.dd_server_run(f.srv)
}

// Close stops progress and closes every reader and export still open, then
// the endpoint, domain and fabric.
func (f *Fabric) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	readers := make([]*Reader, 0, len(f.readers))
	for r := range f.readers {
		readers = append(readers, r)
	}
	exports := make([]*Export, 0, len(f.exports))
	for e := range f.exports {
		exports = append(exports, e)
	}
	f.mu.Unlock()
	for _, r := range readers {
		r.Close()
	}
	C.dd_server_stop(f.srv)
	<-f.progDone
	var err error
	for _, e := range exports {
		if cerr := e.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	f.mu.Lock()
	srv := f.srv
	f.lastWake = uint64(C.dd_server_wakeups(srv))
	f.srv = nil
	f.mu.Unlock()
	if rc := C.dd_server_close(srv, 0); rc != 0 && err == nil {
		err = fiErr("fi_close(server endpoint)", rc)
	}
	f.closeBase()
	return err
}

// Info describes the selected provider and how the package adapts to it.
func (f *Fabric) Info() Info { return f.inf }

// Address is the server endpoint's name, to be exchanged between ranks and
// given to Reader.AddPeer.
func (f *Fabric) Address() []byte { return append([]byte(nil), f.addr...) }

// ProgressWakeups counts how often the progress goroutine woke up (for tests
// and diagnostics: an idle rank should barely wake).
func (f *Fabric) ProgressWakeups() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.srv == nil {
		return f.lastWake
	}
	return uint64(C.dd_server_wakeups(f.srv))
}

// Export is a registered region that peers can read.
type Export struct {
	f    *Fabric
	mr   *C.struct_fid_mr
	key  uint64
	base uint64
	size int
	pin  runtime.Pinner // keeps a Go-heap b in place while registered (no-op off-heap)
}

// Export registers b for remote reads (FI_REMOTE_READ only). b should be
// outside the Go heap (Alloc, or a file mapping) and must stay mapped until
// the Export is closed: the NIC reads it at any time. Go memory is pinned
// for the Export's lifetime, since the provider keeps its address.
func (f *Fabric) Export(b []byte) (*Export, error) {
	if len(b) == 0 {
		return nil, &Error{Op: "export", Code: int(C.FI_EINVAL), Text: "zero-length region", Peer: -1, kind: ErrInvalid}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, &Error{Op: "export", Code: int(C.FI_EINVAL), Text: "fabric is closed", Peer: -1, kind: ErrClosed}
	}
	req := uint64(0)
	if !f.inf.MRProvKey {
		req = f.nextKey.Add(1)
	}
	var mr *C.struct_fid_mr
	var key C.uint64_t
	var desc unsafe.Pointer
	bind := C.int(0)
	if f.inf.MREndpoint {
		bind = 1
	}
	e := &Export{f: f, size: len(b)}
	e.pin.Pin(&b[0])
	C.dd_server_lock(f.srv)
	rc := C.dd_mr_reg(f.dom, f.srv.ep, unsafe.Pointer(&b[0]), C.size_t(len(b)), C.FI_REMOTE_READ, C.uint64_t(req), bind, &mr, &key, &desc)
	if rc == 0 {
		var base C.uint64_t
		if f.inf.MRVirtAddr {
			base = C.uint64_t(uintptr(unsafe.Pointer(&b[0])))
		}
		if rc = C.dd_gsrv_add_export(f.srv, key, base, unsafe.Pointer(&b[0]), C.uint64_t(len(b))); rc != 0 {
			C.dd_close_mr(mr)
		}
	}
	C.dd_server_unlock(f.srv)
	if rc != 0 {
		e.pin.Unpin()
		fe := fiErr("fi_mr_reg(export)", rc).(*Error)
		fe.Text += fmt.Sprintf(" (%d bytes, provider %s)", len(b), f.inf.Provider)
		return nil, fe
	}
	e.mr, e.key = mr, uint64(key)
	if f.inf.MRVirtAddr {
		e.base = uint64(uintptr(unsafe.Pointer(&b[0])))
	}
	f.exports[e] = struct{}{}
	return e, nil
}

// Exports whose MR failed to close stay pinned, and reachable (an unreachable
// Pinner with live pins makes the runtime panic).
var (
	stuckMu      sync.Mutex
	stuckExports []*Export
)

// Key is the remote key a reader passes in ReadOp.Key.
func (e *Export) Key() uint64 { return e.key }

// Base is the remote address of the region's first byte: its virtual address
// with FI_MR_VIRT_ADDR, else 0 (offsets).
func (e *Export) Base() uint64 { return e.base }

// Size is the registered length.
func (e *Export) Size() int { return e.size }

// Close deregisters the region. f.mu is held throughout, so a concurrent
// Fabric.Close cannot free the server (or close the domain) under it.
func (e *Export) Close() error {
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.mr == nil {
		return nil
	}
	delete(f.exports, e)
	mr := e.mr
	e.mr = nil
	C.dd_server_lock(f.srv)
	C.dd_gsrv_del_export(f.srv, C.uint64_t(e.key)) // no gather copies from it after this
	rc := C.dd_close_mr(mr)
	C.dd_server_unlock(f.srv)
	if rc != 0 {
		// The provider may still hold the address: keep b pinned (and
		// the Pinner reachable) for the process's lifetime.
		stuckMu.Lock()
		stuckExports = append(stuckExports, e)
		stuckMu.Unlock()
		return fiErr("fi_close(export mr)", rc)
	}
	e.pin.Unpin()
	return nil
}

// Reader reads remote memory. It owns an endpoint, CQ and AV (and its own
// domain when the provider's threading model needs it). A Reader is meant for
// one goroutine at a time; its mutex (never contended in that use) only makes
// a Close from elsewhere, e.g. Fabric.Close, wait for a running batch (at
// most its deadline) instead of freeing the endpoint under it.
type Reader struct {
	mu      sync.Mutex
	f       *Fabric
	dom     *C.struct_fid_domain
	ownDom  bool
	c       *C.dd_reader
	ops     []C.dd_op // view of c.ops
	peers   []peerEntry
	window  int
	timeout time.Duration
	broken  bool // endpoint torn down after a timeout; recreated lazily
	closed  bool
	pin     pinSet
	mrc     mrCache
	one     [1]ReadOp

	// gather state: ops too large for a round, read with fi_read after
	// the gather (allocated on first use), and counters for tests.
	big      []ReadOp
	bigIdx   []int32
	gathered uint64 // ops served by gather replies
}

type peerEntry struct {
	rank int
	addr []byte
}

// NewReader opens a reader endpoint.
func (f *Fabric) NewReader() (*Reader, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, &Error{Op: "new reader", Code: int(C.FI_EINVAL), Text: "fabric is closed", Peer: -1, kind: ErrClosed}
	}
	r := &Reader{f: f, dom: f.dom, window: f.opts.Window, timeout: f.opts.Timeout}
	if f.ownDom {
		if rc := C.dd_open_domain(f.fab, f.info, &r.dom); rc != 0 {
			return nil, fiErr("fi_domain(reader)", rc)
		}
		r.ownDom = true
	}
	r.c = C.dd_reader_new(f.fab, r.dom, f.info, C.int(r.window), chunkOps, C.int(f.avCount), C.size_t(f.avCount))
	if r.c == nil {
		r.closeDomain()
		return nil, &Error{Op: "new reader", Code: int(C.FI_ENOMEM), Text: "out of memory", Peer: -1}
	}
	var stage *C.char
	if rc := C.dd_reader_setup(r.c, &stage); rc != 0 {
		C.dd_reader_free(r.c)
		r.closeDomain()
		return nil, fiErr("reader "+C.GoString(stage), rc)
	}
	r.ops = unsafe.Slice(r.c.ops, chunkOps)
	r.mrc.init(f.forceLocalMR || f.inf.MRLocal, f.inf.MREndpoint)
	f.readers[r] = struct{}{}
	return r, nil
}

func (r *Reader) closeDomain() {
	if r.ownDom && r.dom != nil {
		C.dd_close_domain(r.dom)
	}
	r.dom = nil
}

// Close closes the reader's endpoint (and domain). Peers are forgotten.
// Nothing is in flight here (every batch completes or tears its endpoint
// down before returning), so local registrations go first: with
// FI_MR_ENDPOINT they are bound to the endpoint.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	r.mrc.purge(r)
	var err error
	if rc := C.dd_reader_teardown(r.c); rc != 0 {
		err = fiErr("fi_close(reader endpoint)", rc)
	}
	C.dd_reader_free(r.c)
	r.c = nil
	r.closeDomain()
	r.f.mu.Lock()
	delete(r.f.readers, r)
	r.f.mu.Unlock()
	return err
}

// AddPeer inserts a peer's address (its Fabric.Address) into the reader's
// address vector. rank only labels errors.
func (r *Reader) AddPeer(rank int, addr []byte) (Peer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return Peer{}, &Error{Op: "av insert", Code: int(C.FI_EINVAL), Text: "reader is closed", Peer: rank, kind: ErrClosed}
	}
	if len(addr) == 0 {
		return Peer{}, &Error{Op: "av insert", Code: int(C.FI_EINVAL), Text: "empty address", Peer: rank, kind: ErrInvalid}
	}
	if len(r.peers) >= r.f.avCount {
		return Peer{}, &Error{Op: "av insert", Code: int(C.FI_ENOSPC), Peer: rank, kind: ErrInvalid,
			Text: fmt.Sprintf("address vector full: %d peers (provider %s allows %d)", len(r.peers), r.f.inf.Provider, r.f.avCount)}
	}
	if err := r.ensureEndpoint(); err != nil {
		return Peer{}, err
	}
	a := append([]byte(nil), addr...)
	idx := len(r.peers)
	if rc := C.dd_av_insert(r.c, C.int(idx), unsafe.Pointer(&a[0])); rc != 0 {
		e := fiErr("fi_av_insert", rc).(*Error)
		e.Peer = rank
		return Peer{}, e
	}
	r.peers = append(r.peers, peerEntry{rank: rank, addr: a})
	return Peer{id: uint32(idx + 1)}, nil
}

// ensureEndpoint recreates the endpoint after a teardown, re-inserting the
// peers in their original order.
func (r *Reader) ensureEndpoint() error {
	if !r.broken {
		return nil
	}
	var stage *C.char
	if rc := C.dd_reader_setup(r.c, &stage); rc != 0 {
		return fiErr("reader "+C.GoString(stage), rc)
	}
	for i, p := range r.peers {
		if rc := C.dd_av_insert(r.c, C.int(i), unsafe.Pointer(&p.addr[0])); rc != 0 {
			e := fiErr("fi_av_insert", rc).(*Error)
			e.Peer = p.rank
			C.dd_reader_teardown(r.c)
			return e
		}
	}
	r.broken = false
	return nil
}

// Read reads one op. See ReadBatch.
func (r *Reader) Read(op ReadOp) (Timing, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.one[0] = op
	t, err := r.readBatch(r.one[:])
	r.one[0] = ReadOp{}
	return t, err
}

// ReadBatch performs every op, keeping at most Window reads in flight.
// It returns when all have completed, one failed (the rest are drained), or
// the deadline (Options.Timeout) passed; in the last case the endpoint is
// torn down before returning so nothing lands in a Dst afterwards, and it is
// recreated by the next call. Dst may be Go heap memory (pinned for the call)
// or off-heap memory. It makes no heap allocation.
func (r *Reader) ReadBatch(ops []ReadOp) (Timing, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.readBatch(ops)
}

func (r *Reader) readBatch(ops []ReadOp) (Timing, error) {
	var tm Timing
	if r.closed {
		return tm, errClosedReader
	}
	if err := r.ensureEndpoint(); err != nil {
		return tm, err
	}
	if len(ops) <= chunkOps {
		return tm, r.readChunk(ops, 0, r.timeout, &tm)
	}
	t0 := time.Now()
	for start := 0; start < len(ops); start += chunkOps {
		end := start + chunkOps
		if end > len(ops) {
			end = len(ops)
		}
		// One deadline for the whole call; a chunk gets what is left (at
		// least 1ns, so an expired deadline fails with the right peer).
		left := max(r.timeout-time.Since(t0), 1)
		if err := r.readChunk(ops[start:end], start, left, &tm); err != nil {
			return tm, err
		}
	}
	return tm, nil
}

// clearOps is the one cleanup of every exit of readChunk and gatherChunk:
// it drops the Go pointers (dst) and gather skip flags of r.ops[0, n) from
// the C-malloc'ed op array, then unpins. C never keeps a Go pointer after a
// call returns, whichever way it returns.
func (r *Reader) clearOps(n int) {
	for i := 0; i < n; i++ {
		c := &r.ops[i]
		c.dst = nil
		c.skip = 0
	}
	r.pin.unpin()
}

func (r *Reader) readChunk(ops []ReadOp, base int, timeout time.Duration, tm *Timing) error {
	n := len(ops)
	defer r.clearOps(n)
	npeers := uint32(len(r.peers))
	maxMsg := r.f.inf.MaxMsgSize
	for i := range ops {
		op := &ops[i]
		if op.Peer.id == 0 || op.Peer.id > npeers {
			return badPeer(base + i)
		}
		if len(op.Dst) == 0 || uint64(len(op.Dst)) > maxMsg {
			return badDst(base+i, r.peers[op.Peer.id-1].rank, len(op.Dst), maxMsg)
		}
		p := unsafe.Pointer(unsafe.SliceData(op.Dst))
		r.pin.pin(p, cap(op.Dst))
		c := &r.ops[i]
		c.dst = p
		c.len = C.uint64_t(len(op.Dst))
		c.addr = C.uint64_t(op.Addr)
		c.key = C.uint64_t(op.Key)
		c.peer = C.uint32_t(op.Peer.id - 1)
		c.desc = nil
	}
	if r.mrc.enabled {
		t0 := time.Now()
		r.mrc.begin(r)
		for i := range ops {
			desc, err := r.mrc.lookup(r, ops, i)
			if err != nil {
				r.mrc.releaseTemp(r)
				fe := err.(*Error)
				fe.Peer = r.peers[ops[i].Peer.id-1].rank
				fe.Index = base + i
				return fe
			}
			r.ops[i].desc = desc
		}
		tm.MR += time.Since(t0)
	}
	rc := C.dd_read_batch(r.c, C.int(n), C.int64_t(timeout))
	res := &r.c.res
	tm.Post += time.Duration(res.post_ns)
	tm.CQWait += time.Duration(res.wait_ns)
	if res.torn_down != 0 {
		r.broken = true
		r.mrc.purgeEndpointBound(r)
	}
	if r.mrc.enabled {
		t0 := time.Now()
		r.mrc.releaseTemp(r)
		tm.MR += time.Since(t0)
	}
	r.clearOps(n) // before building the error (the deferred call repeats it: cheap)
	if rc == 0 {
		return nil
	}
	return r.batchError(res, base, "reads")
}

func (r *Reader) batchError(res *C.dd_result, base int, inflight string) error {
	idx := int(res.failed_op)
	rank := -1
	if idx >= 0 && idx < chunkOps {
		c := &r.ops[idx]
		if int(c.peer) < len(r.peers) {
			rank = r.peers[c.peer].rank
		}
	}
	code := int(res.err)
	e := &Error{Code: code, Peer: rank, Index: base + idx, Text: C.GoString(C.dd_strerror(C.int(code)))}
	detail := ""
	if idx >= 0 && idx < chunkOps {
		c := &r.ops[idx]
		detail = fmt.Sprintf("op %d: %d bytes at remote address %#x, key %#x", base+idx, uint64(c.len), uint64(c.addr), uint64(c.key))
	}
	switch res.stage {
	case C.DD_POST:
		e.Op = "fi_read"
		if t := C.GoString(&res.text[0]); t != "" {
			e.Op = t // gather: fi_tsend or fi_trecv
		}
	case C.DD_REJECT:
		e.Op = "gather"
		e.kind = ErrRejected
		detail += "; target: " + C.GoString(&res.text[0])
	case C.DD_BADREPLY:
		e.Op = "gather"
		detail += "; " + C.GoString(&res.text[0]) + "; endpoint torn down"
	case C.DD_NOMEM:
		e.Op = "gather"
		detail += "; out of memory for the reader's gather buffers"
	case C.DD_CQERR:
		e.Op = "fi_cq_readerr"
		if t := C.GoString(&res.text[0]); t != "" {
			detail += "; provider: " + t
		}
		if res.guessed != 0 {
			detail += " (no op context in the error entry: blamed the oldest read in flight)"
		}
	case C.DD_CQREAD:
		e.Op = "fi_cq_read"
		detail += "; endpoint torn down"
	case C.DD_TIMEOUT:
		e.Op = "read"
		e.kind = ErrTimeout
		e.Text = "deadline exceeded"
		detail += fmt.Sprintf("; deadline %v passed with %d %s in flight", r.timeout, int(res.inflight_at_fail), inflight)
		if res.inflight_at_fail == 0 {
			detail += " (fi_read kept returning -FI_EAGAIN: peer unreachable or not progressing)"
		}
		if res.torn_down != 0 {
			detail += ", endpoint torn down"
		}
	case C.DD_NOEP:
		e.Op = "read"
		detail = "reader has no endpoint"
	}
	if res.torn_down != 0 && res.teardown_rc != 0 {
		// The cancel-by-close guarantee is void: say so loudly.
		detail += "; fi_close(endpoint) failed: " + C.GoString(C.dd_strerror(-res.teardown_rc))
	}
	e.Detail = detail
	return e
}

// ReadGather performs ops like ReadBatch, but on software-RMA providers
// (Info().SoftwareRMA: tcp, sockets, udp, net) it asks each peer for its
// rows with one tagged request per round instead of one fi_read per row:
// the peer's progress thread validates the entries against its exports,
// packs the rows into one reply of at most Options.GatherMaxBytes, and the
// reader copies them from its bounce buffer (off-heap, grow-only) into the
// Dst slices. Up to Options.GatherRounds rounds are in flight. An entry the
// peer rejects (unknown key, range outside the region) fails the call with
// an error that matches ErrRejected and names the peer and the entry; the
// reader and the peer keep working. Rows larger than GatherMaxBytes are read
// with fi_read after the gather, and providers without software RMA use
// ReadBatch for everything. Deadline, teardown and allocation guarantees are
// those of ReadBatch: nothing writes a Dst after return.
func (r *Reader) ReadGather(ops []ReadOp) (Timing, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.f.inf.SoftwareRMA {
		return r.readBatch(ops)
	}
	var tm Timing
	if r.closed {
		return tm, errClosedReader
	}
	if err := r.ensureEndpoint(); err != nil {
		return tm, err
	}
	t0 := time.Now()
	for start := 0; start < len(ops); start += chunkOps {
		end := min(start+chunkOps, len(ops))
		left := max(r.timeout-time.Since(t0), 1)
		if err := r.gatherChunk(ops[start:end], start, left, &tm); err != nil {
			return tm, err
		}
	}
	return tm, nil
}

// GatheredOps counts the ops this reader has had served by gather replies
// (diagnostics and tests: which path a batch took).
func (r *Reader) GatheredOps() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gathered
}

// endGather is the cleanup of every exit of gatherChunk: clearOps for the
// chunk, and the big-row list (it holds the callers' Dst slices).
func (r *Reader) endGather(n int) {
	r.clearOps(n)
	clear(r.big)
	r.big = r.big[:0]
}

func (r *Reader) gatherChunk(ops []ReadOp, base int, timeout time.Duration, tm *Timing) error {
	n := len(ops)
	npeers := uint32(len(r.peers))
	limit := uint64(r.f.opts.GatherMaxBytes)
	if r.big == nil {
		r.big = make([]ReadOp, 0, chunkOps)
		r.bigIdx = make([]int32, 0, chunkOps)
	}
	r.big, r.bigIdx = r.big[:0], r.bigIdx[:0]
	defer r.endGather(n)
	for i := range ops {
		op := &ops[i]
		if op.Peer.id == 0 || op.Peer.id > npeers {
			return badPeer(base + i)
		}
		if len(op.Dst) == 0 {
			return badDst(base+i, r.peers[op.Peer.id-1].rank, 0, 0)
		}
		c := &r.ops[i]
		c.len = C.uint64_t(len(op.Dst))
		c.addr = C.uint64_t(op.Addr)
		c.key = C.uint64_t(op.Key)
		c.peer = C.uint32_t(op.Peer.id - 1)
		c.desc = nil
		if uint64(len(op.Dst)) > limit {
			c.skip = 1
			c.dst = nil
			r.big = append(r.big, *op)
			r.bigIdx = append(r.bigIdx, int32(base+i))
			continue
		}
		c.skip = 0
		p := unsafe.Pointer(unsafe.SliceData(op.Dst))
		r.pin.pin(p, cap(op.Dst))
		c.dst = p
	}
	var rc C.int
	if len(r.big) < n {
		t0 := time.Now()
		rc = C.dd_gather(r.c, C.int(n), C.uint64_t(limit), C.int(r.f.opts.GatherRounds), C.int64_t(timeout))
		res := &r.c.res
		tm.Post += time.Duration(res.post_ns)
		tm.CQWait += time.Duration(res.wait_ns)
		tm.Copy += time.Duration(res.copy_ns)
		r.gathered += uint64(res.done)
		if res.torn_down != 0 {
			r.broken = true
			r.mrc.purgeEndpointBound(r)
		}
		timeout -= time.Since(t0)
	}
	r.clearOps(n) // before readChunk reuses r.ops for the big rows
	if rc != 0 {
		return r.batchError(&r.c.res, base, "gather rounds")
	}
	if len(r.big) == 0 {
		return nil
	}
	// Rows larger than a round: one-sided reads.
	if err := r.ensureEndpoint(); err != nil {
		return err
	}
	err := r.readChunk(r.big, 0, max(timeout, 1), tm)
	if fe, ok := err.(*Error); ok && fe.Index >= 0 && fe.Index < len(r.bigIdx) {
		fe.Index = int(r.bigIdx[fe.Index])
		fe.Detail = fmt.Sprintf("op %d (read with fi_read: larger than GatherMaxBytes %d); ", fe.Index, limit) + fe.Detail
	}
	return err
}

// activeReaders is how many readers of this process are inside a batch
// (tests: every batch leaves the count on every exit).
func activeReaders() int { return int(C.dd_active_readers()) }

// waitFD reports whether the reader's CQ has a wait fd to sleep on (tests).
func (r *Reader) waitFD() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c != nil && C.dd_reader_waitfd(r.c) >= 0
}

// localMR registers [p, p+n) with FI_READ access in the reader's domain.
func (r *Reader) localMR(p unsafe.Pointer, n int) (mrHandle, error) {
	req := uint64(0)
	if !r.f.inf.MRProvKey {
		req = r.f.nextKey.Add(1)
	}
	var mr *C.struct_fid_mr
	var key C.uint64_t
	var desc unsafe.Pointer
	bind := C.int(0)
	if r.f.inf.MREndpoint {
		bind = 1
	}
	rc := C.dd_mr_reg(r.dom, r.c.ep, p, C.size_t(n), C.FI_READ, C.uint64_t(req), bind, &mr, &key, &desc)
	if rc != 0 {
		return mrHandle{}, fiErr("fi_mr_reg(local)", rc)
	}
	liveLocalMRs.Add(1)
	return mrHandle{mr: unsafe.Pointer(mr), desc: desc}, nil
}

func (r *Reader) closeMR(h mrHandle) {
	if h.mr != nil {
		C.dd_close_mr((*C.struct_fid_mr)(h.mr))
		liveLocalMRs.Add(-1)
	}
}

// baselineRead runs the plain C reference loop (dd_baseline) on this
// reader's endpoint: n reads of rowLen bytes at base+offs[i] into dst rows.
// It exists for BenchmarkReadBaselineC.
func (r *Reader) baselineRead(p Peer, dst []byte, rowLen int, offs []uint64, base, key uint64, window int) (time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, errClosedReader
	}
	if err := r.ensureEndpoint(); err != nil {
		return 0, err
	}
	if p.id == 0 || int(p.id) > len(r.peers) {
		return 0, badPeer(0)
	}
	slots := len(dst) / rowLen
	if slots == 0 || len(offs) == 0 {
		return 0, errors.New("fabric: baselineRead: empty dst or offsets")
	}
	coffs := (*C.uint64_t)(C.malloc(C.size_t(8 * len(offs))))
	defer C.free(unsafe.Pointer(coffs))
	copy(unsafe.Slice((*uint64)(unsafe.Pointer(coffs)), len(offs)), offs)
	var pin runtime.Pinner
	pin.Pin(&dst[0])
	defer pin.Unpin()
	el := C.dd_baseline(r.c, C.uint32_t(p.id-1), (*C.char)(unsafe.Pointer(&dst[0])), C.uint64_t(rowLen), C.int(slots),
		coffs, C.int(len(offs)), C.int(window), C.uint64_t(base), C.uint64_t(key), C.int64_t(r.timeout))
	if el < 0 {
		r.broken = true // dd_baseline tore the endpoint down
		return 0, fiErr("baseline fi_read", C.int(el))
	}
	return time.Duration(el), nil
}
