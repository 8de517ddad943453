package fabric

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// gatherExport is one exported region as the gather validator sees it.
type gatherExport struct{ Key, Base, Size uint64 }

// gatherVerdict is what the target's validator decided about a request.
type gatherVerdict struct {
	Parsed  bool   // framing accepted (else the request is dropped unanswered)
	Status  int    // 0, FI_EINVAL or FI_EMSGSIZE
	Bad     uint32 // first bad entry when Status != 0
	Total   uint64 // reply bytes when Status == 0
	Entries []gatherEnt
}

type gatherEnt struct{ Key, Addr, Len uint64 }

var guard struct {
	sync.Mutex
	mem  []byte
	data int
}

// checkGatherRequest runs the target's validator (dd_greq_parse and
// dd_greq_check, dd_gcheck.c) on req, placed so that it ends at a
// PROT_NONE page: a read past it faults. For FuzzGatherRequest and tests.
func checkGatherRequest(req []byte, exports []gatherExport, wantName uint32, maxBytes uint64) gatherVerdict {
	guard.Lock()
	defer guard.Unlock()
	pg := unix.Getpagesize()
	need := (len(req) + pg - 1) / pg * pg
	if need == 0 {
		need = pg
	}
	if guard.data < need {
		if guard.mem != nil {
			unix.Munmap(guard.mem)
		}
		m, err := unix.Mmap(-1, 0, need+pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			panic(err)
		}
		if err := unix.Mprotect(m[need:], unix.PROT_NONE); err != nil {
			panic(err)
		}
		guard.mem, guard.data = m, need
	}
	copy(guard.mem[guard.data-len(req):guard.data], req)
	p := (*cChar)(unsafe.Pointer(&guard.mem[guard.data-len(req)])) // ends at the guard page
	var v cDdGreqView
	var out gatherVerdict
	if ddGreqParse(p, cSizeT(len(req)), cUint32T(wantName), &v) != 0 {
		return out
	}
	out.Parsed = true
	ex := (*cDdGexport)(cCalloc(cSizeT(len(exports)+1), sizeofDdGexport))
	defer cFree(unsafe.Pointer(ex))
	exs := unsafe.Slice(ex, len(exports)+1)
	for i, e := range exports {
		exs[i] = cDdGexport{key: cUint64T(e.Key), base: cUint64T(e.Base), size: cUint64T(e.Size)}
	}
	var total cUint64T
	var bad cUint32T
	var text [ddGtext]cChar
	out.Status = int(ddGreqCheck(&v, ex, cInt(len(exports)), cUint64T(maxBytes), &total, &bad, &text[0], cSizeT(len(text))))
	out.Bad, out.Total = uint32(bad), uint64(total)
	ents := unsafe.Slice((*cDdGent)(unsafe.Pointer(v.ent)), int(v.nent))
	for _, e := range ents {
		out.Entries = append(out.Entries, gatherEnt{uint64(e.key), uint64(e.addr), uint64(e.len)})
	}
	return out
}
