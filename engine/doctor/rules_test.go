package doctor

import (
	"strings"
	"testing"

	"github.com/ddstore/ddstore/telemetry"
)

// Each rule alone: it fires past its threshold with the fix's key and env,
// and stays quiet short of it.
func TestRules(t *testing.T) {
	tcp := Pick{Provider: "tcp;ofi_rxm", Domain: "eth0", TxSize: 2048, SoftwareRMA: true}
	verbs := Pick{Provider: "verbs;ofi_rxm", Domain: "mlx5_0", TxSize: 64, Pins: true}
	provs := []Provider{{}, {}}
	provs[0].Provider, provs[0].Domain, provs[0].SoftwareRMA = "tcp;ofi_rxm", "eth0", true
	provs[1].Provider, provs[1].Domain = "verbs;ofi_rxm", "mlx5_0"
	one := func(t *testing.T, what string, fs []telemetry.Finding, want string, contains ...string) {
		t.Helper()
		if want == "" {
			if len(fs) != 0 {
				t.Errorf("%s: %+v", what, fs)
			}
			return
		}
		if len(fs) != 1 || fs[0].Rule+" "+fs[0].Key+" "+fs[0].Env != want {
			t.Fatalf("%s: %+v, want %q", what, fs, want)
		}
		for _, c := range contains {
			if !strings.Contains(fs[0].Evidence+" | "+fs[0].Fix, c) {
				t.Errorf("%s: %q lacks %q", what, fs[0].Evidence+" | "+fs[0].Fix, c)
			}
		}
	}
	one(t, "libfabric missing", ruleLibfabric("h", Library{Error: "no libfabric.so.1"}), "libfabric  ", "no libfabric.so.1", "apt-get install libfabric1")
	one(t, "libfabric found", ruleLibfabric("h", Library{Found: true}), "")
	one(t, "no provider", rulePick("h", "cxi", "", Pick{Error: `provider "cxi" is not available`}, provs), "provider fabric.provider DDSTORE_FABRIC", "tcp;ofi_rxm on eth0")
	one(t, "no domain", rulePick("h", "tcp", "ib0", Pick{Error: `provider "tcp;ofi_rxm" has no domain "ib0"`}, provs), "provider fabric.iface FABRIC_IFACE")
	one(t, "tcp while verbs offered", rulePick("h", "tcp;ofi_rxm", "", tcp, provs), "slow_provider fabric.provider DDSTORE_FABRIC", `"verbs;ofi_rxm"`)
	one(t, "tcp only", rulePick("h", "", "", tcp, provs[:1]), "")
	one(t, "verbs picked", rulePick("h", "", "", verbs, provs), "")
	l := Limits{MemlockSoft: 8 << 20, MemlockHard: 8 << 20}
	one(t, "memlock low, tcp", ruleMemlock("h", l, tcp, 64<<20), "memlock  ", "8 MiB", "< 64 MiB", "ulimit -l unlimited")
	if f := ruleMemlock("h", l, verbs, 64<<20); len(f) != 1 || f[0].Severity != 1 || ruleMemlock("h", l, tcp, 64<<20)[0].Severity >= 1 {
		t.Errorf("memlock severity: a pinning provider's is the highest: %+v", f)
	}
	one(t, "memlock at threshold", ruleMemlock("h", l, verbs, 8<<20), "")
	one(t, "memlock unlimited", ruleMemlock("h", Limits{MemlockSoft: -1}, verbs, 64<<20), "")
	one(t, "shm small", ruleShm("h", Limits{ShmDir: "/dev/shm", ShmSize: 16 << 20, ShmFree: 15 << 20}, 1<<30), "shm_small telemetry.dir DDSTORE_TELEMETRY_DIR", "15 MiB free of 16 MiB")
	one(t, "shm enough", ruleShm("h", Limits{ShmDir: "/dev/shm", ShmSize: 2 << 30, ShmFree: 1 << 30}, 1<<30), "")
	one(t, "window over tx", ruleWindow("h", 128, verbs), "window fabric.window DDSTORE_FABRIC_WINDOW", "set fabric.window to 64")
	one(t, "window fits", ruleWindow("h", 128, tcp), "")
	one(t, "pick's reads fail", ruleReads("h", []Reads{{Provider: "tcp;ofi_rxm", Domain: "eth0", Error: "boom"}}, tcp), "reads_failed fabric.provider DDSTORE_FABRIC", "boom")
	one(t, "reads fine", ruleReads("h", []Reads{{Provider: "tcp;ofi_rxm"}}, tcp), "")
	one(t, "mr slow", ruleMRCost("h", []Reads{{Provider: "verbs", MRUsPerMiB: 2000}}, 1000), "mr_cost reads.fast_collate DDSTORE_FAST_COLLATE", "2000 µs/MiB > 1000")
	one(t, "mr cheap", ruleMRCost("h", []Reads{{Provider: "verbs", MRUsPerMiB: 999}}, 1000), "")
	one(t, "cuda without driver", ruleGPU("h", "cuda", GPUs{Error: "no libcuda"}), "gpu machine.gpu DDSTORE_GPU", "no libcuda", "none")
	one(t, "auto without driver", ruleGPU("h", "auto", GPUs{Error: "no libcuda"}), "")
	one(t, "cuda with device", ruleGPU("h", "cuda", GPUs{Devices: []GPU{{}}}), "")
	ifs := []Iface{{Name: "lo", Up: true, Loopback: true}, {Name: "eth0", Up: true}, {Name: "ib0"}}
	one(t, "iface missing", ruleIface("h", "hsn0", tcp, ifs), "iface fabric.iface FABRIC_IFACE", "does not exist", "lo, eth0")
	one(t, "iface down", ruleIface("h", "ib0", tcp, ifs), "iface fabric.iface FABRIC_IFACE", "is down")
	one(t, "iface up", ruleIface("h", "eth0", tcp, ifs), "")
	one(t, "iface of cxi is a domain", ruleIface("h", "cxi0", Pick{Provider: "cxi"}, ifs), "")
	one(t, "cpus short", ruleCPUs("h", Limits{CPUCount: 2, CPUs: "0-1"}, 2), "cpus loader.workers DDSTORE_LOADER_WORKERS", "set loader.workers to 1")
	one(t, "cpus enough", ruleCPUs("h", Limits{CPUCount: 2, CPUs: "0-1"}, 1), "")
	one(t, "probe timeout", ruleProbe("h", []Probe{{Name: "GPUs", Status: "timeout", Error: "no answer within 15s"}}), "probe_timeout  ", "GPUs")
	one(t, "probe failed", ruleProbe("h", []Probe{{Name: "GPUs", Status: "failed"}}), "")
}

