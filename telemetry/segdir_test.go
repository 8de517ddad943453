package telemetry

import (
	"errors"
	"os"
	"testing"
	"time"
)

// A SegmentDir that trusts its last reading of a settled directory still
// sees every segment that is added, removed or replaced at the next
// listing, and a change that left the directory's time unchanged within
// dirRelist.
func TestSegmentDir(t *testing.T) {
	dir := t.TempDir()
	d := NewSegmentDir(dir)
	ranks := func() []int {
		t.Helper()
		infos, err := d.Discover(nil)
		if err != nil {
			t.Fatalf("Discover: %v", err)
		}
		var out []int
		for _, in := range infos {
			if in.State == StateInvalid {
				t.Fatalf("%s: %v", in.Path, in.Err)
			}
			out = append(out, in.Rank)
		}
		return out
	}
	create := func(rank int) *Writer {
		t.Helper()
		w, err := Create(WriterOptions{Dir: dir, Job: "j", Rank: rank, World: 4, Host: localHost()})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	settle := func() { // the next listing reads the directory and trusts it afterwards
		time.Sleep(dirSettle + 20*time.Millisecond)
		d.Discover(nil)
	}
	w0 := create(0)
	defer func() { w0.Close() }()
	if got := ranks(); len(got) != 1 || got[0] != 0 {
		t.Fatalf("ranks %v, want [0]", got)
	}
	settle()
	w2 := create(2)
	defer w2.Close()
	if got := ranks(); len(got) != 2 || got[1] != 2 {
		t.Fatalf("after adding rank 2: ranks %v, want [0 2]", got)
	}
	settle()
	w2.Close()
	if got := ranks(); len(got) != 1 || got[0] != 0 {
		t.Fatalf("after removing rank 2: ranks %v, want [0]", got)
	}

	// A replaced segment is described from the new file, not from the
	// mapping of the old one.
	seg := openTest(t, w0.Path())
	open := func(path string) *Segment {
		if path == seg.Path() {
			return seg
		}
		return nil
	}
	settle()
	w0.Close()
	w0 = create(0)
	infos, err := d.Discover(open)
	if err != nil || len(infos) != 1 || infos[0].StartNs == seg.h.startNs {
		t.Fatalf("after replacing rank 0: %+v %v (old start %d)", infos, err, seg.h.startNs)
	}

	// A new file whose directory time was set back is found by the
	// reading every dirRelist.
	settle()
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	w3 := create(3)
	defer w3.Close()
	if err := os.Chtimes(dir, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(dirRelist + 5*time.Second); len(ranks()) != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("rank 3 not listed %v after it was created: ranks %v", dirRelist+5*time.Second, ranks())
		}
	}
	if _, err := NewSegmentDir(dir + "/nope").Discover(nil); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing directory: %v", err)
	}
}
