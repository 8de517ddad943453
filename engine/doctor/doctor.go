// Package doctor owns the machine check behind cmd/doctor: probes of
// libfabric (version, providers, the engine's pick and why), memory limits
// (memlock, /dev/shm, hugepages, CPU set, cgroup), reads between two local
// processes on each usable provider (latency, 128-in-flight throughput,
// registration cost), interfaces, GPUs and NUMA affinity. Each probe runs
// under a time limit and prints a progress line; a missing library or
// driver is a finding, not a failure. Findings have ddtop's form
// (telemetry.Finding, rules in rules.go, one pure function each), and
// WriteConfig turns a Report into a machine config of the configs schema.
package doctor

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/ddstore/ddstore/configs"
	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/telemetry"
)

// Options configure Run; the zero value means the defaults.
type Options struct {
	// Config is what the engine would run with (configs.Load): its
	// fabric provider and interface decide the engine's pick. The zero
	// value means configs.Load("").
	Config *configs.Config
	// Providers to measure reads on; nil means every offered provider of
	// fabric.DefaultOrder, plus the configured one.
	Providers []string
	// ProbeTimeout limits each probe; default 25s (a read probe on a loaded
	// 2-core node takes up to ~10s: the target fills 256 MiB, connects).
	ProbeTimeout time.Duration
	// ReadTime is spent on each read measurement; default 300ms.
	ReadTime time.Duration
	// ReadCount > 0 replaces ReadTime for the 3 KB single-read and
	// 128-in-flight measurements: exactly ReadCount rows each, their
	// offsets drawn and the rows checked outside the timed loop, as
	// fabric's BenchmarkRead with -test.benchtime=ReadCountx reads them
	// (examples/doctor/compare.sh).
	ReadCount int
	// Progress receives one line as each probe starts and ends; nil: none.
	Progress io.Writer
	// Exe is the binary re-executed as the read target (it must call
	// ServeTargetArgs); default os.Executable().
	Exe string
	// SkipReads skips the read probe (the two-process measurements).
	SkipReads  bool
	Thresholds Thresholds
}

// Thresholds of the rules; the zero value of a field means its default.
type Thresholds struct {
	MemlockMin int64   // bytes of RLIMIT_MEMLOCK below which memlock is a finding; default 64 MiB
	ShmFreeMin int64   // free bytes of telemetry.dir below which shm is a finding; default 1 GiB
	MRUsPerMiB float64 // registration cost above which mr_cost is a finding; default 1000 µs/MiB
}

// EnsureDefaults fills zero fields with their defaults.
func (t *Thresholds) EnsureDefaults() *Thresholds {
	if t.MemlockMin == 0 {
		t.MemlockMin = 64 << 20
	}
	if t.ShmFreeMin == 0 {
		t.ShmFreeMin = 1 << 30
	}
	if t.MRUsPerMiB == 0 {
		t.MRUsPerMiB = 1000
	}
	return t
}

