package fabric

// Opening a Fabric: libfabric loaded, the provider chosen, the fabric,
// domain and the server endpoint that exports memory. The C is reached
// through cgo.go, the package's one cgo file.

import (
	"crypto/rand"
	"encoding/binary"
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
// of the fabric fails with fault.ErrNoLibrary, saying what to install; a program
// that only needs the same-node path never calls it.
func loadLibrary() error {
	libOnce.Do(func() {
		var buf [512]cChar
		if ddLoad(&buf[0], cSizeT(len(buf))) != 0 {
			libErr = &fault.Error{Op: "load libfabric", Side: fault.Local, Kind: fault.ErrNoLibrary,
				Detail: fmt.Sprintf("%s could not be loaded (%s); install libfabric: apt-get install libfabric1 "+
					"(Debian/Ubuntu; libfabric-dev to build, libfabric-bin for fi_info), or put a libfabric >= 1.11 on LD_LIBRARY_PATH",
					ddLibfabric, cGoString(&buf[0]))}
		}
	})
	return libErr
}

// rxmEagerLimit is FI_OFI_RXM_EAGER_LIMIT in the C environment, where
// libfabric reads it, and DD_RXM_EAGER_LIMIT, what dd_load sets it to
// unless it was set already.
func rxmEagerLimit() (have string, ours uint64) {
	name := cCString("FI_OFI_RXM_EAGER_LIMIT")
	defer cFree(unsafe.Pointer(name))
	if v := cGetenv(name); v != nil {
		have = cGoString(v)
	}
	return have, ddRxmEagerLimit
}

// LibraryVersion is the loaded libfabric's version ("1.17.0"), loading it
// if needed; the error is fault.ErrNoLibrary when it cannot be loaded.
func LibraryVersion() (string, error) {
	if err := loadLibrary(); err != nil {
		return "", err
	}
	v := uint32(ddLibVersion())
	return fmt.Sprintf("%d.%d", v>>16, v&0xffff), nil
}

// LibraryPath is the file the loaded libfabric was mapped from (loading it
// if needed): diagnostics, and tests that hide it.
func LibraryPath() (string, error) {
	if err := loadLibrary(); err != nil {
		return "", err
	}
	var buf [4096]cChar
	if ddLibPath(&buf[0], cSizeT(len(buf))) != 0 {
		return "", localErr("dladdr", 0, "cannot tell where %s was loaded from", ddLibfabric)
	}
	return cGoString(&buf[0]), nil
}

// strerror is fi_strerror's text for a positive code.
func strerror(code int) string { return cGoString(ddStrerror(cInt(code))) }

// fiErr is a failure of a libfabric call on this process's own resources.
func fiErr(op string, rc cInt) *fault.Error { return localErr(op, int(rc), "") }

type candidate struct {
	info *cStructFiInfo
	desc cDdInfodesc
}

func describe(i *cStructFiInfo) Info {
	var d cDdInfodesc
	ddDescribe(i, &d)
	return infoFromDesc(&d)
}

func infoFromDesc(d *cDdInfodesc) Info {
	mr := uint64(d.mr_mode)
	return Info{
		Provider:       cGoString(d.prov),
		Fabric:         cGoString(d.fabric),
		Domain:         cGoString(d.domain),
		MRLocal:        mr&fiMrLocal != 0,
		MRVirtAddr:     mr&fiMrVirtAddr != 0,
		MRProvKey:      mr&fiMrProvKey != 0,
		MRAllocated:    mr&fiMrAllocated != 0,
		MREndpoint:     mr&fiMrEndpoint != 0,
		ManualProgress: d.data_progress == fiProgressManual,
		Threading:      threadingName(int(d.threading)),
		TxSize:         int(d.tx_size),
		MaxPeers:       int(d.ep_cnt),
		MaxMsgSize:     uint64(d.max_msg_size),
		threading:      int(d.threading),
	}
}

func threadingName(t int) string {
	switch t {
	case fiThreadSafe:
		return "FI_THREAD_SAFE"
	case fiThreadFid:
		return "FI_THREAD_FID"
	case fiThreadDomain:
		return "FI_THREAD_DOMAIN"
	case fiThreadCompletion:
		return "FI_THREAD_COMPLETION"
	case fiThreadEndpoint:
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
var threadingLevels = []cInt{fiThreadSafe, fiThreadCompletion, fiThreadDomain}

// selectInfo picks the provider/domain asked for at the strongest threading
// level that offers it.
func selectInfo(o Options) (*cStructFiInfo, error) {
	var err error
	for _, lvl := range threadingLevels {
		var info *cStructFiInfo
		if info, err = selectAt(o, lvl); err == nil {
			return info, nil
		}
	}
	return nil, err
}

// selectAt walks the fi_getinfo list for one threading level and picks the
// provider/domain asked for (the domain hint is ignored by some providers,
// so we match ourselves).
func selectAt(o Options, threading cInt) (*cStructFiInfo, error) {
	var list *cStructFiInfo
	if rc := ddGetinfo(&list, threading); rc != 0 {
		if -rc == fiEnodata {
			return nil, &fault.Error{Op: "fi_getinfo", Side: fault.Local, Kind: fault.ErrNoProvider, Detail: "no provider offers FI_EP_RDM with FI_RMA reads", Err: errno(int(rc))}
		}
		return nil, fiErr("fi_getinfo", rc)
	}
	defer ddFreeinfo(list)
	var cands []candidate
	for i := list; i != nil; i = ddInfoNext(i) {
		var desc cDdInfodesc // a local: cgo checks the whole Go object a pointer reaches
		ddDescribe(i, &desc)
		cands = append(cands, candidate{info: i, desc: desc})
	}
	provs := []string{}
	for _, c := range cands {
		p := cGoString(c.desc.prov)
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
				if cGoString(c.desc.prov) == n {
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
			if o.Domain == "" || cGoString(c.desc.domain) == o.Domain || cGoString(c.desc.fabric) == o.Domain {
				dup := ddDupinfo(c.info)
				if dup == nil {
					return nil, localErr("fi_dupinfo", int(fiEnomem), "out of memory")
				}
				return dup, nil
			}
		}
		var doms []string
		for _, c := range ofProv {
			d := cGoString(c.desc.domain)
			if !contains(doms, d) {
				doms = append(doms, d)
			}
		}
		return nil, &fault.Error{Op: "select domain", Side: fault.Local, Kind: fault.ErrNoDomain,
			Detail: fmt.Sprintf("provider %q has no domain %q; available: %s", cGoString(ofProv[0].desc.prov), o.Domain, strings.Join(doms, ", "))}
	}
	what := fmt.Sprintf("provider %q", o.Provider)
	if o.Provider == "" {
		what = "none of the default providers " + strings.Join(defaultOrder, ", ")
	}
	return nil, &fault.Error{Op: "select provider", Side: fault.Local, Kind: fault.ErrNoProvider,
		Detail: fmt.Sprintf("%s is not available for FI_EP_RDM with FI_RMA reads; available: %s", what, strings.Join(provs, ", "))}
}

// keyBase is where this process's requested MR keys start (providers that
// choose their own keys, FI_MR_PROV_KEY, ignore it): 40 random bits above
// a 24-bit counter where the provider's keys are 8 bytes, so that a stale
// address (a dead peer's port reused by another ddstore process) meets a
// key that process never issued and fails, and a stranger who reaches an
// endpoint cannot guess a key from a pid.
func keyBase(keySize uint64) uint64 {
	if keySize >= 8 {
		var b [8]byte
		if _, err := rand.Read(b[:5]); err != nil {
			return uint64(os.Getpid()) << 24
		}
		b[4] &= 0x7f // keys stay below 2^63
		return (binary.LittleEndian.Uint64(b[:]) | 1) << 24
	}
	return 1
}

// CheckProvider reports whether this libfabric offers provider name ("tcp"
// and "verbs" also match their ofi_rxm stacks; "" the default order) for
// FI_EP_RDM endpoints with FI_RMA reads, without opening anything. The
// error is fault.ErrNoProvider listing what is available, or fault.ErrNoLibrary. The
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
	ddFreeinfo(info)
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
	info     *cStructFiInfo
	inf      Info
	fab      *cStructFidFabric
	dom      *cStructFidDomain
	srv      *cDdServer // nil once closed (under mu)
	addr     []byte
	avCount  int
	ownDom   bool // readers get their own domain (threading weaker than FI_THREAD_COMPLETION)
	progDone chan struct{}
	nextKey  atomic.Uint64

	mu       sync.Mutex
	closed   bool
	exports  map[*Export]struct{}
	readers  map[*Reader]struct{}
	dead     *cDdDeadset // ranks declared dead (PeerDead); read by the batches
	keepDead atomic.Bool // a reader was quarantined: dead is never freed
	lastWake uint64      // ProgressWakeups once closed
	// leftRegions: shm region files of readers never closed (quarantined,
	// or their close failed), removed by Close (see removeLeftRegions).
	leftRegions []string

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
	f := &Fabric{opts: o, info: info, exports: map[*Export]struct{}{}, readers: map[*Reader]struct{}{}, dead: ddDeadsetNew()}
	if f.dead == nil {
		ddFreeinfo(info)
		return nil, localErr("open", int(fiEnomem), "out of memory for the dead-rank set")
	}
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
	case fiThreadSafe, fiThreadCompletion:
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
	f.nextKey.Store(keyBase(uint64(ddInfoKeySize(info))))

	// Locals receive the handles: cgo checks the whole Go object that a
	// pointer argument reaches, and f holds Go pointers.
	var fab *cStructFidFabric
	var dom *cStructFidDomain
	rc := ddOpenFabric(info, &fab)
	f.fab = fab
	if rc != 0 {
		ddFreeinfo(info)
		return nil, f.wrapOpenErr("fi_fabric", rc)
	}
	rc = ddOpenDomain(f.fab, info, &dom)
	f.dom = dom
	if rc != 0 {
		ddCloseFabric(f.fab)
		ddFreeinfo(info)
		return nil, f.wrapOpenErr("fi_domain", rc)
	}
	f.srv = ddServerNew()
	if f.srv == nil {
		f.closeBase()
		return nil, localErr("server alloc", int(fiEnomem), "out of memory")
	}
	f.srv.fabric = f.fab
	f.srv.domain = f.dom
	f.srv.gkey = cUint64T(f.opts.GatherKey)
	var name [256]cChar
	namelen := cSizeT(len(name))
	var stage *cChar
	gather := cInt(0)
	if f.inf.SoftwareRMA {
		gather = 1
	}
	if rc := ddServerOpen(f.srv, info, cSizeT(f.avCount), gather, &name[0], &namelen, &stage); rc != 0 {
		ddServerClose(f.srv, 0)
		f.srv = nil
		f.closeBase()
		return nil, f.wrapOpenErr("server "+cGoString(stage), rc)
	}
	f.addr = cGoBytes(unsafe.Pointer(&name[0]), cInt(namelen))
	switch f.opts.Progress {
	case "sleep":
		f.srv.mode = ddProgressSleep
	case "spin":
		f.srv.mode = ddProgressSpin
	default:
		f.srv.mode = ddProgressAdaptive
	}
	f.srv.spin_ns = cInt64T(f.opts.ProgressWindow)
	f.inf.WaitFD = f.srv.waitfd >= 0
	f.progDone = make(chan struct{})
	go f.progress()
	return f, nil
}

func (f *Fabric) wrapOpenErr(op string, rc cInt) error {
	return localErr(op, int(rc), "provider %s, domain %s", f.inf.Provider, f.inf.Domain)
}

func (f *Fabric) closeBase() {
	if f.dom != nil {
		ddCloseDomain(f.dom)
		f.dom = nil
	}
	if f.fab != nil {
		ddCloseFabric(f.fab)
		f.fab = nil
	}
	if f.info != nil {
		ddFreeinfo(f.info)
		f.info = nil
	}
}

func (f *Fabric) progress() {
	runtime.LockOSThread()
	defer close(f.progDone)
	ddServerRun(f.srv)
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
	ddServerStop(f.srv)
	<-f.progDone
	var err error
	for _, e := range exports {
		if cerr := e.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	f.mu.Lock()
	srv := f.srv
	f.lastWake = uint64(ddServerWakeups(srv))
	f.srv = nil
	f.mu.Unlock()
	if rc := ddServerClose(srv, 0); rc != 0 && err == nil {
		err = fiErr("fi_close(server endpoint)", rc)
	}
	f.closeBase()
	f.removeLeftRegions()
	if !f.keepDead.Load() {
		cFree(unsafe.Pointer(f.dead))
	}
	f.dead = nil
	return err
}

// PeerDead declares rank dead for this fabric's readers: a read from it
// that is in flight, or posted later, fails as soon as its batch waits,
// with ErrPeerDead naming the rank, instead of at the deadline; the
// endpoint is torn down (nothing lands afterwards) and the next call opens
// a fresh one. The engine calls it when the control plane or a read finds
// the rank dead. Permanent; ranks from 1 << 20 on are not tracked.
func (f *Fabric) PeerDead(rank int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed && f.dead != nil {
		ddDeadsetMark(f.dead, cInt(rank))
	}
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
	return max(time.Duration(ddServerCpuNs(f.srv)), 0)
}

// ProgressWakeups counts how often the progress goroutine woke up (for tests
// and diagnostics: an idle rank should barely wake).
func (f *Fabric) ProgressWakeups() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.srv == nil {
		return f.lastWake
	}
	return uint64(ddServerWakeups(f.srv))
}

// leaveRegion notes the region file (shmRegion) of a reader that is never
// closed: a process that goes on after Close would otherwise leave 16 MiB
// of /dev/shm behind per such reader, after every job on the node.
func (f *Fabric) leaveRegion(path string) {
	if path == "" {
		return
	}
	f.mu.Lock()
	f.leftRegions = append(f.leftRegions, path)
	closed := f.closed
	f.mu.Unlock()
	if closed { // a reader left after Close
		f.removeLeftRegions()
	}
}

// removeLeftRegions removes the files of leaveRegion's regions. Only the
// name goes: the memory stays mapped for a provider call still inside it,
// and a peer that mapped the region keeps its mapping.
func (f *Fabric) removeLeftRegions() {
	f.mu.Lock()
	left := f.leftRegions
	f.leftRegions = nil
	f.mu.Unlock()
	for _, path := range left {
		os.Remove(path)
	}
}
