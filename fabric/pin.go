package fabric

import (
	"runtime"
	"unsafe"
)

// pinSet pins the destinations of one chunk for the duration of the cgo
// call. Destinations inside the [ptr, ptr+cap) of a slice already pinned
// belong to the same Go object and are not pinned again, so a batch of rows
// cut from one buffer costs one pin and no allocation. Pinning an off-heap
// pointer is a no-op.
type pinSet struct {
	p      runtime.Pinner
	ranges [8]struct{ lo, hi uintptr }
	n      int
	next   int
	pinned bool
}

func (s *pinSet) pin(ptr unsafe.Pointer, capBytes int) {
	a := uintptr(ptr)
	for i := 0; i < s.n; i++ {
		if a >= s.ranges[i].lo && a < s.ranges[i].hi {
			return
		}
	}
	s.p.Pin(ptr)
	s.pinned = true
	slot := s.n
	if s.n < len(s.ranges) {
		s.n++
	} else {
		slot = s.next
		s.next = (s.next + 1) % len(s.ranges)
	}
	s.ranges[slot].lo = a
	s.ranges[slot].hi = a + uintptr(capBytes)
}

func (s *pinSet) unpin() {
	if s.pinned {
		s.p.Unpin()
		s.pinned = false
	}
	s.n = 0
	s.next = 0
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
