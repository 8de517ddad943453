package mesh

// A peer's inbox: the frames its read loop received, waiting for the
// collective that takes them.

import (
	"sync"
	"time"
)

// inbox is one peer's queue of received data frames (single consumer).
// Frame bodies come from, and go back to, a small free list of the
// peer's own, so that a warm mesh receives without allocating (the
// store's hot-path allocation checks count every goroutine's mallocs).
type inbox struct {
	mu     sync.Mutex
	frames []frame // frames[head:] are queued
	head   int
	free   [][]byte
	err    error // set once the peer is gone
	wake   chan struct{}
}

const maxFree = 8

// buffer returns a body buffer of n bytes.
func (q *inbox) buffer(n int) []byte {
	q.mu.Lock()
	for i, b := range q.free {
		if cap(b) >= n {
			last := len(q.free) - 1
			q.free[i] = q.free[last]
			q.free[last] = nil
			q.free = q.free[:last]
			q.mu.Unlock()
			return b[:n]
		}
	}
	q.mu.Unlock()
	return make([]byte, n, max(n, 4<<10))
}

// recycle gives a consumed body back.
func (q *inbox) recycle(b []byte) {
	q.mu.Lock()
	if len(q.free) < maxFree && cap(b) <= 4<<20 {
		q.free = append(q.free, b)
	}
	q.mu.Unlock()
}

func (q *inbox) push(f frame) {
	q.mu.Lock()
	if q.head == len(q.frames) {
		q.frames, q.head = q.frames[:0], 0
	}
	q.frames = append(q.frames, f)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *inbox) fail(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pop returns the next frame or the peer's failure (status popOK), or
// popTimeout at timer, or popDeath when death is signalled first.
func (q *inbox) pop(timer <-chan time.Time, death <-chan struct{}) (frame, error, int) {
	for {
		q.mu.Lock()
		if q.head < len(q.frames) {
			f := q.frames[q.head]
			q.frames[q.head] = frame{}
			q.head++
			q.mu.Unlock()
			return f, nil, popOK
		}
		err := q.err
		q.mu.Unlock()
		if err != nil {
			return frame{}, err, popOK
		}
		select {
		case <-q.wake:
		case <-timer:
			return frame{}, nil, popTimeout
		case <-death:
			return frame{}, nil, popDeath
		}
	}
}

// findAbort returns the first queued abort frame of collective seq or an
// earlier one: its collective and body.
func (q *inbox) findAbort(seq uint64) (uint64, []byte, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, f := range q.frames[q.head:] {
		if f.abort && f.seq <= seq {
			return f.seq, f.body, true
		}
	}
	return 0, nil, false
}

func (q *inbox) hasFrames() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.head < len(q.frames)
}

func (q *inbox) ready() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.head < len(q.frames) || q.err != nil
}

const (
	popOK = iota
	popTimeout
	popDeath
)
