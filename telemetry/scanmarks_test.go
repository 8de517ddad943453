package telemetry

import (
	"encoding/binary"
	"os"
	"reflect"
	"testing"
)

// TestScanMarks checks the writer's scan marks (featScanMarks) and that a
// reader using them sees exactly what a full scan sees: a first call on a
// high reader id, the shared last stripe, a slot reused after RemoveVar,
// a file without the feature and marks a corrupt file set out of range.
func TestScanMarks(t *testing.T) {
	w := newTestWriter(t, WriterOptions{MaxVars: 8, MaxReaders: 64, RingSize: 16})
	a, _ := w.AddVar("a", "uint8", 1, 100, 100)
	b, _ := w.AddVar("b", "uint8", 1, 100, 100)
	want := map[[2]int]*Counters{}
	record := func(v, r int, rows int64) {
		var c Call
		patternCall(&c, int32(v), int32(r), rows, 1)
		w.Record(&c)
		k := [2]int{v, min(r, 63)}
		if want[k] == nil {
			want[k] = new(Counters)
		}
		addCall(want[k], &c)
	}
	record(a, 37, 5)
	record(b, 0, 6)
	record(b, 90, 7) // counted in the last stripe (63)
	record(a, 37, 8)

	s := openTest(t, w.Path())
	if s.h.features&featScanMarks == 0 {
		t.Fatal("writer did not set the scan-marks feature")
	}
	if got := s.m.load(hVarsUsed); got != 2 {
		t.Fatalf("varsUsed %d, want 2", got)
	}
	for v, wantMark := range map[int]uint64{a: 38, b: 64} {
		if got := s.m.load(s.h.g.varOff(int64(v)) + vStripesUsed); got != wantMark {
			t.Fatalf("var %d stripesUsed %d, want %d", v, got, wantMark)
		}
	}
	check := func(name string, snap *Snapshot) {
		t.Helper()
		for _, v := range snap.Vars {
			for r := range v.Readers {
				c := &v.Readers[r]
				if wc := want[[2]int{v.ID, r}]; wc != nil {
					if *c != *wc {
						t.Fatalf("%s: var %s reader %d = %+v, want %+v", name, v.Name, r, *c, *wc)
					}
				} else if !c.IsZero() {
					t.Fatalf("%s: var %s reader %d has calls it never recorded: %+v", name, v.Name, r, *c)
				}
			}
			last := -1
			for k := range want {
				if k[0] == v.ID {
					last = max(last, k[1])
				}
			}
			if len(v.Readers) != last+1 {
				t.Fatalf("%s: var %s has %d reader stripes, want %d", name, v.Name, len(v.Readers), last+1)
			}
		}
	}
	marked := snapshot(t, s)
	if len(marked.Vars) != 2 {
		t.Fatalf("%d vars, want 2", len(marked.Vars))
	}
	check("with marks", marked)

	// The same file read by a full scan (feature bit cleared), and with
	// marks a corrupt file put far out of range: the same variables.
	rewrite := func(words map[int64]uint64) *Snapshot {
		t.Helper()
		f, err := os.OpenFile(w.Path(), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for off, v := range words {
			var buf [8]byte
			binary.LittleEndian.PutUint64(buf[:], v)
			if _, err := f.WriteAt(buf[:], off); err != nil {
				t.Fatal(err)
			}
		}
		return snapshot(t, openTest(t, w.Path()))
	}
	full := rewrite(map[int64]uint64{hFeatures: 0})
	if !reflect.DeepEqual(full.Vars, marked.Vars) {
		t.Fatalf("a full scan differs from the marked one: %d vars, want %d", len(full.Vars), len(marked.Vars))
	}
	huge := rewrite(map[int64]uint64{hFeatures: featScanMarks, hVarsUsed: 1 << 63,
		s.h.g.varOff(int64(a)) + vStripesUsed: ^uint64(0)})
	if !reflect.DeepEqual(huge.Vars, marked.Vars) {
		t.Fatalf("marks out of range: %d vars read, want the %d of a full scan", len(huge.Vars), len(marked.Vars))
	}
	rewrite(map[int64]uint64{hVarsUsed: 2, s.h.g.varOff(int64(a)) + vStripesUsed: 38})

	// A reused slot starts with no stripes in use.
	w.RemoveVar(a)
	c, _ := w.AddVar("c", "uint8", 1, 100, 100)
	if c != a {
		t.Fatalf("AddVar reused slot %d, want %d", c, a)
	}
	for k := range want {
		if k[0] == a {
			delete(want, k)
		}
	}
	if got := s.m.load(s.h.g.varOff(int64(c)) + vStripesUsed); got != 0 {
		t.Fatalf("reused slot's stripesUsed %d, want 0", got)
	}
	record(c, 5, 9)
	after := snapshot(t, s)
	if v := after.Var("c"); v == nil || len(v.Readers) != 6 {
		t.Fatalf("after reuse: var c missing, or not 6 reader stripes")
	}
	check("after reuse", after)
}
