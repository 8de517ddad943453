package configs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// clearEnv unsets every variable Load reads.
func clearEnv(t *testing.T) {
	t.Helper()
	vars := []string{"DDSTORE_CONFIG", "LMOD_SYSTEM_NAME", "NERSC_HOST"}
	for _, v := range EnvVars() {
		vars = append(vars, v)
	}
	for _, env := range vars {
		t.Setenv(env, "")
		os.Unsetenv(env)
	}
}

func TestLoadMachineDetection(t *testing.T) {
	for _, tc := range []struct{ env, val, want, provider string }{
		{"LMOD_SYSTEM_NAME", "frontier", "frontier", "cxi"},
		{"NERSC_HOST", "perlmutter", "perlmutter", "cxi"},
	} {
		clearEnv(t)
		t.Setenv(tc.env, tc.val)
		c, err := Load("")
		if err != nil {
			t.Fatal(err)
		}
		if c.Machine.Name != tc.want || c.Fabric.Provider != tc.provider || !strings.Contains(c.Source, "detected machine "+tc.want) {
			t.Fatalf("%s=%s: got machine %q provider %q source %q", tc.env, tc.val, c.Machine.Name, c.Fabric.Provider, c.Source)
		}
	}
	clearEnv(t)
	t.Setenv("LMOD_SYSTEM_NAME", "frontier")
	c, _ := Load("")
	if c.Machine.RanksPerNode != 8 || c.Machine.CoresPerRank != 7 || c.Machine.GPU != "rocm" {
		t.Fatalf("frontier layout: %+v", c.Machine)
	}
	clearEnv(t)
	t.Setenv("NERSC_HOST", "perlmutter")
	c, _ = Load("")
	if c.Machine.RanksPerNode != 4 || c.Machine.CoresPerRank != 32 || c.Machine.GPU != "cuda" {
		t.Fatalf("perlmutter layout: %+v", c.Machine)
	}
}

