// Package engine is the ddstore store: it owns the shards of every variable
// on this rank, the collective calls that create and free them (Add, Init,
// Free), and the read path (Get, GetBatch) that fetches any global row of
// the caller's width group.
//
// Shards live outside the Go heap in shared-memory files under /dev/shm.
// Readers on the same node map a peer's shard read-only and copy rows with
// memcpy; readers on other nodes read through libfabric (package fabric)
// from the same mapping exported with FI_REMOTE_READ. Every Get/GetBatch
// is timed phase by phase and recorded in the process's telemetry segment
// (package telemetry), which ddtop reads.
//
// The hot path (Get, GetBatch on a Store or a Reader) makes no heap
// allocation, takes no global lock and makes no system call beyond the
// fabric's own. Variables are found through an immutable, copy-on-write map
// behind an atomic pointer.
//
// Get and GetBatch also read into GPU memory (GetBatchDevice, GetDevice and
// a Reader's async forms; device.go): rows land in a reader's two pinned
// staging halves and are copied on its own non-blocking stream while the
// next half fills, and a call waits for its own copies only (the gpu_sync
// phase). The loader's Device option puts batches in device memory.
//
// Where a row is read from is decided in one place, package
// engine/placement: a pure function maps each piece of a read (a row, a
// run of rows, or a byte range of the device path) to the rank that
// serves it, the home owner or a replica, and whether that rank's copy is
// mapped here (memcpy) or read through the fabric. Get, GetBatch,
// GetRanges, the device reads, the loader (through them) and failover all
// ask it.
//
// Files, one job each:
//   - store.go: Open, the store's peers and its fabric; close.go: Close.
//   - var.go: variables (Add, Init, Query); update.go: Update, Free.
//   - read.go: Get, GetBatch, GetRanges over placement's pieces;
//     readctx.go: the queue of fabric reads and its flush; reader.go:
//     Readers (one endpoint per goroutine); callstats.go: per-call
//     telemetry.
//   - replica.go: failover to other width groups and UpdateReplicas.
//   - liveness.go: which ranks are dead; collective.go: Barrier,
//     AllGather, AllReduceFloat32.
//   - gpu.go and device.go: the GPU and the device read path.
//   - storage.go, storage_trainer.go, shardfile.go: storage-only ranks
//     and the shard files they load.
//   - loader.go, loader_device.go: the loader (host and device batches).
//   - config.go, options.go: Options and their mapping from package
//     configs.
//
// Replicas (replica.go): with Width < world every width group holds a full
// copy; a row whose owner is dead, unreachable or past the failover
// deadline is re-read from another group inside the same call, and
// UpdateReplicas keeps the copies equal. Storage-only ranks (storage.go):
// a separate launch with Role "storage" loads shards from files, joins the
// trainers at a job rendezvous and serves reads until the job closes.
//
// Subpackages: engine/placement (the one placement decision),
// engine/bootstrap (launcher environment and the exchange of addresses
// between ranks) and engine/mesh (the store's own connections:
// collectives and liveness). The local launcher is cmd/ddrun/launch.
package engine
