package engine

// The loader's automatic prefetch depth (LoaderOptions.Prefetch ==
// PrefetchAuto): a pure decision, nextDepth, fed by the consumer every
// depthWindow batches with the timings it measured; Epoch applies its
// answer by adding or withholding prefetch tokens.

import "github.com/ddstore/ddstore/configs"

// PrefetchAuto as LoaderOptions.Prefetch lets the loader choose its depth
// from the fetch and step times it measures, between max(Workers, 1) and
// max(MaxAutoPrefetch, Workers).
const PrefetchAuto = configs.PrefetchAuto

// MaxAutoPrefetch is the deepest prefetch PrefetchAuto chooses (unless
// Workers is larger).
const MaxAutoPrefetch = 16

// Tuning of nextDepth.
const (
	depthWindow = 8   // batches per decision
	depthWait   = 100 // grow when wait > step/depthWait (1% of the step)
	depthCalm   = 4   // calm windows in a row before shrinking by one
	depthStall  = 4   // a batch that waited > 1/depthStall of the window's step ends it
)

// windowDone reports whether the window w ends here: after depthWindow
// batches, or as soon as the consumer waited more than 1/depthStall of
// the window's step (a stall raises the depth before the next one, not
// up to depthWindow batches later, so the first epoch converges after its
// first stall). A window holds two batches at least: the batch after a
// stall gives the consumer's compute time.
func windowDone(w depthStats) bool {
	return w.Batches >= depthWindow || w.Batches >= 2 && w.WaitNs*depthStall > w.StepNs
}

// depthStats are the consumer's measurements over one window.
type depthStats struct {
	Batches    int
	WaitNs     int64 // consumer waiting inside Next
	StepNs     int64 // between Next returns (includes the wait)
	MaxFetchNs int64 // the slowest batch read of the window (worker time)
}

// depthState is nextDepth's state: the depth in use, its bounds, and how
// many calm windows came in a row.
type depthState struct {
	Depth, Lo, Hi int
	Calm          int
}

// nextDepth returns the state after a window. The depth that hides a
// fetch is the number of consumer steps the slowest fetch spans, plus
// the batch being consumed: ceil(maxFetch / compute) + 1, where compute
// is the consumer's own time per step (step minus wait). When the
// consumer waited more than 1% of its step, the depth rises at once to
// that need (at least by one); when it did not, and the need has been
// below the depth for depthCalm windows in a row, it falls by one, so a
// stall that comes back now and then keeps the depth that hides it.
// Always within [Lo, Hi].
func nextDepth(s depthState, w depthStats) depthState {
	if w.Batches <= 0 || w.StepNs <= 0 {
		return s
	}
	compute := max((w.StepNs-w.WaitNs)/int64(w.Batches), 1)
	need := int((w.MaxFetchNs+compute-1)/compute) + 1
	if w.MaxFetchNs/compute > int64(s.Hi) { // no overflow on absurd timings
		need = s.Hi
	}
	switch {
	case w.WaitNs*depthWait > w.StepNs:
		s.Depth = max(need, s.Depth+1)
		s.Calm = 0
	case need < s.Depth:
		s.Calm++
		if s.Calm >= depthCalm {
			s.Depth--
			s.Calm = 0
		}
	default:
		s.Calm = 0
	}
	s.Depth = min(max(s.Depth, s.Lo), s.Hi)
	return s
}
