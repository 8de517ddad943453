package ui

import (
	"testing"
	"time"
)

func TestFramesFor(t *testing.T) {
	for _, c := range []struct {
		interval time.Duration
		fps      int
		paced    bool
	}{
		{100 * time.Millisecond, 10, true},
		{50 * time.Millisecond, 20, true},
		{time.Second, 10, true},
		{200 * time.Millisecond, 10, true},
		{250 * time.Millisecond, 16, true},  // 62.5 ms frames, 4 a refresh
		{70 * time.Millisecond, 20, false},  // only 100 fps (10 ms) divides it
		{333 * time.Millisecond, 20, false}, // no period of 10..20 fps divides it
		{0, 20, false},
	} {
		fps, paced := framesFor(c.interval)
		if fps != c.fps || paced != c.paced {
			t.Errorf("framesFor(%v) = %d, %v; want %d, %v", c.interval, fps, paced, c.fps, c.paced)
		}
		if paced && c.interval%(time.Second/time.Duration(fps)) != 0 {
			t.Errorf("framesFor(%v) = %d fps: its frame does not divide the interval", c.interval, fps)
		}
	}
}

func TestNextRefresh(t *testing.T) {
	a := time.Unix(1000, 0)
	ms := func(n int) time.Time { return a.Add(time.Duration(n) * time.Millisecond) }
	const I, F = 100 * time.Millisecond, 100 * time.Millisecond
	for _, c := range []struct {
		name      string
		prev, now time.Time
		interval  time.Duration
		frame     time.Duration
		want      time.Time
	}{
		{"first refresh after Init", a, ms(3), I, F, ms(100)},
		{"on the grid, poll took 40 ms", ms(300), ms(340), I, F, ms(400)},
		{"resumed off the grid", ms(337), ms(338), I, F, ms(500)},
		{"ran late: no burst of catch-up refreshes", ms(300), ms(612), I, F, ms(700)},
		{"1 s interval on 100 ms frames", ms(1000), ms(1002), time.Second, F, ms(2000)},
		{"interval of 4 frames", ms(250), ms(260), 250 * time.Millisecond, 62500 * time.Microsecond, ms(500)},
		{"unpaced: interval after now", ms(300), ms(340), I, 0, ms(440)},
		{"not started: interval after now", time.Time{}, ms(340), I, F, ms(440)},
	} {
		got := nextRefresh(a, c.prev, c.now, c.interval, c.frame)
		if !got.Equal(c.want) {
			t.Errorf("%s: nextRefresh = +%v, want +%v", c.name, got.Sub(a), c.want.Sub(a))
		}
	}
}

// TestNextRefreshOnTicks: whatever the lateness, a paced refresh falls on
// a renderer tick, no earlier than an interval after the last one was due
// nor before now, and less than a frame after the later of the two.
func TestNextRefreshOnTicks(t *testing.T) {
	a := time.Unix(5000, 123)
	for _, interval := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, time.Second} {
		fps, paced := framesFor(interval)
		if !paced {
			t.Fatalf("%v not paced", interval)
		}
		frame := time.Second / time.Duration(fps)
		for prevOff := time.Duration(0); prevOff < 3*time.Second; prevOff += 7919 * time.Microsecond {
			for _, late := range []time.Duration{0, time.Millisecond, interval / 2, interval, 3*interval + 1} {
				prev, now := a.Add(prevOff), a.Add(prevOff+late)
				got := nextRefresh(a, prev, now, interval, frame)
				earliest := prev.Add(interval)
				if now.After(earliest) {
					earliest = now
				}
				if got.Sub(a)%frame != 0 || got.Before(earliest) || !got.Before(earliest.Add(frame)) {
					t.Fatalf("interval %v prev +%v now +%v: got +%v (frame %v)", interval, prevOff, prevOff+late, got.Sub(a), frame)
				}
			}
		}
	}
}
