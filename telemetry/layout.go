package telemetry

// Segment layout, format version 4 (version 1, 2 and 3 files are still
// read; see FORMAT.md for what differs). All integers are 64-bit, host byte
// order (little-endian on every supported machine), 8-byte aligned; every
// block starts on a 64-byte cache line. Strings are NUL-padded UTF-8 in
// fixed-size fields. Offsets are from the start of the file.
//
//   0                   1                   2                   3
//   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//  +---------------------------------------------------------------+  0
//  |                  Header (1024 B, see below)                   |
//  +---------------------------------------------------------------+  varTableOff = 1024
//  |          Variable table: MaxVars entries x 128 B              |
//  +---------------------------------------------------------------+  stripeOff
//  |   Counter stripes: MaxVars x MaxReaders stripes x 768 B       |
//  |   stripe(v, r) = stripeOff + (v*MaxReaders + r)*768           |
//  +---------------------------------------------------------------+  loaderOff
//  |                  Loader block (704 B)                         |
//  +---------------------------------------------------------------+  peerOff (v2)
//  |   Peer table (v2): PeerLanes lanes (v3; 1 in v2) x MaxPeers   |
//  |   slots x 192 B, one slot per target rank in each lane        |
//  |   peer(l, rank) = peerOff + (l*MaxPeers + rank)*192           |
//  +---------------------------------------------------------------+  markOff (v3)
//  |   Peer marks (v3): PeerLanes x markWords words, markWords =   |
//  |   ceil(MaxPeers/64) rounded up to 8; bit r of lane l's words  |
//  |   = slot (l, r) has been written (scan marks, below)          |
//  +---------------------------------------------------------------+  ringOff
//  |   Ring of recent calls: RingSize slots x 192 B (v1: 128 B)    |
//  |   (v4: the shared ring, lane 0's: shared calls only)          |
//  +---------------------------------------------------------------+  laneRingOff (v4)
//  |   Lane rings (v4): PeerLanes-1 rings, ring l (1..PeerLanes-1) |
//  |   owned by reader id l-1: a 64 B head line (0 head) and       |
//  |   LaneRingSize slots x 192 B (ring slot layout)               |
//  |   laneRing(l) = laneRingOff + (l-1)*(64 + LaneRingSize*192)   |
//  +---------------------------------------------------------------+  fileBytes
//
// Header (cache line per row; hot atomics on their own lines):
//
//  +---------------------------------------------------------------+
//  |  0 magic "DDSTEL\x00\x01"   |  8 version (WRITTEN LAST, 0=not ready)
//  | 16 headerBytes (1024)       | 24 fileBytes
//  | 32 pid                      | 40 rank
//  | 48 world                    | 56 startNs (unix ns)
//  +---------------------------------------------------------------+  64
//  | 64 maxVars    | 72 maxReaders | 80 ringSize (power of 2)
//  | 88 numBuckets | 96 numPhases  | 104 varEntryBytes | 112 stripeBytes
//  | 120 ringSlotBytes
//  +---------------------------------------------------------------+ 128
//  | 128 varTableOff | 136 stripeOff | 144 loaderOff | 152 ringOff
//  | 160 pidStartTicks (/proc/<pid>/stat field 22, 0 = unknown)
//  +---------------------------------------------------------------+ 192
//  | 192 heartbeatNs (atomic)                                      |
//  +---------------------------------------------------------------+ 256
//  | 256 ringHead (atomic fetch-add per record)                    |
//  +---------------------------------------------------------------+ 320
//  | 320 badVarCalls | 328 badReaderCalls | 336 ringClaimFails     |
//  +---------------------------------------------------------------+ 384
//  | 384 host [64]B | 448 job [64]B | 512 provider [32]B           |
//  | 544 readerMode [32]B | 576 method [32]B                       |
//  | 608 maxPeers | 616 peerOff | 624 peerSlotBytes (v2; 0 in v1)  |
//  +---------------------------------------------------------------+ 640
//  | 640 proc[8]: process counters (v2): 0 quarantinedReaders,     |
//  |     1 leakedBuffers, 2..7 reserved for other engine counters  |
//  +---------------------------------------------------------------+ 704
//  | 704 features (v2, optional: bit 0 = scan marks kept,          |
//  |     bit 1 = loader prefetchMax kept)                          |
//  | 712 varsUsed (feature 0: highest variable slot ever used + 1) |
//  | 720 peerLanes (v3: lanes of the peer table, 1..64)            |
//  | 728 lanesUsed (v3, feature 0: bit l = lane l was written)     |
//  | 736 laneRingSize (v4: slots of each lane ring, power of 2)    |
//  | 744 laneRingOff (v4)                                          |
//  | 752..1023 reserved (zero)                                     |
//  +---------------------------------------------------------------+ 1024
//
// Variable table entry (128 B):
//
//  | 0 gen (odd while being changed) | 8 inUse (0/1) | 16 rowBytes
//  | 24 globalRows | 32 localRows
//  | 40 stripesUsed (feature 0: highest reader stripe given a call + 1)
//  | 48 dtype [16]B
//  | 64 name [64]B
//
// Counter stripe (768 B = 12 cache lines), one per (variable, reader).
// One writer at a time per stripe (load + store), except the last stripe
// of each variable (reader MaxReaders-1, also ids >= MaxReaders) and calls
// marked Call.Concurrent: atomic adds. Either way calls is written last and read first.
//
//  | 0 calls | 8 rows | 16 bytes | 24 localRows | 32 remoteRows
//  | 40 errors | 48..103 phaseNs[7] | 104 mrRegs (v2) | 112 failovers (v2) | 120 pad
//  | 128 callHist[40] (ns per call)
//  | 448 rowHist[40]  (ns per call / rows)
//
// Loader block (704 B):
//
//  | 0 batches | 8 waitNs | 16 stepNs | 24 workers (v2) | 32 prefetch (v2)
//  | 40 readerKind (v2: 0 unknown, 1 shared, 2 thread readers) | 48 batchRows (v2)
//  | 56 prefetchMax (feature 1: prefetch auto's upper bound, 0 = prefetch fixed)
//  | 64 waitHist[40] | 384 stepHist[40]
//
// Peer slot (192 B, v2), one per target rank in each lane (ranks >=
// MaxPeers share the last slot of a lane). Lane 0 takes atomic adds from
// every writer (calls marked Concurrent, the last stripe's, reader ids >=
// PeerLanes-1, Failover). Lane l >= 1 (v3) belongs to reader id l-1 alone
// (the single-writer rule of Writer.Record): load + store, like an owned
// stripe. A reader adds a rank's slots over the lanes; either way calls
// is written last and read first.
//
//  | 0 calls | 8 rows | 16 bytes | 24 errors | 32 ns | 40 failedFrom
//  | 48 servedFor | 56 pad
//  | 64 hist[16]: ns per row, bucket i>0 holds [4^(i-1), 4^i) ns
//
// Scan marks (feature 0): a writer raises varsUsed before a variable slot
// is first put in use and a variable's stripesUsed before a stripe's first
// call is stored (both only grow; AddVar resets stripesUsed while the
// entry is odd). A reader that sees the feature bit reads only slots and
// stripes below the marks: whatever lies above was unused when the mark
// was loaded, exactly as if the reader had scanned it just then. The same
// holds for lanesUsed (v3), a bit per peer lane set before its first store,
// and for the peer marks (v3), a bit per peer slot set before its first
// store: a reader reads only the slots marked in the lanes marked.
// Readers that do not know the bit ignore the marks and scan everything.
//
// Ring slot (192 B in v2, 128 B in v1), slot = position & (RingSize-1):
//
//  | 0 seq | 8 timeNs | 16 var (bits 0-31) reader (32-55) status (56-63)
//  | 24 rows | 32 bytes | 40 localRows | 48 remoteRows
//  | 56 targets: v2 bit r = rank r for ranks 0..63 only; v1 bit rank%64
//  | 64..119 phaseNs[7] | 120 abandoned (highest position+1 given up here)
//  | 128 nTargets (v2) | 136 mrRegs (v2) | 144..191 firstTargets [12]uint32 (v2)
//
// Ring protocol (seqlock): a writer claims position p with a fetch-add of
// ringHead, then locks slot p&(RingSize-1) by CAS of its seq from an even
// value below 2p+1 to 2p+1, stores the fields, then stores seq = 2p+2
// (single-writer stores, see mem.put: the CAS made the slot ours). If
// the slot is odd (still being written by an older lap) or already newer,
// the writer gives position p up: it raises the slot's abandoned word to
// p+1 and bumps ringClaimFails. A reader expecting
// position p accepts the slot only if seq == 2p+2 both before and after
// copying it (status 0 ok, 1 error); seq > 2p+2 (overwritten) or
// abandoned > p counts p as dropped; otherwise seq < 2p+2 means the record
// is not written yet and the reader stops there.
//
// Lane rings (v4): the ring a call goes to is its peer lane's: lane 0
// (shared calls, reader ids >= PeerLanes-1) the shared ring above, lane
// l >= 1 the lane ring of reader id l-1, which has one writer (the
// single-writer rule of Writer.Record). Its writer loads its head p,
// stores seq = 2p+1 in slot p&(LaneRingSize-1), the fields, seq = 2p+2,
// then head = p+1: no claim, no atomic read-modify-write, and a ring
// small enough to stay in the writer's cache (the shared ring's slot was
// last written RingSize calls earlier, a cache miss at every call). A
// reader reads each lane ring as the shared one (the same seq check;
// the abandoned word is unused, 0) and merges the rings by time.

