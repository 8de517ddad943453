package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ddstore/ddstore/configs"
)

// clearConfigEnv unsets every variable LoadConfig reads.
func clearConfigEnv(t *testing.T) {
	t.Helper()
	for _, env := range append([]string{"DDSTORE_CONFIG", "LMOD_SYSTEM_NAME", "NERSC_HOST"}, mapValues(ConfigEnvVars())...) {
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
	if o.Fabric.Provider != c.Fabric.Provider || o.Fabric.Domain != "lo" || o.Fabric.Window != 128 ||
		o.NodeMode != "auto" || o.DisableTelemetry || o.TelemetryDir != "/dev/shm" || o.Bootstrap.Method != "auto" || o.ReadMode != ReadModeAuto ||
		o.Fabric.GatherMaxBytes != 2<<20 {
		t.Fatalf("StoreOptions mapping wrong: %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("StoreOptions of the default config do not validate: %v", err)
	}
}

func TestLoadConfigMachineDetection(t *testing.T) {
	for _, tc := range []struct{ env, val, want, provider string }{
		{"LMOD_SYSTEM_NAME", "frontier", "frontier", "cxi"},
		{"NERSC_HOST", "perlmutter", "perlmutter", "cxi"},
	} {
		clearConfigEnv(t)
		t.Setenv(tc.env, tc.val)
		c, err := LoadConfig("")
		if err != nil {
			t.Fatal(err)
		}
		if c.Machine.Name != tc.want || c.Fabric.Provider != tc.provider || !strings.Contains(c.Source, "detected machine "+tc.want) {
			t.Fatalf("%s=%s: got machine %q provider %q source %q", tc.env, tc.val, c.Machine.Name, c.Fabric.Provider, c.Source)
		}
	}
	clearConfigEnv(t)
	t.Setenv("LMOD_SYSTEM_NAME", "frontier")
	c, _ := LoadConfig("")
	if c.Machine.RanksPerNode != 8 || c.Machine.CoresPerRank != 7 || c.Machine.GPU != "rocm" {
		t.Fatalf("frontier layout: %+v", c.Machine)
	}
	clearConfigEnv(t)
	t.Setenv("NERSC_HOST", "perlmutter")
	c, _ = LoadConfig("")
	if c.Machine.RanksPerNode != 4 || c.Machine.CoresPerRank != 32 || c.Machine.GPU != "cuda" {
		t.Fatalf("perlmutter layout: %+v", c.Machine)
	}
}

func TestLoadConfigOrder(t *testing.T) {
	clearConfigEnv(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "mine.yaml")
	if err := os.WriteFile(p, []byte("fabric:\n  window: 7\nloader:\n  workers: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LMOD_SYSTEM_NAME", "frontier") // lower priority than DDSTORE_CONFIG and --config
	t.Setenv("DDSTORE_CONFIG", "perlmutter")
	c, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Machine.Name != "perlmutter" || !strings.Contains(c.Source, "DDSTORE_CONFIG") {
		t.Fatalf("DDSTORE_CONFIG must win over detection: %q %q", c.Machine.Name, c.Source)
	}
	c, err = LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Fabric.Window != 7 || c.Loader.Workers != 3 || !strings.Contains(c.Source, p) {
		t.Fatalf("--config file not used: %+v", c)
	}
	// keys missing from the file keep local.yaml's values
	if c.Fabric.Provider != "tcp;ofi_rxm" || c.Loader.Prefetch != 2 {
		t.Fatalf("missing keys must default to local.yaml: %+v", c)
	}
}

func TestLoadConfigEnvOverrides(t *testing.T) {
	clearConfigEnv(t)
	t.Setenv("DDSTORE_BATCH_GET", "0")
	t.Setenv("DDSTORE_THREAD_READERS", "false")
	t.Setenv("DDSTORE_FAST_COLLATE", "1")
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
	if c.Reads.BatchGet || c.Reads.ThreadReaders || !c.Reads.FastCollate || !c.Profile ||
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
	if lo.BatchGet || lo.ThreadReaders || !lo.FastCollate || lo.Workers != 1 || lo.Prefetch != 2 || lo.BatchSize != 32 || lo.Seed != 5 {
		t.Fatalf("LoaderOptions mapping: %+v", lo)
	}
}

func TestLoadConfigErrorsNameKeyAndSource(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path string
		env        [2]string
		want       []string
	}{
		{"bad bool env", "", [2]string{"DDSTORE_BATCH_GET", "yes please"}, []string{"reads.batch_get", "env DDSTORE_BATCH_GET", "yes please"}},
		{"bad int env", "", [2]string{"DDSTORE_FABRIC_WINDOW", "many"}, []string{"fabric.window", "env DDSTORE_FABRIC_WINDOW"}},
		{"bad bytes env", "", [2]string{"DDSTORE_ALLTOALL_MAX_BYTES", "2 parsecs"}, []string{"exchange.alltoall_max_bytes", "env DDSTORE_ALLTOALL_MAX_BYTES"}},
		{"bytes overflow env", "", [2]string{"DDSTORE_ALLTOALL_MAX_BYTES", "9000000000000GiB"}, []string{"exchange.alltoall_max_bytes", "env DDSTORE_ALLTOALL_MAX_BYTES", "overflows"}},
		{"bytes overflow digits", "", [2]string{"DDSTORE_ALLTOALL_MAX_BYTES", "99999999999999999999"}, []string{"exchange.alltoall_max_bytes", "env DDSTORE_ALLTOALL_MAX_BYTES", "overflows"}},
		{"bytes overflow file", write("o.yaml", "exchange:\n  alltoall_max_bytes: 8589934592GiB\n"), [2]string{}, []string{"exchange.alltoall_max_bytes", "o.yaml", "overflows"}},
		{"gather round too big", write("g.yaml", "exchange:\n  alltoall_max_bytes: 65MiB\n"), [2]string{}, []string{"exchange.alltoall_max_bytes", "g.yaml", "GatherMaxBytes"}},
		{"bad duration file", write("d.yaml", "fabric:\n  timeout: soon\n"), [2]string{}, []string{"fabric.timeout", "d.yaml"}},
		{"bad bool file", write("b.yaml", "profile: maybe\n"), [2]string{}, []string{"profile", "b.yaml"}},
		{"unknown key", write("u.yaml", "fabric:\n  windwo: 3\n"), [2]string{}, []string{"fabric.windwo", "u.yaml"}},
		{"bad node mode", write("n.yaml", "store:\n  node_mode: psychic\n"), [2]string{}, []string{"store.node_mode", "psychic", "n.yaml"}},
		{"bad read mode env", "", [2]string{"DDSTORE_READ_MODE", "telepathy"}, []string{"reads.mode", "telepathy"}},
		{"zero window env", "", [2]string{"DDSTORE_FABRIC_WINDOW", "0"}, []string{"fabric.window", "DDSTORE_FABRIC_WINDOW"}},
		{"missing file", filepath.Join(dir, "nope.yaml"), [2]string{}, []string{"nope.yaml"}},
		{"broken yaml", write("y.yaml", "fabric: [\n"), [2]string{}, []string{"y.yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearConfigEnv(t)
			if tc.env[0] != "" {
				t.Setenv(tc.env[0], tc.env[1])
			}
			_, err := LoadConfig(tc.path)
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// Every key of every shipped file is documented with a comment line above it.
func TestConfigFilesDocumentEveryKey(t *testing.T) {
	entries, err := configs.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 3 {
		t.Fatalf("want local, frontier, perlmutter; got %d files", len(entries))
	}
	for _, e := range entries {
		data, _ := configs.FS.ReadFile(e.Name())
		lines := strings.Split(string(data), "\n")
		for i, ln := range lines {
			tr := strings.TrimSpace(ln)
			if tr == "" || strings.HasPrefix(tr, "#") || strings.HasSuffix(tr, ":") {
				continue
			}
			if i == 0 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#") {
				t.Errorf("%s:%d: key %q has no comment", e.Name(), i+1, tr)
			}
		}
		clearConfigEnv(t)
		if _, err := LoadConfig(strings.TrimSuffix(e.Name(), ".yaml")); err != nil {
			t.Errorf("%s: %v", e.Name(), err)
		}
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
	for _, s := range []string{"64MiB", "4096", "1K", "3G"} {
		n, err := parseBytes(s)
		want := map[string]int64{"64MiB": 64 << 20, "4096": 4096, "1K": 1 << 10, "3G": 3 << 30}[s]
		if err != nil || n != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", s, n, err, want)
		}
	}
	for _, s := range []string{"8589934592GiB", "9223372036854775807K", "9223372036854775808", "-1", "1.5MiB"} {
		if n, err := parseBytes(s); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", s, n)
		}
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
