package telemetry

import (
	"strings"
	"sync/atomic"
	"unsafe"
)

// mem is a view of a mapped segment. Every 8-byte field is accessed with
// sync/atomic through a pointer into the mapping; callers have validated
// that off+8 <= size before asking.
type mem struct {
	base unsafe.Pointer
	size int64
}

func (m mem) p(off int64) *uint64 { return (*uint64)(unsafe.Add(m.base, off)) }

func (m mem) load(off int64) uint64     { return atomic.LoadUint64(m.p(off)) }
func (m mem) loadI(off int64) int64     { return int64(atomic.LoadUint64(m.p(off))) }
func (m mem) store(off int64, v uint64) { atomic.StoreUint64(m.p(off), v) }
func (m mem) add(off int64, v uint64)   { atomic.AddUint64(m.p(off), v) }
func (m mem) cas(off int64, old, new uint64) bool {
	return atomic.CompareAndSwapUint64(m.p(off), old, new)
}

// putString stores s NUL-padded into the n-byte field at off, 8 bytes at a
// time with atomic stores (n is a multiple of 8). s is truncated to n bytes.
func (m mem) putString(off int64, n int, s string) {
	var buf [nameLen]byte
	copy(buf[:n], s)
	for i := 0; i < n; i += 8 {
		var w uint64
		for j := 7; j >= 0; j-- {
			w = w<<8 | uint64(buf[i+j])
		}
		m.store(off+int64(i), w)
	}
}

// getString loads the n-byte NUL-padded field at off.
func (m mem) getString(off int64, n int) string {
	var buf [nameLen]byte
	for i := 0; i < n; i += 8 {
		w := m.load(off + int64(i))
		for j := 0; j < 8; j++ {
			buf[i+j] = byte(w >> (8 * j))
		}
	}
	return cString(buf[:n])
}

// cString decodes a NUL-padded byte field into a valid UTF-8 string.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			b = b[:i]
			break
		}
	}
	return strings.ToValidUTF8(string(b), "?")
}
