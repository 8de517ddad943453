package engine

// This file is the one config loader of the engine (viper): it turns a YAML
// file from configs/ plus DDSTORE_* environment overrides into a Config, and
// maps a Config onto the plain option structs the library takes.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/viper"

	"github.com/ddstore/ddstore/configs"
)

// ErrConfig is returned (wrapped) for every invalid configuration value; the
// message names the key and where the value came from.
var ErrConfig = errors.New("ddstore: invalid config")

// MachineConfig describes the machine a file is written for. Name and the
// layout are informational (examples and job scripts read them); GPU picks
// the runtime of the device read path (GPUOptions.Device).
type MachineConfig struct {
	Name         string // "local", "frontier", "perlmutter"
	RanksPerNode int    // ranks per node the file is tuned for; 0 = any
	CoresPerRank int    // CPU cores per rank; 0 = unknown
	GPU          string // DDSTORE_GPU: cuda | hip | rocm (= hip) | auto | none
}

// GPUConfig is the gpu section: the device read path (GPUOptions).
type GPUConfig struct {
	Device     string // DDSTORE_GPU_DEVICE: $LOCAL_RANK (default) or a device index
	Sync       string // DDSTORE_GPU_SYNC: stream | device
	Direct     string // DDSTORE_GPU_DIRECT: auto | on | off
	StageBytes int64  // DDSTORE_GPU_STAGE_BYTES: each of a reader's two staging halves
}

// FabricConfig is the fabric section.
type FabricConfig struct {
	Provider string        // DDSTORE_FABRIC; "" = default order
	Iface    string        // FABRIC_IFACE; "" = provider's first domain
	Window   int           // reads in flight per batch, default 128
	Timeout  time.Duration // deadline of every fabric operation, default 10s
}

// StoreConfig is the store section.
type StoreConfig struct {
	NodeMode string        // auto | fabric
	Width    int           // 0 = world size
	Timeout  time.Duration // collectives, default 60s
}

// ReadsConfig selects the read paths (the seed's switches).
type ReadsConfig struct {
	Mode          string // DDSTORE_READ_MODE: auto | rma | gather (Options.ReadMode)
	BatchGet      bool   // DDSTORE_BATCH_GET
	ThreadReaders bool   // DDSTORE_THREAD_READERS
	FastCollate   bool   // DDSTORE_FAST_COLLATE
	// FailoverAfter (DDSTORE_FAILOVER_AFTER): with replica groups, a read
	// whose owner has not answered in this time moves to another group
	// (Options.FailoverAfter); separate from fabric.timeout.
	FailoverAfter time.Duration
}

// ExchangeConfig is the exchange section.
type ExchangeConfig struct {
	// AlltoallMaxBytes (DDSTORE_ALLTOALL_MAX_BYTES, the seed's name; default
	// 2 MiB, in [4 KiB, 64 MiB]) caps the row bytes of one gather round: one
	// request and one reply per peer of the gather read path. StoreOptions
	// passes it as Fabric.GatherMaxBytes. There is no collective (all-to-all)
	// read method; this is the same idea of exchange rounds of a few MiB.
	AlltoallMaxBytes int64
}

// TelemetryConfig is the telemetry section.
type TelemetryConfig struct {
	Enabled bool   // DDSTORE_TELEMETRY, default true
	Dir     string // DDSTORE_TELEMETRY_DIR, default /dev/shm
}

// BootstrapConfig is the bootstrap section.
type BootstrapConfig struct {
	Method  string // auto | pmi | tcp | dir
	Addr    string // tcp root host:port; "" = MASTER_ADDR:MASTER_PORT
	Dir     string // shared directory for method dir
	Timeout time.Duration
}

// LoaderConfig is the loader section.
type LoaderConfig struct {
	Workers  int // worker goroutines; 0 = reads on the caller's goroutine
	Prefetch int // batches in flight ahead of the consumer
}

