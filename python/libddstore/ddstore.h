/*
 * ddstore.h: the C ABI of libddstore.so, the ddstore engine (Go) built with
 * go build -buildmode=c-shared. Usable from C and C++; the Python package
 * ddstore binds it through ctypes.
 *
 * Conventions
 * - Objects (store, loader, epoch, batch lease, pending call) are opaque
 *   64-bit handles (Go runtime/cgo.Handle). 0 is never a valid handle.
 * - Every function returns a code (DDS_OK = 0, or a DDS_ERR_* class, or
 *   DDS_AGAIN / DDS_EOF where documented) and, on error, fills *err (may be
 *   NULL) with the code, the rank concerned (or -1) and the message.
 * - Calls that wait for other ranks (open, add, init, free, barrier, close)
 *   start the operation and hand back a call handle; dds_wait waits for it
 *   in slices of at most slice_ms (so that a caller can handle signals
 *   between slices) and returns DDS_AGAIN until it is done. slice_ms < 0
 *   waits until done. Buffers passed to a started call must stay valid
 *   until dds_wait returned something other than DDS_AGAIN.
 * - Reads (dds_get, dds_get_batch, dds_get_ranges) run in the caller's
 *   thread, bounded by the fabric timeout. Any thread may call them. Their
 *   *_start forms take slice_ms and a call pointer: a read of a store
 *   whose shards are all mapped (no fabric) runs in the caller's thread; a
 *   read that may wait on the fabric runs in the library and the caller
 *   waits up to slice_ms for it. Done by then: its result, *call = 0.
 *   Still running: DDS_AGAIN and a call handle in *call for dds_wait; the
 *   name, index arrays and dst must then stay valid until dds_wait
 *   returned something other than DDS_AGAIN. slice_ms < 0: in the
 *   caller's thread (the plain forms).
 * - The library never keeps a pointer the caller passed in after the call
 *   (or the started operation) returns. Batch data pointers point into
 *   memory outside the Go heap, valid until the lease is released.
 * - A process that forked must not call into the library in the child.
 */
#ifndef DDSTORE_H
#define DDSTORE_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
	DDS_OK = 0,
	/* error codes: written by python/libddstore/gen from fault.Classes */
	DDS_ERR_INDEX = 1,       /* row or range outside the variable */
	DDS_ERR_UNKNOWN_VAR = 2, /* no such variable */
	DDS_ERR_SHORT = 3,       /* destination too small */
	DDS_ERR_DTYPE = 4,       /* bad dtype, row size or data length */
	DDS_ERR_MISMATCH = 5,    /* ranks disagree in a collective, or on the job token */
	DDS_ERR_EXISTS = 6,      /* variable exists */
	DDS_ERR_PEER_DEAD = 7,   /* a rank died; err->rank names it */
	DDS_ERR_CLOSED = 8,      /* store, loader or epoch closed */
	DDS_ERR_TIMEOUT = 9,     /* deadline passed */
	DDS_ERR_INVALID = 10,    /* bad argument, option, handle or launcher environment */
	DDS_ERR_OTHER = 99,      /* anything else (no libfabric or provider, OS) */
	/* end of error codes */
	DDS_AGAIN = 100,         /* dds_wait, dds_epoch_next: not done yet */
	DDS_EOF = 101            /* dds_epoch_next: no batch left */
};

/* Element types (equal to the engine's DType). */
enum {
	DDS_INT32 = 1, DDS_INT64 = 2, DDS_UINT8 = 3, DDS_FLOAT32 = 4,
	DDS_FLOAT64 = 5, DDS_BOOL = 6, DDS_BYTES = 7
};

#define DDS_ERRMSG 1024
typedef struct {
	int32_t code;
	int32_t rank;            /* rank concerned, -1 when none */
	char msg[DDS_ERRMSG];    /* NUL-terminated, truncated to fit */
} dds_error;

#define DDS_MAX_VARS 16
/* One batch handed out by dds_epoch_next: a lease with one reference. */
typedef struct {
	uint64_t batch;          /* lease handle: dds_batch_release when done */
	int64_t epoch, number, rows;
	int32_t nvars;
	void *data[DDS_MAX_VARS];     /* per variable: rows*row_bytes bytes */
	int64_t nbytes[DDS_MAX_VARS];
	int64_t *indices;        /* in: caller's buffer of indices_cap entries */
	int64_t indices_cap;     /* out: the global row of each sample (rows entries) */
} dds_batch;

/* The signals dds_end_on_signals may take: ask for those the program
 * leaves to their default (Python: SIGTERM at SIG_DFL, SIGINT at its
 * KeyboardInterrupt handler). */
#define DDS_END_SIGTERM 1
#define DDS_END_SIGINT 2

#ifndef DDS_NO_PROTOTYPES
/* The name of an error code's class ("INDEX", ..., "OTHER"), NULL for a
 * code of no class. The strings live as long as the library. */
const char *dds_error_name(int code);
/* Pending calls. */
int dds_wait(uint64_t call, int32_t slice_ms, uint64_t *result, dds_error *err);
/* Deletes a handle (store, loader, epoch) after its close; idempotent on 0. */
int dds_handle_free(uint64_t h);

/* Store. opts_json: {"config": path, "node_mode": "auto"|"fabric",
 * "provider", "iface", "read_mode", "width", "timeout_ms",
 * "fabric_timeout_ms", "telemetry": bool, "telemetry_dir", "shard_dir",
 * "bootstrap": {"method", "addr", "dir", "token", "rank", "world",
 * "local_rank", "local_world", "job", "timeout_ms"}}; every key optional
 * ("timeout_ms" outside "bootstrap" bounds collectives and the bootstrap,
 * inside it the bootstrap only). The call's
 * result is the store handle. */
