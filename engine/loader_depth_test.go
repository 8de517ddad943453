package engine

import (
	"testing"
	"time"
)

// win is a window of depthWindow batches with a per-batch compute time,
// a total wait and the slowest fetch.
func win(compute, wait, maxFetch time.Duration) depthStats {
	n := int64(depthWindow)
	return depthStats{Batches: depthWindow, WaitNs: int64(wait), StepNs: n*int64(compute) + int64(wait), MaxFetchNs: int64(maxFetch)}
}

func TestNextDepth(t *testing.T) {
	ms := time.Millisecond
	s0 := depthState{Depth: 2, Lo: 2, Hi: 16}
	cases := []struct {
		name string
		s    depthState
		w    depthStats
		want depthState
	}{
		// A 40 ms fetch behind 4 ms steps spans 10 steps: depth 11.
		{"wait grows to the need", s0, win(4*ms, 30*ms, 40*ms), depthState{11, 2, 16, 0}},
		// Waiting while the fetch looks fast still grows by one.
		{"wait grows by one at least", s0, win(4*ms, 30*ms, ms), depthState{3, 2, 16, 0}},
		{"need capped at Hi", s0, win(ms, 30*ms, time.Hour), depthState{16, 2, 16, 0}},
		{"at Hi stays", depthState{16, 2, 16, 0}, win(ms, 30*ms, time.Hour), depthState{16, 2, 16, 0}},
		// Waits under 1% of the step are noise.
		{"small wait ignored", s0, win(4*ms, 300*time.Microsecond, 40*ms), depthState{2, 2, 16, 0}},
		{"calm counts", depthState{11, 2, 16, 0}, win(4*ms, 0, ms), depthState{11, 2, 16, 1}},
		{"calm shrinks by one", depthState{11, 2, 16, depthCalm - 1}, win(4*ms, 0, ms), depthState{10, 2, 16, 0}},
		// A calm window whose slowest fetch still needs the depth resets.
		{"needed depth kept", depthState{11, 2, 16, 2}, win(4*ms, 0, 40*ms), depthState{11, 2, 16, 0}},
		{"never below Lo", depthState{4, 4, 16, depthCalm - 1}, win(4*ms, 0, 0), depthState{4, 4, 16, 0}},
		{"empty window", s0, depthStats{}, s0},
		// A consumer that only waits (compute 0) needs the most.
		{"no compute", s0, depthStats{Batches: 8, WaitNs: 80, StepNs: 80, MaxFetchNs: 1e6}, depthState{16, 2, 16, 0}},
	}
	for _, c := range cases {
		if got := nextDepth(c.s, c.w); got != c.want {
			t.Errorf("%s: nextDepth(%+v, %+v) = %+v, want %+v", c.name, c.s, c.w, got, c.want)
		}
	}
}

// A periodic stall: the depth climbs to what hides it within a window and
// stays there while the stall keeps coming back; once it stops, the depth
// falls back to Lo one step per depthCalm windows.
func TestNextDepthConverges(t *testing.T) {
	ms := time.Millisecond
	s := depthState{Depth: 2, Lo: 2, Hi: 16}
	for i := range 40 {
		w := win(4*ms, 0, ms)
		if i%3 == 0 { // a 40 ms stall every third window
			w = win(4*ms, 0, 40*ms)
			if s.Depth < 11 {
				w.WaitNs = int64(40*ms) - int64(s.Depth-1)*int64(4*ms)
				w.StepNs += w.WaitNs
			}
		}
		s = nextDepth(s, w)
		if i >= 1 && s.Depth != 11 {
			t.Fatalf("window %d: depth %d, want 11 while the stall recurs", i, s.Depth)
		}
	}
	for range 9 * depthCalm {
		s = nextDepth(s, win(4*ms, 0, ms))
	}
	if s.Depth != 2 {
		t.Fatalf("after the stall stopped: depth %d, want Lo 2", s.Depth)
	}
}

// A window ends after depthWindow batches, or early once the consumer
// waited a large share of the window's step (two batches at least: one
// alone gives no compute time; small waits do not end it).
func TestWindowDone(t *testing.T) {
	ms := int64(time.Millisecond)
	cases := []struct {
		name string
		w    depthStats
		want bool
	}{
		{"full window", depthStats{Batches: depthWindow, StepNs: 8 * 4 * ms}, true},
		{"calm, not full", depthStats{Batches: 3, StepNs: 3 * 4 * ms}, false},
		{"small wait", depthStats{Batches: 3, WaitNs: ms, StepNs: 12*ms + ms}, false},
		{"stall ends it", depthStats{Batches: 3, WaitNs: 30 * ms, StepNs: 8*ms + 30*ms}, true},
		{"stall on the first batch waits for a second", depthStats{Batches: 1, WaitNs: 30 * ms, StepNs: 34 * ms}, false},
		{"a quarter of the step is not yet a stall", depthStats{Batches: 4, WaitNs: 4 * ms, StepNs: 16 * ms}, false},
	}
	for _, c := range cases {
		if got := windowDone(c.w); got != c.want {
			t.Errorf("%s: windowDone(%+v) = %v, want %v", c.name, c.w, got, c.want)
		}
	}
}
