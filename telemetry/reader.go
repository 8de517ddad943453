package telemetry

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

var (
	hostOnce sync.Once
	hostName string
)

// localHost is os.Hostname(), cached; "" if unknown.
func localHost() string {
	hostOnce.Do(func() { hostName, _ = os.Hostname() })
	return hostName
}

// pidAlive reports whether pid runs on this host. start, when not 0, is
// the process start time recorded by the writer; a different start time
// means the pid was reused by another process. Zombies count as dead.
func pidAlive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	if t, zombie, ok := procStart(pid); ok {
		return !zombie && (start == 0 || t == start)
	}
	err := unix.Kill(pid, 0)
	return err == nil || err == unix.EPERM
}

// liveness derives (alive, state) from a header: on this host the pid
// decides exited vs not (pidAlive, or alive when not nil: a remembered
// answer); elsewhere only the heartbeat can tell.
func liveness(host string, pid int, pidStart uint64, age time.Duration, alive func() bool) (bool, string) {
	sameHost := host != "" && host == localHost()
	if sameHost {
		if alive == nil {
			alive = func() bool { return pidAlive(pid, pidStart) }
		}
		if !alive() {
			return false, StateExited
		}
		if age > StaleAfter {
			return true, StateStale
		}
		return true, StateLive
	}
	if age > StaleAfter {
		return false, StateStale
	}
	return true, StateLive
}

// staticHeader is the immutable part of a header, validated.
type staticHeader struct {
	version  int
	pid      int
	pidStart uint64
	rank     int
	world    int
	startNs  int64
	host     string
	job      string
	provider string
	mode     string
	method   string
	features uint64 // v2 optional features (featScanMarks)
	g        geometry
}

