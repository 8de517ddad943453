package ui

import "time"

// Refresh pacing. bubbletea's renderer wakes ddtop on a ticker of its own
// (every 1/fps s, started just before Init) and writes the screen only at
// those ticks. A refresh on a timer of its own would wake the process a
// second time per frame; on a VM each wakeup costs more than a small
// refresh (the scheduler, the Go runtime's sysmon waking with it). So
// the renderer ticks at a rate the refresh interval is a multiple of, and
// every refresh is due exactly on one of its ticks: one wakeup serves
// both, and the frame a refresh draws is written at the next tick.

// minFPS keeps keys answered within 100 ms between refreshes.
const (
	minFPS = 10
	maxFPS = 120 // bubbletea's cap
	// unpacedFPS is the renderer's rate when no rate fits the interval.
	unpacedFPS = 20
)

// framesFor is the renderer's frame rate for a refresh interval: the
// smallest rate of at least minFPS frames a second whose frame period
// (bubbletea's time.Second/fps) divides interval, and true; unpacedFPS and
// false when no rate does up to unpacedFPS or the refresh rate, whichever
// is higher (refreshes then keep their own timer: pacing would wake ddtop
// more often than it saves).
func framesFor(interval time.Duration) (fps int, paced bool) {
	if interval <= 0 {
		return unpacedFPS, false
	}
	top := min(maxFPS, max(unpacedFPS, int((time.Second+interval-1)/interval)))
	for f := minFPS; f <= top; f++ {
		if p := time.Second / time.Duration(f); interval%p == 0 {
			return f, true
		}
	}
	return unpacedFPS, false
}

// nextRefresh is when the refresh after the one due at prev should run:
// prev + interval, moved up to the first renderer tick (anchor + k*frame)
// at or after it, and never before now (a refresh that ran late does not
// make the next ones bunch up). frame <= 0 means unpaced: now + interval.
func nextRefresh(anchor, prev, now time.Time, interval, frame time.Duration) time.Time {
	if frame <= 0 || prev.IsZero() {
		return now.Add(interval)
	}
	due := prev.Add(interval)
	if due.Before(now) {
		due = now
	}
	k := due.Sub(anchor) / frame
	t := anchor.Add(k * frame)
	if t.Before(due) {
		t = t.Add(frame)
	}
	return t
}
