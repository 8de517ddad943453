package fabric

import (
	"errors"
	"strings"
	"testing"

	"github.com/ddstore/ddstore/fault"
)

// TestOptionsDefaults: the zero Options are the defaults; EnsureDefaults
// fills and Validate checks, separately.
func TestOptionsDefaults(t *testing.T) {
	var o Options
	if err := o.Validate(); err != nil {
		t.Fatalf("Options{} invalid: %v", err)
	}
	o.EnsureDefaults()
	want := Options{Window: DefaultWindow, Timeout: DefaultTimeout, MaxPeers: DefaultMaxPeers,
		GatherMaxBytes: DefaultGatherMaxBytes, GatherRounds: DefaultGatherRounds,
		Progress: DefaultProgress, ProgressWindow: DefaultProgressWindow}
	if o != want {
		t.Fatalf("EnsureDefaults: %+v, want %+v", o, want)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	set := Options{Window: 7, Timeout: 3, MaxPeers: 9, GatherMaxBytes: 8192, GatherRounds: 2, Progress: "spin", ProgressWindow: 9}
	if got := *set.EnsureDefaults(); got != (Options{Window: 7, Timeout: 3, MaxPeers: 9, GatherMaxBytes: 8192, GatherRounds: 2, Progress: "spin", ProgressWindow: 9}) {
		t.Fatalf("EnsureDefaults overwrote set fields: %+v", got)
	}
	if err := (Options{Progress: "busy"}).Validate(); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("Progress busy: %v", err)
	}
	bad := Options{Window: -1}
	bad.EnsureDefaults()
	if bad.Window != -1 || !errors.Is(bad.Validate(), fault.ErrInvalid) {
		t.Fatalf("EnsureDefaults must not hide a bad field from Validate: %+v %v", bad, bad.Validate())
	}
}

// TestCheckProvider: a provider this libfabric has passes; a typo fails
// with fault.ErrNoProvider listing the available ones.
func TestCheckProvider(t *testing.T) {
	if _, err := LibraryVersion(); err != nil {
		t.Skipf("libfabric not loadable: %v", err)
	}
	for _, p := range []string{"tcp", "tcp;ofi_rxm", "shm", ""} {
		if err := CheckProvider(p); err != nil {
			t.Errorf("CheckProvider(%q): %v", p, err)
		}
	}
	err := CheckProvider("tpc")
	if !errors.Is(err, fault.ErrNoProvider) || !strings.Contains(err.Error(), `"tpc"`) || !strings.Contains(err.Error(), "tcp;ofi_rxm") {
		t.Fatalf("CheckProvider(tpc): %v", err)
	}
	t.Log(err)
}
