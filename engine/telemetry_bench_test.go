package engine

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkTelemetryPaired is BenchmarkTelemetry's question, on ÷ off,
// asked so that a loaded machine answers it too: each b.N round reads
// pairBlock calls with the variable in telemetry and pairBlock out of it
// (the order alternates between rounds), timing each block by the
// thread's CPU time (time spent waiting for a core is not counted) and by
// wall time. Reported per sub-benchmark: on/off-cpu and on/off-wall, the
// medians of the per-round ratios, and on-off-ns, the median extra CPU ns
// a call. Run with -benchtime=<rounds>x, e.g.
//
//	go test ./engine -run '^$' -bench BenchmarkTelemetryPaired -benchtime 300x
func BenchmarkTelemetryPaired(b *testing.B) {
	const rb, pairBlock = telBenchRow, 64
	tb := startTelemetryBench(b)
	defer tb.close(b)
	for _, batch := range []int{1, 128} {
		idx, dst, read := tb.read(batch)
		b.Run(fmt.Sprintf("row=%d/batch=%d", rb, batch), func(b *testing.B) {
			runtime.LockOSThread() // thread CPU time is this goroutine's
			defer runtime.UnlockOSThread()
			block := func(on bool) (cpu, wall int64) {
				tb.telemetry(on)
				c0, w0 := threadCPU(b), monoNow(b)
				for range pairBlock {
					if err := read(); err != nil {
						b.Fatal(err)
					}
				}
				return threadCPU(b) - c0, monoNow(b) - w0
			}
			block(true) // warm up both paths
			block(false)
			var cpuR, wallR, delta []float64
			b.ResetTimer()
			for i := range b.N {
				var onC, onW, offC, offW int64
				if i%2 == 0 {
					onC, onW = block(true)
					offC, offW = block(false)
				} else {
					offC, offW = block(false)
					onC, onW = block(true)
				}
				if offC > 0 && offW > 0 {
					cpuR = append(cpuR, float64(onC)/float64(offC))
					wallR = append(wallR, float64(onW)/float64(offW))
					delta = append(delta, float64(onC-offC)/pairBlock)
				}
			}
			b.StopTimer()
			if err := checkRows(dst, rb, tb.spec.salt(0), idx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(median(cpuR), "on/off-cpu")
			b.ReportMetric(median(wallR), "on/off-wall")
			b.ReportMetric(median(delta), "on-off-ns")
		})
	}
}

func median(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := slices.Clone(x)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func threadCPU(b *testing.B) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return ts.Nano()
}

func monoNow(b *testing.B) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		b.Fatal(err)
	}
	return ts.Nano()
}
