package telemetry

import (
	"cmp"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname Nanotime

	"golang.org/x/sys/unix"
)

// WriterOptions configure Create. The zero value of every field means its
// default.
type WriterOptions struct {
	// Dir holds the segment. Default "/dev/shm". (DDSTORE_TELEMETRY_DIR is
	// read by the engine and ddtop, not here.)
	Dir string
	// Job names the job; it appears in the file name (characters other
	// than [A-Za-z0-9._-] replaced by '_') and in the header (first 64
	// bytes). Default "local".
	Job string
	// Rank and World of this process. Default 0 and 1; need 0 <= Rank < World.
	Rank, World int
	// Host is recorded in the header; readers check pid liveness only on
	// the same host. Default os.Hostname().
	Host string
	// Pid of the writer. Default os.Getpid().
	Pid int
	// Config summary shown by ddtop (first 32 bytes of each kept).
	Provider, ReaderMode, Method string
	// MaxVars is the number of variable slots. Default 64, at most 4096.
	MaxVars int
	// MaxReaders is the number of reader stripes per variable; reader ids
	// >= MaxReaders are counted in the last stripe, which is therefore
	// shared (see Record). Default 64, at most 4096.
	MaxReaders int
	// RingSize is the number of recent-call ring slots, a power of two.
	// Default 4096, at most 1<<20.
	RingSize int
	// MaxPeers is the number of peer-table slots (one per target rank;
	// ranks >= MaxPeers share the last). Default World, at most 65536.
	MaxPeers int
	// PeerLanes is the number of lanes of the peer table: lane 0 takes
	// atomic adds from any goroutine, lane l >= 1 belongs to reader id
	// l-1 and takes plain stores (cheaper; see Record). Default
	// min(DefaultPeerLanes, MaxReaders+1), fewer where the lanes would
	// pass DefaultPeerLaneBytes (at least 1); at most 64.
	PeerLanes int
	// LaneRingSize is the number of slots of each lane ring (v4: the
	// recent calls of reader ids 0..PeerLanes-2, one ring each; shared
	// calls go to the RingSize ring), a power of two. Small keeps it in
	// the writer's cache; a reader that falls more than LaneRingSize calls
	// of one reader id behind loses records (counted). Default 64, at
	// most 65536.
	LaneRingSize int
}

// Defaults of WriterOptions.
const (
	DefaultDir        = "/dev/shm"
	DefaultJob        = "local"
	DefaultMaxVars    = 64
	DefaultMaxReaders = 64
	DefaultRingSize   = 4096
	DefaultPeerLanes  = 16
	DefaultLaneRing   = 64
	// DefaultPeerLaneBytes bounds the default peer table's size: a world
	// of more than 1365 ranks gets fewer lanes than DefaultPeerLanes.
	DefaultPeerLaneBytes = 4 << 20
)

func (o WriterOptions) withDefaults() WriterOptions {
	o.Dir = cmp.Or(o.Dir, DefaultDir)
	o.Job = cmp.Or(o.Job, DefaultJob)
	o.World = cmp.Or(o.World, 1)
	if o.Host == "" { // asked only when not given
		o.Host = localHost()
	}
	if o.Pid == 0 {
		o.Pid = os.Getpid()
	}
	o.MaxVars = cmp.Or(o.MaxVars, DefaultMaxVars)
	o.MaxReaders = cmp.Or(o.MaxReaders, DefaultMaxReaders)
	o.RingSize = cmp.Or(o.RingSize, DefaultRingSize)
	o.MaxPeers = cmp.Or(o.MaxPeers, min(max(o.World, 1), maxMaxPeers))
	o.LaneRingSize = cmp.Or(o.LaneRingSize, DefaultLaneRing)
	if o.PeerLanes == 0 && o.MaxPeers > 0 && o.MaxReaders > 0 {
		o.PeerLanes = max(1, min(DefaultPeerLanes, o.MaxReaders+1, DefaultPeerLaneBytes/(o.MaxPeers*peerSlotBytes)))
	}
	return o
}

