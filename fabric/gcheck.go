package fabric

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The gather protocol's pure C halves, callable from Go for the tests and
// fuzz targets (gcheck_test.go): the target's validator and reply builder
// (dd_gcheck.c) and the reader's reply check (dd_grep_take). Every buffer
// the C reads or writes ends at a PROT_NONE page, so an access past it
// faults.

// gatherExport is one exported region as the gather validator sees it:
// Size bytes at address Base, holding Data (zeros past len(Data)).
type gatherExport struct {
	Key, Base, Size uint64
	Data            []byte
}

// gatherVerdict is what the target's validator decided about a request,
// and the reply it built.
type gatherVerdict struct {
	Parsed   bool   // key and framing accepted (else the request is dropped unanswered)
	Stranger bool   // dropped for another gather key (DD_GREQ_STRANGER)
	Status   int    // 0, FI_EINVAL or FI_EMSGSIZE
	Bad      uint32 // first bad entry when Status != 0
	Total    uint64 // reply bytes when Status == 0
	Entries  []gatherEnt
	Reply    []byte // the reply as sent: header, then rows or text
}

type gatherEnt struct{ Key, Addr, Len uint64 }

// guardPage is a mapping whose last page is PROT_NONE; at(n) is n bytes
// that end at that page.
type guardPage struct {
	mem  []byte
	data int
}

func (g *guardPage) at(n int) []byte {
	pg := unix.Getpagesize()
	need := max((n+pg-1)/pg*pg, pg)
	if g.data < need {
		if g.mem != nil {
			unix.Munmap(g.mem)
		}
		m, err := unix.Mmap(-1, 0, need+pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			panic(err)
		}
		if err := unix.Mprotect(m[need:], unix.PROT_NONE); err != nil {
			panic(err)
		}
		g.mem, g.data = m, need
	}
	b := g.mem[g.data-n : g.data : g.data]
	clear(b)
	return b
}

func (g *guardPage) ptr(b []byte) *cChar {
	if len(b) == 0 {
		return (*cChar)(unsafe.Pointer(unsafe.SliceData(g.mem[g.data:g.data])))
	}
	return (*cChar)(unsafe.Pointer(&b[0]))
}

// guards: the request or reply, the reply's destinations, and up to
// len(guards.ex) exports. Off the Go heap (mmap), so C may keep no pointer
// into Go memory.
var guards struct {
	sync.Mutex
	msg, out guardPage
	ex       [8]guardPage
}

// checkGatherRequest runs the target's validator (dd_greq_parse with the
// target's gather key gkey, dd_greq_check) on req with the exports (at
// most 8) and, when it parsed, builds the reply (dd_grep_build) from the
// exports' data, as dd_gsrv_handle does.
func checkGatherRequest(req []byte, exports []gatherExport, wantName uint32, gkey, maxBytes uint64) gatherVerdict {
	guards.Lock()
	defer guards.Unlock()
	if len(exports) > len(guards.ex) {
		panic("checkGatherRequest: too many exports")
	}
	m := guards.msg.at(len(req))
	copy(m, req)
	var v cDdGreqView
	var out gatherVerdict
	if rc := ddGreqParse(guards.msg.ptr(m), cSizeT(len(req)), cUint32T(wantName), cUint64T(gkey), &v); rc != 0 {
		out.Stranger = rc == ddGreqStranger
		return out
	}
	out.Parsed = true
	ex := (*cDdGexport)(cCalloc(cSizeT(len(exports)+1), sizeofDdGexport))
	defer cFree(unsafe.Pointer(ex))
	exs := unsafe.Slice(ex, len(exports)+1)
	for i, e := range exports {
		d := guards.ex[i].at(int(e.Size))
		copy(d, e.Data)
		exs[i] = cDdGexport{key: cUint64T(e.Key), base: cUint64T(e.Base), size: cUint64T(e.Size), ptr: guards.ex[i].ptr(d)}
	}
	var total cUint64T
	var bad cUint32T
	var text [ddGtext]cChar
	status := ddGreqCheck(&v, ex, cInt(len(exports)), cUint64T(maxBytes), &total, &bad, &text[0], cSizeT(len(text)))
	out.Status = int(status)
	out.Bad, out.Total = uint32(bad), uint64(total)
	for _, e := range unsafe.Slice((*cDdGent)(unsafe.Pointer(v.ent)), int(v.nent)) {
		out.Entries = append(out.Entries, gatherEnt{uint64(e.key), uint64(e.addr), uint64(e.len)})
	}
	rep := guards.out.at(int(ddGrepSize(status, total, &text[0])))
	n := ddGrepBuild(guards.out.ptr(rep), &v, ex, cInt(len(exports)), status, bad, total, &text[0])
	out.Reply = append([]byte(nil), rep[:n]...)
	if int(n) != len(rep) {
		out.Reply = nil // dd_grep_size and dd_grep_build disagree
	}
	return out
}