// parseHeader validates the first bytes b of a file of fileSize bytes
// (len(b) = min(fileSize, headerBytes)). Every size, count and offset
// is checked against the format and the file size.
func parseHeader(name string, b []byte, fileSize int64) (staticHeader, error) {
	var h staticHeader
	le := binary.LittleEndian
	var magic [8]byte
	le.PutUint64(magic[:], Magic)
	if len(b) < 8 {
		if len(b) > 0 && string(b) == string(magic[:len(b)]) {
			return h, fmt.Errorf("%w: %s is %d bytes, shorter than the 8-byte magic", ErrTruncated, name, len(b))
		}
		return h, fmt.Errorf("%w: %s is %d bytes, no magic", ErrForeign, name, len(b))
	}
	u := func(off int) uint64 { return le.Uint64(b[off:]) }
	if got := u(hMagic); got != Magic {
		var be [8]byte
		binary.BigEndian.PutUint64(be[:], Magic)
		if string(b[:8]) == string(be[:]) {
			return h, fmt.Errorf("%w: %s was written on a machine of the other byte order", ErrForeign, name)
		}
		return h, fmt.Errorf("%w: %s starts with %q, want %q", ErrForeign, name, b[:8], magic[:])
	}
	if len(b) < hVersion+8 {
		return h, fmt.Errorf("%w: %s is %d bytes, header needs %d", ErrTruncated, name, fileSize, headerBytes)
	}
	switch v := u(hVersion); {
	case v == 0:
		return h, fmt.Errorf("%w: %s is still being created (or its writer died while creating it)", ErrNotReady, name)
	case v > Version:
		return h, fmt.Errorf("%w: %s has format version %d; this reader understands versions 1 to %d: upgrade ddtop", ErrVersion, name, v, Version)
	default:
		h.version = int(v)
	}
	if len(b) < headerBytes || fileSize < headerBytes {
		return h, fmt.Errorf("%w: %s is %d bytes, header needs %d", ErrTruncated, name, fileSize, headerBytes)
	}
	bad := func(format string, a ...any) (staticHeader, error) {
		return h, fmt.Errorf("%w: %s: %s", ErrCorrupt, name, fmt.Sprintf(format, a...))
	}
	fixed := []struct {
		off  int
		want uint64
		name string
	}{
		{hHeaderBytes, headerBytes, "header size"},
		{hNumBuckets, NumBuckets, "histogram buckets"},
		{hNumPhases, NumPhases, "phase count"},
		{hVarEntryBytes, varEntryBytes, "variable entry size"},
		{hStripeBytes, stripeBytes, "stripe size"},
		{hRingSlotBytes, ringSlotBytes, "ring slot size"},
	}
	if h.version == 1 {
		fixed[len(fixed)-1].want = ringSlotBytesV1
	} else {
		fixed = append(fixed, struct {
			off  int
			want uint64
			name string
		}{hPeerSlotBytes, peerSlotBytes, "peer slot size"})
	}
	for _, f := range fixed {
		if got := u(f.off); got != f.want {
			return bad("%s is %d, want %d", f.name, got, f.want)
		}
	}
	maxVars, maxReaders, ringSize := u(hMaxVars), u(hMaxReaders), u(hRingSize)
	if maxVars < 1 || maxVars > maxMaxVars {
		return bad("variable slots %d not in [1, %d]", maxVars, maxMaxVars)
	}
	if maxReaders < 1 || maxReaders > maxMaxReaders {
		return bad("reader stripes %d not in [1, %d]", maxReaders, maxMaxReaders)
	}
	if ringSize < 1 || ringSize > maxRingSize || ringSize&(ringSize-1) != 0 {
		return bad("ring size %d not a power of two in [1, %d]", ringSize, maxRingSize)
	}
	var g geometry
	if h.version == 1 {
		g = newGeometryV1(int64(maxVars), int64(maxReaders), int64(ringSize))
	} else {
		maxPeers := u(hMaxPeers)
		if maxPeers < 1 || maxPeers > maxMaxPeers {
			return bad("peer slots %d not in [1, %d]", maxPeers, maxMaxPeers)
		}
		if h.version == 2 {
			g = newGeometryV2(int64(maxVars), int64(maxReaders), int64(ringSize), int64(maxPeers))
		} else {
			lanes := u(hPeerLanes)
			if lanes < 1 || lanes > maxPeerLanes {
				return bad("peer lanes %d not in [1, %d]", lanes, maxPeerLanes)
			}
			g = newGeometry(int64(maxVars), int64(maxReaders), int64(ringSize), int64(maxPeers), int64(lanes))
			if h.version >= 4 {
				lr := u(hLaneRingSize)
				if lr < 1 || lr > maxLaneRing || lr&(lr-1) != 0 {
					return bad("lane ring size %d not a power of two in [1, %d]", lr, maxLaneRing)
				}
				g = newGeometry4(int64(maxVars), int64(maxReaders), int64(ringSize), int64(maxPeers), int64(lanes), int64(lr))
			}
		}
		if got := u(hPeerOff); got != uint64(g.peerOff) {
			return bad("peer table offset is %d, want %d", got, g.peerOff)
		}
	}
	offs := []struct {
		off  int
		want int64
		name string
	}{
		{hVarTableOff, g.varTableOff, "variable table offset"},
		{hStripeOff, g.stripeOff, "stripe offset"},
		{hLoaderOff, g.loaderOff, "loader offset"},
		{hRingOff, g.ringOff, "ring offset"},
		{hFileBytes, g.fileBytes, "segment size"},
	}
	for _, f := range offs {
		if got := u(f.off); got != uint64(f.want) {
			return bad("%s is %d, want %d for %d vars x %d readers, ring %d", f.name, got, f.want, maxVars, maxReaders, ringSize)
		}
	}
	if got := u(hLaneRingOff); h.version >= 4 && got != uint64(g.laneRingOff) {
		return bad("lane ring offset is %d, want %d", got, g.laneRingOff)
	}
	if fileSize < g.fileBytes {
		return h, fmt.Errorf("%w: %s is %d bytes, its header says %d", ErrTruncated, name, fileSize, g.fileBytes)
	}
	pid, rank, world := u(hPid), u(hRank), u(hWorld)
	if pid < 1 || pid > 1<<31-1 {
		return bad("pid %d", pid)
	}
	if world < 1 || world > 1<<31-1 || rank >= world {
		return bad("rank %d of world %d", rank, world)
	}
	h.pid, h.rank, h.world = int(pid), int(rank), int(world)
	h.pidStart = u(hPidStart)
	h.startNs = int64(u(hStartNs))
	h.host = cString(b[hHost : hHost+hostLen])
	h.job = cString(b[hJob : hJob+jobLen])
	h.provider = cString(b[hProvider : hProvider+provLen])
	h.mode = cString(b[hReaderMode : hReaderMode+modeLen])
	h.method = cString(b[hMethod : hMethod+methodLen])
	if h.version >= 2 {
		h.features = u(hFeatures)
	}
	h.g = g
	return h, nil
}

// readHeaderFile reads and validates a segment's header without mapping it.
func readHeaderFile(path string) (staticHeader, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return staticHeader{}, nil, fmt.Errorf("telemetry: open %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return staticHeader{}, nil, fmt.Errorf("telemetry: stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return staticHeader{}, nil, fmt.Errorf("%w: %s is not a regular file", ErrForeign, path)
	}
	n := min(st.Size(), headerBytes)
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return staticHeader{}, nil, fmt.Errorf("telemetry: read %s: %w", path, err)
	}
	h, err := parseHeader(path, b, st.Size())
	return h, b, err
}