// Config is a loaded configuration. Build it with LoadConfig; the zero value
// is not valid.
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

	// Source says where the configuration came from, for display: the file
	// (path or "embedded:<name>.yaml"), why it was chosen, and the
	// environment variables that overrode it.
	Source string
}

type keyKind int

const (
	kindString keyKind = iota
	kindInt
	kindBool
	kindDuration
	kindBytes
)

// configKey is one documented key: its YAML path, its environment variable
// and how to parse it.
type configKey struct {
	key  string
	env  string
	kind keyKind
	set  func(c *Config, v any)
}

var configKeys = []configKey{
	{"machine.name", "", kindString, func(c *Config, v any) { c.Machine.Name = v.(string) }},
	{"machine.ranks_per_node", "", kindInt, func(c *Config, v any) { c.Machine.RanksPerNode = v.(int) }},
	{"machine.cores_per_rank", "", kindInt, func(c *Config, v any) { c.Machine.CoresPerRank = v.(int) }},
	{"machine.gpu", "DDSTORE_GPU", kindString, func(c *Config, v any) { c.Machine.GPU = v.(string) }},
	{"gpu.device", "DDSTORE_GPU_DEVICE", kindString, func(c *Config, v any) { c.GPU.Device = v.(string) }},
	{"gpu.sync", "DDSTORE_GPU_SYNC", kindString, func(c *Config, v any) { c.GPU.Sync = v.(string) }},
	{"gpu.direct", "DDSTORE_GPU_DIRECT", kindString, func(c *Config, v any) { c.GPU.Direct = v.(string) }},
	{"gpu.stage_bytes", "DDSTORE_GPU_STAGE_BYTES", kindBytes, func(c *Config, v any) { c.GPU.StageBytes = v.(int64) }},
	{"fabric.provider", "DDSTORE_FABRIC", kindString, func(c *Config, v any) { c.Fabric.Provider = v.(string) }},
	{"fabric.iface", "FABRIC_IFACE", kindString, func(c *Config, v any) { c.Fabric.Iface = v.(string) }},
	{"fabric.window", "DDSTORE_FABRIC_WINDOW", kindInt, func(c *Config, v any) { c.Fabric.Window = v.(int) }},
	{"fabric.timeout", "DDSTORE_FABRIC_TIMEOUT", kindDuration, func(c *Config, v any) { c.Fabric.Timeout = v.(time.Duration) }},
	{"store.node_mode", "DDSTORE_NODE_MODE", kindString, func(c *Config, v any) { c.Store.NodeMode = v.(string) }},
	{"store.width", "DDSTORE_WIDTH", kindInt, func(c *Config, v any) { c.Store.Width = v.(int) }},
	{"store.timeout", "DDSTORE_TIMEOUT", kindDuration, func(c *Config, v any) { c.Store.Timeout = v.(time.Duration) }},
	{"reads.mode", "DDSTORE_READ_MODE", kindString, func(c *Config, v any) { c.Reads.Mode = v.(string) }},
	{"reads.batch_get", "DDSTORE_BATCH_GET", kindBool, func(c *Config, v any) { c.Reads.BatchGet = v.(bool) }},
	{"reads.thread_readers", "DDSTORE_THREAD_READERS", kindBool, func(c *Config, v any) { c.Reads.ThreadReaders = v.(bool) }},
	{"reads.fast_collate", "DDSTORE_FAST_COLLATE", kindBool, func(c *Config, v any) { c.Reads.FastCollate = v.(bool) }},
	{"reads.failover_after", "DDSTORE_FAILOVER_AFTER", kindDuration, func(c *Config, v any) { c.Reads.FailoverAfter = v.(time.Duration) }},
	{"exchange.alltoall_max_bytes", "DDSTORE_ALLTOALL_MAX_BYTES", kindBytes, func(c *Config, v any) { c.Exchange.AlltoallMaxBytes = v.(int64) }},
	{"profile", "DDSTORE_PROFILE", kindBool, func(c *Config, v any) { c.Profile = v.(bool) }},
	{"telemetry.enabled", "DDSTORE_TELEMETRY", kindBool, func(c *Config, v any) { c.Telemetry.Enabled = v.(bool) }},
	{"telemetry.dir", "DDSTORE_TELEMETRY_DIR", kindString, func(c *Config, v any) { c.Telemetry.Dir = v.(string) }},
	{"bootstrap.method", "DDSTORE_BOOTSTRAP", kindString, func(c *Config, v any) { c.Bootstrap.Method = v.(string) }},
	{"bootstrap.addr", "DDSTORE_BOOTSTRAP_ADDR", kindString, func(c *Config, v any) { c.Bootstrap.Addr = v.(string) }},
	{"bootstrap.dir", "DDSTORE_BOOTSTRAP_DIR", kindString, func(c *Config, v any) { c.Bootstrap.Dir = v.(string) }},
	{"bootstrap.timeout", "DDSTORE_BOOTSTRAP_TIMEOUT", kindDuration, func(c *Config, v any) { c.Bootstrap.Timeout = v.(time.Duration) }},
	{"loader.workers", "DDSTORE_LOADER_WORKERS", kindInt, func(c *Config, v any) { c.Loader.Workers = v.(int) }},
	{"loader.prefetch", "DDSTORE_LOADER_PREFETCH", kindInt, func(c *Config, v any) { c.Loader.Prefetch = v.(int) }},
}

