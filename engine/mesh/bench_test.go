package mesh

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// BenchmarkAllReduceFloat32 is the pair of the goal: the mesh's
// all-reduce of 800 KB on 4 ranks (goroutines of this process, over
// loopback TCP) against the same bytes through a plain TCP ring
// (reduce-scatter + all-gather over raw connections, float32 memory
// written and read as it is: no framing, no pipelining, no checks).
// "pair" alternates the two in every iteration, so that both see the same
// load, and reports the mesh's time per op, the ring's (ring-ns/op) and
// their ratio (x-tcp-ring); "tcp-ring" and "mesh" run each alone.
func BenchmarkAllReduceFloat32(b *testing.B) {
	const ranks, floats = 4, 200_000 // 800 KB
	setup := func(b *testing.B) ([]*ringRank, []*Mesh, [][]float32) {
		return plainRing(b, ranks), world(b, ranks, Options{Timeout: time.Minute}), vecs(ranks, floats)
	}
	ringOp := func(rings []*ringRank, xs [][]float32) {
		var wg sync.WaitGroup
		for r := range ranks {
			wg.Add(1)
			go func() { defer wg.Done(); rings[r].allReduce(xs[r]) }()
		}
		wg.Wait()
	}
	meshOp := func(b *testing.B, ms []*Mesh, xs [][]float32) {
		errs := each(ms, func(r int, m *Mesh) error { return m.AllReduceFloat32("bench", xs[r], 0) })
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("pair", func(b *testing.B) {
		rings, ms, xs := setup(b)
		b.SetBytes(4 * floats)
		b.ReportAllocs()
		b.ResetTimer()
		var tr, tm time.Duration
		for range b.N {
			t0 := time.Now()
			ringOp(rings, xs)
			t1 := time.Now()
			meshOp(b, ms, xs)
			tr, tm = tr+t1.Sub(t0), tm+time.Since(t1)
		}
		b.ReportMetric(float64(tm.Nanoseconds())/float64(b.N), "ns/op")
		b.ReportMetric(float64(tr.Nanoseconds())/float64(b.N), "ring-ns/op")
		b.ReportMetric(float64(tm)/float64(tr), "x-tcp-ring")
	})
	// alone times op by itself, b.N times.
	alone := func(b *testing.B, op func()) {
		b.SetBytes(4 * floats)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			op()
		}
	}
	b.Run("tcp-ring", func(b *testing.B) {
		rings, _, xs := setup(b)
		alone(b, func() { ringOp(rings, xs) })
	})
	b.Run("mesh", func(b *testing.B) {
		_, ms, xs := setup(b)
		alone(b, func() { meshOp(b, ms, xs) })
	})
}

// ringRank is one rank of the plain ring: a connection to the right
// neighbour and one from the left.
type ringRank struct {
	rank, n     int
	right, left net.Conn
	buf         []byte
}

func plainRing(b *testing.B, n int) []*ringRank {
	lns := make([]net.Listener, n)
	for r := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		lns[r] = ln
	}
	rs := make([]*ringRank, n)
	for r := range n {
		rs[r] = &ringRank{rank: r, n: n}
	}
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := lns[r].Accept()
			if err != nil {
				panic(err)
			}
			rs[r].left = c
		}()
	}
	for r := range n {
		c, err := net.Dial("tcp", lns[(r+1)%n].Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		rs[r].right = c
	}
	wg.Wait()
	b.Cleanup(func() {
		for r := range n {
			rs[r].right.Close()
			rs[r].left.Close()
			lns[r].Close()
		}
	})
	return rs
}

func (rr *ringRank) allReduce(x []float32) {
	n, me := rr.n, rr.rank
	seg := func(c int) (int, int) { return segment(c, n, len(x)) }
	if len(rr.buf) < 4*(len(x)/n+1) {
		rr.buf = make([]byte, 4*(len(x)/n+1))
	}
	for t := 0; t < 2*(n-1); t++ {
		sc := me - t
		rc := me - t - 1
		if t >= n-1 {
			sc, rc = me-(t-(n-1))+1, me-(t-(n-1))
		}
		slo, shi := seg(sc)
		done := make(chan struct{})
		go func() { rr.right.Write(f32bytes(x[slo:shi])); close(done) }()
		rlo, rhi := seg(rc)
		in := rr.buf[:4*(rhi-rlo)]
		io.ReadFull(rr.left, in)
		<-done
		src := unsafe.Slice((*float32)(unsafe.Pointer(&in[0])), rhi-rlo)
		if t < n-1 {
			for i, v := range src {
				x[rlo+i] += v
			}
		} else {
			copy(x[rlo:rhi], src)
		}
	}
}

func BenchmarkPiece(b *testing.B) {
	for _, pb := range []int{16 << 10, 64 << 10, 256 << 10, 1 << 20} {
		b.Run(fmt.Sprint(pb>>10, "KiB"), func(b *testing.B) {
			old := PieceBytes
			PieceBytes = pb
			defer func() { PieceBytes = old }()
			ms := world(b, 4, Options{Timeout: time.Minute})
			xs := vecs(4, 200_000)
			b.ResetTimer()
			for range b.N {
				each(ms, func(r int, m *Mesh) error { return m.AllReduceFloat32("bench", xs[r], 0) })
			}
		})
	}
}
