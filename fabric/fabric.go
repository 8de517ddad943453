package fabric

// The cgo side of package fabric: the C lives in dd.h and dd_*.c (one file
// per concern, listed in dd.h), and the Go files that call it (fabric.go,
// export.go, reader.go, gather.go, gcheck.go, hmem.go) include only dd.h.
// Posting and CQ draining stay in C (dd_drive) so that a batch costs one
// cgo call. C never keeps a Go pointer after the
// call that received it returns: destinations are either off-heap or pinned
// by the Go caller for the duration of the call.

/*
#cgo LDFLAGS: -ldl
#include "dd.h"
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ddstore/ddstore/fault"
)

// Provider preference when Options.Provider is empty.
var defaultOrder = []string{"cxi", "verbs;ofi_rxm", "tcp;ofi_rxm", "shm"}

// chunkOps is how many ops one cgo call handles; longer batches are split.
const chunkOps = 4096

var (
	libOnce sync.Once
	libErr  error
)

// loadLibrary dlopens libfabric.so.1 once (dd_load). Without it every use
// of the fabric fails with ErrNoLibrary, saying what to install; a program
// that only needs the same-node path never calls it.
func loadLibrary() error {
	libOnce.Do(func() {
		var buf [512]C.char
		if C.dd_load(&buf[0], C.size_t(len(buf))) != 0 {
			libErr = &fault.Error{Op: "load libfabric", Side: fault.Local, Kind: ErrNoLibrary,
				Detail: fmt.Sprintf("%s could not be loaded (%s); install libfabric: apt-get install libfabric1 "+
					"(Debian/Ubuntu; libfabric-dev to build, libfabric-bin for fi_info), or put a libfabric >= 1.11 on LD_LIBRARY_PATH",
					C.DD_LIBFABRIC, C.GoString(&buf[0]))}
		}
	})
	return libErr
}

// rxmEagerLimit is FI_OFI_RXM_EAGER_LIMIT in the C environment, where
// libfabric reads it, and DD_RXM_EAGER_LIMIT, what dd_load sets it to
// unless it was set already.
func rxmEagerLimit() (have string, ours uint64) {
	name := C.CString("FI_OFI_RXM_EAGER_LIMIT")
	defer C.free(unsafe.Pointer(name))
	if v := C.getenv(name); v != nil {
		have = C.GoString(v)
	}
	return have, C.DD_RXM_EAGER_LIMIT
}

// LibraryVersion is the loaded libfabric's version ("1.17.0"), loading it
// if needed; the error is ErrNoLibrary when it cannot be loaded.
func LibraryVersion() (string, error) {
	if err := loadLibrary(); err != nil {
		return "", err
	}
	v := uint32(C.dd_lib_version())
	return fmt.Sprintf("%d.%d", v>>16, v&0xffff), nil
}

// LibraryPath is the file the loaded libfabric was mapped from (loading it
// if needed): diagnostics, and tests that hide it.
func LibraryPath() (string, error) {
	if err := loadLibrary(); err != nil {
		return "", err
	}
	var buf [4096]C.char
	if C.dd_lib_path(&buf[0], C.size_t(len(buf))) != 0 {
		return "", localErr("dladdr", 0, "cannot tell where %s was loaded from", C.DD_LIBFABRIC)
	}
	return C.GoString(&buf[0]), nil
}

// strerror is fi_strerror's text for a positive code.
func strerror(code int) string { return C.GoString(C.dd_strerror(C.int(code))) }

// fiErr is a failure of a libfabric call on this process's own resources.
func fiErr(op string, rc C.int) *fault.Error { return localErr(op, int(rc), "") }

type candidate struct {
	info *C.struct_fi_info
	desc C.dd_infodesc
}

func describe(i *C.struct_fi_info) Info {
	var d C.dd_infodesc
	C.dd_describe(i, &d)
	return infoFromDesc(&d)
}

func infoFromDesc(d *C.dd_infodesc) Info {
	mr := uint64(d.mr_mode)
	return Info{
		Provider:       C.GoString(d.prov),
		Fabric:         C.GoString(d.fabric),
		Domain:         C.GoString(d.domain),
		MRLocal:        mr&C.FI_MR_LOCAL != 0,
		MRVirtAddr:     mr&C.FI_MR_VIRT_ADDR != 0,
		MRProvKey:      mr&C.FI_MR_PROV_KEY != 0,
		MRAllocated:    mr&C.FI_MR_ALLOCATED != 0,
		MREndpoint:     mr&C.FI_MR_ENDPOINT != 0,
		ManualProgress: d.data_progress == C.FI_PROGRESS_MANUAL,
		Threading:      threadingName(int(d.threading)),
		TxSize:         int(d.tx_size),
		MaxPeers:       int(d.ep_cnt),
		MaxMsgSize:     uint64(d.max_msg_size),
		threading:      int(d.threading),
	}
}

func threadingName(t int) string {
	switch t {
	case C.FI_THREAD_SAFE:
		return "FI_THREAD_SAFE"
	case C.FI_THREAD_FID:
		return "FI_THREAD_FID"
	case C.FI_THREAD_DOMAIN:
		return "FI_THREAD_DOMAIN"
	case C.FI_THREAD_COMPLETION:
		return "FI_THREAD_COMPLETION"
	case C.FI_THREAD_ENDPOINT:
		return "FI_THREAD_ENDPOINT"
	}
	return "FI_THREAD_UNSPEC"
}

// threadingLevels are the FI_THREAD_* levels asked for, strongest first.
// With FI_THREAD_SAFE (tcp, shm, sockets, udp grant it here) or
// FI_THREAD_COMPLETION (objects sharing a CQ serialised: each reader has its
// own endpoint and CQ) the process shares one domain between the server and
// all readers. A provider that grants only FI_THREAD_DOMAIN, FI_THREAD_FID
// or FI_THREAD_ENDPOINT requires every object of a domain (or the domain
// object itself, for fi_mr_reg) to be used by one thread at a time, which
// concurrent readers cannot promise: there each reader opens its own domain
// (Info.ReaderDomains).
var threadingLevels = []C.int{C.FI_THREAD_SAFE, C.FI_THREAD_COMPLETION, C.FI_THREAD_DOMAIN}

// selectInfo picks the provider/domain asked for at the strongest threading
// level that offers it.
func selectInfo(o Options) (*C.struct_fi_info, error) {
	var err error
	for _, lvl := range threadingLevels {
		var info *C.struct_fi_info
		if info, err = selectAt(o, lvl); err == nil {
			return info, nil
		}
	}
	return nil, err
}

// selectAt walks the fi_getinfo list for one threading level and picks the
// provider/domain asked for (the domain hint is ignored by some providers,
// so we match ourselves).
func selectAt(o Options, threading C.int) (*C.struct_fi_info, error) {
	var list *C.struct_fi_info
	if rc := C.dd_getinfo(&list, threading); rc != 0 {
		if -rc == C.FI_ENODATA {
			return nil, &fault.Error{Op: "fi_getinfo", Side: fault.Local, Kind: ErrNoProvider, Detail: "no provider offers FI_EP_RDM with FI_RMA reads", Err: errno(int(rc))}
		}
		return nil, fiErr("fi_getinfo", rc)
	}
	defer C.dd_freeinfo(list)
	var cands []candidate
	for i := list; i != nil; i = C.dd_info_next(i) {
		var c candidate
		c.info = i
		C.dd_describe(i, &c.desc)
		cands = append(cands, c)
	}
	provs := []string{}
	for _, c := range cands {
		p := C.GoString(c.desc.prov)
		if !contains(provs, p) {
			provs = append(provs, p)
		}
	}
	want := []string{o.Provider}
	if o.Provider == "" {
		want = defaultOrder
	}
	for _, w := range want {
		names := []string{w}
		if !strings.Contains(w, ";") {
			names = append(names, w+";ofi_rxm")
		}
		var ofProv []candidate
		for _, n := range names {
			for _, c := range cands {
				if C.GoString(c.desc.prov) == n {
					ofProv = append(ofProv, c)
				}
			}
			if len(ofProv) > 0 {
				break
			}
		}
		if len(ofProv) == 0 {
			continue
		}
		for _, c := range ofProv {
			if o.Domain == "" || C.GoString(c.desc.domain) == o.Domain || C.GoString(c.desc.fabric) == o.Domain {
				dup := C.dd_dupinfo(c.info)
				if dup == nil {
					return nil, localErr("fi_dupinfo", int(C.FI_ENOMEM), "out of memory")
				}
				return dup, nil
			}
		}
		var doms []string
		for _, c := range ofProv {
			d := C.GoString(c.desc.domain)
			if !contains(doms, d) {
				doms = append(doms, d)
			}
		}
		return nil, &fault.Error{Op: "select domain", Side: fault.Local, Kind: ErrNoDomain,
			Detail: fmt.Sprintf("provider %q has no domain %q; available: %s", C.GoString(ofProv[0].desc.prov), o.Domain, strings.Join(doms, ", "))}
	}
	what := fmt.Sprintf("provider %q", o.Provider)
	if o.Provider == "" {
		what = "none of the default providers " + strings.Join(defaultOrder, ", ")
	}
	return nil, &fault.Error{Op: "select provider", Side: fault.Local, Kind: ErrNoProvider,
		Detail: fmt.Sprintf("%s is not available for FI_EP_RDM with FI_RMA reads; available: %s", what, strings.Join(provs, ", "))}
}

// keyBase is where this process's requested MR keys start: the pid in the
// high bits where the provider's keys are 8 bytes, so that a stale address
// (a dead peer's port reused by another ddstore process) meets a key that
// process never issued and fails, instead of reading its memory.
func keyBase(keySize uint64) uint64 {
	if keySize >= 8 {
		return uint64(os.Getpid()) << 24
	}
	return 1
}

// CheckProvider reports whether this libfabric offers provider name ("tcp"
// and "verbs" also match their ofi_rxm stacks; "" the default order) for
// FI_EP_RDM endpoints with FI_RMA reads, without opening anything. The
// error is ErrNoProvider listing what is available, or ErrNoLibrary. The
// engine calls it at Open, so a provider typo fails even on a run that
// never needs the fabric.
func CheckProvider(name string) error {
	if err := loadLibrary(); err != nil {
		return err
	}
	info, err := selectInfo(Options{Provider: name})
	if err != nil {
		return err
	}
	C.dd_freeinfo(info)
	return nil
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// Fabric is one opened provider/domain plus the "server" endpoint that
// exports memory. The server endpoint is progressed by its own goroutine on a
// locked OS thread, so a rank that is busy computing still serves reads.
type Fabric struct {
	opts     Options
	info     *C.struct_fi_info
	inf      Info
	fab      *C.struct_fid_fabric
	dom      *C.struct_fid_domain
	srv      *C.dd_server // nil once closed (under mu)
	addr     []byte
	avCount  int
	ownDom   bool // readers get their own domain (threading weaker than FI_THREAD_COMPLETION)
	progDone chan struct{}
	nextKey  atomic.Uint64

	mu       sync.Mutex
	closed   bool
	exports  map[*Export]struct{}
	readers  map[*Reader]struct{}
	lastWake uint64 // ProgressWakeups once closed

	// forceLocalMR makes readers register destinations as if the provider
	// required FI_MR_LOCAL (tests exercise the registration cache with it).
	forceLocalMR bool
	// guarded: readers' provider calls run under the watchdog
	// (dd_watchdog.c), which abandons a call that never returns. On for
	// shm, whose fi_read can spin forever on a stopped peer's lock; such
	// readers also get their own domain, so that whatever lock an abandoned
	// call holds belongs to the quarantined reader alone.
	guarded bool
	// tcpDoms: on tcp (tcp;ofi_rxm) every reader gets its own domain even
	// at FI_THREAD_SAFE. With one shared domain, a reader closing its
	// endpoint after a read failed on a SIGKILLed peer (dd_batch_fail)
	// crashed inside libfabric (1.17, SIGSEGV in fi_close) about once in
	// 30 runs of examples/train TestStorageRankKilledLoss under load: the
	// tcp provider's progress, driven by the server's and the other
	// readers' CQ reads in the same domain, can reach an endpoint that is
	// being destroyed (see ofiwg/libfabric#7457). A domain of its own
	// keeps that cleanup away from every other thread's progress.
	tcpDoms bool
	// failLocalMR makes every local registration fail as if fi_mr_reg
	// returned -FI_ENOMEM (tests: a local failure must not blame the peer).
	failLocalMR bool
}

// Open selects a provider and domain, opens them and starts the server
// endpoint with its progress goroutine.
func Open(o Options) (*Fabric, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := loadLibrary(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	info, err := selectInfo(o)
	if err != nil {
		return nil, err
	}
	f := &Fabric{opts: o, info: info, exports: map[*Export]struct{}{}, readers: map[*Reader]struct{}{}}
	f.forceLocalMR = o.RegisterDst
	f.inf = describe(info)
	if f.inf.TxSize > 0 && f.opts.Window > f.inf.TxSize {
		f.opts.Window = f.inf.TxSize
	}
	f.inf.Window = f.opts.Window
	f.avCount = o.MaxPeers
	if f.avCount == 0 {
		f.avCount = 1024
	}
	if f.inf.MaxPeers > 0 && f.avCount > f.inf.MaxPeers {
		f.avCount = f.inf.MaxPeers
	}
	f.inf.AVCount = f.avCount
	switch f.inf.threading {
	case C.FI_THREAD_SAFE, C.FI_THREAD_COMPLETION:
		// One domain per process: the server endpoint and every reader's
		// endpoint and CQ (see threadingLevels).
	default:
		// FI_THREAD_DOMAIN, FI_THREAD_FID, FI_THREAD_ENDPOINT: readers
		// register destinations (fi_mr_reg on the domain) and post while the
		// progress goroutine and Export use the server's domain, which
		// these models forbid within one domain: a domain per reader.
		f.ownDom = true
	}
	f.guarded = strings.HasPrefix(f.inf.Provider, "shm")
	f.tcpDoms = strings.HasPrefix(f.inf.Provider, "tcp")
	f.inf.ReaderDomains = f.ownDom || f.guarded || f.tcpDoms
	f.inf.SoftwareRMA = softwareRMA(f.inf.Provider)
	f.inf.GatherMaxBytes = f.opts.GatherMaxBytes
	f.inf.GatherRounds = f.opts.GatherRounds
	f.nextKey.Store(keyBase(uint64(C.dd_info_key_size(info))))

	if rc := C.dd_open_fabric(info, &f.fab); rc != 0 {
		C.dd_freeinfo(info)
		return nil, f.wrapOpenErr("fi_fabric", rc)
	}
	if rc := C.dd_open_domain(f.fab, info, &f.dom); rc != 0 {
		C.dd_close_fabric(f.fab)
		C.dd_freeinfo(info)
		return nil, f.wrapOpenErr("fi_domain", rc)
	}
	f.srv = C.dd_server_new()
	if f.srv == nil {
		f.closeBase()
		return nil, localErr("server alloc", int(C.FI_ENOMEM), "out of memory")
	}
	f.srv.fabric = f.fab
	f.srv.domain = f.dom
	var name [256]C.char
	namelen := C.size_t(len(name))
	var stage *C.char
	gather := C.int(0)
	if f.inf.SoftwareRMA {
		gather = 1
	}
	if rc := C.dd_server_open(f.srv, info, C.size_t(f.avCount), gather, &name[0], &namelen, &stage); rc != 0 {
		C.dd_server_close(f.srv, 0)
		f.srv = nil
		f.closeBase()
		return nil, f.wrapOpenErr("server "+C.GoString(stage), rc)
	}
	f.addr = C.GoBytes(unsafe.Pointer(&name[0]), C.int(namelen))
	switch f.opts.Progress {
	case "sleep":
		f.srv.mode = C.DD_PROGRESS_SLEEP
	case "spin":
		f.srv.mode = C.DD_PROGRESS_SPIN
	default:
		f.srv.mode = C.DD_PROGRESS_ADAPTIVE
	}
	f.srv.spin_ns = C.int64_t(f.opts.ProgressWindow)
	f.inf.WaitFD = f.srv.waitfd >= 0
	f.progDone = make(chan struct{})
	go f.progress()
	return f, nil
}

func (f *Fabric) wrapOpenErr(op string, rc C.int) error {
	return localErr(op, int(rc), "provider %s, domain %s", f.inf.Provider, f.inf.Domain)
}

func (f *Fabric) closeBase() {
	if f.dom != nil {
		C.dd_close_domain(f.dom)
		f.dom = nil
	}
	if f.fab != nil {
		C.dd_close_fabric(f.fab)
		f.fab = nil
	}
	if f.info != nil {
		C.dd_freeinfo(f.info)
		f.info = nil
	}
}

func (f *Fabric) progress() {
	runtime.LockOSThread()
	defer close(f.progDone)
	C.dd_server_run(f.srv)
}

// Close stops progress and closes every reader and export still open, then
// the endpoint, domain and fabric.
func (f *Fabric) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	readers := make([]*Reader, 0, len(f.readers))
	for r := range f.readers {
		readers = append(readers, r)
	}
	exports := make([]*Export, 0, len(f.exports))
	for e := range f.exports {
		exports = append(exports, e)
	}
	f.mu.Unlock()
	for _, r := range readers {
		r.Close()
	}
	C.dd_server_stop(f.srv)
	<-f.progDone
	var err error
	for _, e := range exports {
		if cerr := e.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	f.mu.Lock()
	srv := f.srv
	f.lastWake = uint64(C.dd_server_wakeups(srv))
	f.srv = nil
	f.mu.Unlock()
	if rc := C.dd_server_close(srv, 0); rc != 0 && err == nil {
		err = fiErr("fi_close(server endpoint)", rc)
	}
	f.closeBase()
	return err
}

// Info describes the selected provider and how the package adapts to it.
func (f *Fabric) Info() Info { return f.inf }

// Address is the server endpoint's name, to be exchanged between ranks and
// given to Reader.AddPeer.
func (f *Fabric) Address() []byte { return append([]byte(nil), f.addr...) }

// ProgressCPU is the CPU time the progress goroutine's thread has used
// (benchmarks: CPU cost per served read); 0 once closed.
func (f *Fabric) ProgressCPU() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.srv == nil {
		return 0
	}
	return max(time.Duration(C.dd_server_cpu_ns(f.srv)), 0)
}

// ProgressWakeups counts how often the progress goroutine woke up (for tests
// and diagnostics: an idle rank should barely wake).
func (f *Fabric) ProgressWakeups() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.srv == nil {
		return f.lastWake
	}
	return uint64(C.dd_server_wakeups(f.srv))
}
