package fabric

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ddstore/ddstore/fault"
)

// TestProbeDevice: the GPUDirect probe on this machine's providers. tcp
// does not offer FI_HMEM; Debian's shm offers it (built without CUDA or
// ROCm) but cannot register device memory. The probe must say no, naming
// the step and the provider; bad arguments are refused before any call.
func TestProbeDevice(t *testing.T) {
	// Host memory stands in for "device memory": a provider that could
	// register it as CUDA memory would be wrong about it.
	mem, err := unix.Mmap(-1, 0, 1<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	addr := uint64(uintptrOf(mem))
	for _, prov := range []string{"tcp;ofi_rxm", "shm"} {
		t.Run(prov, func(t *testing.T) {
			o := Options{Provider: prov}
			if prov != "shm" {
				o.Domain = "lo"
			}
			f := openOrSkip(t, o)
			r, err := f.NewReader()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for _, rt := range []string{"cuda", "hip"} {
				err := r.ProbeDevice(addr, len(mem), rt, 0)
				t.Logf("%s %s: %v", prov, rt, err)
				if err == nil {
					t.Fatalf("%s registered host memory as %s device memory", prov, rt)
				}
				// shm offers FI_HMEM when asked; its registration decides.
				step := map[string]string{"shm": "fi_mr_regattr of device memory"}[prov]
				if step == "" {
					step = "fi_getinfo with FI_HMEM"
				}
				if !strings.Contains(err.Error(), step) || !strings.Contains(err.Error(), f.Info().Provider) {
					t.Fatalf("probe error %q does not name the step %q and the provider", err, step)
				}
			}
			if err := r.ProbeDevice(addr, len(mem), "tpu", 0); !errors.Is(err, fault.ErrInvalid) {
				t.Fatalf("runtime tpu: %v, want fault.ErrInvalid", err)
			}
			if err := r.ProbeDevice(0, 10, "cuda", 0); !errors.Is(err, fault.ErrInvalid) {
				t.Fatalf("null address: %v, want fault.ErrInvalid", err)
			}
		})
	}
}
