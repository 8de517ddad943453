package engine

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkGetRanges is the Python binding's get_ranges goal in Go: 128
// packed records of 1–16 KB (a uint8 variable of one byte per row) owned
// by rank 1, read by rank 0 through the store's shared reader over
// tcp;ofi_rxm on lo: how=get is 128 Get calls, how=ranges one GetRanges
// call after another, how=ranges-after-gets one GetRanges right after the
// 128 Gets (the Python benchmark's pattern; only the GetRanges is timed).
// us/row is per record; every record of the last call is checked against
// its pattern.
//
//	go test ./engine -run '^$' -bench BenchmarkGetRanges
func BenchmarkGetRanges(b *testing.B) {
	spec := benchSpec(1)
	c := startBenchCluster(b, "tcp", true, []int64{spec.rowBytes})
	defer c.close(b)
	info, err := c.s.Query(spec.name)
	if err != nil {
		b.Fatal(err)
	}
	lo, hi := info.Shards[1], info.Shards[2]
	salt := spec.salt(0)
	// 128 records packed back to back in rank 1's shard, read in a random
	// order (the binding's benchmark: examples/torch/bench.py ranges).
	rng := rand.New(rand.NewSource(3))
	const records = 128
	starts, counts := make([]int64, records), make([]int64, records)
	at := lo
	var total int64
	for i := range counts {
		counts[i] = 1<<10 + rng.Int63n(15<<10)
		starts[i] = at
		at += counts[i]
		total += counts[i]
	}
	if at > hi {
		b.Fatalf("records end at row %d, past rank 1's shard [%d,%d)", at, lo, hi)
	}
	rng.Shuffle(records, func(i, j int) {
		starts[i], starts[j] = starts[j], starts[i]
		counts[i], counts[j] = counts[j], counts[i]
	})
	dst := make([]byte, total)
	check := func() error { return checkPacked(dst, salt, starts, counts) }
	gets := func() error {
		var at int64
		for i, s := range starts {
			if err := c.s.Get(spec.name, s, counts[i], dst[at:at+counts[i]]); err != nil {
				return err
			}
			at += counts[i]
		}
		return nil
	}
	for _, how := range []string{"get", "ranges", "ranges-after-gets"} {
		read := func() error { return c.s.GetRanges(spec.name, starts, counts, dst) }
		if how == "get" {
			read = gets
		}
		b.Run("how="+how, func(b *testing.B) {
			clear(dst)
			self, peer := cpuNs(os.Getpid()), cpuNs(c.peer.Process.Pid)
			defer func() {
				// CPU time per record of this process (the reader spins
				// while it waits, so this tracks the wall time) and of the
				// peer (the cost of serving).
				n := float64(b.N) * records
				b.ReportMetric(float64(cpuNs(os.Getpid())-self)/1e3/n, "cpu-us/row")
				b.ReportMetric(float64(cpuNs(c.peer.Process.Pid)-peer)/1e3/n, "peer-cpu-us/row")
			}()
			if how != "ranges-after-gets" {
				runRead(b, total/records, records, read, check)
				return
			}
			var spent time.Duration
			for i := 0; i < b.N; i++ {
				if err := gets(); err != nil {
					b.Fatal(err)
				}
				clear(dst) // the check below sees only what GetRanges wrote
				t := time.Now()
				if err := read(); err != nil {
					b.Fatal(err)
				}
				spent += time.Since(t)
			}
			b.ReportMetric(float64(spent.Nanoseconds())/1e3/float64(b.N)/records, "us/row")
			if err := check(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// checkPacked checks the records [starts[i], starts[i]+counts[i]) of a
// variable of one byte per row, packed one after the other in dst.
func checkPacked(dst []byte, salt uint64, starts, counts []int64) error {
	var at int64
	for i, s := range starts {
		if err := checkRows(dst[at:at+counts[i]], 1, salt, seqIdx(s, counts[i])); err != nil {
			return err
		}
		at += counts[i]
	}
	return nil
}

// cpuNs is the CPU time that the threads of process pid have run, from
// /proc/pid/task/*/schedstat (0 when unreadable).
func cpuNs(pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		var run int64
		if _, err := fmt.Sscan(string(b), &run); err == nil {
			sum += run
		}
	}
	return sum
}
