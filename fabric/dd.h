// dd.h: the C side of package fabric. Types, protocol constants and the
// functions the Go side calls; one .c file per concern, each depending
// only on those listed before it:
//   dd_lib.c            libfabric loaded at run time (dlopen)
//   dd_info.c           provider selection, domains, endpoints, MRs
//   dd_hmem.c           the GPUDirect probe
//   dd_gcheck.c         the gather request validator (pure C; dd_proto.h)
//   dd_server.c         the target's progress server
//   dd_gather_server.c  the target's half of gather
//   dd_watchdog.c       deadlines for provider calls that never return
//   dd_drive.c, .h      the one batch loop of a reader (dd_drive) and its helpers
//   dd_reader.c         reader endpoints; the one-sided reads as a dd_drive protocol
//   dd_gather_client.c  the reader's half of gather as a dd_drive protocol
// C never keeps a Go pointer after the call that received it returns.
#ifndef DD_H
#define DD_H

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
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
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

static inline void dd_sleep_ns(int64_t ns) {
	struct timespec ts = { ns / 1000000000LL, ns % 1000000000LL };
	nanosleep(&ts, NULL);
}

// libfabric's real symbols, resolved at run time by dd_load (dd_lib.c). The
// rest of its API is inline calls through ops tables and needs no symbol.
#define DD_LIBFABRIC "libfabric.so.1"
typedef struct dd_fi_api {
	int (*getinfo)(uint32_t version, const char *node, const char *service, uint64_t flags,
		const struct fi_info *hints, struct fi_info **info);
	void (*freeinfo)(struct fi_info *info);
	struct fi_info *(*dupinfo)(const struct fi_info *info);
	int (*fabric)(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
	const char *(*strerror)(int errnum);
	uint32_t (*version)(void);
} dd_fi_api;
extern dd_fi_api dd_fi;

#define DD_CAPS (FI_RMA | FI_READ | FI_REMOTE_READ | FI_MSG | FI_TAGGED)
#define DD_MR_MODES (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT)

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

#include "dd_proto.h"

typedef struct dd_gpeer { char name[DD_GMAX_NAME]; uint32_t namelen; fi_addr_t fa; int inflight; int used; } dd_gpeer;

enum { DD_R_POSTED = 0, DD_R_READY = 1, DD_R_REPOST = 2 };
enum { DD_S_FREE = 0, DD_S_INFLIGHT = 1, DD_S_PENDING = 2 };

typedef struct dd_gsrv {
	struct fi_context2 rctx[DD_GSRV_RECVS];
	char *rbuf[DD_GSRV_RECVS];
	size_t rlen[DD_GSRV_RECVS]; // bytes received (from the completion)
	uint32_t namelen;           // endpoint name length of this provider
	int rstate[DD_GSRV_RECVS];
	struct fi_context2 sctx[DD_GSRV_SENDS];
	char *sbuf[DD_GSRV_SENDS];
	size_t scap[DD_GSRV_SENDS], slen[DD_GSRV_SENDS];
	int sstate[DD_GSRV_SENDS], speer[DD_GSRV_SENDS];
	uint64_t stag[DD_GSRV_SENDS];
	dd_gexport *ex; int nex, capex;
	dd_gpeer *peers; int npeers, cappeers, victim;
	atomic_ullong served, rejected, strangers;
} dd_gsrv;

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
	uint64_t gkey;        // gather: the job's key requests must carry (0: no check); set before dd_server_open
	int mode;             // DD_PROGRESS_*
	int64_t spin_ns;      // adaptive: keep polling this long after activity
	pthread_t thread;     // the progress thread (dd_server_run), once thread_set
	atomic_int thread_set;
} dd_server;

enum { DD_PROGRESS_ADAPTIVE = 0, DD_PROGRESS_SLEEP = 1, DD_PROGRESS_SPIN = 2 };


typedef struct dd_op {
	void *dst;
	uint64_t len;
	uint64_t addr;
	uint64_t key;
	void *desc;
	uint32_t peer;
	uint32_t skip;   // gather: not part of the gather (read with fi_read instead)
	uint32_t done;   // set when the op's data is in dst (read back after a failed batch)
	uint32_t done_t; // when it completed: 16 ns units since the batch (or gather) started
} dd_op;

enum { DD_OK = 0, DD_POST = 1, DD_CQERR = 2, DD_TIMEOUT = 3, DD_CQREAD = 4, DD_NOEP = 5, DD_REJECT = 6, DD_BADREPLY = 7, DD_NOMEM = 8, DD_STUCK = 9, DD_PEERDEAD = 10 };

