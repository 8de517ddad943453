package engine

import (
	"cmp"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ddstore/ddstore/configs"
	"github.com/ddstore/ddstore/engine/bootstrap"
	"github.com/ddstore/ddstore/fabric"
)

// Node modes.
const (
	// NodeModeAuto maps the shards of ranks on the same node (same hostname
	// and boot id) and uses the fabric only across nodes.
	NodeModeAuto = "auto"
	// NodeModeFabric treats every rank as its own node: all reads of other
	// ranks' rows go through the fabric (testing, or measuring the fabric).
	NodeModeFabric = "fabric"
)

// Read modes: how batched fabric reads (GetBatch, and Get of scattered
// shards) reach remote rows.
const (
	// ReadModeAuto gathers on software-RMA providers (tcp, sockets, udp,
	// net: fabric.Info.SoftwareRMA), where every one-sided read is served by
	// the target's CPU anyway, for batches of at least gatherMinOps reads of
	// at most 64 KiB each (rows, or contiguous runs of a Get; larger rows are
	// faster one-sided), and uses one-sided reads elsewhere (cxi, verbs, shm).
	ReadModeAuto = "auto"
	// ReadModeRMA always uses one-sided reads (fi_read, Window in flight).
	ReadModeRMA = "rma"
	// ReadModeGather sends each peer one request listing the rows it wants
	// (fabric.Reader.ReadGather) for every batch of 2 reads or more; it
	// falls back to one-sided reads on providers without software RMA.
	ReadModeGather = "gather"
)

// gatherMinOps is the smallest batch that ReadModeAuto gathers; smaller
// ones (single Gets) stay one-sided reads.
const gatherMinOps = 8

