package telemetry

// Segment layout, format version 1. All integers are 64-bit, host byte
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
//  +---------------------------------------------------------------+  ringOff
//  |          Ring of recent calls: RingSize slots x 128 B         |
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
//  | 544 readerMode [32]B | 576 method [32]B | 608..1023 reserved  |
//  +---------------------------------------------------------------+ 1024
//
// Variable table entry (128 B):
//
//  | 0 gen (odd while being changed) | 8 inUse (0/1) | 16 rowBytes
//  | 24 globalRows | 32 localRows | 40 reserved | 48 dtype [16]B
//  | 64 name [64]B
//
// Counter stripe (768 B = 12 cache lines), one per (variable, reader).
// One writer at a time per stripe (load + store), except the last stripe
// of each variable (reader MaxReaders-1, also ids >= MaxReaders) and calls
// marked Call.Concurrent: atomic adds. Either way calls is written last and read first.
//
//  | 0 calls | 8 rows | 16 bytes | 24 localRows | 32 remoteRows
//  | 40 errors | 48..103 phaseNs[7] | 104..127 pad
//  | 128 callHist[40] (ns per call)
//  | 448 rowHist[40]  (ns per call / rows)
//
// Loader block (704 B):
//
//  | 0 batches | 8 waitNs | 16 stepNs | 24..63 pad
//  | 64 waitHist[40] | 384 stepHist[40]
//
// Ring slot (128 B), slot = position & (RingSize-1):
//
//  | 0 seq | 8 timeNs | 16 var (bits 0-31) reader (32-55) status (56-63)
//  | 24 rows | 32 bytes | 40 localRows | 48 remoteRows | 56 targets
//  | 64..119 phaseNs[7] | 120 abandoned (highest position+1 given up here)
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

const (
	// Magic is the first 8 bytes of every segment: "DDSTEL\x00\x01".
	Magic uint64 = 0x01_00_4c_45_54_53_44_44 // little-endian "DDSTEL\0\1"
	// Version is the format version this package writes and reads.
	Version = 1

	headerBytes   = 1024
	varEntryBytes = 128
	stripeBytes   = 768
	loaderBytes   = 704
	ringSlotBytes = 128

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
	hostLen         = 64
	jobLen          = 64
	provLen         = 32
	modeLen         = 32
	methodLen       = 32

	// variable entry offsets
	vGen        = 0
	vInUse      = 8
	vRowBytes   = 16
	vGlobalRows = 24
	vLocalRows  = 32
	vDType      = 48
	vName       = 64
	dtypeLen    = 16
	nameLen     = 64

	// stripe offsets
	sCalls      = 0
	sRows       = 8
	sBytes      = 16
	sLocalRows  = 24
	sRemoteRows = 32
	sErrors     = 40
	sPhases     = 48
	sCallHist   = 128
	sRowHist    = 448

	// loader offsets
	lBatches  = 0
	lWaitNs   = 8
	lStepNs   = 16
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

	// limits accepted by readers (and writers)
	maxMaxVars    = 4096
	maxMaxReaders = 4096
	maxRingSize   = 1 << 20
)

// geometry is the derived block layout of a segment.
type geometry struct {
	maxVars, maxReaders, ringSize int64
	varTableOff, stripeOff        int64
	loaderOff, ringOff, fileBytes int64
}

func newGeometry(maxVars, maxReaders, ringSize int64) geometry {
	g := geometry{maxVars: maxVars, maxReaders: maxReaders, ringSize: ringSize}
	g.varTableOff = headerBytes
	g.stripeOff = g.varTableOff + maxVars*varEntryBytes
	g.loaderOff = g.stripeOff + maxVars*maxReaders*stripeBytes
	g.ringOff = g.loaderOff + loaderBytes
	g.fileBytes = g.ringOff + ringSize*ringSlotBytes
	return g
}

func (g *geometry) varOff(v int64) int64    { return g.varTableOff + v*varEntryBytes }
func (g *geometry) stripe(v, r int64) int64 { return g.stripeOff + (v*g.maxReaders+r)*stripeBytes }
func (g *geometry) slot(p uint64) int64 {
	return g.ringOff + int64(p&uint64(g.ringSize-1))*ringSlotBytes
}
