package telemetry

import (
	"fmt"
	"sync/atomic"
	"testing"
)

func fmtAny(v any) string { return fmt.Sprintf("%+v", v) }

func atomicAdd32(p *int32) int32 { return atomic.AddInt32(p, 1) - 1 }

// ringSum is the sum of a cursor's positions: the records it has passed.
func ringSum(c *RingCursor) (n uint64) {
	for _, p := range c.Pos {
		n += p
	}
	return n
}

// ringHeads is the records recorded in all of s's rings so far.
func ringHeads(t testing.TB, s *Segment) uint64 {
	t.Helper()
	var c RingCursor
	if err := s.TailRings(&c, 0); err != nil {
		t.Fatal(err)
	}
	return ringSum(&c)
}
