package doctor

// The doctor's rules: one pure function per finding over what the probes
// measured, in ddtop's form (telemetry.Finding: rule, evidence against the
// threshold it crossed, the fix with its config key and environment name).

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ddstore/ddstore/configs"
	"github.com/ddstore/ddstore/telemetry"
)

// Rule names (Finding.Rule).
const (
	RuleLibfabric    = "libfabric"     // libfabric cannot be loaded
	RuleProvider     = "provider"      // the configured provider or domain is not offered
	RuleSlowProvider = "slow_provider" // the pick emulates RMA in software while a hardware one is offered
	RuleMemlock      = "memlock"       // RLIMIT_MEMLOCK bounds registered memory below the threshold
	RuleShm          = "shm_small"     // the telemetry/shard directory has little free space
	RuleWindow       = "window"        // fabric.window above the provider's transmit queue
	RuleReads        = "reads_failed"  // the two-process read probe failed on a provider
	RuleMRCost       = "mr_cost"       // registration costs more per MiB than the threshold
	RuleGPU          = "gpu"           // machine.gpu names a runtime that is not there
	RuleIface        = "iface"         // fabric.iface is missing or down
	RuleCPUs         = "cpus"          // fewer CPUs than loader workers plus the training thread
	RuleProbe        = "probe_timeout" // a probe did not finish in its time limit
)

// fix is a finding of the whole node with its fix's key and env name.
func fix(host, rule string, sev float64, key, evidence, fixText string) telemetry.Finding {
	return telemetry.Finding{Rule: rule, Severity: sev, Rank: -1, Reader: -1, Host: host,
		Evidence: evidence, Fix: fixText, Key: key, Env: configs.EnvVars()[key]}
}

// findings applies every rule to rep, worst first.
func findings(rep *Report, th Thresholds) []telemetry.Finding {
	th.EnsureDefaults()
	var out []telemetry.Finding
	add := func(f ...telemetry.Finding) { out = append(out, f...) }
	h, cfg := rep.Host, rep.cfg
	add(ruleLibfabric(h, rep.Library)...)
	if rep.Library.Found {
		add(rulePick(h, cfg.Fabric.Provider, cfg.Fabric.Iface, rep.Pick, rep.Providers)...)
	}
	add(ruleMemlock(h, rep.Limits, rep.Pick, th.MemlockMin)...)
	add(ruleShm(h, rep.Limits, th.ShmFreeMin)...)
	add(ruleWindow(h, cfg.Fabric.Window, rep.Pick)...)
	add(ruleReads(h, rep.Reads, rep.Pick)...)
	add(ruleMRCost(h, rep.Reads, th.MRUsPerMiB)...)
	add(ruleGPU(h, cfg.Machine.GPU, rep.GPUs)...)
	add(ruleIface(h, cfg.Fabric.Iface, rep.Pick, rep.Interfaces)...)
	add(ruleCPUs(h, rep.Limits, cfg.Loader.Workers)...)
	add(ruleProbe(h, rep.Probes)...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Severity > out[j].Severity })
	if out == nil {
		out = []telemetry.Finding{}
	}
	return out
}

func ruleLibfabric(h string, lib Library) []telemetry.Finding {
	if lib.Found {
		return nil
	}
	return []telemetry.Finding{fix(h, RuleLibfabric, 1, "", lib.Error,
		"install libfabric (Debian/Ubuntu: apt-get install libfabric1), or put a libfabric >= 1.11 on LD_LIBRARY_PATH; without it only same-node reads work")}
}

func rulePick(h, provider, iface string, p Pick, provs []Provider) []telemetry.Finding {
	var offered []string
	hw := ""
	for _, pv := range provs {
		offered = append(offered, pv.Provider+" on "+pv.Domain)
		if !pv.SoftwareRMA && pv.Provider != "shm" && hw == "" {
			hw = pv.Provider
		}
	}
	if p.Error != "" {
		key := "fabric.provider"
		if iface != "" && strings.Contains(p.Error, "no domain") {
			key = "fabric.iface"
		}
		return []telemetry.Finding{fix(h, RuleProvider, 1, key, p.Error,
			"set "+key+" to one that is offered: "+strings.Join(offered, ", "))}
	}
	if p.SoftwareRMA && hw != "" {
		return []telemetry.Finding{fix(h, RuleSlowProvider, 0.8, "fabric.provider",
			fmt.Sprintf("the pick %s emulates RMA on the target's CPU while %s (hardware RMA) is offered (%s)", p.Provider, hw, p.Why),
			fmt.Sprintf("set fabric.provider to %q, or leave it empty for the default order", hw))}
	}
	return nil
}

func ruleMemlock(h string, l Limits, p Pick, min int64) []telemetry.Finding {
	if l.MemlockSoft < 0 || l.MemlockSoft >= min {
		return nil
	}
	sev, who := 0.3, "no registration of "+p.Provider+" pins memory, but verbs, cxi and efa pin every registered byte"
	if p.Pins {
		sev, who = 1, p.Provider+" pins every registered byte"
	}
	return []telemetry.Finding{fix(h, RuleMemlock, sev, "",
		fmt.Sprintf("memlock limit %s (hard %s) < %s: at most %s of shards and read buffers can be registered at once; %s",
			bytesStr(l.MemlockSoft), bytesStr(l.MemlockHard), bytesStr(min), bytesStr(l.MemlockSoft), who),
		"raise it to unlimited: ulimit -l unlimited before the job, memlock in /etc/security/limits.conf, or srun --propagate=MEMLOCK")}
}

