package engine

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/ddstore/ddstore/engine/bootstrap"
	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/fault"
)

func TestDType(t *testing.T) {
	for d := Int32; d <= Bytes; d++ {
		p, err := ParseDType(d.String())
		if err != nil || p != d || d.Size() == 0 {
			t.Errorf("%v: parse %v %v size %d", d, p, err, d.Size())
		}
	}
	if _, err := ParseDType("complex128"); !errors.Is(err, ErrDType) {
		t.Errorf("ParseDType(complex128) = %v", err)
	}
	if DType(0).Valid() || DType(99).Size() != 0 {
		t.Error("invalid dtypes reported valid")
	}
}

func TestOptionsValidate(t *testing.T) {
	o := DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"", ReadModeAuto, ReadModeRMA, ReadModeGather} {
		o := DefaultOptions()
		o.ReadMode = m
		if err := o.Validate(); err != nil {
			t.Errorf("ReadMode %q: %v", m, err)
		}
		if o.EnsureDefaults(); m == "" && o.ReadMode != ReadModeAuto {
			t.Errorf(`ReadMode "" became %q, want auto`, o.ReadMode)
		}
	}
	// The zero value is valid and means the defaults: telemetry on,
	// /dev/shm, 60s, 128 reads in flight. Validate changes nothing.
	var zero Options
	if err := zero.Validate(); err != nil {
		t.Fatalf("Options{} invalid: %v", err)
	}
	if zero.Timeout != 0 || zero.NodeMode != "" {
		t.Fatalf("Validate changed the options: %+v", zero)
	}
	zero.EnsureDefaults()
	if zero.DisableTelemetry || zero.TelemetryDir != "/dev/shm" || zero.ShardDir != "/dev/shm" ||
		zero.Timeout != 60*time.Second || zero.Bootstrap.Timeout != 60*time.Second || zero.Fabric.Window != 128 ||
		zero.Fabric.Timeout != 10*time.Second || zero.NodeMode != NodeModeAuto || zero.ReadMode != ReadModeAuto ||
		zero.GPU.Sync != GPUSyncStream || zero.ProfileOutput == nil {
		t.Fatalf("EnsureDefaults of Options{}: %+v", zero)
	}
	// Set fields stay as set, also invalid ones (Validate reports them).
	set := Options{Timeout: time.Second, NodeMode: "cluster", TelemetryDir: "/tmp/x"}
	set.EnsureDefaults()
	if set.Timeout != time.Second || set.Bootstrap.Timeout != time.Second || set.NodeMode != "cluster" ||
		set.TelemetryDir != "/tmp/x" {
		t.Fatalf("EnsureDefaults changed set fields: %+v", set)
	}
	if err := set.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "NodeMode") {
		t.Fatalf("Validate of NodeMode cluster: %v", err)
	}
	// Each bad option is ErrInvalid naming the field and its value.
	for _, c := range []struct {
		set  func(*Options)
		want string
	}{
		{func(o *Options) { o.NodeMode = "cluster" }, `NodeMode "cluster"`},
		{func(o *Options) { o.Width = -1 }, "Width -1"},
		{func(o *Options) { o.Timeout = -time.Second }, "Timeout -1s"},
		{func(o *Options) { o.ReadMode = "osmosis" }, `ReadMode "osmosis"`},
		{func(o *Options) { o.Fabric.GatherMaxBytes = 100 }, "GatherMaxBytes 100"},
	} {
		o := DefaultOptions()
		c.set(&o)
		if err := wantInvalid(o.Validate(), c.want); err != nil {
			t.Error(err)
		}
	}
}

// wantInvalid returns nil when err is an ErrInvalid whose text names
// field (an option and its value), else an error saying what err was.
func wantInvalid(err error, field string) error {
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), field) {
		return fmt.Errorf("Validate: %v, want ErrInvalid naming %s", err, field)
	}
	return nil
}