// inspect describes the segment at path from its header alone.
func inspect(path string) (SegmentInfo, error) {
	h, b, err := readHeaderFile(path)
	if err != nil {
		return SegmentInfo{Path: path, State: StateInvalid, Err: err}, err
	}
	hb := int64(binary.LittleEndian.Uint64(b[hHeartbeat:]))
	age := time.Duration(time.Now().UnixNano() - hb)
	alive, state := liveness(h.host, h.pid, h.pidStart, age, nil)
	return SegmentInfo{
		Path: path, Job: h.job, Host: h.host, Rank: h.rank, World: h.world, Pid: h.pid,
		StartNs: h.startNs, Alive: alive, HeartbeatAge: age, State: state,
	}, nil
}

// Discover lists the segments (files "ddstore-*.tel") in dir, sorted by
// job and rank, with their liveness. Files that cannot be read are listed
// with State StateInvalid and Err set. Discover does not map anything.
func Discover(dir string) ([]SegmentInfo, error) {
	return DiscoverOpen(dir, nil)
}

// DiscoverOpen is Discover for a caller that keeps segments open (ddtop
// refreshing many times a second): a file that is still the very file
// open(path) maps (same device and inode) is described from the mapping
// (Segment.Info) instead of being opened and its header read and
// validated again. open may be nil, or return nil for a path it does not
// have open.
func DiscoverOpen(dir string, open func(path string) *Segment) ([]SegmentInfo, error) {
	return NewSegmentDir(dir).Discover(open)
}

// Segment is a read-only view of one segment. Its methods are safe for
// concurrent use and never write to the segment.
type Segment struct {
	path   string
	file   os.FileInfo // the file mapped, for DiscoverOpen's same-file check
	h      staticHeader
	data   []byte
	m      mem
	mu     sync.Mutex
	closed bool
	torn   uint64
	fault  bool // SetPanicOnFault's setting before enter, restored by leave
	// The writer's liveness. With a pidfd (a writer on this host, Linux)
	// one poll of it answers; exited is then final. Without one: the
	// pid's last full check (pidAlive, /proc), see pidRecheck.
	pidfd     int // -1: none
	exited    bool
	aliveAt   time.Time
	alive     bool
	checkedAt time.Time    // the last check of any kind
	order     []recordTime // ReadRings' sort keys, kept for the next call
}

// pidRecheck is how often a Segment checks its writer's pid in full
// (/proc/<pid>/stat: start time and zombie state, three system calls).
// In between, a live answer is confirmed with kill(pid, 0) alone, which
// sees the pid disappear, and an exited one is kept: a viewer refreshing
// many segments ten times a second reads /proc once a second for each.
// A pid reused, or a zombie not yet reaped, is seen within pidRecheck.
const pidRecheck = time.Second

// pidReuse is how long an answer of pidAlive stands without a system
// call: a viewer's refresh asks twice per segment (its listing's Info and
// its Snapshot), a few milliseconds apart.
const pidReuse = 50 * time.Millisecond

// pidAlive is pidAlive for the segment's writer. With a pidfd: one poll
// of it, not within pidReuse of the last check (CheckWriters' included).
// Without: checked in full at most every pidRecheck, and not at all
// within pidReuse of the last check. s.mu is held.
func (s *Segment) pidAlive() bool {
	if s.exited {
		return false
	}
	now := time.Now()
	if s.pidfd >= 0 {
		if now.Sub(s.checkedAt) >= pidReuse || now.Before(s.checkedAt) {
			fds := [1]pollFd{{Fd: int32(s.pidfd)}}
			if pollExited(fds[:]) && exitedEvent(&fds[0]) {
				s.writerExited()
			}
			s.checkedAt = now
		}
		return !s.exited
	}
	switch {
	case s.aliveAt.IsZero() || now.Sub(s.aliveAt) >= pidRecheck || now.Before(s.aliveAt):
		s.alive, s.aliveAt = pidAlive(s.h.pid, s.h.pidStart), now
	case now.Sub(s.checkedAt) < pidReuse && !now.Before(s.checkedAt):
		return s.alive
	case s.alive:
		if err := unix.Kill(s.h.pid, 0); err != nil && err != unix.EPERM {
			s.alive = false
		}
	}
	s.checkedAt = now
	return s.alive
}

