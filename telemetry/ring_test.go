package telemetry

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRingTornStress: writers hammer 4-slot rings while a reader copies
// the slots about to be overwritten; every accepted record must pass its
// self-check, and every position is read or counted as dropped. "shared":
// two goroutines recording Concurrent calls into the shared ring (claim
// and lock); "lanes": two owned reader ids, each into its own lane ring
// (plain stores, seq odd while written).
func TestRingTornStress(t *testing.T) {
	for _, concurrent := range []bool{true, false} {
		name := map[bool]string{true: "shared", false: "lanes"}[concurrent]
		t.Run(name, func(t *testing.T) { ringTornStress(t, concurrent) })
	}
}

func ringTornStress(t *testing.T, concurrent bool) {
	w := newTestWriter(t, WriterOptions{MaxVars: 1, MaxReaders: 4, RingSize: 4, LaneRingSize: 4})
	id, _ := w.AddVar("x", "uint8", 3, 100, 100)
	s := openTest(t, w.Path())
	var stop atomic.Bool
	var wg sync.WaitGroup
	var calls atomic.Uint64
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c Call
			for i := int64(0); !stop.Load(); i++ {
				patternCall(&c, int32(id), int32(g), 1+(i*5+int64(g))%97, 3)
				c.Concurrent = concurrent
				w.Record(&c)
				calls.Add(1)
			}
		}()
	}
	buf := make([]Record, 2)
	var cursor, oldest RingCursor
	var read, dropped uint64
	start := time.Now()
	for d := time.Duration(0); d < 300*time.Millisecond || read < 100 && d < 3*time.Second; d = time.Since(start) {
		if err := s.TailRings(&oldest, 3); err != nil {
			t.Fatal(err)
		}
		for i := range s.Rings() {
			if cursor.Pos[i] < oldest.Pos[i] {
				dropped += oldest.Pos[i] - cursor.Pos[i]
				cursor.Pos[i] = oldest.Pos[i] // the oldest slots: the next to be overwritten
			}
		}
		n, d, err := s.ReadRings(&cursor, buf)
		if err != nil {
			t.Fatal(err)
		}
		for i := range buf[:n] {
			if msg := checkPatternRecord(&buf[i], 3); msg != "" {
				stop.Store(true)
				wg.Wait()
				t.Fatal(msg)
			}
		}
		read += uint64(n)
		dropped += d
	}
	stop.Store(true)
	wg.Wait()
	for {
		n, d, _ := s.ReadRings(&cursor, buf)
		read += uint64(n)
		dropped += d
		if n == 0 {
			break
		}
	}
	snap, _ := s.Snapshot()
	t.Logf("%d calls, ring: %d read, %d dropped, %d torn, %d claim fails", calls.Load(), read, dropped, s.Torn(), snap.RingClaimFails)
	if ringSum(&cursor) != calls.Load() || read+dropped != calls.Load() || snap.Total().Calls != int64(calls.Load()) {
		t.Fatalf("cursor %d, read %d + dropped %d, stripe calls %d; want all = %d", ringSum(&cursor), read, dropped, snap.Total().Calls, calls.Load())
	}
	if !concurrent && cursor.Pos[0] != 0 || concurrent && cursor.Pos[0] != calls.Load() {
		t.Fatalf("shared ring passed %d of %d calls (concurrent %v)", cursor.Pos[0], calls.Load(), concurrent)
	}
	if read == 0 {
		t.Fatal("read nothing")
	}
}

// TestCloseWhileRecording: Close racing with Record and RecordLoader must
// not fault (the mapping is swapped for anonymous memory, not unmapped).
func TestCloseWhileRecording(t *testing.T) {
	w, err := Create(WriterOptions{Dir: t.TempDir(), MaxVars: 1, MaxReaders: 2, RingSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := w.AddVar("x", "uint8", 1, 10, 10)
	var wg sync.WaitGroup
	var started sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			var c Call
			patternCall(&c, int32(id), int32(g), 5, 1)
			for i := 0; i < 200000; i++ {
				if i == 100 {
					started.Done()
				}
				w.Record(&c)
				w.RecordLoader(1, 2)
			}
		}()
	}
	started.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if _, err := Discover(filepath.Dir(w.Path())); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(w.Path()); !os.IsNotExist(err) {
		t.Fatalf("segment still there after Close: %v", err)
	}
	if _, err := w.AddVar("y", "uint8", 1, 1, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("AddVar after Close: %v", err)
	}
}

