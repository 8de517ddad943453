package ctrl

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fault"
)

func fast(o *Options) {
	o.Timeout = 20 * time.Second
}

func TestBootstrapTable(t *testing.T) {
	for _, c := range []struct{ world, ppn int }{{1, 1}, {2, 1}, {5, 2}, {37, 4}, {100, 16}} {
		t.Run(fmt.Sprintf("world=%d,ppn=%d", c.world, c.ppn), func(t *testing.T) {
			cl, errs := startCluster(t, c.world, c.ppn, fast, nil)
			if err := firstErr(errs); err != nil {
				t.Fatal(err)
			}
			if err := cl.checkTables(); err != nil {
				t.Fatal(err)
			}
			for _, r := range cl.ctrls {
				if s := r.Stats(); !r.Agent() && s.Conns != 1 {
					t.Fatalf("plain rank %d holds %d connections", r.Rank(), s.Conns)
				}
			}
		})
	}
}

// TestBootstrapNamesMissing: a plain rank and a whole node never start;
// every started rank fails by the deadline with ErrTimeout naming exactly
// the missing ranks.
func TestBootstrapNamesMissing(t *testing.T) {
	skip := map[int]bool{6: true, 12: true, 13: true, 14: true} // rank 6; node 3 (ranks 12-14)
	t0 := time.Now()
	_, errs := startCluster(t, 15, 4, func(o *Options) { o.Timeout = 5 * time.Second }, skip)
	took := time.Since(t0)
	for r, err := range errs {
		if skip[r] {
			continue
		}
		if !errors.Is(err, fault.ErrTimeout) {
			t.Fatalf("rank %d: %v, want a timeout", r, err)
		}
		if got := fault.RanksOf(err); fmt.Sprint(got) != "[6 12 13 14]" {
			t.Fatalf("rank %d names %v: %v", r, got, err)
		}
	}
	if took > 8*time.Second {
		t.Fatalf("bootstrap failure took %v (deadline 5s)", took)
	}
	t.Logf("rank 0: %v", errs[0])
}

func TestHandshakeHook(t *testing.T) {
	var calls atomic.Int64
	ok := func(o *Options) {
		fast(o)
		o.Handshake = func(c net.Conn, initiator bool) error { calls.Add(1); return nil }
	}
	cl, errs := startCluster(t, 12, 3, ok, nil)
	if err := firstErr(errs); err != nil {
		t.Fatal(err)
	}
	// 8 local links, 3 tree links: each runs the hook on both ends.
	if n := calls.Load(); n < 2*(8+3) {
		t.Fatalf("hook ran %d times", n)
	}
	cl.close()
	refuse := func(o *Options) {
		o.Timeout = 4 * time.Second
		o.Handshake = func(c net.Conn, initiator bool) error {
			if o.Rank == 5 {
				return errors.New("bad proof")
			}
			return nil
		}
	}
	_, errs = startCluster(t, 8, 4, refuse, nil)
	if !errors.Is(errs[5], fault.ErrToken) {
		t.Fatalf("rank 5 with a failing hook: %v", errs[5])
	}
	if !errors.Is(errs[0], fault.ErrTimeout) || fmt.Sprint(fault.RanksOf(errs[0])) != "[5]" {
		t.Fatalf("rank 0: %v", errs[0])
	}
}
