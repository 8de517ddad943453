// standin.h: the device model shared by the stand-in libcuda.so.1 and
// libamdhip64.so that package gpu's tests build with gcc. They are never
// used outside those tests.
//
// The model:
//   - "Device memory" is host memory (the allocation list bounds-checks
//     every copy and memset).
//   - Work runs on hardware queues, each drained in order by one worker
//     thread. A stream feeds one queue. CUDA: every stream gets a queue of
//     its own unless CUDA_DEVICE_MAX_CONNECTIONS is set; HIP: the k-th
//     stream created gets queue k % GPU_MAX_HW_QUEUES (default 4) and the
//     default stream holds queue 0, so streams 0, 4, 8, ... share it.
//   - The legacy default stream is blocking: its work waits for all work
//     already queued on blocking streams, and a blocking stream's work
//     waits for the default stream's. Non-blocking streams do neither.
//   - Events are (queue, sequence number) marks: recorded after a stream's
//     last op, complete when the queue has passed it. Stream waits queue a
//     wait op. Event sync sleeps on a condition variable for blocking-sync
//     events and spins (burns CPU) otherwise; stream sync spins, as the
//     real drivers do by default; context sync sleeps.
//   - Freeing device memory and unregistering host memory wait for all
//     queued work first (the real drivers synchronise there too).
//   - Copies from registered host memory are asynchronous; from other
//     memory the stream's earlier work is waited for and the source staged
//     when the copy is queued, and a copy to it waits, as the real drivers
//     do.
//   - The spin kernel (CUDA) and memsets are timed busy periods: a kernel
//     occupies its queue for its ns argument, a memset for
//     n / DDSTORE_STANDIN_MEMSET_MBPS.
//
// Knobs, read at cuInit/hipInit: DDSTORE_STANDIN_DEVICES (default 1; 0 =
// init fails with "no device"), DDSTORE_STANDIN_INIT_ERROR (code init
// returns), DDSTORE_STANDIN_FAIL=name:code (that function returns code),
// DDSTORE_STANDIN_NO_PTX=1 (module loads fail), DDSTORE_STANDIN_MEMSET_MBPS
// (default 1000).
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
	SI_SUCCESS = 0,
	SI_INVALID_VALUE = 1,
	SI_OUT_OF_MEMORY = 2,
	SI_NOT_INITIALIZED = 3,
	SI_NO_DEVICE = 100,
	SI_INVALID_DEVICE = 101,
	SI_INVALID_IMAGE = 200,
	SI_INVALID_CONTEXT = 201,
	SI_INVALID_PTX = 218,
	SI_INVALID_HANDLE = 400,
	SI_NOT_FOUND = 500,
	SI_NOT_READY = 600,
	SI_ALREADY_REGISTERED = 712,
	SI_NOT_REGISTERED = 713,
	SI_UNKNOWN = 999,
};

static const char *si_errstr(int code) {
	switch (code) {
	case SI_SUCCESS: return "no error";
	case SI_INVALID_VALUE: return "invalid argument";
	case SI_OUT_OF_MEMORY: return "out of memory";
	case SI_NOT_INITIALIZED: return "initialization error";
	case SI_NO_DEVICE: return "no GPU device is detected";
	case SI_INVALID_DEVICE: return "invalid device ordinal";
	case SI_INVALID_IMAGE: return "device kernel image is invalid";
	case SI_INVALID_CONTEXT: return "invalid device context";
	case SI_INVALID_PTX: return "a PTX JIT compilation failed";
	case SI_INVALID_HANDLE: return "invalid resource handle";
	case SI_NOT_FOUND: return "named symbol not found";
	case SI_NOT_READY: return "device not ready";
	case SI_ALREADY_REGISTERED: return "part or all of the requested memory range is already mapped";
	case SI_NOT_REGISTERED: return "pointer does not correspond to a registered memory region";
	case 35: return "CUDA driver version is insufficient for CUDA runtime version";
	default: return NULL;
	}
}

