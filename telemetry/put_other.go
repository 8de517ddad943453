//go:build !amd64

package telemetry

import "sync/atomic"

// put stores v at off for a field that has one writer at a time (an owned
// counter stripe, a claimed ring slot) and that readers load atomically.
// Outside amd64 stores are not release-ordered by the hardware (and not
// single-copy atomic on 32-bit machines), so this is an atomic store
// (STLR on arm64: ordered, but no read-modify-write).
func (m mem) put(off int64, v uint64) { atomic.StoreUint64(m.p(off), v) }
