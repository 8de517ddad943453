package engine

// This file maps a configuration (package configs: the schema and its one
// loader) onto the plain option structs the library takes.

import (
	"strconv"
	"strings"

	"github.com/ddstore/ddstore/configs"
)

// ErrConfig is the class of invalid configuration values (configs.ErrConfig);
// the message names the key and where the value came from.
var ErrConfig = configs.ErrConfig

// Config is a loaded configuration: package configs' schema, with the
// methods that map it onto Options and LoaderOptions.
type Config struct {
	configs.Config
}

// LoadConfig loads the configuration with configs.Load (see there for the
// order: path or machine name, DDSTORE_CONFIG, the detected machine, the
// embedded local.yaml; DDSTORE_* overrides) and checks that it maps onto
// valid Options. An invalid value is an *Error whose cause wraps ErrConfig
// and names the key.
func LoadConfig(path string) (Config, error) {
	cc, err := configs.Load(path)
	if err != nil {
		return Config{}, &Error{Op: "LoadConfig", Err: err}
	}
	c := Config{cc}
	o := c.StoreOptions()
	if err := o.Validate(); err != nil {
		return Config{}, &Error{Op: "LoadConfig", Detail: "config " + c.Source, Err: err}
	}
	return c, nil
}

// StoreOptions maps the configuration onto engine Options, starting from
// DefaultOptions. exchange.alltoall_max_bytes becomes Fabric.GatherMaxBytes.
func (c Config) StoreOptions() Options {
	o := DefaultOptions()
	o.Fabric.Provider = c.Fabric.Provider
	o.Fabric.Domain = fabricDomain(c.Fabric.Provider, c.Fabric.Iface)
	o.Fabric.Window = c.Fabric.Window
	o.Fabric.MaxPeers = c.Fabric.MaxPeers
	o.Fabric.Timeout = c.Fabric.Timeout
	o.Fabric.Progress = c.Fabric.Progress
	o.Fabric.GatherMaxBytes = int(c.Exchange.AlltoallMaxBytes)
	o.NodeMode = c.Store.NodeMode
	o.ReadMode = c.Reads.Mode
	o.FailoverAfter = c.Reads.FailoverAfter
	o.Width = c.Store.Width
	o.Timeout = c.Store.Timeout
	o.Liveness = c.Store.Liveness
	o.Control = c.Store.Control
	o.CtrlPeriod, o.CtrlSuspectAfter, o.CtrlDeadAfter = c.Store.CtrlPeriod, c.Store.CtrlSuspectAfter, c.Store.CtrlDeadAfter
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
	o.GPU.SpinWait = c.GPU.SpinWait
	if o.GPU.SpinWait == 0 {
		o.GPU.SpinWait = -1 // the config's 0 is "never poll"
	}
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