func ruleShm(h string, l Limits, min int64) []telemetry.Finding {
	if l.ShmFree < 0 || l.ShmFree >= min {
		return nil
	}
	return []telemetry.Finding{fix(h, RuleShm, 0.9, "telemetry.dir",
		fmt.Sprintf("%s has %s free of %s < %s: the shards of the ranks of a node and their telemetry segments live there",
			l.ShmDir, bytesStr(l.ShmFree), bytesStr(l.ShmSize), bytesStr(min)),
		"grow it (mount -o remount,size=<half the RAM> "+l.ShmDir+"), or point telemetry.dir at a larger tmpfs")}
}

func ruleWindow(h string, window int, p Pick) []telemetry.Finding {
	if p.Error != "" || p.TxSize <= 0 || window <= p.TxSize {
		return nil
	}
	return []telemetry.Finding{fix(h, RuleWindow, 0.2, "fabric.window",
		fmt.Sprintf("fabric.window %d > %s's transmit queue %d: the fabric clamps it", window, p.Provider, p.TxSize),
		fmt.Sprintf("set fabric.window to %d", p.TxSize))}
}

func ruleReads(h string, reads []Reads, p Pick) []telemetry.Finding {
	var out []telemetry.Finding
	for _, r := range reads {
		if r.Error == "" {
			continue
		}
		sev, key := 0.4, ""
		fixText := "the engine does not use it; to use it, see the error"
		if r.Provider == p.Provider {
			sev, key = 1, "fabric.provider"
			fixText = "the engine's pick cannot read between two processes here: set fabric.provider to a provider whose probe passed"
		}
		out = append(out, fix(h, RuleReads, sev, key, r.Provider+" on "+r.Domain+": "+r.Error, fixText))
	}
	return out
}

func ruleMRCost(h string, reads []Reads, max float64) []telemetry.Finding {
	var out []telemetry.Finding
	for _, r := range reads {
		if r.Error == "" && r.MRUsPerMiB > max {
			out = append(out, fix(h, RuleMRCost, 0.5, "reads.fast_collate",
				fmt.Sprintf("registering memory on %s costs %.0f µs/MiB > %.0f", r.Provider, r.MRUsPerMiB, max),
				"keep destinations registered across calls: read into the loader's reused batch buffers (reads.fast_collate: true)"))
		}
	}
	return out
}

func ruleGPU(h, want string, g GPUs) []telemetry.Finding {
	switch want {
	case "cuda", "hip", "rocm":
	default:
		return nil
	}
	if len(g.Devices) > 0 {
		return nil
	}
	return []telemetry.Finding{fix(h, RuleGPU, 0.7, "machine.gpu",
		fmt.Sprintf("machine.gpu is %s but no device opens: %s", want, g.Error),
		"install the driver, or set machine.gpu to none (host reads only) or auto")}
}

func ruleIface(h, iface string, p Pick, ifs []Iface) []telemetry.Finding {
	if iface == "" || !strings.HasPrefix(p.Provider, "tcp") && !strings.HasPrefix(p.Provider, "sockets") {
		return nil
	}
	for _, i := range ifs {
		if i.Name == iface {
			if i.Up {
				return nil
			}
			return []telemetry.Finding{fix(h, RuleIface, 0.9, "fabric.iface", "fabric.iface "+iface+" is down",
				"bring it up, or set fabric.iface to an up interface ("+upIfaces(ifs)+"), or empty for the ranks' own path")}
		}
	}
	return []telemetry.Finding{fix(h, RuleIface, 0.9, "fabric.iface", "fabric.iface "+iface+" does not exist here",
		"set fabric.iface to one of "+upIfaces(ifs)+", or empty for the ranks' own path")}
}

func upIfaces(ifs []Iface) string {
	var up []string
	for _, i := range ifs {
		if i.Up {
			up = append(up, i.Name)
		}
	}
	return strings.Join(up, ", ")
}

func ruleCPUs(h string, l Limits, workers int) []telemetry.Finding {
	if l.CPUCount <= 0 || l.CPUCount >= workers+1 {
		return nil
	}
	return []telemetry.Finding{fix(h, RuleCPUs, 0.6, "loader.workers",
		fmt.Sprintf("%d CPUs (%s) for %d loader workers and the training thread", l.CPUCount, l.CPUs, workers),
		fmt.Sprintf("set loader.workers to %d, or give the rank more CPUs", max(0, l.CPUCount-1)))}
}

func ruleProbe(h string, ps []Probe) []telemetry.Finding {
	var out []telemetry.Finding
	for _, p := range ps {
		if p.Status == "timeout" {
			out = append(out, fix(h, RuleProbe, 0.5, "", p.Name+": "+p.Error,
				"something on this node hangs the probe: run the doctor again, and look at the probe's subject"))
		}
	}
	return out
}

// bytesStr formats a byte count in binary units; -1 is unlimited.
func bytesStr(n int64) string {
	if n < 0 {
		return "unlimited"
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, u := float64(n), 0
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d %s", int64(f), units[u])
	}
	return fmt.Sprintf("%.1f %s", f, units[u])
}
