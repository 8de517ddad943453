package engine

// Benchmarks of the device read path, on the REAL GPU driver only (they
// skip without one; examples/gpu/check.sh runs them on a GPU machine):
//
//	BenchmarkGetDevice/path=<local|tcp>/row=<3072|12800|1048576>
//	    GetBatch of 128 of rank 1's rows through a Reader into host memory
//	    and into device memory, alternating call by call: host-us/row,
//	    gpu-us/row and their ratio gpu/host.
//	BenchmarkGPUSync/sync=<stream|device>
//	    gpu_sync per call (telemetry) of GetBatchDevice of 128 rows of
//	    3 KB, with the default stream idle and held busy for 2 ms per call
//	    (PTX spin kernel), alternating: idle-us, busy-us, busy/idle.
//
// DDSTORE_GPU_DEVICE picks the device (default auto). TestDeviceBenchmarksRun
// runs the same code against the stand-in driver to keep it working; its
// figures mean nothing and are never recorded.

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ddstore/ddstore/gpu"
	"github.com/ddstore/ddstore/telemetry"
)

// deviceBenchRows are the row sizes of the device÷host goals.
var deviceBenchRows = []int64{3072, 12800, 1048576}

// The device benchmarks' GPU settings, for side-by-side runs of one test
// binary (Open reads no DDSTORE_GPU_* variable; LoadConfig maps them).
var (
	benchGPUSpin  = flag.Duration("bench.gpu.spin", 0, "GPUOptions.SpinWait of device benchmarks (0: default, negative: never poll)")
	benchGPUStage = flag.Int("bench.gpu.stage", 0, "GPUOptions.StageBytes of device benchmarks (0: default)")
)

// benchGPUParams are the cluster parameters of a device benchmark: the real
// driver unless standin names a stand-in library.
func benchGPUParams(standin, sync string) map[string]string {
	p := map[string]string{"GPUDEV": os.Getenv("DDSTORE_GPU_DEVICE"), "GPUSYNC": sync, "STAGE": strconv.Itoa(*benchGPUStage),
		"GPUSPIN": benchGPUSpin.String()}
	if standin != "" {
		p["GPUDEV"], p["GPULIB"] = "cuda", standin
	}
	return p
}

// startGPUCluster starts a 2-rank cluster whose rank 0 has a GPU; it skips
// the benchmark when the driver or device is missing.
func startGPUCluster(b *testing.B, mode string, rows []int64, gp map[string]string) (*benchCluster, *gpu.Device) {
	c := startBenchClusterWith(b, mode, true, rows, gp)
	dev, err := c.s.Device()
	if err != nil {
		c.close(b)
		b.Skipf("no GPU: %v", err)
	}
	return c, dev
}

func BenchmarkGetDevice(b *testing.B) { benchGetDevice(b, "", deviceBenchRows) }

