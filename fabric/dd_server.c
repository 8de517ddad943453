// dd_server.c: The target's server endpoint and its progress thread.
// Part of package fabric (compiled by cgo); see dd.h.

#include "dd.h"

// ---- server endpoint and its progress loop ---------------------------------

dd_server *dd_server_new(void) {
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

int dd_server_open(dd_server *s, struct fi_info *info, size_t av_count, int gather, char *name, size_t *namelen, const char **stage) {
	int got_fd = 0;
	int rc = dd_endpoint(s->domain, info, 1024, av_count, 1, FI_CQ_FORMAT_TAGGED, &s->ep, &s->cq, &s->av, &got_fd, stage);
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
	if (s->g) s->g->namelen = (uint32_t)*namelen; // readers' names have this length
	// Progress once before anyone reads from us (shm first-contact).
	struct fi_cq_tagged_entry e[4];
	fi_cq_read(s->cq, e, 4);
	return 0;
}

// dd_server_poll runs one progress step under the domain lock. It returns
// the number of completions read (or the negative error), and sets
// *can_sleep to 1 when fi_trywait says the wait fd may be slept on, 0 when
// it says there is work (-FI_EAGAIN), and -1 when sleeping on the fd is not
// possible (fi_cq_read or fi_trywait failed otherwise): back off then.
ssize_t dd_server_poll(dd_server *s, int *can_sleep, int want_wait) {
	struct fi_cq_tagged_entry e[16];
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
	} else if (n == -FI_EAGAIN && s->waitfd >= 0 && want_wait) {
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

// A polling step (fi_cq_read) that finds nothing takes about 1 µs on tcp
// (under 2 µs in 97% of idle steps on a loaded 2-vCPU VM); one that serves
// a 3 KB read, 4 to 16 µs. Reading the thread's CPU clock around every
// step would tell work from preemption, but it is a system call (1.4 µs
// there) on the path of the next request, so the wall clock picks the
// candidates: a step of at least DD_STEP_SERVE_NS and under
// DD_STEP_PREEMPT_NS. A candidate counts when the thread was not preempted
// since the last candidate (dd_preempted: one getrusage, after the reply
// has gone out). So a loaded machine, where a polling target only takes
// the core its reader needs, sees the plain window; a wrong guess keeps
// the target polling for one more window.
#define DD_STEP_SERVE_NS   2000
#define DD_STEP_PREEMPT_NS 1000000

// dd_step_served reports whether a polling step that read no completion
// and lasted ns may have served a one-sided read (see DD_STEP_SERVE_NS).
int dd_step_served(int64_t ns) { return ns >= DD_STEP_SERVE_NS && ns < DD_STEP_PREEMPT_NS; }

// dd_preempted reports whether the calling thread was preempted (an
// involuntary context switch) since the count in *seen, which it updates;
// when the count cannot be read, it says yes.
static int dd_preempted(long *seen) {
	struct rusage ru;
	if (getrusage(RUSAGE_THREAD, &ru) != 0) return 1;
	int p = ru.ru_nivcsw != *seen;
	*seen = ru.ru_nivcsw;
	return p;
}

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
//
// Progress modes (s->mode): DD_PROGRESS_SLEEP sleeps as above as soon as a
// step finds nothing. DD_PROGRESS_ADAPTIVE (the default), on a wait fd,
// keeps polling for s->spin_ns after the last wakeup, completion or served
// read before it sleeps again: a reader's next read finds the target awake
// (a lone read over tcp otherwise pays a thread wakeup on the target),
// while an idle rank still sleeps on the fd and never wakes. A one-sided
// read served by the target leaves no completion on its CQ, so a polling
// step that took DD_STEP_SERVE_NS of wall time without the thread being
// preempted counts as a served read (dd_step_served, dd_preempted).
// DD_PROGRESS_SPIN never sleeps (a core per rank, like the C++ original's
// target).
void dd_server_run(dd_server *s) {
	int64_t sleep_ns = s->min_sleep_ns;
	int64_t confirm_ns = 0; // after one costly step: the sleep to return to if the next step is idle
	int64_t last_work = dd_now();
	int64_t last_active = 0; // last wakeup, completion or served read (adaptive window)
	long nivcsw = -1;        // involuntary context switches at the last candidate step
	dd_preempted(&nivcsw);
	s->thread = pthread_self();
	atomic_store(&s->thread_set, 1);
	while (!atomic_load(&s->stop)) {
		int can_sleep = 0;
		int64_t t0 = s->mode == DD_PROGRESS_ADAPTIVE && s->waitfd >= 0 && last_active ? dd_now() : 0;
		int spinning = s->mode == DD_PROGRESS_SPIN || (t0 && t0 - last_active < s->spin_ns);
		int64_t c0 = s->waitfd < 0 && !spinning ? dd_thread_cpu() : -1; // only the back-off path needs it
		ssize_t n = dd_server_poll(s, &can_sleep, !spinning);
		int64_t t1 = dd_now();
		if (n > 0) { sleep_ns = s->min_sleep_ns; confirm_ns = 0; last_work = t1; last_active = t1; continue; }
		if (spinning && n == -FI_EAGAIN) {
			if (t0 && dd_step_served(t1 - t0) && !dd_preempted(&nivcsw)) last_active = t1;
			continue;
		}
		if (s->waitfd >= 0 && can_sleep >= 0) {
			if (!can_sleep) continue; // fi_trywait: work pending, progress again
			struct pollfd p[2] = { { s->waitfd, POLLIN, 0 }, { s->stopfd, POLLIN, 0 } };
			poll(p, 2, -1);
			atomic_fetch_add(&s->wakeups, 1);
			last_active = dd_now();
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

void dd_server_stop(dd_server *s) {
	uint64_t one = 1;
	atomic_store(&s->stop, 1);
	if (write(s->stopfd, &one, sizeof one) < 0) { }
}

void dd_server_lock(dd_server *s) { pthread_mutex_lock(&s->lock); }
void dd_server_unlock(dd_server *s) { pthread_mutex_unlock(&s->lock); }

int dd_server_close(dd_server *s, int close_domain) {
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

uint64_t dd_server_wakeups(dd_server *s) { return atomic_load(&s->wakeups); }

// dd_server_cpu_ns is the CPU time the progress thread has used, or -1.
int64_t dd_server_cpu_ns(dd_server *s) {
	clockid_t c;
	struct timespec ts;
	if (!atomic_load(&s->thread_set) || pthread_getcpuclockid(s->thread, &c) != 0 || clock_gettime(c, &ts) != 0) return -1;
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