const (
	// Magic is the first 8 bytes of every segment: "DDSTEL\x00\x01".
	Magic uint64 = 0x01_00_4c_45_54_53_44_44 // little-endian "DDSTEL\0\1"
	// Version is the format version this package writes; it reads this
	// one and versions 1, 2 and 3.
	Version = 4

	headerBytes     = 1024
	varEntryBytes   = 128
	stripeBytes     = 768
	loaderBytes     = 704
	ringSlotBytes   = 192 // v2
	ringSlotBytesV1 = 128
	peerSlotBytes   = 192

	// header offsets
	hMagic          = 0
	hVersion        = 8
	hHeaderBytes    = 16
	hFileBytes      = 24
	hPid            = 32
	hRank           = 40
	hWorld          = 48
	hStartNs        = 56
	hMaxVars        = 64
	hMaxReaders     = 72
	hRingSize       = 80
	hNumBuckets     = 88
	hNumPhases      = 96
	hVarEntryBytes  = 104
	hStripeBytes    = 112
	hRingSlotBytes  = 120
	hVarTableOff    = 128
	hStripeOff      = 136
	hLoaderOff      = 144
	hRingOff        = 152
	hPidStart       = 160
	hHeartbeat      = 192
	hRingHead       = 256
	hBadVarCalls    = 320
	hBadReaderCalls = 328
	hRingClaimFails = 336
	hHost           = 384
	hJob            = 448
	hProvider       = 512
	hReaderMode     = 544
	hMethod         = 576
	hMaxPeers       = 608 // v2
	hPeerOff        = 616 // v2
	hPeerSlotBytes  = 624 // v2
	hProc           = 640 // v2: NumProc counters
	hFeatures       = 704 // v2, optional: featScanMarks
	hVarsUsed       = 712 // featScanMarks
	hPeerLanes      = 720 // v3
	hLanesUsed      = 728 // v3, featScanMarks
	hLaneRingSize   = 736 // v4
	hLaneRingOff    = 744 // v4
	laneHeadBytes   = 64  // v4: a lane ring's head line
	hostLen         = 64
	jobLen          = 64
	provLen         = 32
	modeLen         = 32
	methodLen       = 32

	// variable entry offsets
	vGen         = 0
	vInUse       = 8
	vRowBytes    = 16
	vGlobalRows  = 24
	vLocalRows   = 32
	vStripesUsed = 40 // featScanMarks
	vDType       = 48
	vName        = 64
	dtypeLen     = 16
	nameLen      = 64

	// stripe offsets
	sCalls      = 0
	sRows       = 8
	sBytes      = 16
	sLocalRows  = 24
	sRemoteRows = 32
	sErrors     = 40
	sPhases     = 48
	sMRRegs     = 104 // v2
	sFailovers  = 112 // v2
	sCallHist   = 128
	sRowHist    = 448

	// loader offsets
	lBatches  = 0
	lWaitNs   = 8
	lStepNs   = 16
	lWorkers  = 24 // v2
	lPrefetch = 32 // v2
	lReaders  = 40 // v2
	lBatchRow = 48 // v2
	lPrefMax  = 56 // featLoaderDepth
	lWaitHist = 64
	lStepHist = 384

	// ring slot offsets
	rSeq        = 0
	rTime       = 8
	rVarReader  = 16
	rRows       = 24
	rBytes      = 32
	rLocalRows  = 40
	rRemoteRows = 48
	rTargets    = 56
	rPhases     = 64
	rAbandoned  = 120
	rNTargets   = 128 // v2
	rMRRegs     = 136 // v2
	rFirst      = 144 // v2: MaxCallTargets uint32

	// peer slot offsets (v2)
	pCalls  = 0
	pRows   = 8
	pBytes  = 16
	pErrors = 24
	pNs     = 32
	pFailed = 40 // row reads moved away from the rank to a replica
	pServed = 48 // row reads the rank served for a failed owner
	pHist   = 64

	// featScanMarks: the writer keeps varsUsed and each variable's
	// stripesUsed (see Scan marks above).
	featScanMarks = 1 << 0
	// featLoaderDepth: the loader block's prefetchMax word (its padding
	// before) is kept, and prefetch is the depth in use, which the
	// loader changes when prefetchMax > 0 (prefetch auto).
	featLoaderDepth = 1 << 1

	// limits accepted by readers (and writers)
	maxMaxVars    = 4096
	maxMaxReaders = 4096
	maxRingSize   = 1 << 20
	maxMaxPeers   = 1 << 16
	maxPeerLanes  = 64
	maxLaneRing   = 1 << 16
)