func TestLoadOrder(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "mine.yaml")
	if err := os.WriteFile(p, []byte("fabric:\n  window: 7\nloader:\n  workers: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LMOD_SYSTEM_NAME", "frontier") // lower priority than DDSTORE_CONFIG and --config
	t.Setenv("DDSTORE_CONFIG", "perlmutter")
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Machine.Name != "perlmutter" || !strings.Contains(c.Source, "DDSTORE_CONFIG") {
		t.Fatalf("DDSTORE_CONFIG must win over detection: %q %q", c.Machine.Name, c.Source)
	}
	c, err = Load(p)
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

func TestLoadErrorsNameKeyAndSource(t *testing.T) {
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
		{"bad progress env", "", [2]string{"DDSTORE_FABRIC_PROGRESS", "busy"}, []string{"fabric.progress", "DDSTORE_FABRIC_PROGRESS"}},
		{"bad prefetch env", "", [2]string{"DDSTORE_LOADER_PREFETCH", "deep"}, []string{"loader.prefetch", "DDSTORE_LOADER_PREFETCH", "auto"}},
		{"negative prefetch file", write("p.yaml", "loader:\n  prefetch: -1\n"), [2]string{}, []string{"loader.prefetch", "p.yaml"}},
		{"missing file", filepath.Join(dir, "nope.yaml"), [2]string{}, []string{"nope.yaml"}},
		{"broken yaml", write("y.yaml", "fabric: [\n"), [2]string{}, []string{"y.yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			if tc.env[0] != "" {
				t.Setenv(tc.env[0], tc.env[1])
			}
			_, err := Load(tc.path)
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

// loader.prefetch takes a number or auto, from a file or the environment.
func TestPrefetchAuto(t *testing.T) {
	clearEnv(t)
	p := filepath.Join(t.TempDir(), "a.yaml")
	if err := os.WriteFile(p, []byte("loader:\n  prefetch: auto\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := Load(p); err != nil || c.Loader.Prefetch != PrefetchAuto {
		t.Fatalf("file auto: %d, %v", c.Loader.Prefetch, err)
	}
	t.Setenv("DDSTORE_LOADER_PREFETCH", " AUTO ")
	if c, err := Load(""); err != nil || c.Loader.Prefetch != PrefetchAuto {
		t.Fatalf("env auto: %d, %v", c.Loader.Prefetch, err)
	}
	t.Setenv("DDSTORE_LOADER_PREFETCH", "6")
	if c, err := Load(p); err != nil || c.Loader.Prefetch != 6 {
		t.Fatalf("env 6 over file auto: %d, %v", c.Loader.Prefetch, err)
	}
}

// Every key of every shipped file is documented with a comment line above it.
func TestFilesDocumentEveryKey(t *testing.T) {
	entries, err := FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 3 {
		t.Fatalf("want local, frontier, perlmutter; got %d files", len(entries))
	}
	for _, e := range entries {
		data, _ := FS.ReadFile(e.Name())
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
		clearEnv(t)
		if _, err := Load(strings.TrimSuffix(e.Name(), ".yaml")); err != nil {
			t.Errorf("%s: %v", e.Name(), err)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for _, s := range []string{"64MiB", "4096", "1K", "3G"} {
		n, err := ParseBytes(s)
		want := map[string]int64{"64MiB": 64 << 20, "4096": 4096, "1K": 1 << 10, "3G": 3 << 30}[s]
		if err != nil || n != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", s, n, err, want)
		}
	}
	for _, s := range []string{"8589934592GiB", "9223372036854775807K", "9223372036854775808", "-1", "1.5MiB"} {
		if n, err := ParseBytes(s); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", s, n)
		}
	}
}

// One boolean syntax: ParseBool, the environment and YAML agree.
func TestBooleansParseTheSameEverywhere(t *testing.T) {
	for _, c := range []struct {
		in   string
		want bool
	}{{"1", true}, {"true", true}, {"TRUE", true}, {"yes", true}, {" Yes ", true}, {"on", true}, {"ON", true},
		{"0", false}, {"false", false}, {"False", false}, {"no", false}, {"NO", false}, {"off", false}, {"Off", false}} {
		got, err := ParseBool(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseBool(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
		// The environment.
		clearEnv(t)
		t.Setenv("DDSTORE_PROFILE", c.in)
		cfg, err := Load("")
		if err != nil || cfg.Profile != c.want {
			t.Errorf("DDSTORE_PROFILE=%q: profile %v, %v; want %v", c.in, cfg.Profile, err, c.want)
		}
		// YAML, bare and quoted.
		clearEnv(t)
		for _, v := range []string{strings.TrimSpace(c.in), `"` + c.in + `"`} {
			p := filepath.Join(t.TempDir(), "b.yaml")
			if err := os.WriteFile(p, []byte("profile: "+v+"\nreads:\n  batch_get: "+v+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err = Load(p)
			if err != nil || cfg.Profile != c.want || cfg.Reads.BatchGet != c.want {
				t.Errorf("YAML %s: profile %v batch_get %v, %v; want %v", v, cfg.Profile, cfg.Reads.BatchGet, err, c.want)
			}
		}
	}
	for _, bad := range []string{"", "2", "-1", "yess", "enable", "y", "n", "t"} {
		if _, err := ParseBool(bad); err == nil {
			t.Errorf("ParseBool(%q) accepted", bad)
		}
	}
}

// ddtop's keys are part of the schema: a machine file with a ddtop
// section is valid for the trainer too, and bad ddtop values name the key.
func TestDdtopSection(t *testing.T) {
	clearEnv(t)
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Ddtop.Interval.Seconds() != 1 || c.Ddtop.History != 300 || c.Ddtop.Job != "" || c.Ddtop.Nice != 19 {
		t.Fatalf("default ddtop section: %+v", c.Ddtop)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "m.yaml")
	body := "telemetry:\n  dir: /tmp/tel\nfabric:\n  window: 64\nddtop:\n  interval: 250ms\n  job: j7\n  nice: 5\n  history: 42\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err = Load(p); err != nil {
		t.Fatal(err)
	}
	if c.Ddtop.Interval.Milliseconds() != 250 || c.Ddtop.Job != "j7" || c.Ddtop.Nice != 5 || c.Ddtop.History != 42 ||
		c.Telemetry.Dir != "/tmp/tel" || c.Fabric.Window != 64 {
		t.Fatalf("ddtop and trainer keys of one file: %+v", c)
	}
	for k, v := range map[string]string{"interval": "10ms", "nice": "20", "history": "0"} {
		if err := os.WriteFile(p, []byte("ddtop:\n  "+k+": "+v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "ddtop."+k) {
			t.Errorf("ddtop.%s: %s: %v, want ErrConfig naming it", k, v, err)
		}
	}
}

// A machine name resolves to the embedded file from any directory; a
// name that is neither a file nor a machine lists the machines.
func TestMachineNameFromAnyDirectory(t *testing.T) {
	clearEnv(t)
	wd, _ := os.Getwd()
	t.Cleanup(func() { os.Chdir(wd) })
	if err := os.Chdir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"frontier", "frontier.yaml", "perlmutter", "local"} {
		c, err := Load(name)
		if err != nil || !strings.Contains(c.Source, "embedded:") || c.Machine.Name != strings.TrimSuffix(name, ".yaml") {
			t.Errorf("Load(%q): machine %q source %q, %v", name, c.Machine.Name, c.Source, err)
		}
	}
	_, err := Load("frontire")
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "frontire") || !strings.Contains(err.Error(), "frontier") {
		t.Fatalf("typo: %v, want an error naming it and the machines", err)
	}
}
