package fabric

// The one cgo file of package fabric: the C lives in dd.h and dd_*.c (one
// file per concern, listed in dd.h), and the rest of the package reaches
// it only through the names below: C types under Go names (c + the C
// name), C constants and thin wrappers of the C functions. Posting and CQ
// draining stay in C (dd_drive) so that a batch costs one cgo call. C
// never keeps a Go pointer after the call that received it returns:
// destinations are either off-heap or pinned by the Go caller for the
// duration of the call.

/*
#cgo LDFLAGS: -ldl
#include "dd.h"
*/
import "C"

import "unsafe"

// C types.
type (
	cChar            = C.char
	cDdDeadset       = C.dd_deadset
	cDdGent          = C.dd_gent
	cDdGexport       = C.dd_gexport
	cDdGreqView      = C.dd_greq_view
	cDdInfodesc      = C.dd_infodesc
	cDdOp            = C.dd_op
	cDdReader        = C.dd_reader
	cDdResult        = C.dd_result
	cDdServer        = C.dd_server
	cInt             = C.int
	cInt64T          = C.int64_t
	cSizeT           = C.size_t
	cStructFiInfo    = C.struct_fi_info
	cStructFidDomain = C.struct_fid_domain
	cStructFidFabric = C.struct_fid_fabric
	cStructFidMr     = C.struct_fid_mr
	cUint32T         = C.uint32_t
	cUint64T         = C.uint64_t
)

// C constants.
const (
	ddBadreply         = C.DD_BADREPLY
	ddCqerr            = C.DD_CQERR
	ddCqread           = C.DD_CQREAD
	ddGmaxBytes        = C.DD_GMAX_BYTES
	ddGmaxEnt          = C.DD_GMAX_ENT
	ddGmaxName         = C.DD_GMAX_NAME
	ddGreqStranger     = C.DD_GREQ_STRANGER
	ddGtext            = C.DD_GTEXT
	ddLibfabric        = C.DD_LIBFABRIC
	ddNoep             = C.DD_NOEP
	ddPeerdead         = C.DD_PEERDEAD
	ddNomem            = C.DD_NOMEM
	ddPost             = C.DD_POST
	ddProgressAdaptive = C.DD_PROGRESS_ADAPTIVE
	ddProgressSleep    = C.DD_PROGRESS_SLEEP
	ddProgressSpin     = C.DD_PROGRESS_SPIN
	ddReject           = C.DD_REJECT
	ddRxmEagerLimit    = C.DD_RXM_EAGER_LIMIT
	ddStuck            = C.DD_STUCK
	ddTimeout          = C.DD_TIMEOUT
	ddWdGraceNs        = C.DD_WD_GRACE_NS
	fiEnodata          = C.FI_ENODATA
	fiEnomem           = C.FI_ENOMEM
	fiEnospc           = C.FI_ENOSPC
	fiHmemCuda         = C.FI_HMEM_CUDA
	fiHmemRocr         = C.FI_HMEM_ROCR
	fiMrAllocated      = C.FI_MR_ALLOCATED
	fiMrEndpoint       = C.FI_MR_ENDPOINT
	fiMrLocal          = C.FI_MR_LOCAL
	fiMrProvKey        = C.FI_MR_PROV_KEY
	fiMrVirtAddr       = C.FI_MR_VIRT_ADDR
	fiProgressManual   = C.FI_PROGRESS_MANUAL
	fiRead             = C.FI_READ
	fiRemoteRead       = C.FI_REMOTE_READ
	fiThreadCompletion = C.FI_THREAD_COMPLETION
	fiThreadDomain     = C.FI_THREAD_DOMAIN
	fiThreadEndpoint   = C.FI_THREAD_ENDPOINT
	fiThreadFid        = C.FI_THREAD_FID
	fiThreadSafe       = C.FI_THREAD_SAFE
	sizeofDdGent       = C.sizeof_dd_gent
	sizeofDdOp         = C.sizeof_dd_op
	sizeofDdResult     = C.sizeof_dd_result
	sizeofDdGexport    = C.sizeof_dd_gexport
	sizeofDdGrepHdr    = C.sizeof_dd_grep_hdr
	sizeofDdGreqHdr    = C.sizeof_dd_greq_hdr
)