// writerExited records that the writer is gone for good. s.mu is held.
func (s *Segment) writerExited() {
	s.exited = true
	if s.pidfd >= 0 {
		closeFd(s.pidfd)
		s.pidfd = -1
	}
}

// WriterCheck asks with one poll whether the writers of many segments
// have exited, for a viewer that refreshes them all at once. The zero
// value is ready; it keeps its scratch memory between checks and is not
// safe for concurrent use.
type WriterCheck struct {
	fds     []pollFd
	watched []*Segment
}

// Check polls the writers of segs: the next Info and Snapshot of each,
// within pidReuse, need no system call. Only segments whose writer runs
// on this host and could be watched through a pidfd take part; the
// others check on their own as before.
func (wc *WriterCheck) Check(segs []*Segment) {
	fds, watched := wc.fds[:0], wc.watched[:0]
	defer func() {
		clear(watched) // keep no segment alive
		wc.fds, wc.watched = fds, watched[:0]
	}()
	for _, s := range segs {
		s.mu.Lock()
		if !s.closed && s.pidfd >= 0 {
			fds = append(fds, pollFd{Fd: int32(s.pidfd)})
			watched = append(watched, s)
		}
		s.mu.Unlock()
	}
	if len(fds) == 0 || !pollExited(fds) {
		return
	}
	now := time.Now()
	for i, s := range watched {
		s.mu.Lock()
		if !s.closed && int32(s.pidfd) == fds[i].Fd { // not closed since: the same fd
			if exitedEvent(&fds[i]) {
				s.writerExited()
			}
			s.checkedAt = now
		}
		s.mu.Unlock()
	}
}

// Open maps the segment at path read-only after validating its header:
// ErrForeign, ErrNotReady, ErrVersion, ErrTruncated or ErrCorrupt (all
// errors.Is-able) say why a file is refused.
func Open(path string) (*Segment, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("telemetry: open %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("telemetry: stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrForeign, path)
	}
	b := make([]byte, min(st.Size(), headerBytes))
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, fmt.Errorf("telemetry: read %s: %w", path, err)
	}
	h, err := parseHeader(path, b, st.Size())
	if err != nil {
		return nil, err
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(h.g.fileBytes), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("telemetry: mmap %s read-only (%d bytes): %w", path, h.g.fileBytes, err)
	}
	seg := &Segment{path: path, file: st, h: h, data: data, m: mem{base: unsafe.Pointer(&data[0]), size: h.g.fileBytes}, pidfd: -1}
	if h.host != "" && h.host == localHost() {
		seg.pidfd, seg.exited = openPidfd(h.pid, h.pidStart)
	}
	return seg, nil
}

// Close unmaps the segment.
func (s *Segment) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.pidfd >= 0 {
		closeFd(s.pidfd)
		s.pidfd = -1
	}
	return unix.Munmap(s.data)
}

// Path is the segment file.
func (s *Segment) Path() string { return s.path }

// Torn is the number of ring records ReadRing rejected because a writer
// overwrote them while they were being copied (they are also counted in
// ReadRing's dropped).
func (s *Segment) Torn() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.torn
}

// leave undoes enter. It turns a memory fault while reading the mapping
// (the file was truncated under us) into ErrTruncated instead of a crash.
func (s *Segment) leave(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %s: fault while reading the mapping (%v)", ErrTruncated, s.path, r)
	}
	debug.SetPanicOnFault(s.fault)
	s.mu.Unlock()
}

// enter locks s for a read of its mapping, with a fault turned into a
// panic that leave (deferred at once) recovers. On a closed segment it
// unlocks and returns ErrClosed.
func (s *Segment) enter() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("%w: segment %s", ErrClosed, s.path)
	}
	s.fault = debug.SetPanicOnFault(true)
	return nil
}

// Info describes the segment's writer now (liveness from the heartbeat
// and pid).
func (s *Segment) Info() (info SegmentInfo, err error) {
	if s.enter() != nil {
		return SegmentInfo{Path: s.path, State: StateInvalid, Err: ErrClosed}, ErrClosed
	}
	defer s.leave(&err)
	hb := s.m.loadI(hHeartbeat)
	age := time.Duration(time.Now().UnixNano() - hb)
	alive, state := liveness(s.h.host, s.h.pid, s.h.pidStart, age, s.pidAlive)
	h := &s.h
	return SegmentInfo{Path: s.path, Job: h.job, Host: h.host, Rank: h.rank, World: h.world,
		Pid: h.pid, StartNs: h.startNs, Alive: alive, HeartbeatAge: age, State: state}, nil
}

