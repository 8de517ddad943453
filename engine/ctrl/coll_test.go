package ctrl

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fault"
)

// valueOf is rank r's element i: integer-valued, so every order of the
// sum gives the same exact result, which the test knows.
func intValueOf(r, i int) float32 { return float32((r*7+i*13)%1000 - 500) }

// fracValueOf has rounding: the bits depend on the order of the sum.
func fracValueOf(r, i int) float32 { return float32(math.Sin(float64(r*7919+i*104729))) * 1e3 }

func TestAllReduce(t *testing.T) {
	for _, c := range []struct{ world, ppn int }{{1, 1}, {3, 1}, {13, 2}, {37, 4}, {64, 8}} {
		for _, n := range []int{2, 100, 50000} { // 50 000 float32: above SmallBytes
			t.Run(fmt.Sprintf("world=%d,ppn=%d,n=%d", c.world, c.ppn, n), func(t *testing.T) {
				cl, errs := startCluster(t, c.world, c.ppn, fast, nil)
				if err := firstErr(errs); err != nil {
					t.Fatal(err)
				}
				// Exact: integer values.
				want := make([]float32, n)
				for r := 0; r < c.world; r++ {
					for i := range want {
						want[i] += intValueOf(r, i)
					}
				}
				res := make([][]float32, c.world)
				err := firstErr(cl.each(func(k *Ctrl) error {
					x := make([]float32, n)
					for i := range x {
						x[i] = intValueOf(k.Rank(), i)
					}
					res[k.Rank()] = x
					return k.AllReduceFloat32("int", x, 0)
				}))
				if err != nil {
					t.Fatal(err)
				}
				for r, x := range res {
					for i := range x {
						if x[i] != want[i] {
							t.Fatalf("rank %d element %d: %v, want %v", r, i, x[i], want[i])
						}
					}
				}
				// Bit-identical with rounding, and close to the float64 sum.
				err = firstErr(cl.each(func(k *Ctrl) error {
					x := make([]float32, n)
					for i := range x {
						x[i] = fracValueOf(k.Rank(), i)
					}
					res[k.Rank()] = x
					return k.AllReduceFloat32("frac", x, 0)
				}))
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < n; i++ {
					var s float64
					for r := 0; r < c.world; r++ {
						s += float64(fracValueOf(r, i))
					}
					if math.Abs(float64(res[0][i])-s) > 1e-3*float64(c.world) {
						t.Fatalf("element %d: %v, float64 sum %v", i, res[0][i], s)
					}
					for r := 1; r < c.world; r++ {
						if math.Float32bits(res[r][i]) != math.Float32bits(res[0][i]) {
							t.Fatalf("element %d: rank %d has %x, rank 0 %x", i, r, math.Float32bits(res[r][i]), math.Float32bits(res[0][i]))
						}
					}
				}
			})
		}
	}
}

// TestAllReduceRoundsAndMessages counts, for an 8-byte all-reduce, the
// agent-to-agent messages on the critical path and the messages each
// agent sends, against ⌈log2 nodes⌉+2 and 2⌈log2 nodes⌉+4.
func TestAllReduceRoundsAndMessages(t *testing.T) {
	for _, c := range []struct{ world, ppn int }{{16, 1}, {40, 4}, {100, 2}, {129, 1}} {
		cl, errs := startCluster(t, c.world, c.ppn, fast, nil)
		if err := firstErr(errs); err != nil {
			t.Fatal(err)
		}
		nodes := cl.lay.nodes
		run := func() {
			if err := firstErr(cl.each(func(k *Ctrl) error { return k.AllReduceFloat32("x", []float32{1, 2}, 0) })); err != nil {
				t.Fatal(err)
			}
		}
		run() // connects the partners
		before := make([]Stats, c.world)
		for i, k := range cl.ctrls {
			before[i] = k.Stats()
		}
		run()
		maxMsgs, maxRounds := 0, 0
		for i, k := range cl.ctrls {
			s := k.Stats()
			if k.Agent() {
				maxMsgs = max(maxMsgs, int(s.AgentMsgs-before[i].AgentMsgs))
			}
			maxRounds = max(maxRounds, s.Rounds)
		}
		t.Logf("world %d, %d per node, %d nodes: %d rounds (bound %d), at most %d messages per agent (bound %d)",
			c.world, c.ppn, nodes, maxRounds, CeilLog2(nodes)+2, maxMsgs, 2*CeilLog2(nodes)+4)
		if maxRounds != Rounds(nodes) || maxRounds > CeilLog2(nodes)+2 {
			t.Errorf("%d nodes: %d rounds on the critical path, want %d (bound %d)", nodes, maxRounds, Rounds(nodes), CeilLog2(nodes)+2)
		}
		if maxMsgs > 2*CeilLog2(nodes)+4 {
			t.Errorf("%d nodes: an agent sent %d messages", nodes, maxMsgs)
		}
		cl.close()
	}
}

