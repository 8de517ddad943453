package gpu

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// wantErr checks err's class and that its text names every fragment.
func wantErr(t *testing.T, what string, err, class error, fragments ...string) *Error {
	t.Helper()
	t.Logf("%s: %v", what, err)
	var e *Error
	if !errors.Is(err, class) || !errors.As(err, &e) {
		t.Fatalf("%s: %v, want %v", what, err, class)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Fatalf("%s: %q does not name %q", what, err, f)
		}
	}
	return e
}

func TestNoDriver(t *testing.T) {
	missing := []string{filepath.Join(t.TempDir(), "libcuda.so.1"), "/nonexistent/libcuda.so"}
	_, err := Open(Options{Runtime: CUDA, Libraries: missing})
	wantErr(t, "no CUDA library", err, ErrNoDriver, missing[0], missing[1], "install the NVIDIA driver")

	_, err = Open(Options{Runtime: HIP, Libraries: []string{"/nonexistent/libamdhip64.so"}})
	wantErr(t, "no HIP library", err, ErrNoDriver, "/nonexistent/libamdhip64.so", "ROCm")

	// Without the test option, the real sonames are tried; on a machine
	// without a GPU runtime the error names them all.
	if d, err := Open(Options{}); err == nil || !errors.Is(err, ErrNoDriver) {
		if err == nil {
			err = d.Close()
		}
		t.Skipf("a GPU runtime is installed here (Open: %v)", err)
	} else {
		wantErr(t, "no runtime at all", err, ErrNoDriver,
			"libcuda.so.1", "libcuda.so", "libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5",
			"install the NVIDIA driver", "install ROCm")
	}
}

func TestMissingSymbol(t *testing.T) {
	if built.Dir == "" {
		t.Skip("stand-ins not built")
	}
	lib := built.CUDANoSym
	_, err := Open(Options{Runtime: CUDA, Libraries: []string{lib}})
	wantErr(t, "driver without cuMemcpyHtoDAsync_v2", err, ErrNoDriver, lib, "missing symbol cuMemcpyHtoDAsync_v2", "too old")
}