// Tune: the engine's pick when it read correctly, never shm while a
// network provider reads; gather only where it measured faster; the
// interface of the default route for tcp.
func TestTune(t *testing.T) {
	rep := &Report{Host: "n1", Pick: Pick{Provider: "tcp;ofi_rxm", Domain: "eth0"},
		Interfaces: []Iface{{Name: "lo", Up: true, Loopback: true}, {Name: "eth0", Up: true, Route: true, MTU: 9000}},
		Limits:     Limits{CPUCount: 16}}
	rep.Providers = []Provider{{}}
	rep.Providers[0].Provider, rep.Providers[0].TxSize = "tcp;ofi_rxm", 64
	rep.Reads = []Reads{{Provider: "shm", BatchUsPerRow: 3}, {Provider: "tcp;ofi_rxm", BatchUsPerRow: 9, GatherUsPerRow: 2}}
	tu := Tune(rep)
	if tu.Provider != "tcp;ofi_rxm" || tu.Iface != "eth0" || tu.Window != 64 || tu.ReadMode != "auto" || tu.Workers != 2 || tu.GPU != "auto" {
		t.Errorf("%+v", tu)
	}
	rep.Reads[1].GatherUsPerRow = 20
	if tu := Tune(rep); tu.ReadMode != "rma" {
		t.Errorf("gather slower: mode %s", tu.ReadMode)
	}
	rep.Reads[1].Error = "failed"
	if tu := Tune(rep); tu.Provider != "shm" || tu.Iface != "" {
		t.Errorf("only shm reads: %+v", tu)
	}
	rep.GPUs = GPUs{Runtime: "cuda", Devices: []GPU{{}}}
	if tu := Tune(rep); tu.GPU != "cuda" {
		t.Errorf("gpu %s", tu.GPU)
	}
	if !strings.Contains(string(Tune(rep).Config(rep)), "provider: \"shm\"") {
		t.Error("config text lacks the provider")
	}
}

func TestCPUListAndBytes(t *testing.T) {
	if s := cpuList([]int{0, 1, 2, 3, 8, 10, 11}); s != "0-3,8,10-11" {
		t.Error(s)
	}
	for n, want := range map[int64]string{-1: "unlimited", 65536: "64 KiB", 8 << 20: "8 MiB", 1536: "1.5 KiB", 3: "3 B"} {
		if got := bytesStr(n); got != want {
			t.Errorf("bytesStr(%d) = %q, want %q", n, got, want)
		}
	}
}