// Options configure Open. The zero value means every default: each field
// says its default, and a zero field takes it (EnsureDefaults fills them;
// Open calls it). Booleans are named so that false is the default.
type Options struct {
	// Bootstrap: how ranks find each other. A zero Bootstrap.Env (World 0)
	// is filled by bootstrap.DetectEnv; set Env.Rank/Env.World to override.
	Bootstrap bootstrap.Options
	// Fabric: provider, domain, window (reads in flight, default 128) and
	// per-operation timeout (default 10s). Opened only when a peer of the
	// caller's width group is on another node (or NodeMode is "fabric").
	// An empty Provider is taken from DDSTORE_FABRIC, an empty Domain from
	// FABRIC_IFACE. A zero GatherKey is derived from the job's secret (in
	// an insecure job from its identity: not secret, but it keeps jobs
	// apart): the targets answer only the job's gather requests (README
	// "Security").
	Fabric fabric.Options
	// NodeMode: "auto" (default; "" means auto) or "fabric".
	NodeMode string
	// Width: ranks per replica group; 0 means the world size. The world
	// size must be a multiple of Width. Reads stay inside the caller's group
	// of Width consecutive ranks, whose shards make up the global rows.
	Width int
	// DisableTelemetry: do not export per-call telemetry. Default false:
	// every store exports it in a shared-memory segment that ddtop reads.
	// The environment variable DDSTORE_TELEMETRY=0 (or false, no, off) sets
	// it; a true DDSTORE_TELEMETRY leaves it as set.
	DisableTelemetry bool
	// TelemetryDir: directory of the telemetry segment. Default "/dev/shm";
	// the environment variable DDSTORE_TELEMETRY_DIR replaces the default.
	TelemetryDir string
	// Profile: at Close, write this rank's per-phase profile table (per
	// variable: calls, rows, µs per call in total and per phase, and the
	// loader's fetch wait), read from its own telemetry segment, to
	// ProfileOutput. Default false; the environment variable
	// DDSTORE_PROFILE=1 (or 0) turns it on (or off), as does the config key
	// "profile". Without telemetry the table is one line saying so.
	Profile bool
	// ProfileOutput: where the profile table goes. Default (nil) os.Stderr.
	ProfileOutput io.Writer
	// ShardDir: directory of the shard files. Default "/dev/shm".
	ShardDir string
	// Timeout: deadline of every collective step (Open, Add, Init, Free,
	// Close barrier). Default 60s.
	Timeout time.Duration
	// FailoverAfter: with Width < world (replica groups), a read of a row
	// whose owner in this rank's group has not answered within this time
	// moves to the same shard in another group (see replica.go); a dead
	// owner's rows move at once. 0 means DefaultFailoverAfter (2s). It is
	// separate from Fabric.Timeout, the hard deadline of reads that have no
	// replica left. Config key reads.failover_after, environment variable
	// DDSTORE_FAILOVER_AFTER.
	FailoverAfter time.Duration
	// Role: "train" (default; "" means it) or "storage": a storage-only
	// rank that loads shards from Storage.Dir and serves them until the
	// job closes (storage.go). Environment variable DDSTORE_ROLE.
	Role string
	// Storage: storage-only ranks joined to the trainers (storage.go).
	Storage StorageOptions
	// Liveness: a rank whose connection to this one closes without a
	// goodbye, or that stays silent this long (mesh: heartbeats go every
	// Liveness/5 over the store's own connections; tree: a plain rank's
	// silence at its agent, and the agents' ring when Liveness is under
	// its 3.6s, see Control), is marked dead: reads of its rows fail at
	// once with ErrPeerDead, collectives name it.
	// Default 10s, at least 100ms. Config key store.liveness, environment
	// variable DDSTORE_LIVENESS.
	Liveness time.Duration
	// Control is the control plane that carries the collectives and finds
	// dead ranks after the launcher's exchange: "mesh": a connection from
	// every rank to every other, heartbeats every Liveness/5; "tree"
	// (default, DefaultControl; "" means it): the ranks of a node talk to their node agent
	// (lowest rank of the node) over a unix socket, agents form a 16-ary
	// tree with ring liveness (SWIM) and log-depth collectives
	// (engine/ctrl). Config key store.control, environment variable
	// DDSTORE_CONTROL. The tree's agents ping their ring successor every
	// CtrlPeriod, probe it through others after CtrlSuspectAfter and
	// declare it dead after CtrlDeadAfter (config keys store.ctrl_period,
	// store.ctrl_suspect_after, store.ctrl_dead_after; env
	// DDSTORE_CTRL_PERIOD, _SUSPECT_AFTER, _DEAD_AFTER); zero ones take
	// engine/ctrl's defaults, 1s, 2s, 3.6s. All three zero (the default)
	// means those defaults, or, when Liveness is shorter than 3.6s, dead
	// after Liveness with the same proportions (pings every Liveness/3.6,
	// probes after twice that). A plain rank frozen with its socket open
	// is declared dead by its agent after Liveness and one heartbeat. A
	// rank's exit is seen at once in both.
	Control                                     string
	CtrlPeriod, CtrlSuspectAfter, CtrlDeadAfter time.Duration
	// ReadMode: "auto" (default; "" means auto), "rma" or "gather"; see
	// ReadModeAuto. The config key reads.mode and the environment variable
	// DDSTORE_READ_MODE set it through LoadConfig. Rounds of a gather are
	// capped by Fabric.GatherMaxBytes (default 2 MiB).
	ReadMode string
	// GPU: the device read path (GetBatchDevice, GetDevice and their
	// Reader and async forms); see GPUOptions. Config keys machine.gpu,
	// gpu.device, gpu.sync, gpu.direct, gpu.stage_bytes, gpu.spin_wait.
	GPU GPUOptions
}

// Defaults of Options (and of fabric.Options where Open fills them).
const (
	DefaultTimeout       = 60 * time.Second      // Options.Timeout
	DefaultDir           = "/dev/shm"            // Options.TelemetryDir and ShardDir
	DefaultWindow        = fabric.DefaultWindow  // Options.Fabric.Window: reads in flight
	DefaultFabricTimeout = fabric.DefaultTimeout // Options.Fabric.Timeout: one fabric operation
	DefaultLiveness      = 10 * time.Second      // Options.Liveness: dead-peer deadline
)

// DefaultOptions returns Options{} with every default filled in.
func DefaultOptions() Options {
	var o Options
	o.EnsureDefaults()
	return o
}

