package mesh

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/ddstore/ddstore/engine/ctrl"
	"github.com/ddstore/ddstore/internal/testkit"
)

var treePiece = flag.Int("tree.piece", 0, "BenchmarkTreeVsTCPRing: the tree ring's piece in bytes (ctrl.RingPieceBytes); 0: its default")

// BenchmarkTreeVsTCPRing is issue 27's goal at 4 ranks: the tree control
// plane's all-reduce of 800 KB (engine/ctrl AllReduceRingOrder, which the
// engine runs with store.control tree: one node of 4 ranks through shared
// memory, or 4 nodes of 1 over loopback TCP) against the plain TCP ring
// and the mesh, alternating in every iteration so that all three see the
// same load. Reports the tree's ns/op, ring-ns/op, mesh-ns/op and the
// ratios x-tcp-ring and x-mesh, and gather-ns/op: the tree's all-gather
// of 9 bytes alone (the all-reduce's length check, a fixed cost).
func BenchmarkTreeVsTCPRing(b *testing.B) {
	const ranks, floats = 4, 200_000 // 800 KB
	if *treePiece > 0 {
		old := ctrl.RingPieceBytes
		ctrl.RingPieceBytes = *treePiece
		b.Cleanup(func() { ctrl.RingPieceBytes = old })
	}
	for _, ppn := range []int{4, 1} {
		b.Run(fmt.Sprintf("nodes=%d", ranks/ppn), func(b *testing.B) {
			xs := vecs(ranks, floats)
			rings, ms, ts := plainRing(b, ranks), world(b, ranks, Options{Timeout: time.Minute}), treeWorld(b, ranks, ppn)
			par := func(f func(r int) error) {
				if err := errors.Join(testkit.Each(ranks, f)...); err != nil {
					b.Error(err)
				}
			}
			b.SetBytes(4 * floats)
			b.ResetTimer()
			var tt, tr, tm, tg time.Duration
			small := make([]byte, 9)
			for range b.N {
				t0 := time.Now()
				par(func(r int) error { return ts[r].AllReduceRingOrder("bench", xs[r], 0) })
				t1 := time.Now()
				par(func(r int) error { rings[r].allReduce(xs[r]); return nil })
				t2 := time.Now()
				par(func(r int) error { return ms[r].AllReduceFloat32("bench", xs[r], 0) })
				t3 := time.Now()
				par(func(r int) error { _, err := ts[r].AllGather("bench-len", small, 0); return err })
				tt, tr, tm, tg = tt+t1.Sub(t0), tr+t2.Sub(t1), tm+t3.Sub(t2), tg+time.Since(t3)
			}
			b.ReportMetric(float64(tg.Nanoseconds())/float64(b.N), "gather-ns/op")
			b.ReportMetric(float64(tt.Nanoseconds())/float64(b.N), "ns/op")
			b.ReportMetric(float64(tr.Nanoseconds())/float64(b.N), "ring-ns/op")
			b.ReportMetric(float64(tm.Nanoseconds())/float64(b.N), "mesh-ns/op")
			b.ReportMetric(float64(tt)/float64(tr), "x-tcp-ring")
			b.ReportMetric(float64(tt)/float64(tm), "x-mesh")
		})
	}
}

var treeJobs int

// treeWorld starts n ranks of the tree control plane, ppn per node.
func treeWorld(b *testing.B, n, ppn int) []*ctrl.Ctrl {
	nodes := n / ppn
	lns := make([]net.Listener, nodes)
	agents := make([]string, nodes)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		lns[i], agents[i] = ln, ln.Addr().String()
	}
	treeJobs++
	job := fmt.Sprintf("mb%d-%d", os.Getpid(), treeJobs)
	cs := make([]*ctrl.Ctrl, n)
	errs := testkit.Each(n, func(r int) error {
		o := ctrl.Options{Rank: r, World: n, Node: r / ppn, Nodes: nodes, LocalRank: r % ppn, LocalSize: ppn,
			Job: job, Token: "bench", Agents: agents, Timeout: time.Minute}
		if r%ppn == 0 && nodes > 1 {
			o.Listener = lns[r/ppn]
		}
		var err error
		cs[r], err = ctrl.Start(o)
		return err
	})
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
	b.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
		for _, ln := range lns {
			ln.Close()
		}
	})
	return cs
}
