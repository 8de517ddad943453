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
// Replicas (replica.go): with Width < world every width group holds a full
// copy; a row whose owner is dead, unreachable or past the failover
// deadline is re-read from another group inside the same call, and
// UpdateReplicas keeps the copies equal. Storage-only ranks (storage.go):
// a separate launch with Role "storage" loads shards from files, joins the
// trainers at a job rendezvous and serves reads until the job closes.
//
// Subpackages: engine/bootstrap (launcher environment and the exchange of
// addresses between ranks) and engine/launch (a local launcher).
package engine
