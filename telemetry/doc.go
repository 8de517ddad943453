// Package telemetry owns the shared-memory segment through which every
// ddstore engine process exports live per-call statistics, and the two
// sides that use it:
//
//   - the writer (engine side): Create maps one segment file per process
//     (default /dev/shm/ddstore-<job>-<rank>.tel, mode 0600, removed on
//     Close). Record, RecordLoader and Heartbeat never block, never
//     allocate and share no lock with readers. Record updates a
//     cache-line padded stripe per (variable, reader) that has a single
//     writer at a time (plain stores, no atomic read-modify-write; the
//     last stripe, shared by out-of-range reader ids, and calls marked
//     Call.Concurrent use atomic adds), the reader's lane of the peer
//     table (plain stores likewise; shared calls add atomically to lane 0)
//     and one seqlock-guarded slot in a lossy ring of recent calls: the
//     reader's own small lane ring (v4: plain stores, one writer), or for
//     shared calls the shared ring (two atomic operations: claim a
//     position, lock its slot).
//   - the reader (ddtop side): Discover lists segments with liveness
//     (live, stale, exited), and a SegmentDir does so for a viewer that
//     lists many times a second (it reads the directory again only when
//     its modification time says it may have changed); Open maps one
//     read-only and validates every size in its header against the file;
//     Snapshot copies counters with atomic loads (SnapshotTo into an old
//     snapshot's memory); ReadRings returns recent call records of every
//     ring merged by time (ReadRing: the shared ring alone), rejecting
//     torn ones and counting overwritten ones as drops; SkipRings counts
//     the drops without copying.
//
// The byte layout is drawn in layout.go and documented in FORMAT.md.
// Readers refuse foreign files (ErrForeign), files whose creation has not
// finished (ErrNotReady), newer formats (ErrVersion; version 1, 2 and 3 files are read), truncated files
// (ErrTruncated) and inconsistent headers (ErrCorrupt); they never panic
// on a bad file.
//
// The package imports nothing else from ddstore.
package telemetry
