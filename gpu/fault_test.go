package gpu_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/gpu"
)

// From outside the package: a missing driver is fault.ErrNoLibrary (and
// still gpu.ErrNoDriver, with the *gpu.Error's fields), a bad argument
// fault.ErrInvalid.
func TestErrorsHaveFaultClasses(t *testing.T) {
	_, err := gpu.Open(gpu.Options{Runtime: gpu.CUDA, Libraries: []string{filepath.Join(t.TempDir(), "libcuda.so.1")}})
	var ge *gpu.Error
	if !errors.Is(err, fault.ErrNoLibrary) || !errors.Is(err, gpu.ErrNoDriver) || !errors.As(err, &ge) || ge.Runtime != gpu.CUDA {
		t.Fatalf("no driver: %v (%#v), want fault.ErrNoLibrary and gpu.ErrNoDriver", err, ge)
	}
	if errors.Is(err, fault.ErrInvalid) || fault.CodeOf(err) != fault.CodeOther {
		t.Fatalf("no driver: %v matches another class (code %d)", err, fault.CodeOf(err))
	}
	_, err = gpu.Open(gpu.Options{Runtime: "opencl"})
	if !errors.Is(err, fault.ErrInvalid) || !errors.Is(err, gpu.ErrInvalid) || fault.CodeOf(err) != fault.CodeOf(fault.ErrInvalid) {
		t.Fatalf("unknown runtime: %v, want fault.ErrInvalid", err)
	}
}