// ConfigEnvVars lists the environment variables LoadConfig honours, keyed by
// config key (for help texts).
func ConfigEnvVars() map[string]string {
	m := make(map[string]string, len(configKeys)+1)
	for _, k := range configKeys {
		if k.env != "" {
			m[k.key] = k.env
		}
	}
	return m
}

// LoadConfig loads the configuration. The file is, in order: path (the
// --config flag; a path, or the name of an embedded file such as
// "frontier"), DDSTORE_CONFIG (same forms), the detected machine
// (LMOD_SYSTEM_NAME=frontier, NERSC_HOST=perlmutter → the embedded file),
// else the embedded local.yaml. Every key missing from the file keeps
// local.yaml's value. DDSTORE_* variables (and FABRIC_IFACE) then override
// single keys; booleans accept 0/1/true/false. An invalid value is an error
// wrapping ErrConfig that names the key and where the value came from.
func LoadConfig(path string) (Config, error) {
	data, name, why, err := pickConfig(path)
	if err != nil {
		return Config{}, err
	}
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(configs.Default)); err != nil {
		return Config{}, fmt.Errorf("%w: embedded local.yaml: %v", ErrConfig, err)
	}
	fileKeys := map[string]bool{}
	if name != "embedded:local.yaml" {
		f := viper.New()
		f.SetConfigType("yaml")
		if err := f.ReadConfig(bytes.NewReader(data)); err != nil {
			return Config{}, fmt.Errorf("%w: %s: %v", ErrConfig, name, err)
		}
		for _, k := range f.AllKeys() {
			fileKeys[k] = true
		}
		if err := v.MergeConfig(bytes.NewReader(data)); err != nil {
			return Config{}, fmt.Errorf("%w: %s: %v", ErrConfig, name, err)
		}
	} else {
		for _, k := range v.AllKeys() {
			fileKeys[k] = true
		}
	}
	known := map[string]bool{}
	for _, k := range configKeys {
		known[k.key] = true
		if k.env != "" {
			if err := v.BindEnv(k.key, k.env); err != nil {
				return Config{}, fmt.Errorf("%w: %s: bind %s: %v", ErrConfig, k.key, k.env, err)
			}
		}
	}
	var unknown []string
	for k := range fileKeys {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Config{}, fmt.Errorf("%w: %s: unknown key(s) %s", ErrConfig, name, strings.Join(unknown, ", "))
	}

	var c Config
	var overrides []string
	for _, k := range configKeys {
		from := name
		if k.env != "" {
			if s, ok := os.LookupEnv(k.env); ok && s != "" {
				from = "env " + k.env
				overrides = append(overrides, k.env)
			}
		}
		if !fileKeys[k.key] && !strings.HasPrefix(from, "env ") {
			from = "embedded:local.yaml (default for " + name + ")"
		}
		val, err := parseValue(k.kind, v.Get(k.key))
		if err != nil {
			return Config{}, fmt.Errorf("%w: %s from %s: %v", ErrConfig, k.key, from, err)
		}
		k.set(&c, val)
	}
	c.Source = name + " (" + why + ")"
	if len(overrides) > 0 {
		c.Source += ", overridden by " + strings.Join(overrides, ", ")
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%w (config %s)", err, c.Source)
	}
	return c, nil
}

