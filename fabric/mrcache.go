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
// memory. Nothing stays registered after Reader.Close.

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
	temp    []mrHandle
}

// liveLocalMRs counts open local registrations (tests check for leaks).
var liveLocalMRs atomic.Int64

func (c *mrCache) init(enabled, epBound bool) {
	c.enabled = enabled
	c.epBound = epBound
	if enabled {
		c.temp = make([]mrHandle, 0, chunkOps)
	}
	c.gen = memGen.Load()
}

func (c *mrCache) lookup(r *Reader, p unsafe.Pointer, n int) (unsafe.Pointer, error) {
	a := uintptr(p)
	if g := memGen.Load(); g != c.gen {
		c.dropFreed(r)
		c.gen = g
	}
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
	h, err := r.localMR(p, n)
	if err != nil {
		return nil, err
	}
	c.temp = append(c.temp, h)
	return h.desc, nil
}

// releaseTemp deregisters the chunk's temporary registrations and starts a
// new chunk.
func (c *mrCache) releaseTemp(r *Reader) {
	for i := range c.temp {
		r.closeMR(c.temp[i])
		c.temp[i] = mrHandle{}
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

func (c *mrCache) purgeEndpointBound(r *Reader) {
	if c.epBound {
		c.purge(r)
	}
}