// RingHead is the ring position the next record will take; ReadRing from
// RingHead()-n returns (at most) the n most recent records.
func (s *Segment) RingHead() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0
	}
	return s.m.load(hRingHead)
}

// Snapshot copies the header, the in-use variables with their per-reader
// stripes, and the loader block, with atomic loads. Each variable is
// copied under its generation check, so a variable being added or removed
// is either skipped or complete.
func (s *Segment) Snapshot() (*Snapshot, error) {
	snap := new(Snapshot)
	if err := s.SnapshotTo(snap); err != nil {
		return nil, err
	}
	return snap, nil
}

// SnapshotTo is Snapshot into dst, an earlier snapshot (of any segment)
// that nobody uses any more: its memory (variables, their stripes, peers)
// is reused, so a viewer that refreshes often allocates nothing for a
// segment whose variables stay the same. On error dst holds nothing
// useful.
func (s *Segment) SnapshotTo(dst *Snapshot) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave(&err)

	m, g, h := s.m, &s.h.g, &s.h
	now := time.Now()
	vars, peers := dst.Vars[:0], dst.Peers[:0]
	same := dst.Path == s.path && dst.StartNs == h.startNs // dst's names are this segment's
	*dst = Snapshot{
		Header: Header{
			Version: h.version, Pid: h.pid, Host: h.host, Rank: h.rank, World: h.world, Job: h.job,
			StartNs: h.startNs, Heartbeat: m.loadI(hHeartbeat),
			Provider: h.provider, ReaderMode: h.mode, Method: h.method,
			MaxVars: int(g.maxVars), MaxReaders: int(g.maxReaders), RingSize: int(g.ringSize),
			BadVarCalls:    m.loadI(hBadVarCalls),
			BadReaderCalls: m.loadI(hBadReaderCalls),
			RingClaimFails: m.loadI(hRingClaimFails),
			RingHead:       m.load(hRingHead),
			LaneRingSize:   int(g.laneRingSize),
			MaxPeers:       int(g.maxPeers),
			PeerLanes:      int(g.peerLanes),
		},
		Taken: now,
		Path:  s.path,
	}
	snap := dst
	snap.HeartbeatAge = time.Duration(now.UnixNano() - snap.Heartbeat)
	snap.Alive, snap.State = liveness(h.host, h.pid, h.pidStart, snap.HeartbeatAge, s.pidAlive)

	for v, used := int64(0), s.varsUsed(); v < used; v++ {
		var reuse *VarSnapshot
		if n := len(vars); n < cap(vars) {
			reuse = &vars[:n+1][n]
		}
		if vs, ok := s.readVar(v, reuse, same); ok {
			vars = append(vars, vs)
		}
	}
	snap.Vars = vars
	if len(vars) == 0 {
		snap.Vars = nil
	}
	l := g.loaderOff
	snap.Loader.Batches = m.loadI(l + lBatches) // first: see Counters
	snap.Loader.WaitNs = m.loadI(l + lWaitNs)
	snap.Loader.StepNs = m.loadI(l + lStepNs)
	for i := int64(0); i < NumBuckets; i++ {
		snap.Loader.WaitHist[i] = m.load(l + lWaitHist + i*8)
		snap.Loader.StepHist[i] = m.load(l + lStepHist + i*8)
	}
	if g.version >= 2 {
		snap.Loader.Config = LoaderConfig{
			Workers: m.loadI(l + lWorkers), Prefetch: m.loadI(l + lPrefetch),
			Readers: m.loadI(l + lReaders), BatchRows: m.loadI(l + lBatchRow),
		}
		if s.h.features&featLoaderDepth != 0 {
			snap.Loader.Config.PrefetchMax = m.loadI(l + lPrefMax)
		}
		for i := range snap.Proc {
			snap.Proc[i] = m.loadI(hProc + int64(i)*8)
		}
		peers = s.readPeers(peers)
		if len(peers) > 0 {
			snap.Peers = peers
		}
	}
	return nil
}

// addPeerSlot adds the peer slot at off to p and reports whether it had
// anything to add.
func addPeerSlot(m mem, off int64, p *PeerCounters) bool {
	calls := m.loadI(off + pCalls) // first: see Counters
	errs, failed, served := m.loadI(off+pErrors), m.loadI(off+pFailed), m.loadI(off+pServed)
	if calls == 0 && errs == 0 && failed == 0 && served == 0 {
		return false
	}
	p.Calls += calls
	p.Errors += errs
	p.FailedFrom += failed
	p.ServedFor += served
	p.Rows += m.loadI(off + pRows)
	p.Bytes += m.loadI(off + pBytes)
	p.Ns += m.loadI(off + pNs)
	for i := int64(0); i < NumPeerBuckets; i++ {
		p.Hist[i] += m.load(off + pHist + i*8)
	}
	return true
}

