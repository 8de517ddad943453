package mesh

import (
	"sort"
	"sync"
	"testing"
	"time"
)

// meshUp times n in-process ranks from Listen to the last Connect
// returning, with secret (nil: no authentication), then closes them.
func meshUp(b *testing.B, n int, secret []byte) time.Duration {
	ms := make([]*Mesh, n)
	addrs := make([]Addr, n)
	start := time.Now()
	for r := range n {
		m, a, err := Listen(Options{Rank: r, World: n, Token: "tok", Secret: secret, Bind: "127.0.0.1", Timeout: 60 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		ms[r], addrs[r] = m, a
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = ms[r].Connect(addrs) }()
	}
	wg.Wait()
	d := time.Since(start)
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
	for _, m := range ms {
		m.Close()
	}
	return d
}

// BenchmarkMeshConnectAuthPaired: the mesh of 16 ranks (120 connections)
// with and without the handshake, alternating, one pair per iteration;
// it reports both medians and the median of the pairs' ratios.
//
//	go test -run '^$' -bench MeshConnectAuthPaired -benchtime 15x ./engine/mesh
func BenchmarkMeshConnectAuthPaired(b *testing.B) {
	const n = 16
	var auth, plain, ratio []float64
	i := 0
	for b.Loop() {
		var da, dp time.Duration
		if i%2 == 0 {
			da, dp = meshUp(b, n, testSecret), meshUp(b, n, nil)
		} else {
			dp, da = meshUp(b, n, nil), meshUp(b, n, testSecret)
		}
		i++
		auth, plain = append(auth, float64(da.Microseconds())/1e3), append(plain, float64(dp.Microseconds())/1e3)
		ratio = append(ratio, float64(da)/float64(dp))
	}
	med := func(x []float64) float64 { sort.Float64s(x); return x[len(x)/2] }
	b.ReportMetric(med(auth), "auth-ms")
	b.ReportMetric(med(plain), "plain-ms")
	b.ReportMetric(med(ratio), "ratio")
	b.ReportMetric(0, "ns/op")
}
