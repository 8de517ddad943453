package fabric

/*
#include "dd.h"
*/
import "C"

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
	p := (*C.char)(unsafe.Pointer(&guard.mem[guard.data-len(req)])) // ends at the guard page
	var v C.dd_greq_view
	var out gatherVerdict
	if C.dd_greq_parse(p, C.size_t(len(req)), C.uint32_t(wantName), &v) != 0 {
		return out
	}
	out.Parsed = true
	ex := (*C.dd_gexport)(C.calloc(C.size_t(len(exports)+1), C.sizeof_dd_gexport))
	defer C.free(unsafe.Pointer(ex))
	exs := unsafe.Slice(ex, len(exports)+1)
	for i, e := range exports {
		exs[i] = C.dd_gexport{key: C.uint64_t(e.Key), base: C.uint64_t(e.Base), size: C.uint64_t(e.Size)}
	}
	var total C.uint64_t
	var bad C.uint32_t
	var text [C.DD_GTEXT]C.char
	out.Status = int(C.dd_greq_check(&v, ex, C.int(len(exports)), C.uint64_t(maxBytes), &total, &bad, &text[0], C.size_t(len(text))))
	out.Bad, out.Total = uint32(bad), uint64(total)
	ents := unsafe.Slice((*C.dd_gent)(unsafe.Pointer(v.ent)), int(v.nent))
	for _, e := range ents {
		out.Entries = append(out.Entries, gatherEnt{uint64(e.key), uint64(e.addr), uint64(e.len)})
	}
	return out
}