func cCString(s string) *C.char                        { return C.CString(s) }
func cGoBytes(p unsafe.Pointer, n C.int) []byte        { return C.GoBytes(p, n) }
func cGoString(p *C.char) string                       { return C.GoString(p) }
func cCalloc(n C.size_t, size C.size_t) unsafe.Pointer { return C.calloc(n, size) }
func ddActiveReaders() C.int                           { return C.dd_active_readers() }
func ddAvInsertN(r *C.dd_reader, idx0 C.int, n C.int, ranks *int32, addrs unsafe.Pointer) C.int {
	return C.dd_av_insert_n(r, idx0, n, (*C.int32_t)(unsafe.Pointer(ranks)), addrs)
}
func ddDeadsetNew() *C.dd_deadset               { return C.dd_deadset_new() }
func ddDeadsetMark(d *C.dd_deadset, rank C.int) { C.dd_deadset_mark(d, rank) }
func ddBaseline(r *C.dd_reader, peer C.uint32_t, dst *C.char, len_ C.uint64_t, slots C.int, offs *C.uint64_t, n C.int, window C.int, base C.uint64_t, key C.uint64_t, timeout_ns C.int64_t) C.int64_t {
	return C.dd_baseline(r, peer, dst, len_, slots, offs, n, window, base, key, timeout_ns)
}
func ddCloseDomain(d *C.struct_fid_domain) C.int       { return C.dd_close_domain(d) }
func ddCloseFabric(f *C.struct_fid_fabric) C.int       { return C.dd_close_fabric(f) }
func ddCloseMr(m *C.struct_fid_mr) C.int               { return C.dd_close_mr(m) }
func ddDescribe(i *C.struct_fi_info, d *C.dd_infodesc) { C.dd_describe(i, d) }
func ddDupinfo(i *C.struct_fi_info) *C.struct_fi_info  { return C.dd_dupinfo(i) }
func ddFreeinfo(i *C.struct_fi_info)                   { C.dd_freeinfo(i) }
func ddGatherRoundCap(total C.uint64_t, cap_ C.uint64_t, rounds C.int) C.uint64_t {
	return C.dd_gather_round_cap(total, cap_, rounds)
}
func ddGetinfo(out **C.struct_fi_info, threading C.int) C.int { return C.dd_getinfo(out, threading) }
func ddGreqCheck(v *C.dd_greq_view, ex *C.dd_gexport, nex C.int, max_bytes C.uint64_t, total *C.uint64_t, bad *C.uint32_t, text *C.char, textlen C.size_t) C.int {
	return C.dd_greq_check(v, ex, nex, max_bytes, total, bad, text, textlen)
}
func ddGreqParse(buf *C.char, len_ C.size_t, want_namelen C.uint32_t, gkey C.uint64_t, v *C.dd_greq_view) C.int {
	return C.dd_greq_parse(buf, len_, want_namelen, gkey, v)
}
func ddGatherStrangersCount() C.uint64_t { return C.dd_gather_strangers_count() }
func ddGrepSize(status C.int, total C.uint64_t, text *C.char) C.size_t {
	return C.dd_grep_size(status, total, text)
}
func ddGrepBuild(out *C.char, v *C.dd_greq_view, ex *C.dd_gexport, nex C.int, status C.int, bad C.uint32_t, total C.uint64_t, text *C.char) C.size_t {
	return C.dd_grep_build(out, v, ex, nex, status, bad, total, text)
}
func ddGrepTake(rh unsafe.Pointer, src *C.char, id, bytes C.uint64_t, ops *C.dd_op, order unsafe.Pointer, count, direct C.int, doneT C.uint32_t, res *C.dd_result) C.int {
	return C.dd_grep_take((*C.dd_grep_hdr)(rh), src, id, bytes, ops, (*C.int32_t)(order), count, direct, doneT, res)
}
func ddGsrvAddExport(s *C.dd_server, key C.uint64_t, base C.uint64_t, ptr unsafe.Pointer, size C.uint64_t) C.int {
	return C.dd_gsrv_add_export(s, key, base, ptr, size)
}
func ddGsrvDelExport(s *C.dd_server, key C.uint64_t) { C.dd_gsrv_del_export(s, key) }
func ddGuardedGather(r *C.dd_reader, n C.int, cap_ C.uint64_t, rounds C.int, timeout_ns C.int64_t) C.int {
	return C.dd_guarded_gather(r, n, cap_, rounds, timeout_ns)
}
func ddGuardedReadBatch(r *C.dd_reader, n C.int, timeout_ns C.int64_t) C.int {
	return C.dd_guarded_read_batch(r, n, timeout_ns)
}
func ddHmemOffered(info *C.struct_fi_info) C.int { return C.dd_hmem_offered(info) }
func ddHmemProbe(info *C.struct_fi_info, dom *C.struct_fid_domain, ep *C.struct_fid_ep, bind_ep C.int, addr C.uint64_t, len_ C.size_t, iface C.int, device C.int, stage *C.int) C.int {
	return C.dd_hmem_probe(info, dom, ep, bind_ep, addr, len_, iface, device, stage)
}
func ddInfoKeySize(i *C.struct_fi_info) C.uint64_t     { return C.dd_info_key_size(i) }
func ddInfoNext(i *C.struct_fi_info) *C.struct_fi_info { return C.dd_info_next(i) }
func ddLeakedEpsCount() C.uint64_t                     { return C.dd_leaked_eps_count() }
func ddLibPath(buf *C.char, n C.size_t) C.int          { return C.dd_lib_path(buf, n) }
func ddLibVersion() C.uint32_t                         { return C.dd_lib_version() }
func ddLoad(err *C.char, n C.size_t) C.int             { return C.dd_load(err, n) }
func ddMrReg(dom *C.struct_fid_domain, ep *C.struct_fid_ep, buf unsafe.Pointer, len_ C.size_t, access C.uint64_t, key C.uint64_t, bind_ep C.int, mr **C.struct_fid_mr, out_key *C.uint64_t, desc *unsafe.Pointer) C.int {
	return C.dd_mr_reg(dom, ep, buf, len_, access, key, bind_ep, mr, out_key, desc)
}
func ddOpenDomain(fab *C.struct_fid_fabric, info *C.struct_fi_info, dom **C.struct_fid_domain) C.int {
	return C.dd_open_domain(fab, info, dom)
}
func ddOpenFabric(info *C.struct_fi_info, fab **C.struct_fid_fabric) C.int {
	return C.dd_open_fabric(info, fab)
}
func ddQuarantinedCount() C.uint64_t { return C.dd_quarantined_count() }
func ddReaderFree(r *C.dd_reader)    { C.dd_reader_free(r) }
func ddReaderNew(fab *C.struct_fid_fabric, dom *C.struct_fid_domain, info *C.struct_fi_info, window C.int, cap_ C.int, maxpeers C.int, av_count C.size_t) *C.dd_reader {
	return C.dd_reader_new(fab, dom, info, window, cap_, maxpeers, av_count)
}
func ddReaderSetup(r *C.dd_reader, stage **C.char) C.int { return C.dd_reader_setup(r, stage) }
func ddReaderTeardown(r *C.dd_reader) C.int              { return C.dd_reader_teardown(r) }
func ddReaderWaitfd(r *C.dd_reader) C.int                { return C.dd_reader_waitfd(r) }
func ddServerClose(s *C.dd_server, close_domain C.int) C.int {
	return C.dd_server_close(s, close_domain)
}
func ddServerCpuNs(s *C.dd_server) C.int64_t { return C.dd_server_cpu_ns(s) }
func ddServerLock(s *C.dd_server)            { C.dd_server_lock(s) }
func ddServerNew() *C.dd_server              { return C.dd_server_new() }
func ddServerOpen(s *C.dd_server, info *C.struct_fi_info, av_count C.size_t, gather C.int, name *C.char, namelen *C.size_t, stage **C.char) C.int {
	return C.dd_server_open(s, info, av_count, gather, name, namelen, stage)
}
func ddServerRun(s *C.dd_server)                { C.dd_server_run(s) }
func ddServerStop(s *C.dd_server)               { C.dd_server_stop(s) }
func ddServerUnlock(s *C.dd_server)             { C.dd_server_unlock(s) }
func ddServerWakeups(s *C.dd_server) C.uint64_t { return C.dd_server_wakeups(s) }
func ddSetTestStuck(n C.int)                    { C.dd_set_test_stuck(n) }
func ddStepServed(ns C.int64_t) C.int           { return C.dd_step_served(ns) }
func ddStrerror(err C.int) *C.char              { return C.dd_strerror(err) }
func ddWdRegister(r *C.dd_reader) C.int         { return C.dd_wd_register(r) }
func cFree(p unsafe.Pointer)                    { C.free(p) }
func cGetenv(name *C.char) *C.char              { return C.getenv(name) }
func cMalloc(n C.size_t) unsafe.Pointer         { return C.malloc(n) }