func TestAllGatherBroadcastBarrier(t *testing.T) {
	cl, errs := startCluster(t, 23, 3, fast, nil) // 8 nodes, the last with 2 ranks
	if err := firstErr(errs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	errs = cl.each(func(k *Ctrl) error {
		got, err := k.AllGather("ag", []byte(fmt.Sprintf("rank-%d", k.Rank())), 0)
		if err != nil {
			return err
		}
		if len(got) != 23 {
			return fmt.Errorf("rank %d got %d blobs, want 23", k.Rank(), len(got))
		}
		for r, b := range got {
			if string(b) != fmt.Sprintf("rank-%d", r) {
				return fmt.Errorf("rank %d got %q for rank %d", k.Rank(), b, r)
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	cl.close()
	// A folded node needs 5 nodes of which 1 is excess: 10 ranks, 2 per node.
	cl, errs = startCluster(t, 10, 2, fast, nil)
	if err := firstErr(errs); err != nil {
		t.Fatal(err)
	}
	for _, root := range []int{0, 1, 3, 9} { // agent of a folded node, its plain rank, a partner's, the last
		err := firstErr(cl.each(func(k *Ctrl) error {
			var data []byte
			if k.Rank() == root {
				data = []byte(fmt.Sprintf("from %d", root))
			}
			got, err := k.Broadcast("b", root, data, 0)
			if err != nil {
				return err
			}
			if string(got) != fmt.Sprintf("from %d", root) {
				return fmt.Errorf("rank %d got %q from root %d", k.Rank(), got, root)
			}
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
	}
	// Barrier: nobody leaves before the last one enters.
	var entered, early int
	err := firstErr(cl.each(func(k *Ctrl) error {
		if k.Rank() == 7 {
			time.Sleep(200 * time.Millisecond)
		}
		mu.Lock()
		entered++
		mu.Unlock()
		if err := k.Barrier("b", 0); err != nil {
			return err
		}
		mu.Lock()
		if entered < 10 {
			early++
		}
		mu.Unlock()
		return nil
	}))
	if err != nil || early > 0 {
		t.Fatalf("barrier: %v, %d ranks left early", err, early)
	}
}

// TestMismatch: a rank that passes another tag, or another length, makes
// the collective fail on every rank with ErrMismatch naming a rank.
func TestMismatch(t *testing.T) {
	for _, odd := range []string{"tag", "len"} {
		cl, errs := startCluster(t, 12, 3, func(o *Options) { o.Timeout = 5 * time.Second }, nil)
		if err := firstErr(errs); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		res := cl.each(func(k *Ctrl) error {
			tag, x := "t", make([]float32, 4)
			if k.Rank() == 7 {
				if odd == "tag" {
					tag = "other"
				} else {
					x = make([]float32, 5)
				}
			}
			return k.AllReduceFloat32(tag, x, 0)
		})
		for r, err := range res {
			if !errors.Is(err, fault.ErrMismatch) {
				t.Fatalf("%s: rank %d: %v, want a mismatch", odd, r, err)
			}
		}
		if d := time.Since(t0); d > 3*time.Second {
			t.Fatalf("%s: mismatch found after %v", odd, d)
		}
		t.Logf("%s: rank 0: %v", odd, res[0])
		// Broken afterwards, naming the cause.
		if err := cl.rank(0).Barrier("after", time.Second); !errors.Is(err, fault.ErrClosed) {
			t.Fatalf("collective after a failure: %v", err)
		}
		cl.close()
	}
}
