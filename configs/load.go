package configs

// This file is ddstore's one config loader (viper, at the edge): it turns a
// YAML file of this directory (or any path) plus DDSTORE_* environment
// overrides into a Config. The engine maps a Config onto its option
// structs; ddtop reads the telemetry and ddtop sections.

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
)

// ErrConfig is returned (wrapped) for every invalid configuration value; the
// message names the key and where the value came from.
var ErrConfig = errors.New("ddstore: invalid config")

// Limits the schema checks (the engine checks the same at Open).
const (
	// MaxGatherRoundBytes is the largest exchange.alltoall_max_bytes (the
	// fabric's GatherMaxBytes: the most a gather target serves in one reply).
	MaxGatherRoundBytes = 64 << 20
	// MinGatherRoundBytes is the smallest exchange.alltoall_max_bytes.
	MinGatherRoundBytes = 4 << 10
	// MaxStageBytes is the largest gpu.stage_bytes (each of a reader's two
	// pinned staging halves).
	MaxStageBytes = 256 << 20
	// MaxSpinWait is the longest gpu.spin_wait: past it a wait should sleep.
	MaxSpinWait = 10 * time.Millisecond
	// MinStageBytes is the smallest gpu.stage_bytes.
	MinStageBytes = 1 << 10
	// MinDdtopInterval is the shortest ddtop.interval.
	MinDdtopInterval = 50 * time.Millisecond
)

type keyKind int

const (
	kindString keyKind = iota
	kindInt
	kindBool
	kindDuration
	kindBytes
	kindPrefetch // an integer or "auto" (PrefetchAuto)
)

// key is one documented key: its YAML path, its environment variable and
// how to parse it.
type key struct {
	key  string
	env  string
	kind keyKind
	set  func(c *Config, v any)
}

var keys = []key{
	{"machine.name", "", kindString, func(c *Config, v any) { c.Machine.Name = v.(string) }},
	{"machine.ranks_per_node", "", kindInt, func(c *Config, v any) { c.Machine.RanksPerNode = v.(int) }},
	{"machine.cores_per_rank", "", kindInt, func(c *Config, v any) { c.Machine.CoresPerRank = v.(int) }},
	{"machine.gpu", "DDSTORE_GPU", kindString, func(c *Config, v any) { c.Machine.GPU = v.(string) }},
	{"gpu.device", "DDSTORE_GPU_DEVICE", kindString, func(c *Config, v any) { c.GPU.Device = v.(string) }},
	{"gpu.sync", "DDSTORE_GPU_SYNC", kindString, func(c *Config, v any) { c.GPU.Sync = v.(string) }},
	{"gpu.direct", "DDSTORE_GPU_DIRECT", kindString, func(c *Config, v any) { c.GPU.Direct = v.(string) }},
	{"gpu.stage_bytes", "DDSTORE_GPU_STAGE_BYTES", kindBytes, func(c *Config, v any) { c.GPU.StageBytes = v.(int64) }},
	{"gpu.spin_wait", "DDSTORE_GPU_SPIN_WAIT", kindDuration, func(c *Config, v any) { c.GPU.SpinWait = v.(time.Duration) }},
	{"fabric.provider", "DDSTORE_FABRIC", kindString, func(c *Config, v any) { c.Fabric.Provider = v.(string) }},
	{"fabric.iface", "FABRIC_IFACE", kindString, func(c *Config, v any) { c.Fabric.Iface = v.(string) }},
	{"fabric.window", "DDSTORE_FABRIC_WINDOW", kindInt, func(c *Config, v any) { c.Fabric.Window = v.(int) }},
	{"fabric.max_peers", "DDSTORE_FABRIC_MAX_PEERS", kindInt, func(c *Config, v any) { c.Fabric.MaxPeers = v.(int) }},
	{"fabric.timeout", "DDSTORE_FABRIC_TIMEOUT", kindDuration, func(c *Config, v any) { c.Fabric.Timeout = v.(time.Duration) }},
	{"fabric.progress", "DDSTORE_FABRIC_PROGRESS", kindString, func(c *Config, v any) { c.Fabric.Progress = v.(string) }},
	{"store.node_mode", "DDSTORE_NODE_MODE", kindString, func(c *Config, v any) { c.Store.NodeMode = v.(string) }},
	{"store.width", "DDSTORE_WIDTH", kindInt, func(c *Config, v any) { c.Store.Width = v.(int) }},
	{"store.timeout", "DDSTORE_TIMEOUT", kindDuration, func(c *Config, v any) { c.Store.Timeout = v.(time.Duration) }},
	{"store.liveness", "DDSTORE_LIVENESS", kindDuration, func(c *Config, v any) { c.Store.Liveness = v.(time.Duration) }},
	{"store.control", "DDSTORE_CONTROL", kindString, func(c *Config, v any) { c.Store.Control = v.(string) }},
	{"store.ctrl_period", "DDSTORE_CTRL_PERIOD", kindDuration, func(c *Config, v any) { c.Store.CtrlPeriod = v.(time.Duration) }},
	{"store.ctrl_suspect_after", "DDSTORE_CTRL_SUSPECT_AFTER", kindDuration, func(c *Config, v any) { c.Store.CtrlSuspectAfter = v.(time.Duration) }},
	{"store.ctrl_dead_after", "DDSTORE_CTRL_DEAD_AFTER", kindDuration, func(c *Config, v any) { c.Store.CtrlDeadAfter = v.(time.Duration) }},
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
	{"loader.prefetch", "DDSTORE_LOADER_PREFETCH", kindPrefetch, func(c *Config, v any) { c.Loader.Prefetch = v.(int) }},
	{"ddtop.interval", "", kindDuration, func(c *Config, v any) { c.Ddtop.Interval = v.(time.Duration) }},
	{"ddtop.history", "", kindInt, func(c *Config, v any) { c.Ddtop.History = v.(int) }},
	{"ddtop.job", "", kindString, func(c *Config, v any) { c.Ddtop.Job = v.(string) }},
	{"ddtop.nice", "", kindInt, func(c *Config, v any) { c.Ddtop.Nice = v.(int) }},
}

