package engine

import _ "unsafe" // for go:linkname

// nanotime is the runtime's monotonic clock in ns: one vDSO read, where
// time.Now makes two (wall and monotonic). Used to time read phases.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64