// TestRingSlotOwnership plays a stalled writer by hand to check the slot
// ownership rule deterministically: a writer never touches a slot that an
// older lap still holds, nor one a newer lap already took; it gives its
// position up instead (counted as dropped, never waited for), and the
// slot works again once its holder publishes.
func TestRingSlotOwnership(t *testing.T) {
	w := newTestWriter(t, WriterOptions{MaxVars: 1, MaxReaders: 2, RingSize: 4})
	id, _ := w.AddVar("x", "uint8", 1, 10, 10)
	s := openTest(t, w.Path())
	m, g := w.m, &w.g
	// callAt is the call the test records at ring position p: its rows
	// derive from p, so a record read back shows which call it is.
	callAt := func(p uint64) (c Call) {
		patternCall(&c, int32(id), 1, int64(3*p+1), 1) // the last stripe: the shared ring
		return c
	}
	var pos uint64 // the position the next claim takes, as the test counts
	record := func() {
		c := callAt(pos)
		w.Record(&c)
		pos++
	}
	buf := make([]Record, 8)
	// read wants positions cursor.. (n of them) read, then next and dropped.
	read := func(cursor uint64, wantN int, wantNext, wantDropped uint64) {
		t.Helper()
		n, next, dropped, err := s.ReadRing(cursor, buf)
		if err != nil || n != wantN || next != wantNext || dropped != wantDropped {
			t.Fatalf("ReadRing(%d) = %d, %d, %d, %v; want %d, %d, %d", cursor, n, next, dropped, err, wantN, wantNext, wantDropped)
		}
		for i := range buf[:n] {
			want := callAt(cursor + uint64(i))
			if buf[i].Seq != cursor+uint64(i) {
				t.Fatalf("ReadRing(%d): record %d has seq %d", cursor, i, buf[i].Seq)
			}
			if msg := checkRecordOf(&buf[i], &want, 1); msg != "" {
				t.Fatalf("position %d: %s", buf[i].Seq, msg)
			}
		}
	}
	claimFails := func() int64 {
		return snapshot(t, s).RingClaimFails
	}
	for range 4 {
		record() // positions 0..3
	}
	// A stalled writer claims position 4 (slot 0) and locks the slot.
	p := atomic.AddUint64(m.p(hRingHead), 1) - 1
	pos++
	slot := g.slot(p)
	if p != 4 || !m.cas(slot+rSeq, 2, 2*p+1) {
		t.Fatalf("manual claim of position %d failed (seq %d)", p, m.load(slot+rSeq))
	}
	for range 4 {
		record() // positions 5..8; 8 falls on the held slot
	}
	if seq := m.load(slot + rSeq); seq != 2*p+1 {
		t.Fatalf("slot held by position %d has seq %d: the next lap wrote into it", p, seq)
	}
	if got := claimFails(); got != 1 {
		t.Fatalf("ring claim fails %d, want 1", got)
	}
	read(5, 3, 9, 1) // 5, 6, 7 read; 8 given up, not waited for
	// The stalled writer publishes.
	m.store(slot+rSeq, 2*p+2)

	// A newer lap already owns the slot the next record falls on.
	head := m.load(hRingHead) // 9, slot 1
	next := g.slot(head)
	future := 2*(head+4) + 2
	m.store(next+rSeq, future)
	record() // position 9
	if seq := m.load(next + rSeq); seq != future {
		t.Fatalf("record overwrote a newer lap's slot: seq %d, want %d", seq, future)
	}
	if got := claimFails(); got != 2 {
		t.Fatalf("ring claim fails %d, want 2", got)
	}
	m.store(next+rSeq, 2*head+2) // undo, as if that lap had not happened

	// Both slots work again.
	for range 4 {
		record() // positions 10..13, on slots 2, 3, 0, 1
	}
	read(10, 4, 14, 0)
}
