package ctrl

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ddstore/ddstore/engine/mesh"
	"github.com/ddstore/ddstore/internal/testkit"
)

// BenchmarkAllReduceVsMesh: 800 KB all-reduces of 4 ranks (goroutines of
// this process), this control plane (4 nodes of 1 rank: agents over
// loopback TCP; or 1 node of 4: unix sockets to the agent) against
// engine/mesh's pipelined TCP ring, alternating in every iteration so that
// both see the same load. Reports ctrl's ns/op, mesh-ns/op and their ratio
// (x-mesh).
func BenchmarkAllReduceVsMesh(b *testing.B) {
	const ranks, floats = 4, 200_000
	for _, ppn := range []int{1, 4} {
		name := map[int]string{1: "nodes=4", 4: "nodes=1"}[ppn]
		b.Run(name, func(b *testing.B) {
			cl, errs := startCluster(b, ranks, ppn, func(o *Options) { o.Timeout = time.Minute }, nil)
			if err := firstErr(errs); err != nil {
				b.Fatal(err)
			}
			ms := meshWorld(b, ranks)
			xs := make([][]float32, ranks)
			for r := range xs {
				xs[r] = make([]float32, floats)
				for i := range xs[r] {
					xs[r][i] = intValueOf(r, i)
				}
			}
			run := func(f func(r int) error) {
				if err := errors.Join(testkit.Each(ranks, f)...); err != nil {
					b.Error(err)
				}
			}
			b.SetBytes(4 * floats)
			b.ResetTimer()
			var tc, tm time.Duration
			for range b.N {
				t0 := time.Now()
				run(func(r int) error { return cl.rank(r).AllReduceFloat32("b", xs[r], 0) })
				t1 := time.Now()
				run(func(r int) error { return ms[r].AllReduceFloat32("b", xs[r], 0) })
				tc, tm = tc+t1.Sub(t0), tm+time.Since(t1)
			}
			b.ReportMetric(float64(tc.Nanoseconds())/float64(b.N), "ns/op")
			b.ReportMetric(float64(tm.Nanoseconds())/float64(b.N), "mesh-ns/op")
			b.ReportMetric(float64(tc)/float64(tm), "x-mesh")
		})
	}
}

func meshWorld(b *testing.B, n int) []*mesh.Mesh {
	ms := make([]*mesh.Mesh, n)
	addrs := make([]mesh.Addr, n)
	for r := range ms {
		m, a, err := mesh.Listen(mesh.Options{Rank: r, World: n, Token: "bench", Bind: "127.0.0.1", Timeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		ms[r], addrs[r] = m, a
	}
	if err := errors.Join(testkit.Each(n, func(r int) error { return ms[r].Connect(addrs) })...); err != nil {
		b.Error(err)
	}
	b.Cleanup(func() {
		for _, m := range ms {
			m.Close()
		}
	})
	return ms
}

// BenchmarkAllReduceRingOrder: 800 KB all-reduces of 4 ranks in the mesh
// ring's order (the store's all-reduce under store.control tree), with
// the allocations of the whole process per call (all 4 ranks): the agents'
// ring reuses its result buffer and the frame bodies, so this stays far
// below the 3.2 MB of one gathered vector set.
func BenchmarkAllReduceRingOrder(b *testing.B) {
	const ranks, floats = 4, 200_000
	for _, c := range []struct {
		ppn    int
		gather bool
	}{{1, false}, {1, true}, {2, false}, {4, false}} {
		name := fmt.Sprintf("nodes=%d", ranks/c.ppn)
		if c.gather {
			name += ",gather" // the path before the ring: every vector to every rank
		}
		b.Run(name, func(b *testing.B) {
			if c.gather {
				old := GatherBytes
				GatherBytes = 1 << 30
				defer func() { GatherBytes = old }()
			}
			cl, errs := startCluster(b, ranks, c.ppn, func(o *Options) { o.Timeout = time.Minute }, nil)
			if err := firstErr(errs); err != nil {
				b.Fatal(err)
			}
			xs := make([][]float32, ranks)
			for r := range xs {
				xs[r] = make([]float32, floats)
			}
			run := func() {
				if err := errors.Join(testkit.Each(ranks, func(r int) error { return cl.rank(r).AllReduceRingOrder("b", xs[r], 0) })...); err != nil {
					b.Fatal(err)
				}
			}
			run() // warm: links, buffers
			b.SetBytes(4 * floats)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				run()
			}
		})
	}
}
