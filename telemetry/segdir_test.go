package telemetry

import (
	"errors"
	"os"
	"reflect"
	"testing"
	"time"
)

// A SegmentDir that trusts its last reading of a settled directory still
// sees every segment that is added, removed or replaced at the next
// listing, and a change that left the directory's time unchanged within
// dirRelist.
func TestSegmentDir(t *testing.T) {
	defer func(d time.Duration) { dirRelist = d }(dirRelist)
	dirRelist = time.Second
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

// SnapshotTo into an old snapshot gives what Snapshot gives, whichever
// segment and variables the old one held, and allocates nothing when the
// variables stay the same.
func TestSnapshotTo(t *testing.T) {
	dir := t.TempDir()
	mk := func(rank int, names ...string) (*Writer, *Segment) {
		w, err := Create(WriterOptions{Dir: dir, Job: "j", Rank: rank, World: 2, Host: localHost()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		for i, n := range names {
			id, err := w.AddVar(n, "float32", int64(4*(i+1)), 100, 50)
			if err != nil {
				t.Fatal(err)
			}
			for k := range 3 + i {
				c := Call{Var: int32(id), Reader: int32(k % (2 + i)), Rows: int64(k + 1), Bytes: 4, RemoteRows: 1}
				c.Targets.Add(1-rank, int64(k+1))
				c.Phases[PhaseCQWait] = int64(1000 * (k + 1))
				w.Record(&c)
			}
		}
		return w, openTest(t, w.Path())
	}
	wa, a := mk(0, "a0", "a1")
	_, b := mk(1, "b0")
	same := func(what string, got *Snapshot, seg *Segment) {
		t.Helper()
		want := snapshot(t, seg)
		g := *got
		g.Taken, g.HeartbeatAge = want.Taken, want.HeartbeatAge
		if !reflect.DeepEqual(&g, want) {
			t.Fatalf("%s: SnapshotTo\n%+v\nSnapshot\n%+v", what, g, *want)
		}
	}
	dst := new(Snapshot)
	for _, step := range []struct {
		what string
		seg  *Segment
	}{{"a into new", a}, {"b into a's", b}, {"a into b's", a}, {"a again", a}} {
		if err := step.seg.SnapshotTo(dst); err != nil {
			t.Fatal(err)
		}
		same(step.what, dst, step.seg)
	}
	if n := testing.AllocsPerRun(100, func() { a.SnapshotTo(dst) }); n != 0 {
		t.Errorf("SnapshotTo of unchanged variables allocates %v times", n)
	}
	wa.RemoveVar(0)
	if _, err := wa.AddVar("a2", "int64", 8, 10, 5); err != nil {
		t.Fatal(err)
	}
	if err := a.SnapshotTo(dst); err != nil {
		t.Fatal(err)
	}
	same("a after a variable was replaced", dst, a)
}

// AppendDiscover keeps what dst held, sorts only what it appends (by job,
// then rank), lists what Discover lists, and fills dst's memory when it
// is large enough (a poller's scratch).
func TestAppendDiscover(t *testing.T) {
	dir := t.TempDir()
	for _, r := range []int{3, 0, 2, 1} {
		w, err := Create(WriterOptions{Dir: dir, Job: "j", Rank: r, World: 4, Host: localHost()})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
	}
	d := NewSegmentDir(dir)
	want, err := d.Discover(nil)
	if err != nil || len(want) != 4 {
		t.Fatalf("Discover: %d segments, %v", len(want), err)
	}
	prefix := SegmentInfo{Path: "kept", Job: "z", Rank: 9}
	buf := make([]SegmentInfo, 1, 8)
	buf[0] = prefix
	got, err := d.AppendDiscover(buf, nil)
	if err != nil || len(got) != 5 || got[0] != prefix {
		t.Fatalf("AppendDiscover: %d infos, first %+v, %v", len(got), got[0], err)
	}
	if &got[0] != &buf[0] {
		t.Error("AppendDiscover did not fill dst's memory")
	}
	for i, in := range got[1:] {
		if in.Rank != i || in.Path != want[i].Path || in.State != want[i].State {
			t.Errorf("appended %d: rank %d %s %s, want rank %d %s %s", i, in.Rank, in.Path, in.State, i, want[i].Path, want[i].State)
		}
	}
	if _, err := NewSegmentDir(dir+"/nope").AppendDiscover(buf[:0], nil); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing directory: %v", err)
	}
}