int dds_open_start(const char *opts_json, uint64_t *call, dds_error *err);
int dds_close_start(uint64_t store, uint64_t *call, dds_error *err);
/* For a process ending by an error or an interrupt, when the other ranks
 * are not at a close: removes the store's telemetry segment and shard
 * files at once, without a barrier; the store is closed after it (its
 * handle must still be freed). */
int dds_abandon(uint64_t store, dds_error *err);
/* For a process ending by an interrupt, after its stores were abandoned:
 * under MPICH's mpiexec it exits at once with code 130, its output held
 * open until mpiexec has seen the exit (engine.ExitUnderHydra), so that
 * mpiexec reports the interrupt and kills no rank; under any other
 * launcher it returns, and the caller ends by SIGINT. Flush your own
 * output first. */
void dds_exit_interrupted(void);
/* Ends the process on the signals of flags that it takes: on one of them,
 * a goroutine of the library abandons every store still open (as
 * dds_abandon), writes one line on stderr and ends the process by the
 * signal, within milliseconds, whatever the caller's threads are doing.
 * It takes SIGTERM, and SIGINT only in a Slurm step whose srun SIGKILLs
 * the tasks right after it forwards Ctrl-C (SLURM_STEP_ID set, neither
 * SLURM_DISABLE_STATUS nor SLURM_PTY_PORT): there a handler that needs
 * more than a few milliseconds (a KeyboardInterrupt) never finishes.
 * Returns the flags taken so far; a later call may take more. Taken
 * signals stay taken; a handler the caller installs afterwards (sigaction)
 * replaces the library's. A forked child inherits the handler but not the
 * library's threads: give the child its own handlers back. */
int dds_end_on_signals(int flags);
int dds_add_start(uint64_t store, const char *name, int32_t dtype, int64_t row_elems,
		const void *data, int64_t nbytes, uint64_t *call, dds_error *err);
int dds_init_start(uint64_t store, const char *name, int32_t dtype, int64_t row_elems,
		int64_t local_rows, uint64_t *call, dds_error *err);
int dds_free_start(uint64_t store, const char *name, uint64_t *call, dds_error *err);
int dds_barrier_start(uint64_t store, uint64_t *call, dds_error *err);
/* rank, world, width (ranks per replica group), local rank. */
int dds_info(uint64_t store, int32_t out[4], dds_error *err);
/* Variable description as JSON into out (cap bytes). */
int dds_query(uint64_t store, const char *name, char *out, int64_t cap, dds_error *err);
int dds_update(uint64_t store, const char *name, const void *rows, int64_t nbytes,
		int64_t local_offset, dds_error *err);
int dds_get(uint64_t store, const char *name, int64_t start, int64_t count,
		void *dst, int64_t dst_bytes, dds_error *err);
int dds_get_batch(uint64_t store, const char *name, const int64_t *idx, int64_t n,
		void *dst, int64_t dst_bytes, dds_error *err);
/* Range i = rows [starts[i], starts[i]+counts[i]), packed into dst in order. */
int dds_get_ranges(uint64_t store, const char *name, const int64_t *starts,
		const int64_t *counts, int64_t n, void *dst, int64_t dst_bytes, dds_error *err);
/* The reads in slices (see Conventions): DDS_AGAIN leaves a call in *call. */
int dds_get_start(uint64_t store, const char *name, int64_t start, int64_t count,
		void *dst, int64_t dst_bytes, int32_t slice_ms, uint64_t *call, dds_error *err);
int dds_get_batch_start(uint64_t store, const char *name, const int64_t *idx, int64_t n,
		void *dst, int64_t dst_bytes, int32_t slice_ms, uint64_t *call, dds_error *err);
int dds_get_ranges_start(uint64_t store, const char *name, const int64_t *starts,
		const int64_t *counts, int64_t n, void *dst, int64_t dst_bytes, int32_t slice_ms,
		uint64_t *call, dds_error *err);

/* Loader. opts_json: {"vars": [...], "batch_size", "seed", "shuffle",
 * "drop_last", "workers", "prefetch", "batch_get", "fast_collate",
 * "thread_readers", "replicas", "rank", "timeout_ms"}. out: rows per
 * epoch on this rank, batches per epoch, pool size. */
int dds_loader_new(uint64_t store, const char *opts_json, uint64_t *loader, dds_error *err);
int dds_loader_len(uint64_t loader, int64_t out[3], dds_error *err);
int dds_loader_close(uint64_t loader, dds_error *err);
/* idx NULL (n < 0): the loader's DistributedSampler order; else this rank's rows. */
int dds_loader_epoch(uint64_t loader, int64_t epoch, const int64_t *idx, int64_t n,
		uint64_t *ep, dds_error *err);
/* DDS_OK with *out filled, DDS_AGAIN when not ready within slice_ms, DDS_EOF. */
int dds_epoch_next(uint64_t ep, int32_t slice_ms, dds_batch *out, dds_error *err);
/* Wait in Next (ns), step (ns), batches, rows so far. */
int dds_epoch_stats(uint64_t ep, int64_t out[4], dds_error *err);
int dds_epoch_close(uint64_t ep, dds_error *err);
/* Consumes the rest of the epoch in Go, releasing every batch (the Go
 * consumer's rate, for comparisons): batches, rows, nanoseconds. */
int dds_epoch_drain(uint64_t ep, int64_t out[3], dds_error *err);
int dds_batch_retain(uint64_t batch, dds_error *err);
/* Drops one reference; the last returns the buffers and ends the handle. */
int dds_batch_release(uint64_t batch, dds_error *err);
#endif

#ifdef __cplusplus
}
#endif
#endif
