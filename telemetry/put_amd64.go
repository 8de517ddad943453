package telemetry

// put stores v at off for a field that has one writer at a time (an owned
// counter stripe, a claimed ring slot) and that readers load atomically.
//
// On amd64 this is a plain MOVQ: an aligned 8-byte store is single-copy
// atomic, and x86's total store order makes every store a release store,
// so readers that load the publishing word (calls, seq) first and the
// fields after it never see a field older than the publishing word
// promises. The Go compiler keeps stores in program order (every store
// is a step of the memory chain), and puts are never followed by a store
// to the same word in the same Record, so none is dropped as dead.
// atomic.StoreUint64 would be an XCHG, as costly as a LOCK ADD.
func (m mem) put(off int64, v uint64) { *m.p(off) = v }