// ---- configuration ---------------------------------------------------------

static pthread_mutex_t si_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t si_cv = PTHREAD_COND_INITIALIZER;

static int si_inited;
static int si_devices = 1;
static int si_no_ptx;
static double si_memset_mbps = 1000;
static char si_fail_name[128];
static int si_fail_code;

static int si_env_int(const char *name, int def) {
	const char *v = getenv(name);
	return v && *v ? atoi(v) : def;
}

// si_fail returns the configured failure code when name is the function
// DDSTORE_STANDIN_FAIL names.
static int si_fail(const char *name) {
	return si_fail_code && strcmp(name, si_fail_name) == 0 ? si_fail_code : 0;
}
#define SI_FAILPOINT(name)                      \
	do {                                    \
		int f_ = si_fail(name);         \
		if (f_) return f_;              \
	} while (0)

// ---- queues, ops, streams, events -------------------------------------------

enum { OP_NOP, OP_COPY, OP_MEMSET, OP_BUSY, OP_WAIT };

typedef struct si_queue si_queue;
typedef struct si_op {
	int kind;
	unsigned char *dst;
	const unsigned char *src;
	void *owned; // staging copy of a pageable source, freed after the op
	size_t n;
	int val;
	int64_t ns;
	si_queue *wq; // OP_WAIT: wait until wq has completed wseq
	uint64_t wseq;
	struct si_op *next;
} si_op;

struct si_queue {
	si_op *head, *tail;
	uint64_t submitted, completed;
	int stop, running;
	pthread_t th;
};

#define SI_STREAM_MAGIC 0x5354524dU
#define SI_EVENT_MAGIC 0x4556454eU
typedef struct si_stream {
	unsigned magic;
	si_queue *q;
	uint64_t last; // sequence number of the stream's last op on q
	int blocking;
	int own_queue; // q belongs to this stream alone (destroyed with it)
} si_stream;

typedef struct si_event {
	unsigned magic;
	unsigned flags;
	si_queue *q; // NULL until recorded
	uint64_t seq;
} si_event;

#define SI_MAX_QUEUES 1024
static si_queue *si_all[SI_MAX_QUEUES]; // every queue ever made (never freed)
static int si_nall;
static si_queue si_qdefault;
static si_stream si_default = {SI_STREAM_MAGIC, &si_qdefault, 0, 1, 0};
static si_queue *si_pool[64]; // bounded mode: si_pool[0] is the default queue
static int si_npool;          // 0: a queue per stream
static int si_created;        // streams created since the last reset
static int si_live;           // user streams alive
static si_stream *si_blocking[256];
static int si_nblocking;

static int64_t si_now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void si_sleep_until(int64_t t) {
	struct timespec ts = {t / 1000000000LL, t % 1000000000LL};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
	}
}

static void si_exec(si_op *op) {
	int64_t start = si_now();
	switch (op->kind) {
	case OP_COPY:
		memcpy(op->dst, op->owned ? op->owned : (const void *)op->src, op->n);
		break;
	case OP_MEMSET:
		memset(op->dst, op->val, op->n);
		si_sleep_until(start + (int64_t)((double)op->n / (si_memset_mbps * 1e6) * 1e9));
		break;
	case OP_BUSY:
		si_sleep_until(start + op->ns);
		break;
	}
}

static void *si_worker(void *arg) {
	si_queue *q = arg;
	pthread_mutex_lock(&si_mu);
	for (;;) {
		while (!q->head && !q->stop) pthread_cond_wait(&si_cv, &si_mu);
		if (!q->head) break;
		si_op *op = q->head;
		if (op->kind == OP_WAIT) {
			while (op->wq->completed < op->wseq) pthread_cond_wait(&si_cv, &si_mu);
		} else if (op->kind != OP_NOP) {
			pthread_mutex_unlock(&si_mu);
			si_exec(op);
			pthread_mutex_lock(&si_mu);
		}
		q->head = op->next;
		if (!q->head) q->tail = NULL;
		q->completed++;
		free(op->owned);
		free(op);
		pthread_cond_broadcast(&si_cv);
	}
	pthread_mutex_unlock(&si_mu);
	return NULL;
}