// geometry is the derived block layout of a segment.
type geometry struct {
	version                       int64
	maxVars, maxReaders, ringSize int64
	maxPeers                      int64 // 0 in v1
	peerLanes                     int64 // 0 in v1, 1 in v2
	varTableOff, stripeOff        int64
	loaderOff, peerOff            int64
	markOff, markWords            int64 // v3 peer marks (0 words before)
	ringOff, fileBytes            int64
	slotBytes                     int64 // ring slot size
	laneRingOff, laneRingSize     int64 // v4 lane rings (size 0 before)
}

// newGeometry4 is the layout of a version 4 segment: v3's and lane rings
// of laneRing slots for lanes 1..peerLanes-1.
func newGeometry4(maxVars, maxReaders, ringSize, maxPeers, peerLanes, laneRing int64) geometry {
	g := newGeometry(maxVars, maxReaders, ringSize, maxPeers, peerLanes)
	g.version, g.laneRingSize, g.laneRingOff = 4, laneRing, g.fileBytes
	g.fileBytes += (peerLanes - 1) * g.laneRingBytes()
	return g
}

// laneRingBytes is the size of one lane ring (head line and slots).
func (g *geometry) laneRingBytes() int64 { return laneHeadBytes + g.laneRingSize*ringSlotBytes }