// A bad named value is refused with a message naming the field, the value
// and every value it may take; "" (the default) and each named value pass.
func TestOptionsOneOf(t *testing.T) {
	for _, c := range []struct {
		set  func(*Options)
		want string
	}{
		{func(o *Options) { o.NodeMode = "cluster" }, `NodeMode "cluster": want "auto" or "fabric"`},
		{func(o *Options) { o.ReadMode = "osmosis" }, `ReadMode "osmosis": want "auto", "rma" or "gather"`},
		{func(o *Options) { o.GPU.Sync = "always" }, `GPU.Sync "always": want "stream" or "device"`},
		{func(o *Options) { o.GPU.Direct = "maybe" }, `GPU.Direct "maybe": want "auto", "on" or "off"`},
	} {
		o := DefaultOptions()
		c.set(&o)
		err := o.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate: %v, want ErrInvalid saying %s", err, c.want)
		}
	}
	for _, v := range []string{"", "a", "b", "c"} {
		if err := oneOf("F", v, "a", "b", "c"); err != nil {
			t.Errorf("oneOf(%q): %v", v, err)
		}
	}
	if err := oneOf("F", "x", "a"); err == nil || !strings.Contains(err.Error(), `F "x": want "a"`) {
		t.Errorf("oneOf of one value: %v", err)
	}
}

// TestSingleRank is an in-process store of one rank: the whole API on the
// mapped path, zero allocations, telemetry on.
func TestSingleRank(t *testing.T) {
	s, job := openSingleJob(t, "single")
	defer checkNoShardFiles(t, job)
	spec := varSpec{name: "x", dt: Int32, rowBytes: 40, base: 1000, emptyMember: -1}
	if err := addPattern(s, spec); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	if _, err := checkVar(s, s, spec, rng); err != nil {
		t.Fatal(err)
	}
	r, err := s.NewReader()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkVar(s, r, spec, rng); err != nil {
		t.Fatal(err)
	}
	if _, err := checkAllocs(s, s, spec, "store"); err != nil {
		t.Fatal(err)
	}
	if _, err := checkAllocs(s, r, spec, "reader"); err != nil {
		t.Fatal(err)
	}
	v, err := s.Var("x")
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 3*spec.rowBytes)
	if err := v.GetBatch([]int64{999, 0, 999}, dst); err != nil {
		t.Fatal(err)
	}
	if err := checkRows(dst, spec.rowBytes, spec.salt(0), []int64{999, 0, 999}); err != nil {
		t.Fatal(err)
	}
	if err := s.Free("x"); err != nil {
		t.Fatal(err)
	}
	if err := v.GetBatch([]int64{0}, dst); !errors.Is(err, ErrUnknownVar) {
		t.Errorf("freed handle: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.GetBatch("x", []int64{0}, dst); !errors.Is(err, ErrClosed) {
		t.Errorf("reader after Close: %v", err)
	}
}