// Library is libfabric as loaded.
type Library struct {
	Found   bool   `json:"found"`
	Version string `json:"version,omitempty"`
	Path    string `json:"path,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Provider is one offered provider/domain.
type Provider struct {
	fabric.Offer
	MRMode []string `json:"mr_mode"`
}

// Pick is the provider and domain the engine would open with the config.
type Pick struct {
	Provider string `json:"provider"`
	Domain   string `json:"domain"`
	Why      string `json:"why"`
	TxSize   int    `json:"tx_size"`
	Error    string `json:"error,omitempty"`
	// Pins: the provider registers by pinning (hardware RMA, not shm), so
	// memlock bounds what can be registered.
	Pins        bool `json:"pins_memory"`
	SoftwareRMA bool `json:"software_rma"`
}

// Probe is how one probe went.
type Probe struct {
	Name   string  `json:"name"`
	Took   float64 `json:"took_s"`
	Status string  `json:"status"` // ok, failed, timeout
	Error  string  `json:"error,omitempty"`
}

// Report is everything Run found.
type Report struct {
	Host       string              `json:"host"`
	Config     string              `json:"config"`
	Took       float64             `json:"took_s"`
	Library    Library             `json:"libfabric"`
	Providers  []Provider          `json:"providers"`
	Pick       Pick                `json:"pick"`
	Limits     Limits              `json:"limits"`
	Reads      []Reads             `json:"reads"`
	Interfaces []Iface             `json:"interfaces"`
	NUMA       []NUMANode          `json:"numa"`
	GPUs       GPUs                `json:"gpus"`
	Probes     []Probe             `json:"probes"`
	Findings   []telemetry.Finding `json:"findings"`

	cfg configs.Config
}

// probeFunc runs under a context with the probe's deadline and returns
// what to store in the report (applied only when it finished in time).
type probeFunc func(ctx context.Context) (apply func(), err error)

// step runs fn under the probe time limit, with progress lines. A probe
// that overruns is abandoned (its result dropped) and reported as a
// timeout.
func (rep *Report) step(o *Options, name string, fn probeFunc) {
	limit := o.ProbeTimeout
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "doctor: %s (limit %v)\n", name, limit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	t0 := time.Now()
	type result struct {
		apply func()
		err   error
	}
	done := make(chan result, 1)
	go func() {
		a, err := fn(ctx)
		done <- result{a, err}
	}()
	p := Probe{Name: name, Status: "ok"}
	select {
	case r := <-done:
		if r.apply != nil {
			r.apply()
		}
		if r.err != nil {
			p.Status, p.Error = "failed", r.err.Error()
		}
	case <-time.After(limit + time.Second):
		p.Status, p.Error = "timeout", fmt.Sprintf("no answer within %v", limit)
	}
	p.Took = time.Since(t0).Seconds()
	rep.Probes = append(rep.Probes, p)
	if o.Progress != nil {
		msg := p.Status
		if p.Error != "" {
			msg += ": " + p.Error
		}
		fmt.Fprintf(o.Progress, "doctor: %s: %s (%.2fs)\n", name, msg, p.Took)
	}
}

// Run probes this node.
func Run(o Options) (*Report, error) {
	t0 := time.Now()
	if o.ProbeTimeout == 0 {
		o.ProbeTimeout = 25 * time.Second
	}
	if o.ReadTime == 0 {
		o.ReadTime = 300 * time.Millisecond
	}
	o.Thresholds.EnsureDefaults()
	if o.Config == nil {
		c, err := configs.Load("")
		if err != nil {
			return nil, err
		}
		o.Config = &c
	}
	if o.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("doctor: cannot find its own binary for the read target: %w", err)
		}
		o.Exe = exe
	}
	cfg := *o.Config
	rep := &Report{Config: cfg.Source, cfg: cfg}
	rep.Host, _ = os.Hostname()

	rep.step(&o, "libfabric and providers", func(ctx context.Context) (func(), error) {
		lib, provs, pick := probeFabric(cfg)
		apply := func() { rep.Library, rep.Providers, rep.Pick = lib, provs, pick }
		if !lib.Found {
			return apply, fmt.Errorf("%s", lib.Error)
		}
		return apply, nil
	})
	rep.step(&o, "limits: memlock, "+cfg.Telemetry.Dir+", hugepages, CPUs, cgroup", func(ctx context.Context) (func(), error) {
		l := probeLimits(cfg.Telemetry.Dir)
		return func() { rep.Limits = l }, nil
	})
	rep.step(&o, "interfaces and NUMA", func(ctx context.Context) (func(), error) {
		ifs, numa := probeIfaces(), probeNUMA()
		return func() { rep.Interfaces, rep.NUMA = ifs, numa }, nil
	})
	rep.step(&o, "GPUs", func(ctx context.Context) (func(), error) {
		g := probeGPUs(cfg.Machine.GPU, nil)
		return func() { rep.GPUs = g }, nil
	})
	for i := range rep.Interfaces {
		rep.Interfaces[i].Fabric = rep.Pick.Error == "" && rep.Interfaces[i].Name == rep.Pick.Domain
	}
	for i := range rep.GPUs.Devices {
		rep.GPUs.Devices[i].NIC = nearestNIC(rep.GPUs.Devices[i].NUMA, rep.Interfaces)
	}
	if rep.Library.Found && !o.SkipReads {
		for _, pd := range readProviders(o, rep) {
			rep.step(&o, "reads between 2 processes: "+pd[0]+" on "+pd[1], func(ctx context.Context) (func(), error) {
				r, err := probeReads(ctx, o.Exe, pd[0], pd[1], o.ReadTime, o.ReadCount, o.Progress)
				if err != nil {
					r.Error = err.Error()
				}
				return func() { rep.Reads = append(rep.Reads, r) }, err
			})
		}
	}
	rep.Findings = findings(rep, o.Thresholds)
	rep.Took = time.Since(t0).Seconds()
	return rep, nil
}

// readProviders is the (provider, domain) pairs to measure: the
// engine's pick first (on its domain), then every other offered provider
// of the default order (the config's too) or of o.Providers, each on its
// first domain.
func readProviders(o Options, rep *Report) [][2]string {
	want := o.Providers
	if want == nil {
		want = append(fabric.DefaultOrder(), o.Config.Fabric.Provider)
	}
	var out [][2]string
	seen := map[string]bool{}
	add := func(p, d string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, [2]string{p, d})
		}
	}
	pickWanted := o.Providers == nil
	for _, w := range o.Providers {
		pickWanted = pickWanted || w == rep.Pick.Provider || w+";ofi_rxm" == rep.Pick.Provider
	}
	if rep.Pick.Error == "" && pickWanted {
		add(rep.Pick.Provider, rep.Pick.Domain) // on the engine's domain
	}
	for _, w := range want {
		for _, pv := range rep.Providers {
			if w != "" && (pv.Provider == w || pv.Provider == w+";ofi_rxm") {
				add(pv.Provider, pv.Domain)
				break
			}
		}
	}
	return out
}

// probeFabric loads libfabric, lists its providers and selects as Open
// would for cfg.
func probeFabric(cfg configs.Config) (Library, []Provider, Pick) {
	var lib Library
	v, err := fabric.LibraryVersion()
	if err != nil {
		lib.Error = err.Error()
		return lib, nil, Pick{Error: err.Error()}
	}
	lib.Found, lib.Version = true, v
	lib.Path, _ = fabric.LibraryPath()
	var provs []Provider
	offers, err := fabric.Providers()
	for _, of := range offers {
		provs = append(provs, Provider{Offer: of, MRMode: mrMode(of.Info)})
	}
	sel := fabric.Options{Provider: cfg.Fabric.Provider, Domain: cfg.Fabric.Iface}
	inf, why, serr := fabric.Select(sel)
	if serr != nil {
		if err == nil {
			err = serr
		}
		return lib, provs, Pick{Error: err.Error()}
	}
	if cfg.Fabric.Provider != "" {
		why = "fabric.provider (DDSTORE_FABRIC) in " + cfg.Source + ": " + why
	}
	p := Pick{Provider: inf.Provider, Domain: inf.Domain, Why: why, TxSize: inf.TxSize, SoftwareRMA: inf.SoftwareRMA}
	p.Pins = !inf.SoftwareRMA && inf.Provider != "shm"
	return lib, provs, p
}

func mrMode(i fabric.Info) []string {
	var m []string
	for _, x := range []struct {
		on   bool
		name string
	}{{i.MRLocal, "FI_MR_LOCAL"}, {i.MRVirtAddr, "FI_MR_VIRT_ADDR"}, {i.MRProvKey, "FI_MR_PROV_KEY"},
		{i.MRAllocated, "FI_MR_ALLOCATED"}, {i.MREndpoint, "FI_MR_ENDPOINT"}} {
		if x.on {
			m = append(m, x.name)
		}
	}
	if m == nil {
		m = []string{}
	}
	return m
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
