package configs

import "time"

// MachineConfig describes the machine a file is written for. Name and the
// layout are informational (examples and job scripts read them); GPU picks
// the runtime of the device read path (engine GPUOptions.Device).
type MachineConfig struct {
	Name         string // "local", "frontier", "perlmutter"
	RanksPerNode int    // ranks per node the file is tuned for; 0 = any
	CoresPerRank int    // CPU cores per rank; 0 = unknown
	GPU          string // DDSTORE_GPU: cuda | hip | rocm (= hip) | auto | none
}

// GPUConfig is the gpu section: the device read path (engine GPUOptions).
type GPUConfig struct {
	Device     string        // DDSTORE_GPU_DEVICE: $LOCAL_RANK (default) or a device index
	Sync       string        // DDSTORE_GPU_SYNC: stream | device
	Direct     string        // DDSTORE_GPU_DIRECT: auto | on | off
	StageBytes int64         // DDSTORE_GPU_STAGE_BYTES: each of a reader's two staging halves
	SpinWait   time.Duration // DDSTORE_GPU_SPIN_WAIT: how long a copy's wait polls before it sleeps; 0: never polls
}

// FabricConfig is the fabric section.
type FabricConfig struct {
	Provider string        // DDSTORE_FABRIC; "" = default order
	Iface    string        // FABRIC_IFACE; "" = the interface of the ranks' own connections across hosts, else the provider's first domain
	Window   int           // reads in flight per batch, default 128
	MaxPeers int           // DDSTORE_FABRIC_MAX_PEERS: address-vector size, default 1024
	Timeout  time.Duration // deadline of every fabric operation, default 10s
	Progress string        // DDSTORE_FABRIC_PROGRESS: sleep | adaptive | spin (the target's progress thread), default adaptive
}

// StoreConfig is the store section.
type StoreConfig struct {
	NodeMode string        // auto | fabric
	Width    int           // 0 = world size
	Timeout  time.Duration // collectives, default 60s
	Liveness time.Duration // DDSTORE_LIVENESS: dead-peer deadline, default 10s
	// Control (DDSTORE_CONTROL) is the control plane: "tree" (default,
	// DefaultControl: node agents in a k-ary tree, engine/ctrl) or "mesh"
	// (a connection from every rank to every other, engine/mesh).
	Control string
	// The tree's liveness (engine/ctrl): an agent pings its ring successor
	// every CtrlPeriod (DDSTORE_CTRL_PERIOD), probes it through others
	// after CtrlSuspectAfter (DDSTORE_CTRL_SUSPECT_AFTER) and declares it
	// dead after CtrlDeadAfter (DDSTORE_CTRL_DEAD_AFTER). 0: engine/ctrl's
	// defaults (1s, 2s, 3.6s), or from a Liveness under 3.6s (dead after
	// it, a ping every Liveness/3.6). A frozen plain rank: Liveness.
	CtrlPeriod, CtrlSuspectAfter, CtrlDeadAfter time.Duration
}

// ReadsConfig selects the read paths (the seed's switches).
type ReadsConfig struct {
	Mode          string // DDSTORE_READ_MODE: auto | rma | gather (engine Options.ReadMode)
	BatchGet      bool   // DDSTORE_BATCH_GET
	ThreadReaders bool   // DDSTORE_THREAD_READERS
	FastCollate   bool   // DDSTORE_FAST_COLLATE
	// FailoverAfter (DDSTORE_FAILOVER_AFTER): with replica groups, a read
	// whose owner has not answered in this time moves to another group
	// (engine Options.FailoverAfter); separate from fabric.timeout.
	FailoverAfter time.Duration
}

// ExchangeConfig is the exchange section.
type ExchangeConfig struct {
	// AlltoallMaxBytes (DDSTORE_ALLTOALL_MAX_BYTES, the seed's name; default
	// 2 MiB, in [4 KiB, 64 MiB]) caps the row bytes of one gather round: one
	// request and one reply per peer of the gather read path. The engine
	// passes it as fabric Options.GatherMaxBytes. There is no collective
	// (all-to-all) read method; this is the same idea of exchange rounds of
	// a few MiB.
	AlltoallMaxBytes int64
}

// TelemetryConfig is the telemetry section, read by the engine (where to
// write) and by ddtop (where to look).
type TelemetryConfig struct {
	Enabled bool   // DDSTORE_TELEMETRY, default true
	Dir     string // DDSTORE_TELEMETRY_DIR, default /dev/shm; ddtop's --dir
}

// BootstrapConfig is the bootstrap section.
type BootstrapConfig struct {
	Method  string // auto | pmi | tcp | dir | single
	Addr    string // tcp root host:port; "" = MASTER_ADDR:MASTER_PORT
	Dir     string // shared directory for method dir
	Timeout time.Duration
}

// LoaderConfig is the loader section.
type LoaderConfig struct {
	Workers  int // worker goroutines; 0 = reads on the caller's goroutine
	Prefetch int // batches in flight ahead of the consumer; PrefetchAuto ("auto"): the loader chooses
}

// PrefetchAuto is LoaderConfig.Prefetch for "auto": the loader chooses its
// depth from the fetch and step times it measures (engine.PrefetchAuto).
const PrefetchAuto = -1

// DdtopConfig is the ddtop section: the monitor's settings. Its directory
// is telemetry.dir, the trainers' own.
type DdtopConfig struct {
	Interval time.Duration // refresh interval, default 1s, at least 50ms (--interval)
	History  int           // throughput points kept per rank, default 300 (--history)
	Job      string        // show only this job id; "" = every job (--job)
	Nice     int           // niceness ddtop gives itself, 0-19, default 19; 0 keeps the inherited one (--nice)
}

// Config is one loaded configuration: every section of the schema. Build
// it with Load; the zero value is not valid.
type Config struct {
	Machine   MachineConfig
	Fabric    FabricConfig
	Store     StoreConfig
	Reads     ReadsConfig
	Exchange  ExchangeConfig
	Profile   bool // DDSTORE_PROFILE: per-phase summary table at Close
	Telemetry TelemetryConfig
	Bootstrap BootstrapConfig
	Loader    LoaderConfig
	GPU       GPUConfig
	Ddtop     DdtopConfig

	// Source says where the configuration came from, for display: the file
	// (path or "embedded:<name>.yaml"), why it was chosen, and the
	// environment variables that overrode it.
	Source string
}