// EnvVars lists the environment variables Load honours, keyed by config
// key (for help texts and tests).
func EnvVars() map[string]string {
	m := make(map[string]string, len(keys))
	for _, k := range keys {
		if k.env != "" {
			m[k.key] = k.env
		}
	}
	return m
}

// Load loads the configuration. The file is, in order: path (a --config
// flag; a path, or the name of an embedded file such as "frontier", from
// any directory), DDSTORE_CONFIG (same forms), the detected machine
// (LMOD_SYSTEM_NAME=frontier, NERSC_HOST=perlmutter → the embedded file),
// else the embedded local.yaml. Every key missing from the file keeps
// local.yaml's value. DDSTORE_* variables (and FABRIC_IFACE) then
// override single keys; booleans parse with ParseBool everywhere. An
// invalid value or an unknown key is an error wrapping ErrConfig that names
// the key and where the value came from.
func Load(path string) (Config, error) {
	data, name, why, err := pick(path)
	if err != nil {
		return Config{}, err
	}
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(Default)); err != nil {
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
	for _, k := range keys {
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
	for _, k := range keys {
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
		val, err := parse(k.kind, v.Get(k.key))
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

// pick returns the chosen file's bytes, its display name and why it was
// chosen.
func pick(path string) (data []byte, name, why string, err error) {
	if path != "" {
		data, name, err = readRef(path)
		return data, name, "--config", err
	}
	if p := os.Getenv("DDSTORE_CONFIG"); p != "" {
		data, name, err = readRef(p)
		if err != nil {
			err = fmt.Errorf("%w (from DDSTORE_CONFIG)", err)
		}
		return data, name, "DDSTORE_CONFIG", err
	}
	if m := DetectMachine(); m != "" {
		data, name, err = embedded(m)
		return data, name, "detected machine " + m, err
	}
	return Default, "embedded:local.yaml", "default", nil
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

// readRef reads a file path, or an embedded file by name ("frontier",
// "frontier.yaml") when no such file exists.
func readRef(ref string) ([]byte, string, error) {
	data, err := os.ReadFile(ref)
	if err == nil {
		return data, ref, nil
	}
	if errors.Is(err, fs.ErrNotExist) && !strings.ContainsRune(ref, filepath.Separator) {
		if d, n, e := embedded(strings.TrimSuffix(ref, ".yaml")); e == nil {
			return d, n, nil
		}
		return nil, ref, fmt.Errorf("%w: %q is neither a config file nor an embedded machine (%s): %v",
			ErrConfig, ref, strings.Join(Machines(), ", "), err)
	}
	return nil, ref, fmt.Errorf("%w: config file %s: %v", ErrConfig, ref, err)
}

// Machines lists the embedded machine files by name ("frontier", "local", ...).
func Machines() []string {
	entries, _ := FS.ReadDir(".")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	return names
}

func embedded(machine string) ([]byte, string, error) {
	n := machine + ".yaml"
	d, err := FS.ReadFile(n)
	if err != nil {
		return nil, "embedded:" + n, fmt.Errorf("%w: no embedded config %q: %v", ErrConfig, n, err)
	}
	return d, "embedded:" + n, nil
}

// ParseBool is how every boolean of ddstore parses, in options, the
// environment and YAML: 1/0, true/false, yes/no, on/off, in any case, with
// surrounding space ignored. Anything else is an error that lists them.
func ParseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean (1/0, true/false, yes/no, on/off)", s)
}

func parse(kind keyKind, raw any) (any, error) {
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
		return ParseBool(s)
	case kindDuration:
		if d, err := time.ParseDuration(s); err == nil {
			return d, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return time.Duration(f * float64(time.Second)), nil // plain number = seconds
		}
		return nil, fmt.Errorf("%q is not a duration (e.g. 10s, 500ms, or seconds)", s)
	case kindBytes:
		return ParseBytes(s)
	case kindPrefetch:
		if strings.EqualFold(s, "auto") {
			return PrefetchAuto, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is neither an integer ≥ 1 nor auto", s)
		}
		return n, nil
	}
	return nil, fmt.Errorf("unknown kind %d", kind)
}

// ParseBytes accepts a byte count with an optional KiB/MiB/GiB (or K/M/G,
// B) suffix. A count that does not fit in an int64 is an error.
func ParseBytes(s string) (int64, error) {
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

// Validate checks every value; errors wrap ErrConfig and name the key.
func (c Config) Validate() error {
	bad := func(key string, format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrConfig, key, fmt.Sprintf(format, a...))
	}
	switch c.Store.NodeMode {
	case "auto", "fabric":
	default:
		return bad("store.node_mode", "%q is not auto or fabric", c.Store.NodeMode)
	}
	if err := CheckControl(c.Store.Control); err != nil {
		return bad("store.control", "%v", err)
	}
	if err := CheckCtrlTiming(c.Store.CtrlPeriod, c.Store.CtrlSuspectAfter, c.Store.CtrlDeadAfter); err != nil {
		return bad("store.ctrl_period, store.ctrl_suspect_after, store.ctrl_dead_after", "%v", err)
	}
	switch c.Reads.Mode {
	case "auto", "rma", "gather":
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
	if d := strings.TrimSpace(c.GPU.Device); d != "" && !strings.EqualFold(d, "$LOCAL_RANK") {
		if n, err := strconv.Atoi(d); err != nil || n < 0 {
			return bad("gpu.device", "%q: want $LOCAL_RANK or a device index", c.GPU.Device)
		}
	}
	switch c.GPU.Sync {
	case "stream", "device":
	default:
		return bad("gpu.sync", "%q is not stream or device", c.GPU.Sync)
	}
	switch c.GPU.Direct {
	case "auto", "on", "off":
	default:
		return bad("gpu.direct", "%q is not auto, on or off", c.GPU.Direct)
	}
	switch {
	case c.GPU.StageBytes < MinStageBytes || c.GPU.StageBytes > MaxStageBytes:
		return bad("gpu.stage_bytes", "%d outside [1 KiB, 256 MiB]", c.GPU.StageBytes)
	case c.GPU.SpinWait < 0 || c.GPU.SpinWait > MaxSpinWait:
		return bad("gpu.spin_wait", "%v outside [0, %v]", c.GPU.SpinWait, MaxSpinWait)
	case c.Fabric.Window < 1:
		return bad("fabric.window", "%d < 1", c.Fabric.Window)
	case c.Fabric.MaxPeers < 1:
		return bad("fabric.max_peers", "%d < 1", c.Fabric.MaxPeers)
	case c.Fabric.Timeout <= 0:
		return bad("fabric.timeout", "%v must be > 0", c.Fabric.Timeout)
	case c.Fabric.Progress != "" && c.Fabric.Progress != "sleep" && c.Fabric.Progress != "adaptive" && c.Fabric.Progress != "spin":
		return bad("fabric.progress", "%q is not sleep, adaptive or spin", c.Fabric.Progress)
	case c.Store.Width < 0:
		return bad("store.width", "%d < 0", c.Store.Width)
	case c.Store.Timeout <= 0:
		return bad("store.timeout", "%v must be > 0", c.Store.Timeout)
	case c.Store.Liveness < 100*time.Millisecond:
		return bad("store.liveness", "%v must be ≥ 100ms", c.Store.Liveness)
	case c.Reads.FailoverAfter <= 0:
		return bad("reads.failover_after", "%v must be > 0", c.Reads.FailoverAfter)
	case c.Exchange.AlltoallMaxBytes < MinGatherRoundBytes || c.Exchange.AlltoallMaxBytes > MaxGatherRoundBytes:
		return bad("exchange.alltoall_max_bytes", "%d outside [%d, %d] (the gather round cap, fabric.Options.GatherMaxBytes)",
			c.Exchange.AlltoallMaxBytes, MinGatherRoundBytes, MaxGatherRoundBytes)
	case c.Telemetry.Enabled && c.Telemetry.Dir == "":
		return bad("telemetry.dir", "empty while telemetry.enabled")
	case c.Bootstrap.Timeout <= 0:
		return bad("bootstrap.timeout", "%v must be > 0", c.Bootstrap.Timeout)
	case c.Loader.Workers < 0:
		return bad("loader.workers", "%d < 0", c.Loader.Workers)
	case c.Loader.Prefetch < 1 && c.Loader.Prefetch != PrefetchAuto:
		return bad("loader.prefetch", "%d < 1 (auto lets the loader choose)", c.Loader.Prefetch)
	case c.Machine.RanksPerNode < 0 || c.Machine.CoresPerRank < 0:
		return bad("machine", "negative ranks_per_node or cores_per_rank")
	case c.Ddtop.Interval < MinDdtopInterval:
		return bad("ddtop.interval", "%v is below %v", c.Ddtop.Interval, MinDdtopInterval)
	case c.Ddtop.History < 1:
		return bad("ddtop.history", "%d < 1", c.Ddtop.History)
	case c.Ddtop.Nice < 0 || c.Ddtop.Nice > 19:
		return bad("ddtop.nice", "%d outside [0, 19] (ddtop only lowers its priority)", c.Ddtop.Nice)
	}
	return nil
}
