// Package gputest builds the stand-in GPU drivers that the tests of
// package gpu and of the engine's device path run against on machines
// without a GPU: a libcuda.so.1 and a libamdhip64.so, compiled with gcc
// from the C sources embedded here (csrc/), whose "device memory" is host
// memory and whose streams are queues drained by worker threads (see
// csrc/standin.h for the model and its knobs).
//
// Only tests use it: gpu.Options.Libraries (and the engine's
// GPUOptions.Libraries) point at the built files. Benchmarks and examples
// never do; they load the real driver.
package gputest

import (
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

//go:embed csrc/*.c csrc/*.h
var csrc embed.FS

// Standins are the paths of the built libraries.
type Standins struct {
	Dir       string // the directory they were built in
	CUDA      string // cuda/libcuda.so.1
	HIP       string // hip/libamdhip64.so
	CUDANoSym string // cuda-nosym/libcuda.so.1: lacks cuMemcpyHtoDAsync_v2 (a too-old driver)
}

// Build compiles the stand-ins into dir with gcc (or $CC); it needs only
// a C compiler and pthreads.
func Build(dir string) (Standins, error) {
	s := Standins{Dir: dir,
		CUDA:      filepath.Join(dir, "cuda", "libcuda.so.1"),
		HIP:       filepath.Join(dir, "hip", "libamdhip64.so"),
		CUDANoSym: filepath.Join(dir, "cuda-nosym", "libcuda.so.1"),
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return s, err
	}
	files, err := csrc.ReadDir("csrc")
	if err != nil {
		return s, err
	}
	for _, f := range files {
		b, err := csrc.ReadFile("csrc/" + f.Name())
		if err == nil {
			err = os.WriteFile(filepath.Join(src, f.Name()), b, 0o644)
		}
		if err != nil {
			return s, err
		}
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	builds := []struct{ out, src, def string }{
		{s.CUDA, "standin_cuda.c", ""},
		{s.CUDANoSym, "standin_cuda.c", "-DSTANDIN_OMIT_HTOD"},
		{s.HIP, "standin_hip.c", ""},
	}
	for _, b := range builds {
		if err := os.MkdirAll(filepath.Dir(b.out), 0o755); err != nil {
			return s, err
		}
		args := []string{"-shared", "-fPIC", "-O1", "-pthread", "-Wall", "-Werror", "-o", b.out, filepath.Join(src, b.src)}
		if b.def != "" {
			args = append(args, b.def)
		}
		if msg, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			return s, fmt.Errorf("gputest: %s %v: %v\n%s", cc, args, err, msg)
		}
	}
	return s, nil
}
