package fabric

import (
	"cmp"
	"strings"
	"time"
)

// Options configures Open.
type Options struct {
	// Provider is a libfabric provider name, e.g. "tcp;ofi_rxm", "shm",
	// "cxi", "verbs;ofi_rxm" ("tcp" and "verbs" also match their ofi_rxm
	// stacks). "" takes the first available of cxi, verbs;ofi_rxm,
	// tcp;ofi_rxm, shm. The engine maps DDSTORE_FABRIC onto it.
	Provider string
	// Domain is the domain or interface name ("lo", "eth0", "cxi0"); it
	// also matches the fabric name. "" takes the provider's first domain.
	// The engine maps FABRIC_IFACE onto it.
	Domain string
	// Window is the number of reads a batch keeps in flight. Default 128;
	// clamped to the provider's transmit queue size.
	Window int
	// Timeout is the deadline of every operation. Default 10s.
	Timeout time.Duration
	// MaxPeers is the address-vector size of each reader. Default 1024;
	// clamped to the provider's maximum (shm: 256).
	MaxPeers int
	// GatherMaxBytes caps the row bytes of one Reader.ReadGather round (one
	// request and one reply per peer); rows larger than this are read with
	// fi_read. Default 2 MiB (the seed found 2–8 MiB exchange rounds best);
	// at least 4096 and at most 64 MiB (the most a target serves).
	GatherMaxBytes int
	// GatherRounds is the number of ReadGather rounds a reader keeps in
	// flight (to different peers, or pipelined to one). Default 4, at most 64.
	// A reader's bounce buffers grow up to GatherRounds × GatherMaxBytes.
	GatherRounds int
	// RegisterDst makes readers register every read destination with the
	// domain, as providers that need FI_MR_LOCAL (some verbs and cxi
	// setups) make them do, also where the provider does not: it shows on
	// tcp what unregistered destinations cost there (a registration per
	// chunk of Go-heap rows; memory from Alloc is registered once and
	// cached). Timing.Regs counts the registrations.
	RegisterDst bool
	// Progress is how the target's progress thread waits for work:
	// "adaptive" (default: after serving, it keeps polling for
	// ProgressWindow before it sleeps on the CQ's wait fd again, so
	// back-to-back reads find it awake while an idle rank sleeps; a served
	// one-sided read counts though it leaves no completion), "sleep"
	// (sleeps as soon as a step finds nothing) or "spin" (never sleeps: a
	// core per rank). Without a wait fd (shm) adaptive is sleep's back-off.
	Progress string
	// ProgressWindow is the adaptive polling window. Default 50µs, at most
	// 10ms.
	ProgressWindow time.Duration
	// GatherKey is the job's gather key (the engine derives it from the
	// job's secret): every ReadGather request carries it, and this
	// fabric's target answers only requests that carry its own; any other
	// is dropped unanswered, its sender never entered in the address
	// vector, and counted (GatherStrangers). 0 (insecure jobs) checks
	// nothing. It travels unencrypted, like memory keys.
	GatherKey uint64
}

// Defaults.
const (
	DefaultWindow   = 128
	DefaultTimeout  = 10 * time.Second
	DefaultMaxPeers = 1024

	DefaultGatherMaxBytes = 2 << 20
	DefaultGatherRounds   = 4
	DefaultProgress       = "adaptive"
	DefaultProgressWindow = 50 * time.Microsecond
	maxProgressWindow     = 10 * time.Millisecond
	maxGatherRounds       = 64
)

// Validate reports options that cannot work. It does not fill defaults
// (EnsureDefaults does): a zero field means its default and is valid, so
// Options{} and any EnsureDefaults result validate.
func (o Options) Validate() error {
	if o.Window < 0 {
		return invalid("options", nil, "Window %d is negative", o.Window)
	}
	if o.Window > chunkOps {
		return invalid("options", nil, "Window %d exceeds %d", o.Window, chunkOps)
	}
	if o.Timeout < 0 {
		return invalid("options", nil, "Timeout %v is negative", o.Timeout)
	}
	if o.GatherMaxBytes != 0 && (o.GatherMaxBytes < 4096 || o.GatherMaxBytes > maxGatherBytes) {
		return invalid("options", nil, "GatherMaxBytes %d outside [4096, %d]", o.GatherMaxBytes, maxGatherBytes)
	}
	if o.GatherRounds < 0 || o.GatherRounds > maxGatherRounds {
		return invalid("options", nil, "GatherRounds %d outside [0, %d]", o.GatherRounds, maxGatherRounds)
	}
	switch o.Progress {
	case "", "adaptive", "sleep", "spin":
	default:
		return invalid("options", nil, "Progress %q is not one of sleep, adaptive, spin", o.Progress)
	}
	if o.ProgressWindow < 0 || o.ProgressWindow > maxProgressWindow {
		return invalid("options", nil, "ProgressWindow %v outside [0, %v]", o.ProgressWindow, maxProgressWindow)
	}
	if o.MaxPeers < 0 {
		return invalid("options", nil, "MaxPeers %d is negative", o.MaxPeers)
	}
	return nil
}