// replyVerdict is what the reader made of a gather reply.
type replyVerdict struct {
	OK     bool
	Stage  int    // DD_REJECT or DD_BADREPLY when not OK
	Err    int    // the target's status, or FI_EIO
	Failed int    // the op it blames
	Text   string // res.text
	Rows   [][]byte
	Done   []bool // op.done
	DoneT  []uint32
	NDone  int  // res.done
	Fenced bool // the bytes around the destinations are intact
}

// takeGatherReply runs the reader's reply check (dd_grep_take) for a round
// of ops with lens (in request order), asked with id: hdr is the reply's
// header (gatherRepHdr bytes) and payload what followed it. The ops lie in
// the C op array in reverse request order (order[k] = n-1-k), their
// destinations back to back with 8-byte fences between them, prefilled
// with 0xA5. direct: the reply was received in place (no copy).
func takeGatherReply(hdr, payload []byte, id uint64, lens []uint64, direct bool, doneT uint32) replyVerdict {
	guards.Lock()
	defer guards.Unlock()
	n := len(lens)
	var sum uint64
	for _, l := range lens {
		sum += l
	}
	src := guards.msg.at(int(max(sum, ddGtext)) + gatherRepHdr) // what the reader's buffers hold
	copy(src, hdr[:gatherRepHdr])
	copy(src[gatherRepHdr:], payload)
	const fence = 8
	dst := guards.out.at(int(sum) + fence*(n+1))
	for i := range dst {
		dst[i] = 0xA5
	}
	ops := (*cDdOp)(cCalloc(cSizeT(n+1), sizeofDdOp))
	defer cFree(unsafe.Pointer(ops))
	opv := unsafe.Slice(ops, n+1)
	order := (*int32)(cCalloc(cSizeT(n+1), 4))
	defer cFree(unsafe.Pointer(order))
	ordv := unsafe.Slice(order, n+1)
	res := (*cDdResult)(cCalloc(1, sizeofDdResult))
	defer cFree(unsafe.Pointer(res))
	off := fence
	row := make([][2]int, n)
	for k, l := range lens {
		i := n - 1 - k
		ordv[k] = int32(i)
		opv[i].dst = unsafe.Pointer(&dst[off])
		opv[i].len = cUint64T(l)
		row[k] = [2]int{off, off + int(l)}
		off += int(l) + fence
	}
	d := 0
	if direct {
		d = 1
	}
	rc := ddGrepTake(unsafe.Pointer(&src[0]), guards.msg.ptr(src[gatherRepHdr:]), cUint64T(id), cUint64T(sum), ops, unsafe.Pointer(order), cInt(n), cInt(d), cUint32T(doneT), res)
	out := replyVerdict{OK: rc == 0, Stage: int(res.stage), Err: int(res.err), Failed: int(res.failed_op),
		Text: cGoString(&res.text[0]), NDone: int(res.done), Fenced: true}
	for k := range lens {
		out.Rows = append(out.Rows, append([]byte(nil), dst[row[k][0]:row[k][1]]...))
		op := opv[n-1-k]
		out.Done = append(out.Done, op.done != 0)
		out.DoneT = append(out.DoneT, uint32(op.done_t))
	}
	for k := range n + 1 {
		lo := 0
		if k > 0 {
			lo = row[k-1][1]
		}
		for _, b := range dst[lo : lo+fence] {
			out.Fenced = out.Fenced && b == 0xA5
		}
	}
	return out
}