// readPeers appends the peer table's ranks that saw anything to peers, by
// rank, each the sum of its slots over the lanes. With v3's scan marks
// it reads only marked slots of marked lanes; else every slot.
func (s *Segment) readPeers(peers []PeerCounters) []PeerCounters {
	m, g := s.m, &s.h.g
	lanes := s.lanesUsed()
	marked := g.markWords > 0 && s.h.features&featScanMarks != 0
	for w := int64(0); w*64 < g.maxPeers && lanes != 0; w++ {
		set := ^uint64(0) // ranks 64w.. that some used lane has marked
		if marked {
			set = 0
			for l := int64(0); l < g.peerLanes; l++ {
				if lanes&(1<<uint(l)) != 0 {
					set |= m.load(g.markOff + (l*g.markWords+w)*8)
				}
			}
		}
		for ; set != 0; set &= set - 1 {
			r := w*64 + int64(bits.TrailingZeros64(set))
			if r >= g.maxPeers {
				break
			}
			var p PeerCounters
			seen := false
			for l := int64(0); l < g.peerLanes; l++ {
				if lanes&(1<<uint(l)) != 0 {
					seen = addPeerSlot(m, g.peer(l, r), &p) || seen
				}
			}
			if seen {
				p.Rank = int(r)
				peers = append(peers, p)
			}
		}
	}
	return peers
}

// lanesUsed is the set of peer lanes a snapshot reads (bit l: lane l):
// those the writer has marked written when it keeps scan marks, else all.
func (s *Segment) lanesUsed() uint64 {
	g := &s.h.g
	all := uint64(1)<<uint(g.peerLanes) - 1 // peerLanes <= 64: 1<<64 is 0 in Go, so all ones
	if s.h.features&featScanMarks == 0 || g.version < 3 {
		return all
	}
	return s.m.load(hLanesUsed) & all
}

// varsUsed is how many variable slots a snapshot reads: those below the
// writer's mark when it keeps scan marks, else all.
func (s *Segment) varsUsed() int64 {
	if s.h.features&featScanMarks == 0 {
		return s.h.g.maxVars
	}
	return int64(min(s.m.load(hVarsUsed), uint64(s.h.g.maxVars)))
}

// readVar copies variable v if it is in use, retrying while it changes.
// reuse, when not nil, is an old copy of a variable whose stripes' memory
// the copy may take; when it was copied from this segment (same) and is
// the same generation of v, the copy keeps its strings.
func (s *Segment) readVar(v int64, reuse *VarSnapshot, same bool) (VarSnapshot, bool) {
	m, g := s.m, &s.h.g
	off := g.varOff(v)
	var spare []Counters
	if reuse != nil {
		spare = reuse.Readers[:cap(reuse.Readers)]
	}
	for try := 0; try < 100; try++ {
		gen := m.load(off + vGen)
		if gen&1 != 0 {
			runtime.Gosched()
			continue
		}
		if m.load(off+vInUse) == 0 {
			return VarSnapshot{}, false
		}
		vs := VarSnapshot{
			ID:         int(v),
			RowBytes:   m.loadI(off + vRowBytes),
			GlobalRows: m.loadI(off + vGlobalRows),
			LocalRows:  m.loadI(off + vLocalRows),
			Generation: gen,
		}
		if same && reuse != nil && reuse.ID == int(v) && reuse.Generation == gen {
			vs.Name, vs.DType = reuse.Name, reuse.DType // set before the generation was published
		} else {
			vs.Name, vs.DType = m.getString(off+vName, nameLen), m.getString(off+vDType, dtypeLen)
		}
		// Copy only the stripes up to the last one that saw calls: a
		// stripe's calls counter is loaded first, so one that gets its
		// first call after this scan is simply not in this snapshot. With
		// scan marks the stripes above the mark have not seen a call.
		used := int64(0)
		top := g.maxReaders
		if s.h.features&featScanMarks != 0 {
			top = int64(min(m.load(off+vStripesUsed), uint64(top)))
		}
		for r := top - 1; r >= 0; r-- {
			if m.loadI(g.stripe(v, r)+sCalls) != 0 {
				used = r + 1
				break
			}
		}
		var readers []Counters
		switch {
		case used == 0:
		case int64(len(spare)) >= used:
			readers = spare[:used]
		default:
			readers = make([]Counters, used)
		}
		last := -1
		for r := int64(0); r < used; r++ {
			s.readStripe(g.stripe(v, r), &readers[r])
			if readers[r].Calls != 0 {
				last = int(r)
			}
		}
		if m.load(off+vGen) != gen {
			continue
		}
		if last >= 0 {
			vs.Readers = readers[:last+1]
		}
		return vs, true
	}
	return VarSnapshot{}, false
}