// pickConfig returns the chosen file's bytes, its display name and why it
// was chosen.
func pickConfig(path string) (data []byte, name, why string, err error) {
	if path != "" {
		data, name, err = readConfigRef(path)
		return data, name, "--config", err
	}
	if p := os.Getenv("DDSTORE_CONFIG"); p != "" {
		data, name, err = readConfigRef(p)
		if err != nil {
			err = fmt.Errorf("%w (from DDSTORE_CONFIG)", err)
		}
		return data, name, "DDSTORE_CONFIG", err
	}
	if m := DetectMachine(); m != "" {
		data, name, err = embedded(m)
		return data, name, "detected machine " + m, err
	}
	return configs.Default, "embedded:local.yaml", "default", nil
}

// DetectMachine names the machine from the environment: "frontier" when
// LMOD_SYSTEM_NAME=frontier, "perlmutter" when NERSC_HOST=perlmutter, else "".
func DetectMachine() string {
	if strings.EqualFold(os.Getenv("LMOD_SYSTEM_NAME"), "frontier") {
		return "frontier"
	}
	if strings.EqualFold(os.Getenv("NERSC_HOST"), "perlmutter") {
		return "perlmutter"
	}
	return ""
}

// readConfigRef reads a file path, or an embedded file by name ("frontier",
// "frontier.yaml") when no such file exists.
func readConfigRef(ref string) ([]byte, string, error) {
	data, err := os.ReadFile(ref)
	if err == nil {
		return data, ref, nil
	}
	if errors.Is(err, fs.ErrNotExist) && !strings.ContainsRune(ref, filepath.Separator) {
		if d, n, e := embedded(strings.TrimSuffix(ref, ".yaml")); e == nil {
			return d, n, nil
		}
	}
	return nil, ref, fmt.Errorf("%w: config file %s: %v", ErrConfig, ref, err)
}

func embedded(machine string) ([]byte, string, error) {
	n := machine + ".yaml"
	d, err := configs.FS.ReadFile(n)
	if err != nil {
		return nil, "embedded:" + n, fmt.Errorf("%w: no embedded config %q: %v", ErrConfig, n, err)
	}
	return d, "embedded:" + n, nil
}

func parseValue(kind keyKind, raw any) (any, error) {
	s := ""
	if raw != nil {
		s = strings.TrimSpace(fmt.Sprint(raw))
	}
	switch kind {
	case kindString:
		return s, nil
	case kindInt:
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", s)
		}
		return n, nil
	case kindBool:
		switch strings.ToLower(s) {
		case "1", "true":
			return true, nil
		case "0", "false":
			return false, nil
		}
		return nil, fmt.Errorf("%q is not a boolean (0, 1, true, false)", s)
	case kindDuration:
		if d, err := time.ParseDuration(s); err == nil {
			return d, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return time.Duration(f * float64(time.Second)), nil // plain number = seconds
		}
		return nil, fmt.Errorf("%q is not a duration (e.g. 10s, 500ms, or seconds)", s)
	case kindBytes:
		return parseBytes(s)
	}
	return nil, fmt.Errorf("unknown kind %d", kind)
}