func benchGetDevice(b *testing.B, standin string, rows []int64) {
	for _, path := range []string{"local", "tcp"} {
		b.Run("path="+path, func(b *testing.B) {
			c, dev := startGPUCluster(b, path, rows, benchGPUParams(standin, GPUSyncStream))
			defer c.close(b)
			r, err := c.s.NewReader()
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			check, err := dev.NewStream()
			if err != nil {
				b.Fatal(err)
			}
			defer check.Close()
			const batch = 128
			for _, rb := range rows {
				spec := benchSpec(rb)
				idx := peerIdx(c, spec, batch)
				host := make([]byte, batch*rb)
				buf, err := dev.Alloc(int(batch * rb))
				if err != nil {
					b.Fatal(err)
				}
				b.Run(fmt.Sprintf("row=%d", rb), func(b *testing.B) {
					b.SetBytes(2 * batch * rb)
					b.ReportAllocs()
					var th, tg time.Duration
					step := func() error {
						t0 := time.Now()
						if err := r.GetBatch(spec.name, idx, host); err != nil {
							return err
						}
						t1 := time.Now()
						err := r.GetBatchDevice(spec.name, idx, buf, 0)
						th, tg = th+t1.Sub(t0), tg+time.Since(t1)
						return err
					}
					if err := step(); err != nil { // warm up: stream, staging, connections
						b.Fatal(err)
					}
					th, tg = 0, 0
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if err := step(); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					rowsRead := float64(b.N * batch)
					b.ReportMetric(float64(th.Nanoseconds())/1e3/rowsRead, "host-us/row")
					b.ReportMetric(float64(tg.Nanoseconds())/1e3/rowsRead, "gpu-us/row")
					b.ReportMetric(float64(tg)/float64(max(th, 1)), "gpu/host")
					benchReported(fmt.Sprintf("path=%s/row=%d gpu/host", path, rb), float64(tg)/float64(max(th, 1)))
					if err := check.ReadBack(host, buf, 0); err != nil {
						b.Fatal(err)
					}
					if err := checkRows(host, rb, spec.salt(0), idx); err != nil {
						b.Fatal(err)
					}
				})
				if err := buf.Free(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// gpuSyncBusyFor is how long the default stream is busy per call in
// BenchmarkGPUSync (the gpu package's BenchmarkSync uses the same).
const gpuSyncBusyFor = 2 * time.Millisecond

func BenchmarkGPUSync(b *testing.B) { benchGPUSync(b, "") }

func benchGPUSync(b *testing.B, standin string) {
	for _, mode := range []string{GPUSyncStream, GPUSyncDevice} {
		b.Run("sync="+mode, func(b *testing.B) {
			const rb, batch = 3072, 128
			c, dev := startGPUCluster(b, "tcp", []int64{rb}, benchGPUParams(standin, mode))
			defer c.close(b)
			r, err := c.s.NewReader()
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			spec := benchSpec(rb)
			idx := peerIdx(c, spec, batch)
			buf, err := dev.Alloc(batch * rb)
			if err != nil {
				b.Fatal(err)
			}
			defer buf.Free()
			// gpuSyncNs reads the reader's gpu_sync total from telemetry.
			gpuSyncNs := func() int64 {
				v, err := telemetrySnapshot(c.s, spec.name)
				if err != nil {
					b.Fatal(err)
				}
				return stripe(v, r.ID()).PhaseNs[telemetry.PhaseGPUSync]
			}
			call := func(busy bool) int64 {
				var bz *gpu.Busy
				if busy {
					if bz, err = dev.BusyDefaultStream(gpuSyncBusyFor); err != nil {
						b.Fatal(err)
					}
				}
				before := gpuSyncNs()
				if err := r.GetBatchDevice(spec.name, idx, buf, 0); err != nil {
					b.Fatal(err)
				}
				d := gpuSyncNs() - before
				if bz != nil {
					if err := bz.Wait(); err != nil { // the next call starts idle
						b.Fatal(err)
					}
				}
				return d
			}
			call(false)
			call(true)
			var idle, busy []int64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				idle = append(idle, call(false))
				busy = append(busy, call(true))
			}
			b.StopTimer()
			slices.Sort(idle)
			slices.Sort(busy)
			mi, mb := idle[len(idle)/2], busy[len(busy)/2]
			b.ReportMetric(float64(mi)/1e3, "idle-us")
			b.ReportMetric(float64(mb)/1e3, "busy-us")
			b.ReportMetric(float64(mb)/float64(max(mi, 1)), "busy/idle")
			benchReported("sync="+mode+" busy/idle", float64(mb)/float64(max(mi, 1)))
		})
	}
}

// benchReports collects, when not nil, the ratios the device benchmarks
// report (TestDeviceBenchmarksRun reads them).
var benchReports map[string]float64

func benchReported(key string, v float64) {
	if benchReports != nil {
		benchReports[key] = v
	}
}

// TestDeviceBenchmarksRun runs the device benchmarks' code, briefly,
// against the stand-in driver, so that it keeps working where no GPU is;
// the figures are not measurements of anything.
func TestDeviceBenchmarksRun(t *testing.T) {
	libs := standinLibs(t)
	benchReports = map[string]float64{}
	defer func() { benchReports = nil }()
	if bt := flag.Lookup("test.benchtime"); bt != nil { // a few iterations: this checks code, not speed
		old := bt.Value.String()
		if err := flag.Set("test.benchtime", "5x"); err == nil {
			defer flag.Set("test.benchtime", old)
		}
	}
	testing.Benchmark(func(b *testing.B) { benchGetDevice(b, libs.CUDA, []int64{3072, 70001}) })
	testing.Benchmark(func(b *testing.B) { benchGPUSync(b, libs.CUDA) })
	t.Logf("stand-in, not measurements: %v", benchReports)
	for _, k := range []string{"path=local/row=3072 gpu/host", "path=tcp/row=70001 gpu/host", "sync=stream busy/idle", "sync=device busy/idle"} {
		if benchReports[k] <= 0 {
			t.Errorf("no %s reported (the benchmark failed or skipped; run it with -test.v)", k)
		}
	}
}
