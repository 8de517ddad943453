package ctrl

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// TestIdleAllocs: an idle control plane (heartbeats, pings, their
// answers) allocates nothing on the heap, so that the engine's
// allocation-free read paths stay so when measured process-wide
// (testing.AllocsPerRun counts every goroutine's mallocs).
func TestIdleAllocs(t *testing.T) {
	for _, ppn := range []int{1, 4} {
		t.Run(fmt.Sprintf("ppn=%d", ppn), func(t *testing.T) {
			cl, errs := startCluster(t, 4, ppn, func(o *Options) {
				o.Period, o.SuspectAfter, o.DeadAfter = 50*time.Millisecond, 500*time.Millisecond, time.Second
			}, nil)
			if err := firstErr(errs); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // ring links dialled, first timers made
			var a, b runtime.MemStats
			runtime.ReadMemStats(&a)
			time.Sleep(time.Second) // 20 periods: 80+ liveness messages
			runtime.ReadMemStats(&b)
			hb := uint64(0)
			for r := range 4 {
				hb += cl.rank(r).Stats().HBSent
			}
			if n := b.Mallocs - a.Mallocs; n > 10 {
				t.Fatalf("%d heap allocations in 1 s of idle liveness (%d liveness messages sent in all so far)", n, hb)
			}
		})
	}
}