// rings is the number of rings: 1 before v4, peerLanes in v4 (ring 0 the
// shared ring).
func (g *geometry) rings() int {
	if g.laneRingSize == 0 {
		return 1
	}
	return int(g.peerLanes)
}

// laneHead is the offset of lane ring l's head word (1 <= l < peerLanes).
func (g *geometry) laneHead(l int64) int64 { return g.laneRingOff + (l-1)*g.laneRingBytes() }

// laneSlot is the offset of lane ring l's slot for position p.
func (g *geometry) laneSlot(l int64, p uint64) int64 {
	return g.laneHead(l) + laneHeadBytes + int64(p&uint64(g.laneRingSize-1))*ringSlotBytes
}

// newGeometry is the layout of a version 3 segment.
func newGeometry(maxVars, maxReaders, ringSize, maxPeers, peerLanes int64) geometry {
	g := geometry{version: 3, maxVars: maxVars, maxReaders: maxReaders, ringSize: ringSize,
		maxPeers: maxPeers, peerLanes: peerLanes, slotBytes: ringSlotBytes}
	g.varTableOff = headerBytes
	g.stripeOff = g.varTableOff + maxVars*varEntryBytes
	g.loaderOff = g.stripeOff + maxVars*maxReaders*stripeBytes
	g.peerOff = g.loaderOff + loaderBytes
	g.markOff = g.peerOff + peerLanes*maxPeers*peerSlotBytes
	g.markWords = (maxPeers + 511) / 512 * 8
	g.ringOff = g.markOff + peerLanes*g.markWords*8
	g.fileBytes = g.ringOff + ringSize*ringSlotBytes
	return g
}

// mark is the offset and bit of peer slot (lane, rank)'s mark; rank <
// maxPeers.
func (g *geometry) mark(lane, rank int64) (int64, uint64) {
	return g.markOff + (lane*g.markWords+rank/64)*8, 1 << uint(rank%64)
}

// newGeometryV2 is the layout of a version 2 segment: one lane of peers.
func newGeometryV2(maxVars, maxReaders, ringSize, maxPeers int64) geometry {
	g := newGeometry(maxVars, maxReaders, ringSize, maxPeers, 1)
	g.version, g.markWords = 2, 0
	g.ringOff = g.markOff
	g.fileBytes = g.ringOff + ringSize*ringSlotBytes
	return g
}

// newGeometryV1 is the layout of a version 1 segment: no peer table,
// 128-byte ring slots.
func newGeometryV1(maxVars, maxReaders, ringSize int64) geometry {
	g := newGeometry(maxVars, maxReaders, ringSize, 0, 0)
	g.version, g.slotBytes = 1, ringSlotBytesV1
	g.fileBytes = g.ringOff + ringSize*ringSlotBytesV1
	return g
}

// peer is the offset of lane's slot that counts rank (ranks at or above
// maxPeers share the last slot); maxPeers must be > 0, lane < peerLanes.
func (g *geometry) peer(lane, rank int64) int64 {
	if uint64(rank) >= uint64(g.maxPeers) {
		rank = g.maxPeers - 1
	}
	return g.peerOff + (lane*g.maxPeers+rank)*peerSlotBytes
}

func (g *geometry) varOff(v int64) int64    { return g.varTableOff + v*varEntryBytes }
func (g *geometry) stripe(v, r int64) int64 { return g.stripeOff + (v*g.maxReaders+r)*stripeBytes }
func (g *geometry) slot(p uint64) int64 {
	return g.ringOff + int64(p&uint64(g.ringSize-1))*g.slotBytes
}