// EnsureDefaults fills every zero field with its default and returns o
// (pebble style): Options{} means the defaults. Provider and Domain stay ""
// (Open's default provider order, the provider's first domain). It does not
// validate (Validate does), so a negative field stays as it is.
func (o *Options) EnsureDefaults() *Options {
	o.Window = cmp.Or(o.Window, DefaultWindow)
	o.Timeout = cmp.Or(o.Timeout, DefaultTimeout)
	o.MaxPeers = cmp.Or(o.MaxPeers, DefaultMaxPeers)
	o.GatherMaxBytes = cmp.Or(o.GatherMaxBytes, DefaultGatherMaxBytes)
	o.GatherRounds = cmp.Or(o.GatherRounds, DefaultGatherRounds)
	o.Progress = cmp.Or(o.Progress, DefaultProgress)
	o.ProgressWindow = cmp.Or(o.ProgressWindow, DefaultProgressWindow)
	return o
}

// withDefaults is EnsureDefaults on a copy.
func (o Options) withDefaults() Options { return *o.EnsureDefaults() }

// Info describes the opened provider and how the package adapts to it.
type Info struct {
	Provider, Fabric, Domain string
	MRLocal                  bool   // provider needs local buffers registered (readers register Dst)
	MRVirtAddr               bool   // remote addresses are virtual addresses (Export.Base != 0)
	MRProvKey                bool   // provider picks MR keys
	MRAllocated              bool   // registered memory must be allocated (Alloc pre-faults)
	MREndpoint               bool   // MRs are bound to an endpoint
	ManualProgress           bool   // FI_PROGRESS_MANUAL data progress
	Threading                string // FI_THREAD_* name
	TxSize                   int    // transmit queue size
	MaxPeers                 int    // provider's endpoint count (ep_cnt)
	MaxMsgSize               uint64 // largest single read
	Window                   int    // effective reads in flight per batch
	AVCount                  int    // effective address vector size
	WaitFD                   bool   // the progress goroutine sleeps on a CQ wait fd (else polls with back-off)
	ReaderDomains            bool   // each Reader opens its own domain
	// SoftwareRMA: the provider emulates RMA in software (tcp, sockets,
	// udp, net): every fi_read is a message the target's CPU answers, so
	// batches are cheaper as Reader.ReadGather. False for cxi, verbs and
	// shm (whose reads are the reader's own CMA copies).
	SoftwareRMA    bool
	GatherMaxBytes int // effective Options.GatherMaxBytes
	GatherRounds   int // effective Options.GatherRounds

	threading int
}

// Peer is a reader-local handle for an inserted address; the zero Peer is
// invalid.
type Peer struct{ id uint32 }

// ReadOp is one remote read: len(Dst) bytes from the peer's Addr (its
// Export.Base()+offset) with the peer's Export.Key().
//
// Done is an output of ReadBatch and ReadGather, meaningful when they
// return an error: true where the op completed (its Dst holds the data),
// false where it did not (failed, cancelled at the deadline, or never
// posted), so that a caller can retry only what is missing. After a
// successful call every op completed, whatever Done says.
//
// DoneNs is an output of a successful ReadBatch or ReadGather: when the op
// completed, in ns (16 ns resolution) since its chunk of up to 4096 ops
// started (the call's start for smaller batches). The latest DoneNs of one
// peer's ops is how long that peer took to serve them: telemetry's
// per-peer time.
type ReadOp struct {
	Dst    []byte
	Peer   Peer
	Addr   uint64
	Key    uint64
	Done   bool
	DoneNs int64
}

// Timing splits an operation's time: local memory registration, posting
// reads, and waiting on the completion queue.
type Timing struct {
	MR, Post, CQWait time.Duration
	Copy             time.Duration // ReadGather: copying rows from the bounce buffer
	Regs             int64         // local memory registrations (fi_mr_reg) the call made
}

// softwareRMA reports whether a provider (its core, before any ";ofi_rx?"
// utility) implements RMA with messages handled by the target's CPU.
func softwareRMA(provider string) bool {
	core, _, _ := strings.Cut(provider, ";")
	switch core {
	case "tcp", "sockets", "udp", "net":
		return true
	}
	return false
}