// si_queue_start registers q and starts its worker. si_mu is held.
static int si_queue_start(si_queue *q) {
	if (q->running) return 0;
	if (si_nall == SI_MAX_QUEUES) return SI_OUT_OF_MEMORY;
	if (pthread_create(&q->th, NULL, si_worker, q) != 0) return SI_OUT_OF_MEMORY;
	q->running = 1;
	si_all[si_nall++] = q;
	return 0;
}

static void si_append(si_queue *q, si_op *op) {
	op->next = NULL;
	if (q->tail) q->tail->next = op;
	else q->head = op;
	q->tail = op;
	q->submitted++;
}

static si_op *si_newop(int kind) {
	si_op *op = calloc(1, sizeof *op);
	if (op) op->kind = kind;
	return op;
}

static int si_wait_op(si_stream *s, si_queue *wq, uint64_t wseq) {
	if (wq->completed >= wseq || wq == s->q) return 0; // already passed, or in order anyway
	si_op *w = si_newop(OP_WAIT);
	if (!w) return SI_OUT_OF_MEMORY;
	w->wq = wq;
	w->wseq = wseq;
	si_append(s->q, w);
	s->last = s->q->submitted;
	return 0;
}

// si_submit queues op on s with the legacy default stream's implicit
// synchronisation. si_mu is held.
static int si_submit(si_stream *s, si_op *op) {
	if (s == &si_default) {
		for (int i = 0; i < si_nblocking; i++) {
			int rc = si_wait_op(s, si_blocking[i]->q, si_blocking[i]->last);
			if (rc) return rc;
		}
	} else if (s->blocking) {
		int rc = si_wait_op(s, si_default.q, si_default.last);
		if (rc) return rc;
	}
	si_append(s->q, op);
	s->last = s->q->submitted;
	pthread_cond_broadcast(&si_cv);
	return 0;
}

static void si_wait_seq(si_queue *q, uint64_t seq) {
	while (q->completed < seq) pthread_cond_wait(&si_cv, &si_mu);
}

// si_spin_seq waits like a driver that spins: it never sleeps.
static void si_spin_seq(si_queue *q, uint64_t seq) {
	while (q->completed < seq) {
		pthread_mutex_unlock(&si_mu);
		sched_yield();
		pthread_mutex_lock(&si_mu);
	}
}

// si_drain waits for all work queued so far on every queue. si_mu is held.
static void si_drain(void) {
	uint64_t target[SI_MAX_QUEUES];
	int n = si_nall;
	for (int i = 0; i < n; i++) target[i] = si_all[i]->submitted;
	for (int i = 0; i < n; i++) si_wait_seq(si_all[i], target[i]);
}

// ---- memory ranges ----------------------------------------------------------

typedef struct si_range {
	unsigned char *p;
	size_t n;
} si_range;
typedef struct si_ranges {
	si_range *r;
	int len, cap;
} si_ranges;
static si_ranges si_allocs, si_registered;

static int si_find(si_ranges *rs, const void *p, size_t n) {
	const unsigned char *b = p;
	for (int i = 0; i < rs->len; i++)
		if (b >= rs->r[i].p && n <= rs->r[i].n && (size_t)(b - rs->r[i].p) <= rs->r[i].n - n) return i;
	return -1;
}
static int si_find_start(si_ranges *rs, const void *p) {
	for (int i = 0; i < rs->len; i++)
		if (rs->r[i].p == p) return i;
	return -1;
}
static int si_add(si_ranges *rs, void *p, size_t n) {
	if (rs->len == rs->cap) {
		int cap = rs->cap ? 2 * rs->cap : 64;
		si_range *r = realloc(rs->r, cap * sizeof *r);
		if (!r) return SI_OUT_OF_MEMORY;
		rs->r = r;
		rs->cap = cap;
	}
	rs->r[rs->len++] = (si_range){p, n};
	return 0;
}
static void si_remove(si_ranges *rs, int i) { rs->r[i] = rs->r[--rs->len]; }

