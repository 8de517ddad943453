package engine

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ddstore/ddstore/configs"
)

// clearConfigEnv unsets every variable LoadConfig reads.
func clearConfigEnv(t *testing.T) {
	t.Helper()
	for _, env := range append([]string{"DDSTORE_CONFIG", "LMOD_SYSTEM_NAME", "NERSC_HOST"}, mapValues(configs.EnvVars())...) {
		t.Setenv(env, "")
		os.Unsetenv(env)
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func TestLoadConfigDefault(t *testing.T) {
	clearConfigEnv(t)
	c, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Machine.Name != "local" || c.Fabric.Provider != "tcp;ofi_rxm" || c.Fabric.Window != 128 ||
		c.Exchange.AlltoallMaxBytes != 2<<20 || !c.Reads.BatchGet || !c.Reads.ThreadReaders ||
		!c.Reads.FastCollate || c.Profile || c.Fabric.Timeout != 10*time.Second || c.Store.NodeMode != "auto" || c.Reads.Mode != "auto" {
		t.Fatalf("embedded default not as documented: %+v", c)
	}
	if !strings.Contains(c.Source, "embedded:local.yaml") {
		t.Fatalf("Source %q does not name the embedded default", c.Source)
	}
	o := c.StoreOptions()
	if o.Fabric.Provider != c.Fabric.Provider || o.Fabric.Domain != "" || o.Fabric.Window != 128 || o.Fabric.MaxPeers != 1024 ||
		o.NodeMode != "auto" || o.DisableTelemetry || o.TelemetryDir != "/dev/shm" || o.Bootstrap.Method != "auto" || o.ReadMode != ReadModeAuto ||
		o.Fabric.GatherMaxBytes != 2<<20 {
		t.Fatalf("StoreOptions mapping wrong: %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("StoreOptions of the default config do not validate: %v", err)
	}
}

func TestLoadConfigEnvOverrides(t *testing.T) {
	clearConfigEnv(t)
	t.Setenv("DDSTORE_BATCH_GET", "0")
	t.Setenv("DDSTORE_THREAD_READERS", "false")
	t.Setenv("DDSTORE_FAST_COLLATE", "0") // frontier.yaml says true
	t.Setenv("DDSTORE_PROFILE", "TRUE")
	t.Setenv("DDSTORE_FABRIC", "shm")
	t.Setenv("FABRIC_IFACE", "hsn0")
	t.Setenv("DDSTORE_ALLTOALL_MAX_BYTES", "8MiB")
	t.Setenv("DDSTORE_TELEMETRY", "0")
	t.Setenv("DDSTORE_TELEMETRY_DIR", "/tmp/x")
	t.Setenv("DDSTORE_FABRIC_TIMEOUT", "2.5")
	t.Setenv("DDSTORE_READ_MODE", "rma")
	c, err := LoadConfig("frontier")
	if err != nil {
		t.Fatal(err)
	}
	if c.Reads.BatchGet || c.Reads.ThreadReaders || c.Reads.FastCollate || !c.Profile ||
		c.Fabric.Provider != "shm" || c.Fabric.Iface != "hsn0" || c.Exchange.AlltoallMaxBytes != 8<<20 ||
		c.Telemetry.Enabled || c.Telemetry.Dir != "/tmp/x" || c.Fabric.Timeout != 2500*time.Millisecond || c.Reads.Mode != "rma" {
		t.Fatalf("env overrides not applied: %+v", c)
	}
	if !strings.Contains(c.Source, "DDSTORE_BATCH_GET") || !strings.Contains(c.Source, "embedded:frontier.yaml") {
		t.Fatalf("Source %q must name the file and the overriding variables", c.Source)
	}
	if o := c.StoreOptions(); o.Fabric.Domain != "hsn0" || !o.DisableTelemetry || o.ReadMode != ReadModeRMA { // shm: no hsn→cxi mapping
		t.Fatalf("StoreOptions ignores overrides: %+v", o)
	}
	lo := c.LoaderOptions([]string{"x"}, 32, 5)
	if lo.BatchGet || lo.ThreadReaders || lo.FastCollate || lo.Workers != 1 || lo.Prefetch != 2 || lo.BatchSize != 32 || lo.Seed != 5 {
		t.Fatalf("LoaderOptions mapping: %+v", lo)
	}
}

// exchange.alltoall_max_bytes caps the gather rounds: StoreOptions carries
// it as Fabric.GatherMaxBytes, from the file and from the environment.
func TestConfigAlltoallMaxBytesIsGatherRoundCap(t *testing.T) {
	clearConfigEnv(t)
	p := filepath.Join(t.TempDir(), "x.yaml")
	if err := os.WriteFile(p, []byte("exchange:\n  alltoall_max_bytes: 8MiB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if o := c.StoreOptions(); o.Fabric.GatherMaxBytes != 8<<20 {
		t.Fatalf("file 8MiB: Fabric.GatherMaxBytes %d, want %d", o.Fabric.GatherMaxBytes, 8<<20)
	} else if err := o.Validate(); err != nil {
		t.Fatalf("StoreOptions with 8 MiB rounds do not validate: %v", err)
	}
	t.Setenv("DDSTORE_ALLTOALL_MAX_BYTES", "65536")
	if c, err = LoadConfig(p); err != nil {
		t.Fatal(err)
	}
	if got := c.StoreOptions().Fabric.GatherMaxBytes; got != 65536 || !strings.Contains(c.Source, "DDSTORE_ALLTOALL_MAX_BYTES") {
		t.Fatalf("env 65536: Fabric.GatherMaxBytes %d (source %q), want 65536", got, c.Source)
	}
}

func TestFabricDomainMapsSlingshotNICs(t *testing.T) {
	for _, tc := range []struct{ provider, iface, want string }{
		{"cxi", "hsn0", "cxi0"},
		{"", "hsn3", "cxi3"},
		{"cxi", "cxi2", "cxi2"},
		{"tcp;ofi_rxm", "hsn0", "hsn0"},
		{"cxi", "hsnX", "hsnX"},
		{"cxi", "", ""},
	} {
		if got := fabricDomain(tc.provider, tc.iface); got != tc.want {
			t.Errorf("fabricDomain(%q, %q) = %q, want %q", tc.provider, tc.iface, got, tc.want)
		}
	}
	clearConfigEnv(t)
	t.Setenv("FABRIC_IFACE", "hsn1")
	c, err := LoadConfig("frontier")
	if err != nil {
		t.Fatal(err)
	}
	if d := c.StoreOptions().Fabric.Domain; d != "cxi1" {
		t.Fatalf("frontier with FABRIC_IFACE=hsn1: domain %q, want cxi1", d)
	}
}

// TestDefaultsAgree: the defaults live in one meaning. Options{} (the
// engine's and the fabric's documented defaults, filled by EnsureDefaults)
// and the embedded local.yaml mapped by StoreOptions must be the same
// Options, but for the provider, which local.yaml names ("tcp;ofi_rxm")
// where Options leaves the default order. A default changed in one place
// only fails here.
func TestDefaultsAgree(t *testing.T) {
	clearConfigEnv(t)
	c, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	fromYAML := c.StoreOptions()
	fromYAML.EnsureDefaults()
	fromYAML.Fabric.Provider = ""
	if d := DefaultOptions(); !reflect.DeepEqual(fromYAML, d) {
		t.Fatalf("local.yaml and Options{} disagree:\n yaml    %+v\n Options %+v", fromYAML, d)
	}
}
