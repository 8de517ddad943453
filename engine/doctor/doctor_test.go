package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ddstore/ddstore/configs"
	"github.com/ddstore/ddstore/telemetry"
)

// The test binary re-executes itself as the read target.
func TestMain(m *testing.M) {
	if ok, code := ServeTargetArgs(os.Args); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// requireFabric: with DDSTORE_REQUIRE_FABRIC=1 (make test) a missing
// provider fails instead of skipping.
func requireFabric(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("DDSTORE_REQUIRE_FABRIC") == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

var (
	runOnce sync.Once
	runRep  *Report
	runErr  error
	runTook time.Duration
)

// report is one Run on the default config, shared by the tests.
func report(t *testing.T) *Report {
	t.Helper()
	runOnce.Do(func() {
		var progress bytes.Buffer
		t0 := time.Now()
		// A generous limit: the machine running the tests may be loaded;
		// the time goal (30 s) is measured in docs/BENCHMARKS.md.
		runRep, runErr = Run(Options{Progress: &progress, ProbeTimeout: 60 * time.Second})
		runTook = time.Since(t0)
		t.Logf("progress:\n%s", progress.String())
	})
	if runErr != nil {
		t.Fatal(runErr)
	}
	if !runRep.Library.Found {
		requireFabric(t, "no libfabric: %s", runRep.Library.Error)
	}
	return runRep
}

// One node: tcp and shm are listed and read between two real processes,
// every row checked; the pick is the config's provider; every probe
// reports; the table and the JSON carry it all.
func TestRunProbesTCPAndSHM(t *testing.T) {
	rep := report(t)
	if rep.Pick.Provider != "tcp;ofi_rxm" || rep.Pick.Error != "" || !strings.Contains(rep.Pick.Why, "asked for") {
		t.Errorf("pick %+v", rep.Pick)
	}
	got := map[string]Reads{}
	for _, r := range rep.Reads {
		got[r.Provider] = r
	}
	for _, p := range []string{"tcp;ofi_rxm", "shm"} {
		r, ok := got[p]
		if !ok {
			requireFabric(t, "%s not probed: %+v", p, rep.Reads)
		}
		if r.Error != "" || r.LatencyUs <= 0 || r.BatchUsPerRow <= 0 || r.BigRowGBps <= 0 || r.Rows < 1000 || r.Window != 128 {
			t.Errorf("%s: %+v", p, r)
		}
	}
	if got["tcp;ofi_rxm"].GatherUsPerRow <= 0 || got["shm"].GatherUsPerRow != 0 {
		t.Errorf("gather measured on tcp only: %+v", rep.Reads)
	}
	for _, p := range rep.Probes {
		if p.Status != "ok" {
			t.Errorf("probe %+v", p)
		}
	}
	var lo, fab bool
	for _, i := range rep.Interfaces {
		lo = lo || i.Loopback && i.Up && i.Name == "lo"
		fab = fab || i.Fabric && i.Name == rep.Pick.Domain
	}
	if !lo || !fab || rep.Limits.CPUCount < 1 || rep.Limits.ShmSize <= 0 {
		t.Errorf("interfaces %+v limits %+v", rep.Interfaces, rep.Limits)
	}
	var tb bytes.Buffer
	if err := rep.WriteTable(&tb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"libfabric " + rep.Library.Version, "engine's pick", "tcp;ofi_rxm", "shm", "memlock", "INTERFACE", "GPUs"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tb.String())
		}
	}
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Pick     Pick                `json:"pick"`
		Reads    []Reads             `json:"reads"`
		Findings []telemetry.Finding `json:"findings"`
	}
	if err := json.Unmarshal(data, &back); err != nil || back.Pick != rep.Pick || len(back.Reads) != len(rep.Reads) || back.Findings == nil {
		t.Errorf("JSON round trip: %v %+v", err, back)
	}
	t.Logf("took %v:\n%s", runTook, tb.String())
}

// The written config loads through configs.Load with what Tune decided.
func TestWriteConfigLoads(t *testing.T) {
	rep := report(t)
	path := filepath.Join(t.TempDir(), "machine.yaml")
	if err := rep.WriteConfig(path); err != nil {
		t.Fatal(err)
	}
	c, err := configs.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tu := Tune(rep)
	if c.Fabric.Provider != tu.Provider || c.Fabric.Iface != tu.Iface || c.Fabric.Window != tu.Window || c.Reads.Mode != tu.ReadMode ||
		c.Loader.Workers != tu.Workers || c.Loader.Prefetch != tu.Prefetch || c.Exchange.AlltoallMaxBytes != tu.GatherBytes ||
		c.Machine.Name != tu.Name || !strings.Contains(c.Source, path) {
		t.Errorf("loaded %+v\ntuned %+v", c, tu)
	}
	if c.Loader.Prefetch != configs.PrefetchAuto {
		t.Errorf("loader.prefetch %d, want auto (%d): the loader chooses from what it measures", c.Loader.Prefetch, configs.PrefetchAuto)
	}
	if c.Fabric.Provider != "tcp;ofi_rxm" {
		t.Errorf("provider %q: tcp read fine here and shm carries no reads across nodes", c.Fabric.Provider)
	}
}

// ReadCount: exactly that many rows for the single-read and 128-in-flight
// figures (as BenchmarkRead -test.benchtime=Nx), every row checked. With
// no time to spend (per 0) every other figure reads one batch, so two
// probes differ in rows checked by exactly twice the difference of their
// counts (both at most the probe's 128 slots, where every row read stays
// in place to be checked).
func TestReadCount(t *testing.T) {
	if testing.Short() {
		t.Skip("two-process test")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	counts := []int{100, 37}
	rows := make([]int64, len(counts))
	for i, n := range counts {
		r, err := probeReads(context.Background(), exe, "tcp;ofi_rxm", "lo", 0, n, nil)
		if err != nil {
			requireFabric(t, "tcp on lo: %v", err)
			t.Skip(err)
		}
		if r.LatencyUs <= 0 || r.BatchUsPerRow <= 0 || r.Rows < int64(2*n) {
			t.Fatalf("count %d: %+v", n, r)
		}
		rows[i] = r.Rows
		t.Logf("count %d: %d rows checked, single %.1f µs, batched %.2f µs/row", n, r.Rows, r.LatencyUs, r.BatchUsPerRow)
	}
	if got, want := rows[0]-rows[1], int64(2*(counts[0]-counts[1])); got != want {
		t.Fatalf("count %d checked %d rows, count %d %d: the counted figures differ by %d rows, want %d (2 × %d)",
			counts[0], rows[0], counts[1], rows[1], got, want, counts[0]-counts[1])
	}
}