// ---- the operations both APIs share (si_mu is taken inside) ----------------

// si_init reads the knobs. bounded_env names the queue-count variable and
// def_queues is its default (0: a queue per stream).
static int si_init(const char *bounded_env, int def_queues) {
	pthread_mutex_lock(&si_mu);
	si_devices = si_env_int("DDSTORE_STANDIN_DEVICES", 1);
	si_no_ptx = si_env_int("DDSTORE_STANDIN_NO_PTX", 0);
	si_memset_mbps = si_env_int("DDSTORE_STANDIN_MEMSET_MBPS", 1000);
	if (si_memset_mbps <= 0) si_memset_mbps = 1000;
	si_fail_code = 0;
	const char *f = getenv("DDSTORE_STANDIN_FAIL");
	if (f && *f) {
		const char *colon = strchr(f, ':');
		size_t len = colon ? (size_t)(colon - f) : strlen(f);
		if (len < sizeof si_fail_name) {
			memcpy(si_fail_name, f, len);
			si_fail_name[len] = 0;
			si_fail_code = colon ? atoi(colon + 1) : SI_UNKNOWN;
		}
	}
	int rc = si_queue_start(&si_qdefault);
	if (!rc && si_live == 0) {
		si_created = 0;
		int n = si_env_int(bounded_env, def_queues);
		si_npool = n < 0 ? 0 : n > 64 ? 64 : n;
		si_pool[0] = &si_qdefault;
		for (int i = 1; i < si_npool && !rc; i++) {
			if (!si_pool[i]) si_pool[i] = calloc(1, sizeof(si_queue));
			rc = si_pool[i] ? si_queue_start(si_pool[i]) : SI_OUT_OF_MEMORY;
		}
	}
	int init_err = si_env_int("DDSTORE_STANDIN_INIT_ERROR", 0);
	if (!rc) rc = init_err ? init_err : si_devices <= 0 ? SI_NO_DEVICE : 0;
	si_inited = rc == 0;
	pthread_mutex_unlock(&si_mu);
	return rc;
}

static int si_alloc(void **p, size_t n) {
	if (!p || n == 0) return SI_INVALID_VALUE;
	void *m = NULL;
	if (posix_memalign(&m, 256, n) != 0) return SI_OUT_OF_MEMORY;
	pthread_mutex_lock(&si_mu);
	int rc = si_add(&si_allocs, m, n);
	pthread_mutex_unlock(&si_mu);
	if (rc) {
		free(m);
		return rc;
	}
	*p = m;
	return 0;
}

// si_free and si_unregister first wait for all queued work, as the real
// drivers' frees synchronise implicitly.
static int si_free(void *p) {
	pthread_mutex_lock(&si_mu);
	si_drain();
	int i = si_find_start(&si_allocs, p);
	if (i >= 0) si_remove(&si_allocs, i);
	pthread_mutex_unlock(&si_mu);
	if (i < 0) return SI_INVALID_VALUE;
	free(p);
	return 0;
}

static int si_register(void *p, size_t n) {
	if (!p || n == 0) return SI_INVALID_VALUE;
	pthread_mutex_lock(&si_mu);
	int rc = si_find(&si_registered, p, 1) >= 0 ? SI_ALREADY_REGISTERED : si_add(&si_registered, p, n);
	pthread_mutex_unlock(&si_mu);
	return rc;
}

static int si_unregister(void *p) {
	pthread_mutex_lock(&si_mu);
	si_drain();
	int i = si_find_start(&si_registered, p);
	if (i >= 0) si_remove(&si_registered, i);
	pthread_mutex_unlock(&si_mu);
	return i < 0 ? SI_NOT_REGISTERED : 0;
}

// si_stream_of resolves a handle: NULL (and legacy) is the default stream.
static si_stream *si_stream_of(void *h) {
	if (!h) return &si_default;
	si_stream *s = h;
	return s->magic == SI_STREAM_MAGIC ? s : NULL;
}

