package ui

import (
	"bytes"
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
	wait := func(what ...string) {
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
