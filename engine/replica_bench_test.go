package engine

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func init() { scenarios["stall-bench"] = scenarioStallBench }

// scenarioStallBench: 4 ranks, width 2, fabric path. Rank 0 times
// GetBatch calls of 64 random rows for PHASE_S seconds with every rank
// healthy, then again while it holds rank 1 stopped (SIGSTOP), then
// resumes it; it writes the per-call latencies' p50 and p99 of both
// phases (µs) to TELDIR/stall.txt. The other ranks wait.
func scenarioStallBench(w *worker) error {
	spec := varSpec{name: "stall", dt: Bytes, rowBytes: 3072, base: 2000, emptyMember: -1}
	s, err := w.openSalted(spec, false)
	if err != nil {
		return err
	}
	if s.Rank() == 0 {
		r, err := s.NewReader()
		if err != nil {
			return err
		}
		info, _ := s.Query(spec.name)
		rng := rand.New(rand.NewSource(1))
		idx := make([]int64, 64)
		dst := make([]byte, 64*spec.rowBytes)
		phase := time.Duration(w.intParam("PHASE_S", 4)) * time.Second
		run := func() ([]time.Duration, error) {
			var lat []time.Duration
			for t0 := time.Now(); time.Since(t0) < phase; {
				for i := range idx {
					idx[i] = rng.Int63n(info.GlobalRows)
				}
				c0 := time.Now()
				if err := r.GetBatch(spec.name, idx, dst); err != nil {
					return nil, err
				}
				lat = append(lat, time.Since(c0))
				if err := checkRows(dst, spec.rowBytes, spec.salt(0), idx); err != nil {
					return nil, err
				}
			}
			slices.Sort(lat)
			return lat, nil
		}
		healthy, err := run()
		if err != nil {
			return err
		}
		pid := s.peers[1].Pid
		syscall.Kill(pid, syscall.SIGSTOP)
		stalled, err := run()
		syscall.Kill(pid, syscall.SIGCONT)
		if err != nil {
			return err
		}
		q := func(l []time.Duration, p float64) float64 { return float64(l[int(p*float64(len(l)-1))].Microseconds()) }
		out := fmt.Sprintf("%d %.0f %.0f %d %.0f %.0f %d", len(healthy), q(healthy, 0.5), q(healthy, 0.99),
			len(stalled), q(stalled, 0.5), q(stalled, 0.99), s.Failovers().From[1])
		if err := os.WriteFile(filepath.Join(w.param("TELDIR", ""), "stall.txt"), []byte(out), 0o600); err != nil {
			return err
		}
		r.Close()
	}
	return s.Close()
}

// BenchmarkStalledOwner: p99 GetBatch latency (64 rows of 3 KB, fabric
// path, width 2 of 4 ranks) with every owner healthy and with one owner
// stopped (SIGSTOP), side by side in one job. Goal: stalled p99 ≤
// failover deadline + 2 × healthy p99. Metrics: healthy and stalled p50
// and p99 in µs, the deadline, and stalled p99 ÷ (deadline + 2 × healthy
// p99), which the goal wants ≤ 1.
func BenchmarkStalledOwner(b *testing.B) {
	const after = 200 * time.Millisecond
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		spawnRanks(b, 4, "stall-bench", map[string]string{"MODE": "tcp", "WIDTH": "2", "TELDIR": dir, "PHASE_S": "4",
			"FAILOVER": after.String(), "RING_DEAD": "60s"}, 120*time.Second, nil)
		raw, err := os.ReadFile(filepath.Join(dir, "stall.txt"))
		if err != nil {
			b.Fatal(err)
		}
		var f [7]float64
		for k, x := range strings.Fields(string(raw)) {
			f[k], _ = strconv.ParseFloat(x, 64)
		}
		b.ReportMetric(f[1], "healthy-p50-µs")
		b.ReportMetric(f[2], "healthy-p99-µs")
		b.ReportMetric(f[4], "stalled-p50-µs")
		b.ReportMetric(f[5], "stalled-p99-µs")
		b.ReportMetric(float64(after.Microseconds()), "deadline-µs")
		b.ReportMetric(f[5]/(float64(after.Microseconds())+2*f[2]), "stalled-p99÷goal")
		b.ReportMetric(f[6], "rows-moved")
		b.Logf("calls: healthy %v, stalled %v", f[0], f[3])
	}
}