static int si_stream_create(void **out, int blocking) {
	if (!out) return SI_INVALID_VALUE;
	si_stream *s = calloc(1, sizeof *s);
	if (!s) return SI_OUT_OF_MEMORY;
	s->magic = SI_STREAM_MAGIC;
	s->blocking = blocking;
	pthread_mutex_lock(&si_mu);
	int rc = 0;
	if (si_npool > 0) {
		s->q = si_pool[si_created % si_npool];
	} else {
		s->q = calloc(1, sizeof(si_queue));
		rc = s->q ? si_queue_start(s->q) : SI_OUT_OF_MEMORY;
		s->own_queue = 1;
	}
	if (!rc && blocking) {
		if (si_nblocking == 256) rc = SI_OUT_OF_MEMORY;
		else si_blocking[si_nblocking++] = s;
	}
	if (!rc) {
		si_created++;
		si_live++;
	}
	pthread_mutex_unlock(&si_mu);
	if (rc) {
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

static int si_stream_destroy(void *h) {
	si_stream *s = si_stream_of(h);
	if (!s || s == &si_default) return SI_INVALID_HANDLE;
	pthread_mutex_lock(&si_mu);
	for (int i = 0; i < si_nblocking; i++)
		if (si_blocking[i] == s) si_blocking[i] = si_blocking[--si_nblocking];
	si_queue *q = s->own_queue ? s->q : NULL;
	if (q) q->stop = 1; // its worker drains what is queued, then exits
	pthread_cond_broadcast(&si_cv);
	si_live--;
	s->magic = 0;
	pthread_mutex_unlock(&si_mu);
	if (q) pthread_join(q->th, NULL); // the queue itself stays: events may name it
	free(s);
	return 0;
}

static int si_check_dev(const void *p, size_t n) { return si_find(&si_allocs, p, n) >= 0 ? 0 : SI_INVALID_VALUE; }

// si_copy queues a copy on stream h; to_dev says the direction. From
// pageable memory the call first waits for the stream's earlier work and
// stages the source; to pageable memory it waits for the copy itself.
static int si_copy(void *h, void *dst, const void *src, size_t n, int to_dev) {
	pthread_mutex_lock(&si_mu);
	si_stream *s = si_stream_of(h);
	int rc = !s ? SI_INVALID_HANDLE : si_check_dev(to_dev ? dst : src, n);
	const void *host = to_dev ? src : dst;
	int pinned = si_find(&si_registered, host, n) >= 0;
	si_op *op = rc ? NULL : si_newop(OP_COPY);
	if (!rc && !op) rc = SI_OUT_OF_MEMORY;
	if (!rc) {
		op->dst = dst;
		op->src = src;
		op->n = n;
		if (to_dev && !pinned) {
			si_wait_seq(s->q, s->last); // the drivers sync the stream first
			op->owned = malloc(n ? n : 1);
			if (!op->owned) rc = SI_OUT_OF_MEMORY;
			else memcpy(op->owned, src, n);
		}
	}
	if (!rc) rc = si_submit(s, op);
	else free(op);
	if (!rc && !to_dev && !pinned) si_wait_seq(s->q, s->last);
	pthread_mutex_unlock(&si_mu);
	return rc;
}

static int si_memset(void *h, void *p, int v, size_t n) {
	pthread_mutex_lock(&si_mu);
	si_stream *s = si_stream_of(h);
	int rc = !s ? SI_INVALID_HANDLE : si_check_dev(p, n);
	si_op *op = rc ? NULL : si_newop(OP_MEMSET);
	if (!rc && !op) rc = SI_OUT_OF_MEMORY;
	if (!rc) {
		op->dst = p;
		op->val = v;
		op->n = n;
		rc = si_submit(s, op);
	}
	pthread_mutex_unlock(&si_mu);
	return rc;
}

__attribute__((unused)) static int si_busy(void *h, int64_t ns) {
	pthread_mutex_lock(&si_mu);
	si_stream *s = si_stream_of(h);
	si_op *op = s ? si_newop(OP_BUSY) : NULL;
	int rc = !s ? SI_INVALID_HANDLE : !op ? SI_OUT_OF_MEMORY : 0;
	if (!rc) {
		op->ns = ns;
		rc = si_submit(s, op);
	}
	pthread_mutex_unlock(&si_mu);
	return rc;
}

static int si_stream_sync(void *h) {
	pthread_mutex_lock(&si_mu);
	si_stream *s = si_stream_of(h);
	if (s) si_spin_seq(s->q, s->last);
	pthread_mutex_unlock(&si_mu);
	return s ? 0 : SI_INVALID_HANDLE;
}

static int si_ctx_sync(void) {
	pthread_mutex_lock(&si_mu);
	si_drain();
	pthread_mutex_unlock(&si_mu);
	return 0;
}

static int si_event_create(void **out, unsigned flags) {
	if (!out) return SI_INVALID_VALUE;
	si_event *e = calloc(1, sizeof *e);
	if (!e) return SI_OUT_OF_MEMORY;
	e->magic = SI_EVENT_MAGIC;
	e->flags = flags;
	*out = e;
	return 0;
}

static si_event *si_event_of(void *h) {
	si_event *e = h;
	return e && e->magic == SI_EVENT_MAGIC ? e : NULL;
}

static int si_event_destroy(void *h) {
	si_event *e = si_event_of(h);
	if (!e) return SI_INVALID_HANDLE;
	e->magic = 0;
	free(e);
	return 0;
}

static int si_event_record(void *eh, void *sh) {
	pthread_mutex_lock(&si_mu);
	si_event *e = si_event_of(eh);
	si_stream *s = si_stream_of(sh);
	si_op *op = e && s ? si_newop(OP_NOP) : NULL;
	int rc = !e || !s ? SI_INVALID_HANDLE : !op ? SI_OUT_OF_MEMORY : si_submit(s, op);
	if (!rc) {
		e->q = s->q;
		e->seq = s->last;
	}
	pthread_mutex_unlock(&si_mu);
	return rc;
}

static int si_event_done(si_event *e) { return !e->q || e->q->completed >= e->seq; }

static int si_event_query(void *h) {
	pthread_mutex_lock(&si_mu);
	si_event *e = si_event_of(h);
	int rc = !e ? SI_INVALID_HANDLE : si_event_done(e) ? 0 : SI_NOT_READY;
	pthread_mutex_unlock(&si_mu);
	return rc;
}

// si_event_sync sleeps for blocking-sync events and spins otherwise.
static int si_event_sync(void *h, unsigned blocking_flag) {
	pthread_mutex_lock(&si_mu);
	si_event *e = si_event_of(h);
	if (e && e->q) {
		if (e->flags & blocking_flag) si_wait_seq(e->q, e->seq);
		else si_spin_seq(e->q, e->seq);
	}
	pthread_mutex_unlock(&si_mu);
	return e ? 0 : SI_INVALID_HANDLE;
}

static int si_stream_wait_event(void *sh, void *eh) {
	pthread_mutex_lock(&si_mu);
	si_stream *s = si_stream_of(sh);
	si_event *e = si_event_of(eh);
	int rc = !s || !e ? SI_INVALID_HANDLE : e->q ? si_wait_op(s, e->q, e->seq) : 0;
	pthread_cond_broadcast(&si_cv);
	pthread_mutex_unlock(&si_mu);
	return rc;
}

static int si_check_ordinal(int ordinal) {
	if (!si_inited) return SI_NOT_INITIALIZED;
	return ordinal < 0 || ordinal >= si_devices ? SI_INVALID_DEVICE : 0;
}

static int si_copy_string(char *dst, int len, const char *src) {
	if (!dst || len <= 0) return SI_INVALID_VALUE;
	snprintf(dst, (size_t)len, "%s", src);
	return 0;
}