// parseBytes accepts a byte count with an optional KiB/MiB/GiB (or K/M/G)
// suffix. A count that does not fit in an int64 is an error (LoadConfig
// adds the key and the source).
func parseBytes(s string) (int64, error) {
	mult := int64(1)
	num := s
	for _, suf := range []struct {
		s string
		m int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(s, suf.s) {
			mult, num = suf.m, strings.TrimSpace(strings.TrimSuffix(s, suf.s))
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("%q overflows a 64-bit byte count", s)
		}
		return 0, fmt.Errorf("%q is not a byte count (e.g. 2097152 or 2MiB)", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q overflows a 64-bit byte count", s)
	}
	return n * mult, nil
}

// Validate checks every value; errors name the key.
func (c Config) Validate() error {
	bad := func(key string, format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrConfig, key, fmt.Sprintf(format, a...))
	}
	switch c.Store.NodeMode {
	case "auto", "fabric":
	default:
		return bad("store.node_mode", "%q is not auto or fabric", c.Store.NodeMode)
	}
	switch c.Reads.Mode {
	case ReadModeAuto, ReadModeRMA, ReadModeGather:
	default:
		return bad("reads.mode", "%q is not auto, rma or gather", c.Reads.Mode)
	}
	switch c.Bootstrap.Method {
	case "auto", "pmi", "tcp", "dir", "single":
	default:
		return bad("bootstrap.method", "%q is not auto, pmi, tcp, dir or single", c.Bootstrap.Method)
	}
	if c.Bootstrap.Method == "dir" && c.Bootstrap.Dir == "" {
		return bad("bootstrap.dir", "required with bootstrap.method dir")
	}
	switch c.Machine.GPU {
	case "", "none", "auto", "rocm", "hip", "cuda":
	default:
		return bad("machine.gpu", "%q is not cuda, hip, rocm, auto or none", c.Machine.GPU)
	}
	if _, err := parseGPUDevice(c.gpuDevice()); err != nil {
		return bad("gpu.device", "%q: want $LOCAL_RANK or a device index", c.GPU.Device)
	}
	switch c.GPU.Sync {
	case GPUSyncStream, GPUSyncDevice:
	default:
		return bad("gpu.sync", "%q is not stream or device", c.GPU.Sync)
	}
	switch c.GPU.Direct {
	case GPUDirectAuto, GPUDirectOn, GPUDirectOff:
	default:
		return bad("gpu.direct", "%q is not auto, on or off", c.GPU.Direct)
	}
	if c.GPU.StageBytes < 1<<10 || c.GPU.StageBytes > maxReadBytes {
		return bad("gpu.stage_bytes", "%d outside [1 KiB, 4 MiB]", c.GPU.StageBytes)
	}
	switch {
	case c.Fabric.Window < 1:
		return bad("fabric.window", "%d < 1", c.Fabric.Window)
	case c.Fabric.Timeout <= 0:
		return bad("fabric.timeout", "%v must be > 0", c.Fabric.Timeout)
	case c.Store.Width < 0:
		return bad("store.width", "%d < 0", c.Store.Width)
	case c.Store.Timeout <= 0:
		return bad("store.timeout", "%v must be > 0", c.Store.Timeout)
	case c.Reads.FailoverAfter <= 0:
		return bad("reads.failover_after", "%v must be > 0", c.Reads.FailoverAfter)
	case c.Exchange.AlltoallMaxBytes < 4096 || c.Exchange.AlltoallMaxBytes > maxGatherRoundBytes:
		return bad("exchange.alltoall_max_bytes", "%d outside [4096, %d] (the gather round cap, fabric.Options.GatherMaxBytes)",
			c.Exchange.AlltoallMaxBytes, maxGatherRoundBytes)
	case c.Telemetry.Enabled && c.Telemetry.Dir == "":
		return bad("telemetry.dir", "empty while telemetry.enabled")
	case c.Bootstrap.Timeout <= 0:
		return bad("bootstrap.timeout", "%v must be > 0", c.Bootstrap.Timeout)
	case c.Loader.Workers < 0:
		return bad("loader.workers", "%d < 0", c.Loader.Workers)
	case c.Loader.Prefetch < 1:
		return bad("loader.prefetch", "%d < 1", c.Loader.Prefetch)
	case c.Machine.RanksPerNode < 0 || c.Machine.CoresPerRank < 0:
		return bad("machine", "negative ranks_per_node or cores_per_rank")
	}
	return nil
}