// readStripe loads one stripe, calls first (see Counters).
func (s *Segment) readStripe(off int64, c *Counters) {
	m := s.m
	c.Calls = m.loadI(off + sCalls)
	if c.Calls == 0 {
		*c = Counters{}
		return
	}
	c.Rows = m.loadI(off + sRows)
	c.Bytes = m.loadI(off + sBytes)
	c.LocalRows = m.loadI(off + sLocalRows)
	c.RemoteRows = m.loadI(off + sRemoteRows)
	c.Errors = m.loadI(off + sErrors)
	for i := int64(0); i < NumPhases; i++ {
		c.PhaseNs[i] = m.loadI(off + sPhases + i*8)
	}
	if s.h.g.version >= 2 {
		c.MRRegs = m.loadI(off + sMRRegs)
		c.Failovers = m.loadI(off + sFailovers)
	}
	for i := int64(0); i < NumBuckets; i++ {
		c.CallHist[i] = m.load(off + sCallHist + i*8)
		c.RowHist[i] = m.load(off + sRowHist + i*8)
	}
}

// targetsFromMask fills NTargets and FirstTargets from a v1 bitmask.
func (r *Record) targetsFromMask() {
	r.NTargets = 0
	for b := 0; b < 64; b++ {
		if r.Targets&(1<<uint(b)) != 0 {
			if r.NTargets < MaxCallTargets {
				r.FirstTargets[r.NTargets] = int32(b)
			}
			r.NTargets++
		}
	}
	for i := min(r.NTargets, MaxCallTargets); i < MaxCallTargets; i++ {
		r.FirstTargets[i] = -1
	}
}

// ReadRing copies records of the shared ring (before v4 the only one; in
// v4 that of shared calls, see ReadRings) from position cursor onward into dst, in
// order, and returns how many it copied, the cursor to pass next time, and
// how many records were lost since cursor (overwritten by newer laps
// before they were read, or torn while being copied). It stops early at a
// record whose writer has not finished it. Start with cursor 0 for
// everything still in the ring, or RingHead() for only new records. A
// cursor beyond the head (e.g. from a replaced segment) restarts at the
// head.
func (s *Segment) ReadRing(cursor uint64, dst []Record) (n int, next uint64, dropped uint64, err error) {
	if err := s.enter(); err != nil {
		return 0, cursor, 0, err
	}
	defer s.leave(&err)
	n, next, dropped = s.readRing(0, cursor, dst)
	return n, next, dropped, nil
}

// ringAt is ring i's head word, slot of position p and size (i = 0: the
// shared ring; i >= 1, v4: lane ring i).
func (g *geometry) ringAt(i int) (head int64, size uint64) {
	if i == 0 {
		return hRingHead, uint64(g.ringSize)
	}
	return g.laneHead(int64(i)), uint64(g.laneRingSize)
}

func (g *geometry) ringSlot(i int, p uint64) int64 {
	if i == 0 {
		return g.slot(p)
	}
	return g.laneSlot(int64(i), p)
}

// readRing is ReadRing of ring i; the caller is between enter and
// leave.
func (s *Segment) readRing(i int, cursor uint64, dst []Record) (n int, next uint64, dropped uint64) {
	m, g := s.m, &s.h.g
	hoff, size := g.ringAt(i)
	head := m.load(hoff)
	if cursor > head {
		cursor = head
	}
	if head-cursor > size {
		dropped += head - size - cursor
		cursor = head - size
	}
	for cursor < head && n < len(dst) {
		off := g.ringSlot(i, cursor)
		want := 2*cursor + 2
		seq := m.load(off + rSeq)
		if seq < want && m.load(off+rAbandoned) <= cursor {
			break // not written yet
		}
		if seq != want {
			dropped++ // overwritten by a newer lap, or abandoned
			cursor++
			continue
		}
		rec := &dst[n]
		rec.Seq, rec.Ring = cursor, i
		rec.TimeNs = m.loadI(off + rTime)
		vr := m.load(off + rVarReader)
		rec.Var, rec.Reader = int32(uint32(vr)), int32(vr>>32&0xFFFFFF)
		rec.Err = vr>>56 != 0
		rec.Rows = m.loadI(off + rRows)
		rec.Bytes = m.loadI(off + rBytes)
		rec.LocalRows = m.loadI(off + rLocalRows)
		rec.RemoteRows = m.loadI(off + rRemoteRows)
		rec.Targets = m.load(off + rTargets)
		for i := int64(0); i < NumPhases; i++ {
			rec.Phases[i] = m.loadI(off + rPhases + i*8)
		}
		if g.version >= 2 {
			rec.NTargets = int(m.load(off + rNTargets))
			rec.MRRegs = m.loadI(off + rMRRegs)
			for i := int64(0); i < MaxCallTargets; i += 2 {
				w := m.load(off + rFirst + i*4)
				rec.FirstTargets[i], rec.FirstTargets[i+1] = int32(uint32(w)), int32(uint32(w>>32))
			}
		} else {
			rec.targetsFromMask()
		}
		if m.load(off+rSeq) != want {
			s.torn++
			dropped++
			cursor++
			continue
		}
		n++
		cursor++
	}
	return n, cursor, dropped
}