// EnsureDefaults fills every zero field with its documented default and
// returns o. It checks nothing (Validate does) and leaves set fields,
// also invalid ones, as they are.
func (o *Options) EnsureDefaults() *Options {
	o.NodeMode = cmp.Or(o.NodeMode, NodeModeAuto)
	o.ReadMode = cmp.Or(o.ReadMode, ReadModeAuto)
	o.Timeout = cmp.Or(o.Timeout, DefaultTimeout)
	o.FailoverAfter = cmp.Or(o.FailoverAfter, DefaultFailoverAfter)
	o.Liveness = cmp.Or(o.Liveness, DefaultLiveness)
	o.Control = cmp.Or(o.Control, DefaultControl)
	o.TelemetryDir = cmp.Or(o.TelemetryDir, DefaultDir)
	o.ShardDir = cmp.Or(o.ShardDir, DefaultDir)
	if o.ProfileOutput == nil {
		o.ProfileOutput = os.Stderr
	}
	o.Fabric.EnsureDefaults() // the fabric's own documented defaults
	o.Bootstrap.Method = cmp.Or(o.Bootstrap.Method, "auto")
	if o.Bootstrap.Timeout == 0 && o.Timeout > 0 {
		o.Bootstrap.Timeout = o.Timeout
	}
	o.GPU.ensureDefaults()
	return o
}

// Validate checks the options and changes nothing; a zero field is valid
// (it means the default). The error is an *Error of class ErrInvalid
// naming the field.
func (o *Options) Validate() error {
	if err := oneOf("NodeMode", o.NodeMode, NodeModeAuto, NodeModeFabric); err != nil {
		return err
	}
	if err := oneOf("ReadMode", o.ReadMode, ReadModeAuto, ReadModeRMA, ReadModeGather); err != nil {
		return err
	}
	if err := o.GPU.validate(); err != nil {
		return err
	}
	if o.Width < 0 {
		return errf(ErrInvalid, "options", "", "Width %d is negative", o.Width)
	}
	if o.Timeout < 0 {
		return errf(ErrInvalid, "options", "", "Timeout %v is negative", o.Timeout)
	}
	if err := o.validateStorage(); err != nil {
		return err
	}
	if o.FailoverAfter < 0 {
		return errf(ErrInvalid, "options", "", "FailoverAfter %v is negative", o.FailoverAfter)
	}
	if err := configs.CheckControl(o.Control); err != nil {
		return errf(ErrInvalid, "options", "", "Control: %v (config store.control, env DDSTORE_CONTROL)", err)
	}
	if err := configs.CheckCtrlTiming(o.CtrlPeriod, o.CtrlSuspectAfter, o.CtrlDeadAfter); err != nil {
		return errf(ErrInvalid, "options", "", "CtrlPeriod, CtrlSuspectAfter, CtrlDeadAfter: %v", err)
	}
	if o.Liveness != 0 && o.Liveness < 100*time.Millisecond {
		return errf(ErrInvalid, "options", "", "Liveness %v: want at least 100ms (config store.liveness, env DDSTORE_LIVENESS)", o.Liveness)
	}
	if err := o.Fabric.Validate(); err != nil {
		return wrapf(ErrInvalid, "options", "", err, "Fabric")
	}
	if err := o.Bootstrap.Validate(); err != nil {
		return wrapf(ErrInvalid, "options", "", err, "Bootstrap")
	}
	return nil
}

// oneOf checks an option of a few named values: "" (the default) or one
// of want. The error names the field, its value and what it may be
// ("want "a", "b" or "c"").
func oneOf(field, v string, want ...string) error {
	if v == "" || slices.Contains(want, v) {
		return nil
	}
	q := make([]string, len(want))
	for i, w := range want {
		q[i] = strconv.Quote(w)
	}
	list := q[len(q)-1]
	if len(q) > 1 {
		list = strings.Join(q[:len(q)-1], ", ") + " or " + list
	}
	return errf(ErrInvalid, "options", "", "%s %q: want %s", field, v, list)
}