// maxGatherRoundBytes is the largest fabric.Options.GatherMaxBytes (the most
// a gather target serves in one reply).
const maxGatherRoundBytes = 64 << 20

// StoreOptions maps the configuration onto engine Options, starting from
// DefaultOptions. exchange.alltoall_max_bytes becomes Fabric.GatherMaxBytes.
func (c Config) StoreOptions() Options {
	o := DefaultOptions()
	o.Fabric.Provider = c.Fabric.Provider
	o.Fabric.Domain = fabricDomain(c.Fabric.Provider, c.Fabric.Iface)
	o.Fabric.Window = c.Fabric.Window
	o.Fabric.Timeout = c.Fabric.Timeout
	o.Fabric.GatherMaxBytes = int(c.Exchange.AlltoallMaxBytes)
	o.NodeMode = c.Store.NodeMode
	o.ReadMode = c.Reads.Mode
	o.FailoverAfter = c.Reads.FailoverAfter
	o.Width = c.Store.Width
	o.Timeout = c.Store.Timeout
	o.DisableTelemetry = !c.Telemetry.Enabled
	o.TelemetryDir = c.Telemetry.Dir
	o.Profile = c.Profile
	o.Bootstrap.Method = c.Bootstrap.Method
	o.Bootstrap.Addr = c.Bootstrap.Addr
	o.Bootstrap.Dir = c.Bootstrap.Dir
	o.Bootstrap.Timeout = c.Bootstrap.Timeout
	o.GPU.Device = c.gpuDevice()
	o.GPU.Sync = c.GPU.Sync
	o.GPU.Direct = c.GPU.Direct
	o.GPU.StageBytes = int(c.GPU.StageBytes)
	return o
}

// gpuDevice is GPUOptions.Device from machine.gpu and gpu.device:
// "cuda:$LOCAL_RANK", "hip:3", "none".
func (c Config) gpuDevice() string {
	rt := c.Machine.GPU
	switch rt {
	case "", "none":
		return "none"
	case "rocm":
		rt = "hip"
	}
	if d := strings.TrimSpace(c.GPU.Device); d != "" {
		return rt + ":" + d
	}
	return rt + ":$LOCAL_RANK"
}

// fabricDomain maps FABRIC_IFACE onto a libfabric domain name: Slingshot
// NICs are named hsn0..hsn3 by the kernel and cxi0..cxi3 by libfabric, so
// with the cxi provider (or the default order) "hsnN" becomes "cxiN".
// Other names pass through.
func fabricDomain(provider, iface string) string {
	if provider != "" && provider != "cxi" {
		return iface
	}
	if n, ok := strings.CutPrefix(iface, "hsn"); ok && n != "" {
		if _, err := strconv.Atoi(n); err == nil {
			return "cxi" + n
		}
	}
	return iface
}

// LoaderOptions maps the reads and loader sections onto LoaderOptions for
// the given variables and batch size (shuffled, not dropping the last batch).
func (c Config) LoaderOptions(vars []string, batchSize int, seed int64) LoaderOptions {
	return LoaderOptions{
		Vars:          vars,
		BatchSize:     batchSize,
		Seed:          seed,
		Shuffle:       true,
		Workers:       c.Loader.Workers,
		Prefetch:      c.Loader.Prefetch,
		BatchGet:      c.Reads.BatchGet,
		FastCollate:   c.Reads.FastCollate,
		ThreadReaders: c.Reads.ThreadReaders,
	}
}