// RingCursor holds a reader's position in each ring of a segment (index
// 0 the shared ring, i >= 1 lane ring i in v4). The zero value starts at
// the oldest record still kept; Segment.TailRings places it near the
// heads. No allocation: a fixed array.
type RingCursor struct {
	Pos [maxPeerLanes]uint64
}

// Rings is the number of rings of the segment (1 before v4).
func (s *Segment) Rings() int { return s.h.g.rings() }

// TailRings sets c to read, from each ring, at most the last keep
// records before its head (keep 0: only new records).
func (s *Segment) TailRings(c *RingCursor, keep uint64) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave(&err)
	g := &s.h.g
	for i := range g.rings() {
		hoff, _ := g.ringAt(i)
		head := s.m.load(hoff)
		c.Pos[i] = head - min(head, keep)
	}
	return nil
}

// ReadRings copies the records since c from every ring into dst, ordered
// by time (stable; a ring's positions are in time order except where
// shared-ring writers claimed before reading the clock), advances c,
// and returns how many it copied and how many were lost since c (as
// ReadRing). It reads the rings in turn and stops when dst is full, so a
// caller that got len(dst) records calls again for the rest.
func (s *Segment) ReadRings(c *RingCursor, dst []Record) (n int, dropped uint64, err error) {
	if err := s.enter(); err != nil {
		return 0, 0, err
	}
	defer s.leave(&err)
	for i := range s.h.g.rings() {
		k, next, d := s.readRing(i, c.Pos[i], dst[n:])
		n, c.Pos[i], dropped = n+k, next, dropped+d
	}
	if s.h.g.rings() > 1 {
		s.order = sortByTime(dst[:n], s.order)
	}
	return n, dropped, nil
}

// recordTime is a record's time and place, what sortByTime sorts.
type recordTime struct {
	t int64
	i int
}

// sortByTime orders recs by TimeNs, stably (equal times keep their order),
// as slices.SortStableFunc would, but sorts the 16-byte keys (in order,
// reused: the returned slice) instead of the 200-byte records, and then
// moves each record once, cycle by cycle.
func sortByTime(recs []Record, order []recordTime) []recordTime {
	order = order[:0]
	sorted := true
	for i := range recs {
		order = append(order, recordTime{recs[i].TimeNs, i})
		sorted = sorted && (i == 0 || recs[i-1].TimeNs <= recs[i].TimeNs)
	}
	if sorted {
		return order
	}
	slices.SortFunc(order, func(a, b recordTime) int { return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.i, b.i)) })
	// Position j takes the record at order[j].i; -1 marks a place filled.
	for j := range order {
		if order[j].i < 0 {
			continue
		}
		first := recs[j]
		at := j
		for {
			from := order[at].i
			order[at].i = -1
			if from == j {
				recs[at] = first
				break
			}
			recs[at] = recs[from]
			at = from
		}
	}
	return order
}

// SkipRings moves c to every ring's head without copying records, and
// returns how many records were lost since c: those the rings no longer
// hold (what ReadRings would count, less records torn while copied).
// A viewer that shows no recent calls keeps its loss count this way.
func (s *Segment) SkipRings(c *RingCursor) (dropped uint64, err error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.leave(&err)
	g := &s.h.g
	for i := range g.rings() {
		hoff, size := g.ringAt(i)
		head := s.m.load(hoff)
		if cur := c.Pos[i]; cur < head && head-cur > size {
			dropped += head - size - cur
		}
		c.Pos[i] = head
	}
	return dropped, nil
}