// Validate checks the options after defaults are applied.
func (o WriterOptions) Validate() error {
	o = o.withDefaults()
	switch {
	case o.Rank < 0 || o.Rank >= o.World:
		return fmt.Errorf("%w: rank %d not in [0, world %d)", ErrOptions, o.Rank, o.World)
	case o.Pid < 0:
		return fmt.Errorf("%w: pid %d", ErrOptions, o.Pid)
	case o.MaxVars < 1 || o.MaxVars > maxMaxVars:
		return fmt.Errorf("%w: MaxVars %d not in [1, %d]", ErrOptions, o.MaxVars, maxMaxVars)
	case o.MaxReaders < 1 || o.MaxReaders > maxMaxReaders:
		return fmt.Errorf("%w: MaxReaders %d not in [1, %d]", ErrOptions, o.MaxReaders, maxMaxReaders)
	case o.RingSize < 1 || o.RingSize > maxRingSize || o.RingSize&(o.RingSize-1) != 0:
		return fmt.Errorf("%w: RingSize %d not a power of two in [1, %d]", ErrOptions, o.RingSize, maxRingSize)
	case o.MaxPeers < 1 || o.MaxPeers > maxMaxPeers:
		return fmt.Errorf("%w: MaxPeers %d not in [1, %d]", ErrOptions, o.MaxPeers, maxMaxPeers)
	case o.PeerLanes < 1 || o.PeerLanes > maxPeerLanes:
		return fmt.Errorf("%w: PeerLanes %d not in [1, %d]", ErrOptions, o.PeerLanes, maxPeerLanes)
	case o.LaneRingSize < 1 || o.LaneRingSize > maxLaneRing || o.LaneRingSize&(o.LaneRingSize-1) != 0:
		return fmt.Errorf("%w: LaneRingSize %d not a power of two in [1, %d]", ErrOptions, o.LaneRingSize, maxLaneRing)
	}
	return nil
}

// SegmentPrefix and SegmentSuffix frame every segment file name.
const (
	SegmentPrefix = "ddstore-"
	SegmentSuffix = ".tel"
)

// SegmentPath is the file a writer of (job, rank) uses in dir:
// "<dir>/ddstore-<job>-<rank>.tel", job sanitized for a file name.
func SegmentPath(dir, job string, rank int) string {
	if job == "" {
		job = DefaultJob
	}
	b := []byte(job)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			b[i] = '_'
		}
	}
	return filepath.Join(dir, fmt.Sprintf("%s%s-%d%s", SegmentPrefix, b, rank, SegmentSuffix))
}

// Writer is the engine side of one segment. Record, RecordLoader and
// Heartbeat never block and never allocate; they are safe for concurrent
// use, Record within its single-writer rule (one goroutine at a time per
// (variable, reader) pair, see Record). AddVar and RemoveVar are
// serialized by a writer-private mutex.
type Writer struct {
	m      mem
	g      geometry
	path   string
	dev    uint64
	ino    uint64
	closed atomic.Bool

	// Ring record clock (see nowNs): unix ns = Nanotime() + wallOffset,
	// re-estimated by Heartbeat so that record times follow steps of the
	// wall clock.
	start      time.Time
	wallOffset atomic.Int64

	mu     sync.Mutex // AddVar/RemoveVar/Close
	hbStop chan struct{}
	hbDone chan struct{}
}