// TestOptionsEnv: the documented environment overrides, applied before
// Validate; a boolean that is not one is an error naming the variable.
func TestOptionsEnv(t *testing.T) {
	for _, k := range []string{"DDSTORE_TELEMETRY", "DDSTORE_PROFILE", "DDSTORE_TELEMETRY_DIR", "DDSTORE_FABRIC", "FABRIC_IFACE"} {
		t.Setenv(k, "")
	}
	apply := func(edit func(*Options)) Options {
		t.Helper()
		o := DefaultOptions()
		if edit != nil {
			edit(&o)
		}
		if err := o.applyEnv(); err != nil {
			t.Fatal(err)
		}
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		return o
	}
	for _, c := range []struct {
		val string
		on  bool
	}{{"1", true}, {"TRUE", true}, {"On", true}, {"yes", true}, {" YES ", true},
		{"0", false}, {"false", false}, {"OFF", false}, {"No", false}} {
		t.Setenv("DDSTORE_PROFILE", c.val)
		if o := apply(func(o *Options) { o.Profile = !c.on }); o.Profile != c.on {
			t.Errorf("DDSTORE_PROFILE=%q: Profile %v", c.val, o.Profile)
		}
		t.Setenv("DDSTORE_TELEMETRY", c.val)
		// A false value turns telemetry off; a true one leaves the option.
		if o := apply(nil); o.DisableTelemetry == c.on {
			t.Errorf("DDSTORE_TELEMETRY=%q: DisableTelemetry %v", c.val, o.DisableTelemetry)
		}
		if o := apply(func(o *Options) { o.DisableTelemetry = true }); !o.DisableTelemetry {
			t.Errorf("DDSTORE_TELEMETRY=%q turned an explicit DisableTelemetry off", c.val)
		}
	}
	t.Setenv("DDSTORE_PROFILE", "")
	t.Setenv("DDSTORE_TELEMETRY", "")
	for _, k := range []string{"DDSTORE_TELEMETRY", "DDSTORE_PROFILE"} {
		for _, bad := range []string{"2", "yess", "enable", "-1"} {
			t.Setenv(k, bad)
			o := DefaultOptions()
			err := o.applyEnv()
			if err == nil || !strings.Contains(err.Error(), k) || !strings.Contains(err.Error(), bad) {
				t.Errorf("%s=%q: %v, want an error naming it", k, bad, err)
			}
			// Open refuses it before joining anyone.
			o = DefaultOptions()
			o.Bootstrap.Method = "single"
			o.Bootstrap.Env = bootstrap.Env{Rank: 0, World: 1, LocalWorld: 1, Launcher: "none", Job: testJob("env")}
			if s, err := Open(o); err == nil || !strings.Contains(err.Error(), k) {
				t.Errorf("Open with %s=%q: %v", k, bad, err)
				if s != nil {
					s.Close()
				}
			}
		}
		t.Setenv(k, "")
	}

	// Strings: empty fields and the default directory take the environment;
	// explicit values win.
	t.Setenv("DDSTORE_TELEMETRY_DIR", "/tmp/teldir")
	t.Setenv("DDSTORE_FABRIC", "tcp;ofi_rxm")
	t.Setenv("FABRIC_IFACE", "lo")
	o := apply(func(o *Options) { o.TelemetryDir = "" })
	if o.TelemetryDir != "/tmp/teldir" || o.Fabric.Provider != "tcp;ofi_rxm" || o.Fabric.Domain != "lo" {
		t.Errorf("environment not applied: dir %q provider %q domain %q", o.TelemetryDir, o.Fabric.Provider, o.Fabric.Domain)
	}
	if o := apply(nil); o.TelemetryDir != "/tmp/teldir" {
		t.Errorf("DDSTORE_TELEMETRY_DIR did not replace the default: %q", o.TelemetryDir)
	}
	o = apply(func(o *Options) { o.TelemetryDir, o.Fabric.Provider, o.Fabric.Domain = "/mine", "verbs", "mlx5_0" })
	if o.TelemetryDir != "/mine" || o.Fabric.Provider != "verbs" || o.Fabric.Domain != "mlx5_0" {
		t.Errorf("environment overrode explicit options: dir %q provider %q domain %q", o.TelemetryDir, o.Fabric.Provider, o.Fabric.Domain)
	}
}

// TestOpenUnknownProvider: a provider this libfabric lacks fails Open even
// when no rank needs the fabric (one rank, shared mapping only), from the
// option and from DDSTORE_FABRIC; a provider it has opens.
func TestOpenUnknownProvider(t *testing.T) {
	if _, err := fabric.LibraryVersion(); err != nil {
		skipOrRequire(t, "DDSTORE_REQUIRE_FABRIC", "libfabric not loadable: %v", err)
	}
	t.Setenv("DDSTORE_FABRIC", "")
	open := func(provider string) (*Store, error) {
		o := Options{TelemetryDir: t.TempDir()}
		o.Fabric.Provider = provider
		o.Bootstrap.Method = "single"
		o.Bootstrap.Env = bootstrap.Env{Rank: 0, World: 1, LocalWorld: 1, Launcher: "none", Job: testJob("prov")}
		return Open(o)
	}
	for _, p := range []string{"tcp", "shm"} {
		s, err := open(p)
		if err != nil {
			t.Fatalf("provider %q: %v", p, err)
		}
		s.Close()
	}
	for _, env := range []bool{false, true} {
		p := "tpc"
		if env {
			t.Setenv("DDSTORE_FABRIC", p)
			p = ""
		}
		s, err := open(p)
		if err == nil {
			s.Close()
			t.Fatalf("provider typo (env %v): Open succeeded", env)
		}
		if !errors.Is(err, fault.ErrNoProvider) || !strings.Contains(err.Error(), `"tpc"`) ||
			!strings.Contains(err.Error(), "DDSTORE_FABRIC") {
			t.Fatalf("provider typo (env %v): %v, want ErrNoProvider naming it", env, err)
		}
		t.Log(err)
	}
}
