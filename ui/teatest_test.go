package ui

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/teatest"
)

// The whole program at 100x30: it refreshes by itself, switches views,
// drills in, pauses and quits on q.
func TestProgram(t *testing.T) {
	fx := newFixture(t)
	fx.rank(0, 2, "alpha", 0, "images")
	fx.rank(1, 2, "beta", 0, "images", "labels")
	fx.record(0, "images", 0, 8)
	fx.record(1, "labels", 1, 3)
	m, err := New(Options{Dir: fx.dir, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(100, 30))
	wait := waiter(t, tm)
	wait("2 ranks: 2 live", "alpha", "beta", "PHASES")

	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("2")})
	wait("VARIABLE", "labels", "float32")

	tm.Send(tea.KeyMsg{Type: tea.KeyEnter}) // images by rank
	wait("variable images by rank")

	tm.Type("1")
	tm.Send(tea.KeyMsg{Type: tea.KeyDown})
	tm.Send(tea.KeyMsg{Type: tea.KeyEnter}) // detail of rank 1 (beta)
	wait("rank 1/2", "beta", "CALL LATENCY")
	tm.Send(tea.KeyMsg{Type: tea.KeyPgDown})
	wait("RECENT CALLS")

	tm.Type("p")
	wait("PAUSED")
	tm.Type("q")
	tm.WaitFinished(t, teatest.WithFinalTimeout(30*time.Second))
	final := tm.FinalModel(t).(*Model)
	if !final.paused || final.view != viewDetail || final.detail.rank == nil || final.detail.rank.Host != "beta" {
		t.Fatalf("final state: paused %v view %d rank %+v", final.paused, final.view, final.detail.rank)
	}
}

// waiter waits (up to 30 s) until the program's output has shown every
// string given.
func waiter(t *testing.T, tm *teatest.TestModel) func(what ...string) {
	return func(what ...string) {
		t.Helper()
		teatest.WaitFor(t, tm.Output(), func(b []byte) bool {
			for _, w := range what {
				if !bytes.Contains(b, []byte(w)) {
					return false
				}
			}
			return true
		}, teatest.WithDuration(30*time.Second), teatest.WithCheckInterval(10*time.Millisecond))
	}
}

// syncClock is a fake clock that the program's refreshes read while the
// test moves it.
type syncClock struct{ ns atomic.Int64 }

func (c *syncClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *syncClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// The whole program at 160x45 over issue 31's /dev/shm: the live job
// first with the cursor on it; once the poller's clock passes the grace
// period the exited ranks hide, X shows them again.
func TestProgramHidesExited(t *testing.T) {
	fx := pileUp(t)
	clk := &syncClock{}
	clk.advance(time.Duration(fx.clk.now().UnixNano()))
	m, err := New(Options{Dir: fx.dir, Interval: 50 * time.Millisecond, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(160, 45))
	wait := waiter(t, tm)
	wait("36 ranks: 4 live, 32 exited", "FINDINGS")
	clk.advance(DefaultExitedGrace)
	wait("36 ranks: 4 live, 32 exited (hidden; press X to show)", "32 exited ranks hidden (32 findings)")
	tm.Type("X")
	wait("(shown; press X to hide)")
	tm.Type("q")
	tm.WaitFinished(t, teatest.WithFinalTimeout(30*time.Second))
	final := tm.FinalModel(t).(*Model)
	if !final.exited.show || len(final.ranks.shown) != 36 {
		t.Fatalf("final: show %v, %d rows", final.exited.show, len(final.ranks.shown))
	}
	if r := final.ranks.selected(); r == nil || r.state != "live" || r.rank != 0 {
		t.Fatalf("final cursor on %+v", r)
	}
}