// Create makes the segment of (o.Job, o.Rank) in o.Dir. A segment of the
// same name left by a dead process (or one that cannot be read) is
// replaced; one whose writer is alive gives ErrInUse. The new file is
// built under a temporary name, its version word written last, then
// renamed into place, so readers never see a half-made segment.
func Create(o WriterOptions) (*Writer, error) {
	o = o.withDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	path := SegmentPath(o.Dir, o.Job, o.Rank)
	// An existing file that cannot be read (foreign, not ready, corrupt)
	// sits on our name: it is replaced like a dead writer's segment.
	if info, err := inspect(path); err == nil && info.Alive {
		return nil, fmt.Errorf("%w: %s belongs to pid %d on %s (heartbeat %v ago)",
			ErrInUse, path, info.Pid, info.Host, info.HeartbeatAge.Round(time.Millisecond))
	}

	g := newGeometry4(int64(o.MaxVars), int64(o.MaxReaders), int64(o.RingSize), int64(o.MaxPeers), int64(o.PeerLanes),
		int64(o.LaneRingSize))
	tmp := filepath.Join(o.Dir, fmt.Sprintf(".%s.%d.tmp", filepath.Base(path), os.Getpid()))
	_ = os.Remove(tmp)
	// A directory that does not exist yet is made, private to the user
	// (an existing one keeps its mode).
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create segment directory %s: %w", o.Dir, err)
	}
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create segment in %s: %w", o.Dir, err)
	}
	fail := func(err error) (*Writer, error) {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := f.Chmod(0o600); err != nil {
		return fail(fmt.Errorf("telemetry: chmod %s: %w", tmp, err))
	}
	if err := f.Truncate(g.fileBytes); err != nil {
		return fail(fmt.Errorf("telemetry: size %s to %d bytes: %w", tmp, g.fileBytes, err))
	}
	base, err := unix.MmapPtr(int(f.Fd()), 0, nil, uintptr(g.fileBytes), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("telemetry: mmap %s (%d bytes): %w", tmp, g.fileBytes, err))
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		unix.MunmapPtr(base, uintptr(g.fileBytes))
		return fail(fmt.Errorf("telemetry: stat %s: %w", tmp, err))
	}
	w := &Writer{
		m:     mem{base: base, size: g.fileBytes},
		g:     g,
		path:  path,
		dev:   uint64(st.Dev),
		ino:   st.Ino,
		start: time.Now(),
	}
	w.wallOffset.Store(w.start.UnixNano() - Nanotime())
	w.initHeader(o)
	if err := os.Rename(tmp, path); err != nil {
		unix.MunmapPtr(base, uintptr(g.fileBytes))
		return fail(fmt.Errorf("telemetry: install segment %s: %w", path, err))
	}
	f.Close()
	return w, nil
}

func (w *Writer) initHeader(o WriterOptions) {
	m, g := w.m, w.g
	now := uint64(w.start.UnixNano())
	m.store(hMagic, Magic)
	m.store(hHeaderBytes, headerBytes)
	m.store(hFileBytes, uint64(g.fileBytes))
	m.store(hPid, uint64(o.Pid))
	m.store(hRank, uint64(o.Rank))
	m.store(hWorld, uint64(o.World))
	m.store(hStartNs, now)
	m.store(hMaxVars, uint64(g.maxVars))
	m.store(hMaxReaders, uint64(g.maxReaders))
	m.store(hRingSize, uint64(g.ringSize))
	m.store(hNumBuckets, NumBuckets)
	m.store(hNumPhases, NumPhases)
	m.store(hVarEntryBytes, varEntryBytes)
	m.store(hStripeBytes, stripeBytes)
	m.store(hRingSlotBytes, ringSlotBytes)
	m.store(hVarTableOff, uint64(g.varTableOff))
	m.store(hStripeOff, uint64(g.stripeOff))
	m.store(hLoaderOff, uint64(g.loaderOff))
	m.store(hRingOff, uint64(g.ringOff))
	m.store(hMaxPeers, uint64(g.maxPeers))
	m.store(hPeerOff, uint64(g.peerOff))
	m.store(hPeerSlotBytes, peerSlotBytes)
	m.store(hPeerLanes, uint64(g.peerLanes))
	m.store(hLaneRingSize, uint64(g.laneRingSize))
	m.store(hLaneRingOff, uint64(g.laneRingOff))
	if t, _, ok := procStart(o.Pid); ok {
		m.store(hPidStart, t)
	}
	m.store(hHeartbeat, now)
	m.putString(hHost, hostLen, o.Host)
	m.putString(hJob, jobLen, o.Job)
	m.putString(hProvider, provLen, o.Provider)
	m.putString(hReaderMode, modeLen, o.ReaderMode)
	m.putString(hMethod, methodLen, o.Method)
	m.store(hFeatures, featScanMarks|featLoaderDepth)
	m.store(hVersion, Version) // last: readers refuse version 0
}

