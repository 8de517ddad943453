package gpu

import (
	"fmt"
	"github.com/ddstore/ddstore/gpu/gputest"
	"os"
	"strconv"
	"testing"
)

// A backend is what a behaviour test runs against: the stand-in CUDA and
// HIP libraries built by package gputest (always), and the real driver when
// DDSTORE_GPU_REAL=1 (examples/gpu/check.sh). The stand-ins are only ever
// named here: Open without Options.Libraries loads the real
// sonames.
type backend struct {
	name    string
	opts    Options
	standin bool
}

var (
	built    gputest.Standins // the stand-in libraries
	backends []backend
)

// realGPU: run the behaviour tests against the real driver as well.
func realGPU() bool { return os.Getenv("DDSTORE_GPU_REAL") == "1" }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ddstore-gpu-standin-")
	if err == nil {
		built, err = gputest.Build(dir)
	}
	switch {
	case err == nil:
		backends = append(backends,
			backend{name: "standin-cuda", opts: standinOptions(CUDA, built.CUDA), standin: true},
			backend{name: "standin-hip", opts: standinOptions(HIP, built.HIP), standin: true})
	case realGPU():
		fmt.Fprintf(os.Stderr, "gpu: stand-in drivers not built (%v); running against the real driver only\n", err)
	default:
		fmt.Fprintf(os.Stderr, "gpu: cannot build the stand-in drivers: %v\n", err)
		os.Exit(1)
	}
	if realGPU() {
		idx, _ := strconv.Atoi(os.Getenv("DDSTORE_GPU_INDEX"))
		backends = append(backends, backend{name: "real", opts: Options{Runtime: Runtime(os.Getenv("DDSTORE_GPU_RUNTIME")), Index: idx}})
	}
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

func standinOptions(rt Runtime, lib string) Options {
	return Options{Runtime: rt, Libraries: []string{lib}, scratchBytes: 1 << 20}
}

// each runs f once per backend, as subtests named after them.
func each(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// standins runs f for the stand-in backends only.
func standins(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		if b.standin {
			t.Run(b.name, func(t *testing.T) { f(t, b) })
		}
	}
}

// open opens b's device (with changes to its options) and closes it when
// the test ends.
func (b backend) open(t testing.TB, change ...func(*Options)) *Device {
	t.Helper()
	o := b.opts
	for _, c := range change {
		c(&o)
	}
	d, err := Open(o)
	if err != nil {
		t.Fatalf("open %s: %v", b.name, err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close device: %v", err)
		}
	})
	return d
}

// closing registers c.Close to run (and be checked) when the test ends.
func closing[T interface{ Close() error }](t testing.TB, c T) T {
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close %T: %v", c, err)
		}
	})
	return c
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// patternByte is byte j of global row r: it differs between neighbouring
// rows and along a row, so a misplaced, shifted or stale byte shows.
func patternByte(r, j int) byte {
	x := uint32(r)*2654435761 ^ uint32(j)*40503
	return byte(x>>24) ^ byte(x>>11) ^ byte(j)
}

func fillRow(b []byte, r int) {
	for j := range b {
		b[j] = patternByte(r, j)
	}
}

// checkRows checks that b holds rows first, first+1, ... of rowSize bytes.
func checkRows(t testing.TB, what string, b []byte, first, rowSize int) {
	t.Helper()
	for i := 0; i*rowSize < len(b); i++ {
		row := b[i*rowSize : min((i+1)*rowSize, len(b))]
		for j, v := range row {
			if want := patternByte(first+i, j); v != want {
				t.Fatalf("%s: row %d byte %d = %#x, want %#x", what, first+i, j, v, want)
			}
		}
	}
}
