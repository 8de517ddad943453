package fabric

import (
	"sync/atomic"
	"unsafe"
)

// Local registration of read destinations, used only when the provider
// requires FI_MR_LOCAL. Destinations inside a Memory from Alloc are
// registered whole and cached (a bounded LRU per reader, entries dropped when
// the Memory is freed); any other destination (Go heap) is registered for
// the one chunk and deregistered right after, because Go may reuse that
// memory. Such a temporary registration covers the run of following ops whose
// Dst lies in the same buffer (inside the first one's [ptr, ptr+cap), i.e.
// the same pinned object), so rows cut from one buffer cost one registration
// per chunk, not one per row. Nothing stays registered after Reader.Close.

const mrCacheSize = 16

type mrHandle struct {
	mr, desc unsafe.Pointer
}

type mrEntry struct {
	lo, hi uintptr
	id     uint64
	h      mrHandle
	used   uint64
}

type mrCache struct {
	enabled bool
	epBound bool // FI_MR_ENDPOINT: registrations die with the endpoint
	ents    [mrCacheSize]mrEntry
	n       int
	tick    uint64
	gen     uint64
	temp    []tempMR
}

// tempMR is a registration that lives for one chunk.
type tempMR struct {
	lo, hi uintptr
	h      mrHandle
}

// tempScan is how many of the latest temporary registrations a lookup
// checks (rows of one buffer hit the latest; a bound keeps lookups O(1)).
const tempScan = 4

// liveLocalMRs counts open local registrations (tests check for leaks).
var liveLocalMRs atomic.Int64

func (c *mrCache) init(enabled, epBound bool) {
	c.enabled = enabled
	c.epBound = epBound
	if enabled {
		c.temp = make([]tempMR, 0, chunkOps)
	}
	c.gen = memGen.Load()
}

// begin starts a chunk: it drops cached registrations of freed Memory.
func (c *mrCache) begin(r *Reader) {
	if g := memGen.Load(); g != c.gen {
		c.dropFreed(r)
		c.gen = g
	}
}

// lookup returns the descriptor for ops[i].Dst, registering if needed.
func (c *mrCache) lookup(r *Reader, ops []ReadOp, i int) (unsafe.Pointer, error) {
	p := unsafe.Pointer(unsafe.SliceData(ops[i].Dst))
	n := len(ops[i].Dst)
	a := uintptr(p)
	for i := 0; i < c.n; i++ {
		e := &c.ents[i]
		if a >= e.lo && a+uintptr(n) <= e.hi {
			e.used = c.tick
			return e.h.desc, nil
		}
	}
	if m, ok := findMemory(a, n); ok {
		slot := -1
		if c.n < mrCacheSize {
			slot = c.n
		} else {
			for i := 0; i < c.n; i++ { // least recently used, not used by this chunk
				if c.ents[i].used < c.tick && (slot < 0 || c.ents[i].used < c.ents[slot].used) {
					slot = i
				}
			}
		}
		if slot >= 0 {
			h, err := r.localMR(m.base, int(m.hi-m.lo))
			if err != nil {
				return nil, err
			}
			if slot < c.n {
				r.closeMR(c.ents[slot].h)
			} else {
				c.n++
			}
			c.ents[slot] = mrEntry{lo: m.lo, hi: m.hi, id: m.id, h: h, used: c.tick}
			return h.desc, nil
		}
	}
	for k := len(c.temp) - 1; k >= 0 && k >= len(c.temp)-tempScan; k-- {
		if t := &c.temp[k]; a >= t.lo && a+uintptr(n) <= t.hi {
			return t.h.desc, nil
		}
	}
	ext := tempExtent(ops, i)
	h, err := r.localMR(p, ext)
	if err != nil {
		return nil, err
	}
	c.temp = append(c.temp, tempMR{lo: a, hi: a + uintptr(ext), h: h})
	return h.desc, nil
}

// tempExtent is the length to register from ops[i].Dst's start: up to the
// end of the last op in the run of ops i, i+1, ... whose Dst lies inside
// ops[i].Dst's [ptr, ptr+cap) (one Go object, pinned as a whole).
func tempExtent(ops []ReadOp, i int) int {
	lo := uintptrOf(ops[i].Dst)
	capEnd := lo + uintptr(cap(ops[i].Dst))
	end := lo + uintptr(len(ops[i].Dst))
	for j := i + 1; j < len(ops); j++ {
		a := uintptrOf(ops[j].Dst)
		e := a + uintptr(len(ops[j].Dst))
		if a < lo || e > capEnd {
			break
		}
		end = max(end, e)
	}
	return int(end - lo)
}

// releaseTemp deregisters the chunk's temporary registrations and starts a
// new chunk.
func (c *mrCache) releaseTemp(r *Reader) {
	for i := range c.temp {
		r.closeMR(c.temp[i].h)
		c.temp[i] = tempMR{}
	}
	c.temp = c.temp[:0]
	c.tick++
}

func (c *mrCache) dropFreed(r *Reader) {
	j := 0
	for i := 0; i < c.n; i++ {
		if memoryLive(c.ents[i].id) {
			c.ents[j] = c.ents[i]
			j++
		} else {
			r.closeMR(c.ents[i].h)
		}
	}
	for i := j; i < c.n; i++ {
		c.ents[i] = mrEntry{}
	}
	c.n = j
}

func (c *mrCache) purge(r *Reader) {
	c.releaseTemp(r)
	for i := 0; i < c.n; i++ {
		r.closeMR(c.ents[i].h)
		c.ents[i] = mrEntry{}
	}
	c.n = 0
}

// abandon forgets every registration without closing it: the provider may
// still use them (a failed endpoint close, an abandoned call).
func (c *mrCache) abandon() {
	clear(c.temp)
	c.temp = c.temp[:0]
	clear(c.ents[:])
	c.n = 0
	c.tick++
}

func (c *mrCache) purgeEndpointBound(r *Reader) {
	if c.epBound {
		c.purge(r)
	}
}