// dd_deadset: the ranks that a fabric's user declared dead
// (Fabric.PeerDead), one bit per rank below DD_DEAD_RANKS, and a count of
// the marks. A batch checks it when it starts and whenever it waits
// (dd_dead_op): an op not done whose peer is dead fails the batch at once
// (DD_PEERDEAD) instead of waiting for the deadline. Allocated with calloc: pages never marked are
// never touched.
#define DD_DEAD_RANKS (1 << 20)
typedef struct dd_deadset {
	atomic_ullong gen;
	atomic_uchar bits[DD_DEAD_RANKS / 8];
} dd_deadset;

// DD_GIOV: iovecs of a direct gather receive: the reply's header, then up to
// DD_GIOV-1 contiguous runs of destinations (within every software-RMA
// provider's receive iov limit: tcp;ofi_rxm takes 4).
#define DD_GIOV 4

// One gather round in flight: a request to one peer and its reply.
typedef struct dd_gslot {
	struct fi_context2 sctx, rctx;
	char *req;          // DD_GREQ_MAX bytes
	char *bounce;       // reply buffer, grow-only up to header + cap
	size_t bcap;
	int direct;         // the reply lands in the destinations (iov), not in bounce
	dd_grep_hdr hdr;    // a direct reply's header
	struct iovec iov[DD_GIOV];
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
	uint64_t gkey;      // gather: the job's key, sent with every request
	int giov;           // gather: receive iovecs the provider takes (0 or 1: bounce only)
	// watchdog (dd_watchdog.c): set while a guarded call is inside the provider
	int guarded, wd_slot;
	pthread_t wd_thread;
	atomic_llong wd_deadline; // ns (dd_now), 0 outside a call
	atomic_int wd_fired;
	volatile int wd_op;       // op being posted (the one blamed if a call never returns)
	int fail_close;           // tests: dd_reader_teardown fails without closing
	dd_deadset *dead;         // the fabric's dead ranks (NULL: none checked)
	int32_t *peer_rank;       // rank of each peer (dd_av_insert_n)
	int batch_n;              // ops in the batch running (dd_dead_op)
} dd_reader;

extern atomic_int dd_active;
extern int dd_spin_limit;

// dd_lib.c
int dd_load(char *err, size_t n);
void dd_set_rxm_eager(void);
uint32_t dd_lib_version(void);
int dd_lib_path(char *buf, size_t n);
void dd_freeinfo(struct fi_info *i);

// dd_watchdog.c
#define DD_WD_SIGNAL (SIGRTMIN + 6)
#define DD_WD_GRACE_NS 250000000LL // past the deadline before abandoning
int dd_wd_register(dd_reader *r);
void dd_wd_unregister(dd_reader *r);
int dd_wd_guard(dd_reader *r, int64_t timeout_ns, int (*call)(dd_reader *r, void *arg), void *arg);
uint64_t dd_quarantined_count(void);
uint64_t dd_leaked_eps_count(void);
void dd_set_test_stuck(int n);
extern atomic_ullong dd_leaked_eps;

// dd_info.c
int dd_getinfo(struct fi_info **out, int threading);
void dd_describe(struct fi_info *i, dd_infodesc *d);
struct fi_info *dd_info_next(struct fi_info *i);
struct fi_info *dd_dupinfo(struct fi_info *i);
int dd_open_fabric(struct fi_info *info, struct fid_fabric **fab);
int dd_open_domain(struct fid_fabric *fab, struct fi_info *info, struct fid_domain **dom);
int dd_close(struct fid *f);
int dd_close_fabric(struct fid_fabric *f);
int dd_close_domain(struct fid_domain *d);
int dd_close_mr(struct fid_mr *m);
// dd_hmem.c: the GPUDirect probe (FI_HMEM offered, device memory registers).
int dd_hmem_offered(struct fi_info *info);
int dd_hmem_probe(struct fi_info *info, struct fid_domain *dom, struct fid_ep *ep, int bind_ep,
		uint64_t addr, size_t len, int iface, int device, int *stage);
int dd_endpoint(struct fid_domain *dom, struct fi_info *info, size_t cq_size, size_t av_count,
		int wait_fd, int cq_format, struct fid_ep **ep, struct fid_cq **cq, struct fid_av **av, int *got_fd, const char **stage);
int dd_mr_reg(struct fid_domain *dom, struct fid_ep *ep, void *buf, size_t len, uint64_t access,
		uint64_t key, int bind_ep, struct fid_mr **mr, uint64_t *out_key, void **desc);
const char *dd_strerror(int err);
uint64_t dd_info_key_size(struct fi_info *i);

