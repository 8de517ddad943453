package bootstrap

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fault"
)

// A second exchanger of a rank on a rendezvous that an open one holds
// fails at once, saying so and what to do instead; once the first is
// closed the rendezvous serves again.
func TestRendezvousHeldByOpenExchanger(t *testing.T) {
	clearLauncherEnv(t)
	for _, method := range []string{"tcp", "dir"} {
		o := Options{Method: method, Token: "t", Timeout: 10 * time.Second}
		if method == "tcp" {
			o.Addr = "127.0.0.1:" + freePort(t)
		} else {
			o.Dir = t.TempDir()
		}
		for round := range 2 {
			xs := connectAll(t, o, 2)
			for r := range 2 {
				oo := o
				oo.Env = Env{Rank: r, World: 2, Launcher: "test", Job: "inproc"}
				t0 := time.Now()
				_, err := Connect(oo)
				if !errors.Is(err, fault.ErrEnv) || !strings.Contains(err.Error(), "still open holds the "+method) ||
					!strings.Contains(err.Error(), "rendezvous of its own") || time.Since(t0) > 2*time.Second {
					t.Fatalf("%s round %d rank %d: second Connect after %v: %v", method, round, r, time.Since(t0), err)
				}
			}
			var wg sync.WaitGroup
			for _, x := range xs {
				wg.Add(1)
				go func() { defer wg.Done(); x.Close() }()
			}
			wg.Wait()
		}
	}
}
