package ui

import (
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/ddstore/ddstore/ui/data"
)

// noRecycle is a frame source that never reuses a frame's memory.
type noRecycle struct{ frameSource }

func (noRecycle) recycle(*data.Frame) {}

// smallTail is fx.model keeping 16 recent calls per rank: the tests'
// calls then retire call blocks, which recycling reuses.
func smallTail(fx *fixture) *Model {
	fx.t.Helper()
	m, err := New(Options{Dir: fx.dir, Now: fx.clk.now, Interval: 100 * time.Millisecond, Recent: 16})
	if err != nil {
		fx.t.Fatal(err)
	}
	fx.t.Cleanup(func() { m.Close() })
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 60})
	return m
}

// stable drops the lines that show wall-clock ages (two models draw them
// a moment apart).
func stable(view string) string {
	var keep []string
	for _, l := range strings.Split(view, "\n") {
		if !strings.Contains(l, "heartbeat") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// TestRecycleSameView runs two models over the same segments, one reusing
// each frame's memory once the next is shown and one not, and checks that
// they draw the same pages: the ranks view, the detail of a rank (with its
// recent calls, in blocks that retire and are reused) that then vanishes
// (its last contents kept), the variables and a variable by rank. It also
// checks that frames really are recycled.
func TestRecycleSameView(t *testing.T) {
	fx := newFixture(t)
	for r := range 4 {
		fx.rank(r, 4, "", 0, "x", "y")
	}
	recycling, plain := smallTail(fx), smallTail(fx)
	plain.src = noRecycle{plain.src}
	seen := map[*data.Rank]bool{}
	reused := 0
	step := func(k int) {
		t.Helper()
		for i := range fx.ws {
			if fx.ws[i] != nil {
				fx.record(i, []string{"x", "y"}[k%2], int32(k%3), 5+k%4+10*(k%3)+i)
			}
		}
		fx.clk.advance(100 * time.Millisecond)
		refresh(t, recycling)
		refresh(t, plain)
		for _, r := range recycling.Frame().Ranks {
			if seen[r] {
				reused++
			}
			seen[r] = true
		}
		if a, b := stable(recycling.View()), stable(plain.View()); a != b {
			t.Fatalf("refresh %d: the recycling model draws\n%s\nthe other\n%s", k, a, b)
		}
	}
	for k := range 6 {
		step(k)
	}
	press(recycling, "enter") // the detail of rank 0
	press(plain, "enter")
	for k := 6; k < 10; k++ {
		step(k)
	}
	fx.ws[0].Close() // rank 0 goes: the detail keeps its last contents
	fx.ws[0] = nil
	for k := 10; k < 16; k++ {
		step(k)
		if !strings.Contains(recycling.View(), "gone") {
			t.Fatalf("refresh %d: the vanished rank's detail is not marked gone:\n%s", k, recycling.View())
		}
	}
	press(recycling, "esc", "2", "enter") // the variables, then x by rank
	press(plain, "esc", "2", "enter")
	for k := 16; k < 20; k++ {
		step(k)
	}
	if reused == 0 {
		t.Fatal("no frame's ranks were reused")
	}
}

// TestRecycleRace polls in a goroutine, as the program does, while the
// model sorts its rows and scrolls a rank's detail over the frame it
// shows: under -race (make test) it fails if a poll reuses memory that
// the shown frame still uses.
func TestRecycleRace(t *testing.T) {
	fx := newFixture(t)
	for r := range 4 {
		fx.rank(r, 4, "", 0, "x", "y")
	}
	m := smallTail(fx)
	refresh(t, m)
	for k := range 40 {
		switch k {
		case 20:
			press(m, "enter") // the detail of the selected rank
		}
		for i := range fx.ws {
			fx.record(i, []string{"x", "y"}[k%2], int32(k%3), 3+k%4+40*(k%3))
		}
		fx.clk.advance(100 * time.Millisecond)
		polled := make(chan tea.Msg)
		poll := m.pollCmd()
		go func() { polled <- poll() }()
		if k < 20 {
			press(m, "s") // sorts by the next column: reads every row's figures
		} else {
			press(m, "down", "up") // draws the detail page again
		}
		_ = m.View()
		m.Update(<-polled)
		if m.err != nil {
			t.Fatal(m.err)
		}
	}
}