// dd_server.c
dd_server *dd_server_new(void);
int dd_server_open(dd_server *s, struct fi_info *info, size_t av_count, int gather, char *name, size_t *namelen, const char **stage);
ssize_t dd_server_poll(dd_server *s, int *can_sleep, int want_wait);
int64_t dd_server_cpu_ns(dd_server *s);
void dd_server_run(dd_server *s);
int dd_step_served(int64_t ns);
void dd_server_stop(dd_server *s);
void dd_server_lock(dd_server *s);
void dd_server_unlock(dd_server *s);
int dd_server_close(dd_server *s, int close_domain);
uint64_t dd_server_wakeups(dd_server *s);

// dd_gather_server.c
int dd_gsrv_post_recv(dd_server *s, int i);
int dd_gsrv_start(dd_server *s, size_t av_count);
void dd_gsrv_free(dd_server *s);
int dd_gsrv_add_export(dd_server *s, uint64_t key, uint64_t base, void *ptr, uint64_t size);
void dd_gsrv_del_export(dd_server *s, uint64_t key);
int dd_gsrv_peer(dd_server *s, const char *name, uint32_t len);
int dd_gsrv_post_send(dd_server *s, int k);
void dd_gsrv_handle(dd_server *s, int i, int k);
int dd_gsrv_kick(dd_server *s);
void dd_gsrv_complete(dd_server *s, void *ctx, size_t len);
int dd_gsrv_progress(dd_server *s, struct fi_cq_tagged_entry *e, ssize_t n);
int dd_gsrv_error(dd_server *s, struct fi_cq_err_entry *err);
uint64_t dd_gsrv_served(dd_server *s);
uint64_t dd_gsrv_rejected(dd_server *s);
uint64_t dd_gsrv_strangers(dd_server *s);
extern atomic_ullong dd_gather_strangers;
uint64_t dd_gather_strangers_count(void);

// dd_drive.c: the helpers of the one batch loop (dd_drive.h).
void dd_active_enter(dd_reader *r);
void dd_active_leave(dd_reader *r);
int dd_active_readers(void);
void dd_result_reset(dd_result *res);
void dd_set_fail(dd_result *res, int stage, int err, int op);
dd_deadset *dd_deadset_new(void);
void dd_deadset_mark(dd_deadset *d, int rank);
int dd_dead_op(dd_reader *r, uint64_t *seen);
ssize_t dd_cq_readerr(dd_reader *r, struct fi_cq_err_entry *e);
ssize_t dd_cq_poll(dd_reader *r, struct fi_cq_entry *comp, dd_result *res, int64_t *t);
int dd_batch_fail(dd_reader *r, dd_result *res, int inflight);
int64_t dd_reader_wait(dd_reader *r, int64_t t, int64_t last_done, int64_t deadline, int64_t *sleep_ns, int *busy, int64_t *wait_ns);
void dd_record_cq_error(dd_reader *r, struct fi_cq_err_entry *e, dd_result *res);

// dd_reader.c
dd_reader *dd_reader_new(struct fid_fabric *fab, struct fid_domain *dom, struct fi_info *info, int window, int cap, int maxpeers, size_t av_count);
int dd_reader_setup(dd_reader *r, const char **stage);
int dd_reader_teardown(dd_reader *r);
void dd_reader_free(dd_reader *r);
int dd_av_insert_n(dd_reader *r, int idx0, int n, const int32_t *ranks, const void *addrs);
int dd_oldest(dd_reader *r, int next, int n);
int dd_read_batch(dd_reader *r, int n, int64_t timeout_ns);
int dd_guarded_read_batch(dd_reader *r, int n, int64_t timeout_ns);
int64_t dd_baseline(dd_reader *r, uint32_t peer, char *dst, uint64_t len, int slots,
		const uint64_t *offs, int n, int window, uint64_t base, uint64_t key, int64_t timeout_ns);
int dd_reader_waitfd(dd_reader *r);

// dd_gather_client.c
int dd_gather_prepare(dd_reader *r, int rounds);
int dd_gslot_of(dd_reader *r, void *ctx, int rounds, int *is_recv);
int dd_gather_oldest(dd_reader *r, int rounds, int pos, int m);
uint64_t dd_gather_round_cap(uint64_t total, uint64_t cap, int rounds);
int dd_gather(dd_reader *r, int n, uint64_t cap, int rounds, int64_t timeout_ns);
int dd_guarded_gather(dd_reader *r, int n, uint64_t cap, int rounds, int64_t timeout_ns);
int dd_grep_take(const dd_grep_hdr *rh, const char *src, uint64_t id, uint64_t bytes,
	dd_op *ops, const int32_t *order, int count, int direct, uint32_t done_t, dd_result *res);

#endif