func TestInitFailures(t *testing.T) {
	standins(t, func(t *testing.T, b backend) {
		initOp := map[Runtime]string{CUDA: "cuInit", HIP: "hipInit"}[b.opts.Runtime]
		t.Run("init error", func(t *testing.T) {
			t.Setenv("DDSTORE_STANDIN_INIT_ERROR", "35")
			_, err := Open(b.opts)
			e := wantErr(t, "init", err, ErrNoDriver, initOp, "error 35", "insufficient", b.opts.Libraries[0])
			if !errors.Is(err, ErrDriver) || e.Code != 35 || e.Op != initOp {
				t.Fatalf("init error: %+v", e)
			}
		})
		t.Run("no device", func(t *testing.T) {
			t.Setenv("DDSTORE_STANDIN_DEVICES", "0")
			_, err := Open(b.opts)
			wantErr(t, "zero devices", err, ErrNoDevice, initOp, "error 100", "device 0 requested", visibleVar(b.opts.Runtime))
		})
		t.Run("index out of range", func(t *testing.T) {
			t.Setenv("DDSTORE_STANDIN_DEVICES", "2")
			o := b.opts
			o.Index = 5
			_, err := Open(o)
			wantErr(t, "device 5 of 2", err, ErrNoDevice, "device 5 requested, 2 present", visibleVar(b.opts.Runtime))
			o.Index = 1
			d, err := Open(o)
			if err != nil {
				t.Fatalf("device 1 of 2: %v", err)
			}
			if d.Index != 1 || !strings.HasSuffix(d.PCIBusID, ":00.0") {
				t.Fatalf("device 1: %s", d)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			// WrapIndex: local rank 5 of a rank that sees 2 devices uses 1.
			o.Index, o.WrapIndex = 5, true
			if d, err = Open(o); err != nil || d.Index != 1 {
				t.Fatalf("device 5 of 2, wrapped: %v, %v", d, err)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
		})
		// Each call of the device's runtime, failed by the stand-in, is
		// named in the error (CUDA's name on CUDA, HIP's on HIP). (A failed
		// destroy is left out: the stand-in would keep the stream's queue
		// for the tests after this one.)
		t.Run("driver errors name the call", func(t *testing.T) {
			for _, c := range []struct {
				cu, hip string
				run     func(s *Stream, buf *Buffer) error
			}{
				{"cuMemcpyHtoDAsync_v2", "hipMemcpyHtoDAsync", func(s *Stream, buf *Buffer) error { return s.CopyIn(buf, 0, make([]byte, 64)) }},
				{"cuMemcpyDtoHAsync_v2", "hipMemcpyDtoHAsync", func(s *Stream, buf *Buffer) error { return s.ReadBack(make([]byte, 64), buf, 0) }},
				{"cuStreamSynchronize", "hipStreamSynchronize", func(s *Stream, _ *Buffer) error { return s.Close() }},
			} {
				name := map[Runtime]string{CUDA: c.cu, HIP: c.hip}[b.opts.Runtime]
				t.Setenv("DDSTORE_STANDIN_FAIL", name+":2")
				d := must[*Device](t)(Open(b.opts)) // its Close may fail too: the failure stays injected
				s := must[*Stream](t)(d.NewStream())
				buf := must[*Buffer](t)(d.Alloc(64))
				wantErr(t, name, c.run(s, buf), ErrDriver, name, "error 2")
				s.Close()
				buf.Free()
				d.Close()
			}
		})
		t.Run("driver error", func(t *testing.T) {
			alloc := map[Runtime]string{CUDA: "cuMemAlloc_v2", HIP: "hipMalloc"}[b.opts.Runtime]
			t.Setenv("DDSTORE_STANDIN_FAIL", alloc+":2")
			d := b.open(t)
			_, err := d.Alloc(4096)
			e := wantErr(t, "failing alloc", err, ErrOutOfMemory, alloc, "error 2: out of memory")
			if !errors.Is(err, ErrDriver) || e.Device != 0 || e.Runtime != b.opts.Runtime {
				t.Fatalf("alloc error: %+v", e)
			}
		})
	})
}

func TestMisuse(t *testing.T) {
	if _, err := Open(Options{Runtime: "opencl"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown runtime: %v", err)
	}
	if _, err := Open(Options{Index: -1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative index: %v", err)
	}
	standins(t, func(t *testing.T, b backend) {
		d, err := Open(b.opts)
		if err != nil {
			t.Fatal(err)
		}
		s := must[*Stream](t)(d.NewStream())
		ev := must[*Event](t)(d.NewEvent())
		buf := must[*Buffer](t)(d.Alloc(64))
		if err := errors.Join(buf.Free(), ev.Close(), s.Close()); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(); !errors.Is(err, ErrClosed) {
			t.Fatalf("sync of a closed stream: %v", err)
		}
		if err := ev.Record(nil); !errors.Is(err, ErrClosed) {
			t.Fatalf("record of a closed event: %v", err)
		}
		s2 := must[*Stream](t)(d.NewStream())
		if err := s2.WaitEvent(nil); !errors.Is(err, ErrInvalid) {
			t.Fatalf("wait on a nil event: %v", err)
		}
		if _, err := d.BusyDefaultStream(0); !errors.Is(err, ErrInvalid) {
			t.Fatalf("busy for 0: %v", err)
		}
		if err := errors.Join(s2.Close(), d.Close()); err != nil {
			t.Fatal(err)
		}
		if err := d.Sync(); !errors.Is(err, ErrClosed) {
			t.Fatalf("sync of a closed device: %v", err)
		}
		if _, err := d.Alloc(64); !errors.Is(err, ErrClosed) {
			t.Fatalf("alloc on a closed device: %v", err)
		}
		if err := d.Close(); err != nil {
			t.Fatalf("second close: %v", err)
		}
	})
}

func TestParseDevice(t *testing.T) {
	for _, c := range []struct {
		in  string
		rt  Runtime
		idx int
	}{{"cuda", CUDA, 0}, {"cuda:3", CUDA, 3}, {"hip:1", HIP, 1}, {"ROCm:2", HIP, 2}, {" cuda:0 ", CUDA, 0}} {
		rt, idx, err := ParseDevice(c.in)
		if err != nil || rt != c.rt || idx != c.idx {
			t.Errorf("ParseDevice(%q) = %s, %d, %v", c.in, rt, idx, err)
		}
	}
	for _, in := range []string{"", "gpu:0", "cuda:", "cuda:-1", "cuda:x", "hip:1:2"} {
		if _, _, err := ParseDevice(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseDevice(%q): %v, want ErrInvalid", in, err)
		}
	}
}
