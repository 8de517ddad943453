package doctor

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ddstore/ddstore/gpu/gputest"
)

// TestProbeGPUs: the GPU probe against the stand-in CUDA driver with two
// devices reports each one's name, PCI id and memory (the stand-in's
// device d has 80 + d GiB), and the table shows them; a driver that does
// not load is a finding's input (NoLib), not a crash.
func TestProbeGPUs(t *testing.T) {
	// gputest.Build compiles with $CC, else gcc: only its absence skips;
	// a stand-in that does not build with a compiler present is a failure.
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) for the stand-in drivers: %v", cc, err)
	}
	libs, err := gputest.Build(t.TempDir())
	if err != nil {
		t.Fatalf("building the stand-in drivers with %s: %v", cc, err)
	}
	t.Setenv("DDSTORE_STANDIN_DEVICES", "2")
	g := probeGPUs("cuda", []string{libs.CUDA})
	if g.Error != "" || g.Runtime != "cuda" || len(g.Devices) != 2 {
		t.Fatalf("probe: %+v", g)
	}
	for i, d := range g.Devices {
		pci := []string{"0000:10:00.0", "0000:11:00.0"}[i]
		if d.Index != i || d.Name != "ddstore stand-in CUDA GPU" || d.PCI != pci || d.Memory != int64(80+i)<<30 {
			t.Errorf("device %d: %+v, want PCI %s and %d GiB", i, d, pci, 80+i)
		}
	}
	var out bytes.Buffer
	rep := &Report{GPUs: g}
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2, cuda driver", "80.0 GiB", "81.0 GiB", "0000:11:00.0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}

	g = probeGPUs("cuda", []string{t.TempDir() + "/libcuda.so.1"})
	if !g.NoLib || len(g.Devices) != 0 || !strings.Contains(g.Error, "libcuda.so.1") {
		t.Fatalf("missing driver: %+v", g)
	}
}