// Path is the segment file.
func (w *Writer) Path() string { return w.path }

// Heartbeat stores the current time as the writer's heartbeat. Readers
// report a writer whose heartbeat is older than StaleAfter as stale. It
// also re-anchors the clock of ring records to the wall clock (see nowNs).
func (w *Writer) Heartbeat() {
	if w == nil || w.closed.Load() {
		return
	}
	now := time.Now()
	w.m.store(hHeartbeat, uint64(now.UnixNano()))
	w.wallOffset.Store(now.UnixNano() - Nanotime())
}

// StartHeartbeat calls Heartbeat every interval (default 1 s when <= 0)
// from a goroutine until Close. Calling it again has no effect.
func (w *Writer) StartHeartbeat(interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hbStop != nil || w.closed.Load() {
		return
	}
	w.hbStop, w.hbDone = make(chan struct{}), make(chan struct{})
	go func(stop, done chan struct{}) {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				w.Heartbeat()
			}
		}
	}(w.hbStop, w.hbDone)
}

// AddVar registers a variable and returns its id for Call.Var. The slot's
// stripes start from zero and its generation changes, so readers do not
// mix it with a removed variable that used the same slot. Names are kept
// up to 64 bytes, dtypes up to 16.
func (w *Writer) AddVar(name, dtype string, rowBytes, globalRows, localRows int64) (int, error) {
	if name == "" {
		return -1, fmt.Errorf("%w: AddVar with an empty name", ErrOptions)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed.Load() {
		return -1, ErrClosed
	}
	m, g := w.m, w.g
	for v := int64(0); v < g.maxVars; v++ {
		off := g.varOff(v)
		if m.load(off+vInUse) != 0 {
			continue
		}
		gen := m.load(off + vGen)
		m.store(off+vGen, gen|1) // odd: changing
		for r := int64(0); r < g.maxReaders; r++ {
			s := g.stripe(v, r)
			for i := int64(0); i < stripeBytes; i += 8 {
				m.store(s+i, 0)
			}
		}
		m.store(off+vStripesUsed, 0)
		if m.load(hVarsUsed) <= uint64(v) {
			m.store(hVarsUsed, uint64(v+1)) // before the slot is in use
		}
		m.store(off+vRowBytes, uint64(rowBytes))
		m.store(off+vGlobalRows, uint64(globalRows))
		m.store(off+vLocalRows, uint64(localRows))
		m.putString(off+vDType, dtypeLen, dtype)
		m.putString(off+vName, nameLen, name)
		m.store(off+vInUse, 1)
		m.store(off+vGen, (gen|1)+1) // even: stable
		return int(v), nil
	}
	return -1, fmt.Errorf("%w: %d variables in use, cannot add %q", ErrFull, g.maxVars, name)
}

// RemoveVar frees a variable slot; later Records for id are counted in
// the header's BadVarCalls. Unknown ids are ignored. No Record for id may
// still be running: its plain stores could land in the slot's next
// variable (the engine frees a variable only after its readers are done
// with it).
func (w *Writer) RemoveVar(id int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed.Load() || id < 0 || int64(id) >= w.g.maxVars {
		return
	}
	off := w.g.varOff(int64(id))
	if w.m.load(off+vInUse) == 0 {
		return
	}
	gen := w.m.load(off + vGen)
	w.m.store(off+vGen, gen|1)
	w.m.store(off+vInUse, 0)
	w.m.store(off+vGen, (gen|1)+1)
}

// markStripe raises variable v's stripesUsed mark to at least r+1 (see
// the scan marks in layout.go).
func (w *Writer) markStripe(v, r int64) { w.raise(w.g.varOff(v)+vStripesUsed, r) }

// markLane sets lane's bit of the lanesUsed scan mark (once: a load
// after that).
func (w *Writer) markLane(lane int64) {
	bit := uint64(1) << uint(lane)
	for {
		cur := w.m.load(hLanesUsed)
		if cur&bit != 0 || w.m.cas(hLanesUsed, cur, cur|bit) {
			return
		}
	}
}

// markPeer sets the mark of peer slot (lane, rank) (ranks at or above
// maxPeers: the last slot's), before the slot's first store; once set, it
// costs a load of a line the lane's calls keep warm.
func (w *Writer) markPeer(lane, rank int64) {
	if uint64(rank) >= uint64(w.g.maxPeers) {
		rank = w.g.maxPeers - 1
	}
	off, bit := w.g.mark(lane, rank)
	for {
		cur := w.m.load(off)
		if cur&bit != 0 || w.m.cas(off, cur, cur|bit) {
			return
		}
	}
}

// raise raises the scan mark at off to at least r+1. Concurrent first
// calls may race: the mark only grows.
func (w *Writer) raise(off, r int64) {
	for {
		cur := w.m.load(off)
		if cur > uint64(r) || w.m.cas(off, cur, uint64(r+1)) {
			return
		}
	}
}

func clampNs(v int64) uint64 {
	if v < 0 {
		return 0
	}
	return uint64(v)
}

// Record adds one call to its (variable, reader) stripe and to the ring
// of recent calls. It never blocks or allocates. A nil or closed writer
// ignores the call.
//
// Single-writer rule: at most one goroutine at a time may record for a
// given c.Reader id, whatever the variable (a Reader belongs to one
// goroutine), unless c.Concurrent is set. Handing a reader id from one
// goroutine to another needs the usual synchronization (mutex, channel).
// Such an owned reader's stripes and peer lane are updated with plain
// loads and stores, no atomic read-modify-write, so two unsynchronized
// writers of one reader id would lose counts. Calls with c.Concurrent set
// (the store's shared path, which several goroutines use at once) and
// calls on the last stripe, reader id MaxReaders-1, which also counts
// every reader id >= MaxReaders, are updated with atomic adds (slower):
// any number of goroutines may record them at once. A reader id must not
// mix the two: if any writer of it records Concurrent, all must (the last
// stripe always is). Different reader ids may always record concurrently.
// Reader ids >= PeerLanes-1 own their stripes but share peer lane 0
// (atomic adds there).
//
// Cost: plain stores for an owned reader id below PeerLanes-1 (its own
// lane ring); two atomic read-modify-writes (claiming a shared ring
// position and locking its slot) otherwise; one clock read if c.EndNano is 0;
// one compare-and-swap on a stripe's or peer lane's first call (its scan
// mark); atomic adds to peer lane 0 for shared calls.
func (w *Writer) Record(c *Call) {
	if w == nil || c == nil || w.closed.Load() {
		return
	}
	m, g := w.m, &w.g
	v, r := int64(c.Var), int64(c.Reader)
	if uint64(v) >= uint64(g.maxVars) || m.load(g.varOff(v)+vInUse) == 0 {
		m.add(hBadVarCalls, 1)
		return
	}
	if uint64(r) >= uint64(g.maxReaders) {
		m.add(hBadReaderCalls, 1)
		r = g.maxReaders - 1
	}
	shared := c.Concurrent || r == g.maxReaders-1
	s := g.stripe(v, r)
	if m.load(s+sCalls) == 0 {
		w.markStripe(v, r) // before the stripe's first call is stored
	}
	rows := clampNs(c.Rows)
	var total uint64
	for i, p := range c.Phases {
		if p > 0 {
			m.bump(s+sPhases+int64(i)*8, uint64(p), shared)
			total += uint64(p)
		}
	}
	m.bump(s+sRows, rows, shared)
	m.bump(s+sBytes, clampNs(c.Bytes), shared)
	m.bump(s+sLocalRows, clampNs(c.LocalRows), shared)
	m.bump(s+sRemoteRows, clampNs(c.RemoteRows), shared)
	if c.Err {
		m.bump(s+sErrors, 1, shared)
	}
	m.bump(s+sMRRegs, clampNs(c.MRRegs), shared)
	m.bump(s+sFailovers, clampNs(c.Failovers), shared)
	m.bump(s+sCallHist+int64(bucketU(total))*8, 1, shared)
	if rows != 0 {
		m.bump(s+sRowHist+int64(bucketU(total/rows))*8, 1, shared)
	}
	m.bump(s+sCalls, 1, shared) // last: readers load calls first
	var lane int64              // shared
	if !shared && r+1 < g.peerLanes {
		lane = r + 1
	}
	w.recordPeers(c, total, lane)

	var status uint64
	if c.Err {
		status = 1
	}
	end := c.EndNano
	if end == 0 {
		end = Nanotime()
	}
	if lane != 0 {
		// The reader's own ring: one writer, plain stores (layout.go).
		h := g.laneHead(lane)
		p := m.load(h)
		slot := g.laneSlot(lane, p)
		m.put(slot+rSeq, 2*p+1)
		w.putRecord(slot, c, r, status, end)
		m.put(slot+rSeq, 2*p+2)
		m.put(h, p+1)
		return
	}
	// The shared ring: claim a position, lock its slot, fill it, publish.
	p := atomic.AddUint64(m.p(hRingHead), 1) - 1
	slot := g.slot(p)
	lock := 2*p + 1
	seq := m.load(slot + rSeq)
	if seq&1 != 0 || seq >= lock || !m.cas(slot+rSeq, seq, lock) {
		w.abandon(slot, p)
		return
	}
	// The slot is ours until seq is even again: plain stores suffice.
	w.putRecord(slot, c, r, status, end)
	m.put(slot+rSeq, lock+1) // publish, after every field
}

// putRecord stores call c's fields (reader stripe r) in the ring slot at
// slot, which the caller holds (seq odd).
func (w *Writer) putRecord(slot int64, c *Call, r int64, status uint64, end int64) {
	m := w.m
	m.put(slot+rTime, uint64(end+w.wallOffset.Load()))
	m.put(slot+rVarReader, uint64(uint32(c.Var))|uint64(r)<<32|status<<56)
	m.put(slot+rRows, uint64(c.Rows))
	m.put(slot+rBytes, uint64(c.Bytes))
	m.put(slot+rLocalRows, uint64(c.LocalRows))
	m.put(slot+rRemoteRows, uint64(c.RemoteRows))
	t := &c.Targets
	m.put(slot+rTargets, t.Mask())
	m.put(slot+rNTargets, uint64(t.n))
	m.put(slot+rMRRegs, uint64(c.MRRegs))
	for i := int64(0); i < MaxCallTargets; i += 2 {
		// Ranks past the named ones read as -1: all ones.
		lo := uint64(uint32(t.rank[i])) | uint64(uint32((int32(t.n)-1-int32(i))>>31))
		hi := uint64(uint32(t.rank[i+1])) | uint64(uint32((int32(t.n)-2-int32(i))>>31))
		m.put(slot+rFirst+i*4, lo|hi<<32)
	}
	for i, ph := range c.Phases {
		m.put(slot+rPhases+int64(i)*8, uint64(ph))
	}
}

// Failover counts rows row reads that moved from owner (dead, unreachable
// or past the failover deadline) to replica, in both ranks' peer slots
// (atomic adds; never blocks, never allocates). No-op on a version 1
// segment or for negative ranks.
func (w *Writer) Failover(owner, replica int, rows int64) {
	if w == nil || w.closed.Load() || w.g.maxPeers == 0 || owner < 0 || replica < 0 || rows <= 0 {
		return
	}
	m, g := w.m, &w.g
	w.markLane(0)
	w.markPeer(0, int64(owner))
	w.markPeer(0, int64(replica))
	m.add(g.peer(0, int64(owner))+pFailed, uint64(rows))
	m.add(g.peer(0, int64(replica))+pServed, uint64(rows))
}

// recordPeers adds the call's share to the peer slot of each named target
// in lane (0: atomic adds, every reader of the process may read from the
// same rank at once; else the reader's own lane, plain stores). A target
// with a measured service time (TargetSet.Served: when the last of its
// reads completed) gets that time; the call's time less lock wait, GPU
// sync and the measured times is split among the others by rows. Bytes
// are split by rows. Rows of targets beyond the first MaxCallTargets are
// not attributed to a peer.
func (w *Writer) recordPeers(c *Call, total uint64, lane int64) {
	m, g := w.m, &w.g
	t := &c.Targets
	n := t.Named()
	blame := c.Err && c.ErrPeer > 0
	if n == 0 && !blame {
		return
	}
	shared := lane == 0
	w.markLane(lane) // before the lane's first store
	if blame {
		w.markPeer(lane, int64(c.ErrPeer-1))
		m.bump(g.peer(lane, int64(c.ErrPeer-1))+pErrors, 1, shared)
	}
	if n == 0 {
		return
	}
	rows := clampNs(t.other)
	var measured, mrows uint64
	for i := 0; i < n; i++ {
		r := clampNs(t.rows[i])
		rows += r
		if t.ns[i] > 0 {
			measured += uint64(t.ns[i])
			mrows += r
		}
	}
	ns := total - min(total, clampNs(c.Phases[PhaseLockWait])+clampNs(c.Phases[PhaseGPUSync]))
	rest, restRows := ns-min(ns, measured), rows-mrows
	bytes := clampNs(c.Bytes)
	for i := 0; i < n; i++ {
		r := clampNs(t.rows[i])
		pns, pb := ns, bytes
		if n > 1 || t.other > 0 {
			pb = mulDiv(bytes, r, rows)
		}
		switch {
		case t.ns[i] > 0:
			pns = uint64(t.ns[i])
		case n > 1 || t.other > 0 || measured > 0:
			pns = mulDiv(rest, r, restRows)
		}
		off := g.peer(lane, int64(t.rank[i]))
		if m.load(off+pCalls) == 0 { // no call stored yet: maybe unmarked
			w.markPeer(lane, int64(t.rank[i]))
		}
		m.bump(off+pRows, r, shared)
		m.bump(off+pBytes, pb, shared)
		m.bump(off+pNs, pns, shared)
		m.bump(off+pHist+int64(peerBucketPerRow(pns, r))*8, 1, shared)
		m.bump(off+pCalls, 1, shared) // last, as for stripes
	}
}

// mulDiv is a*b/c without overflow for the sizes seen here (c > 0).
func mulDiv(a, b, c uint64) uint64 {
	if c == 0 {
		return 0
	}
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return a // cannot happen when b <= c; keep the whole
	}
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// SetLoaderConfig stores the loader's configuration in the loader block
// (the engine calls it when a loader starts).
func (w *Writer) SetLoaderConfig(lc LoaderConfig) {
	if w == nil || w.closed.Load() {
		return
	}
	l := w.g.loaderOff
	w.m.store(l+lWorkers, uint64(lc.Workers))
	w.m.store(l+lPrefetch, uint64(lc.Prefetch))
	w.m.store(l+lReaders, uint64(lc.Readers))
	w.m.store(l+lBatchRow, uint64(lc.BatchRows))
	w.m.store(l+lPrefMax, uint64(lc.PrefetchMax))
}

// SetLoaderPrefetch stores the prefetch depth the loader now uses (with
// prefetch auto it changes while the loader runs). Never blocks or
// allocates.
func (w *Writer) SetLoaderPrefetch(depth int64) {
	if w == nil || w.closed.Load() {
		return
	}
	w.m.store(w.g.loaderOff+lPrefetch, uint64(depth))
}

// AddProc adds d to process counter i (Proc*). Never blocks or allocates;
// out-of-range i is ignored.
func (w *Writer) AddProc(i int, d int64) {
	if w == nil || w.closed.Load() || i < 0 || i >= NumProc {
		return
	}
	w.m.add(hProc+int64(i)*8, uint64(d))
}

// bump adds x to the counter at off: an atomic add on a shared stripe, a
// load and a plain store on an owned (single-writer) one. Zero adds to an
// owned stripe are skipped.
func (m mem) bump(off int64, x uint64, shared bool) {
	if shared {
		if x != 0 {
			m.add(off, x)
		}
		return
	}
	if x != 0 {
		m.put(off, m.load(off)+x)
	}
}

// Nanotime is the monotonic clock, in ns, of Call.EndNano: the runtime's
// own (one vDSO read, where time.Now makes two). A caller that times its
// call with it hands Record the end time, and Record reads no clock.
//
//go:linkname Nanotime runtime.nanotime
func Nanotime() int64

// abandon marks ring position p as given up (its slot was busy), so
// readers count it as dropped instead of waiting for it.
func (w *Writer) abandon(slot int64, p uint64) {
	m := w.m
	m.add(hRingClaimFails, 1)
	for {
		a := m.load(slot + rAbandoned)
		if a > p || m.cas(slot+rAbandoned, a, p+1) {
			return
		}
	}
}

// bucketU is BucketIndex for unsigned values.
func bucketU(v uint64) int {
	b := bits.Len64(v)
	if b >= NumBuckets {
		return NumBuckets - 1
	}
	return b
}

// RecordLoader adds one batch to the loader block: waitNs is how long the
// consumer waited for the batch, stepNs the time since the previous batch
// was handed out (the training step). Never blocks or allocates.
func (w *Writer) RecordLoader(waitNs, stepNs int64) {
	if w == nil || w.closed.Load() {
		return
	}
	m, l := w.m, w.g.loaderOff
	wait, step := clampNs(waitNs), clampNs(stepNs)
	m.add(l+lWaitNs, wait)
	m.add(l+lStepNs, step)
	m.add(l+lWaitHist+int64(bucketU(wait))*8, 1)
	m.add(l+lStepHist+int64(bucketU(step))*8, 1)
	m.add(l+lBatches, 1) // last, as for stripes
}

// Close stops the heartbeat and removes the segment file (unless another
// writer has since replaced it). Calls after Close are ignored. The
// mapping is replaced by private anonymous memory rather than unmapped,
// so a Record racing with Close writes harmlessly instead of faulting;
// that leaves the address range (not the memory) reserved.
func (w *Writer) Close() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed.Swap(true) {
		return nil
	}
	if w.hbStop != nil {
		close(w.hbStop)
		<-w.hbDone
	}
	var err error
	var st unix.Stat_t
	if unix.Stat(w.path, &st) == nil && uint64(st.Dev) == w.dev && st.Ino == w.ino {
		if rmErr := os.Remove(w.path); rmErr != nil {
			err = fmt.Errorf("telemetry: remove %s: %w", w.path, rmErr)
		}
	}
	_, mErr := unix.MmapPtr(-1, 0, w.m.base, uintptr(w.g.fileBytes),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
	if mErr != nil && err == nil {
		err = fmt.Errorf("telemetry: release mapping of %s: %w", w.path, mErr)
	}
	return err
}
