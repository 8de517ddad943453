package data

import (
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/ddstore/ddstore/internal/segtest"
	"github.com/ddstore/ddstore/telemetry"
)

// clock is a fake clock for interval lengths.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Unix(1_700_000_000, 0)} }
func near(a, b float64) bool             { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
func writer(t *testing.T, o telemetry.WriterOptions) *telemetry.Writer {
	t.Helper()
	w, err := telemetry.Create(o)
	if err != nil {
		t.Fatalf("telemetry.Create(%+v): %v", o, err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// call i of a test stream: rows i+1, 8 bytes a row, cq_wait 300 ns a row and
// copy 100 ns a row, so every call costs 400 ns per row.
func testCall(v int32, i int) telemetry.Call {
	rows := int64(i + 1)
	c := telemetry.Call{Var: v, Rows: rows, Bytes: 8 * rows, RemoteRows: rows}
	c.Phases[telemetry.PhaseCQWait] = 300 * rows
	c.Phases[telemetry.PhaseCopy] = 100 * rows
	return c
}

// tailPoller is a writer with one variable of 1-byte rows in a new
// directory (a ring of ringSize records; 0: the default) and a Poller
// there keeping keep recent calls.
func tailPoller(t *testing.T, ringSize, keep int) (*telemetry.Writer, int32, *Poller) {
	dir := t.TempDir()
	w := writer(t, telemetry.WriterOptions{Dir: dir, RingSize: ringSize, LaneRingSize: ringSize}) // reader 0: its lane ring
	id, _ := w.AddVar("x", "u8", 1, 1, 1)
	p, _ := NewPoller(Options{Dir: dir, Recent: keep})
	t.Cleanup(func() { p.Close() })
	return w, int32(id), p
}

// recordCalls records test calls from to to-1 and returns to.
func recordCalls(w *telemetry.Writer, id int32, from, to int) int {
	for i := from; i < to; i++ {
		c := testCall(id, i)
		w.Record(&c)
	}
	return to
}

// checkRecent fails unless r's recent calls are the last min(n, keep) of
// the n test calls recorded, oldest first.
func checkRecent(t *testing.T, what string, r *Rank, n, keep int) {
	t.Helper()
	rec := r.Recent.Copy()
	if want := min(n, keep); len(rec) != want {
		t.Fatalf("%s: %d recent calls, want %d", what, len(rec), want)
	}
	for j := range rec {
		call := n - len(rec) + j
		if want := int64(call + 1); rec[j].Rows != want || rec[j].Seq != uint64(call) {
			t.Fatalf("%s: recent[%d] is call %d (rows %d), want call %d (rows %d)", what, j, rec[j].Seq, rec[j].Rows, call, want)
		}
	}
}

func TestPollRates(t *testing.T) {
	dir := t.TempDir()
	w := writer(t, telemetry.WriterOptions{Dir: dir, Job: "j", Rank: 1, World: 2})
	id, err := w.AddVar("x", "float32", 8, 1000, 500)
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	p, err := NewPoller(Options{Dir: dir, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	f, err := p.Poll()
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Ranks) != 1 || f.Ranks[0].Rank != 1 || f.Ranks[0].Interval != 0 || f.Ranks[0].CallsPerSec() != 0 {
		t.Fatalf("first poll: %+v", f.Ranks)
	}

	const n = 10
	var rows int64
	for i := range n {
		c := testCall(int32(id), i)
		rows += c.Rows
		w.Record(&c)
	}
	clk.advance(2 * time.Second)
	f, err = p.Poll()
	if err != nil {
		t.Fatal(err)
	}
	r := f.Ranks[0]
	if r.Interval != 2*time.Second || r.Delta.Calls != n || r.Delta.Rows != rows {
		t.Fatalf("interval %v delta calls %d rows %d, want 2s %d %d", r.Interval, r.Delta.Calls, r.Delta.Rows, n, rows)
	}
	if !near(r.CallsPerSec(), n/2.0) || !near(r.RowsPerSec(), float64(rows)/2) || !near(r.BytesPerSec(), float64(8*rows)/2) {
		t.Fatalf("rates %v %v %v", r.CallsPerSec(), r.RowsPerSec(), r.BytesPerSec())
	}
	if !near(r.NsPerRow(), 400) {
		t.Fatalf("ns/row %v, want 400", r.NsPerRow())
	}
	// Every call's ns/row is 400: bucket [256, 512).
	if q := r.RowQuantile(0.99); q < 256 || q >= 512 {
		t.Fatalf("row p99 %v outside [256,512)", q)
	}
	sh := r.PhaseShare()
	if !near(sh[telemetry.PhaseCQWait], 0.75) || !near(sh[telemetry.PhaseCopy], 0.25) {
		t.Fatalf("phase share %v", sh)
	}
	if len(f.Vars) != 1 || f.Vars[0].Name != "x" || f.Vars[0].Total.Rows != rows || f.Vars[0].GlobalRows != 1000 {
		t.Fatalf("vars %+v", f.Vars)
	}
	if len(r.Readers) != 1 || r.Readers[0].Var != "x" || r.Readers[0].Reader != 0 || r.Readers[0].Total.Calls != n {
		t.Fatalf("readers %+v", r.Readers)
	}
	// The ring tail holds the calls in order.
	if r.Recent.Len() != n || r.Dropped != 0 {
		t.Fatalf("recent %d dropped %d", r.Recent.Len(), r.Dropped)
	}
	for i, rec := range r.Recent.Copy() {
		if want := testCall(int32(id), i); rec.Rows != want.Rows || rec.Bytes != want.Bytes || r.VarName(rec.Var) != "x" {
			t.Fatalf("recent[%d] = rows %d bytes %d var %s, want %d %d x", i, rec.Rows, rec.Bytes, r.VarName(rec.Var), want.Rows, want.Bytes)
		}
	}

	// A quiet interval: rates drop to 0, latency falls back to cumulative.
	clk.advance(time.Second)
	f, _ = p.Poll()
	r = f.Ranks[0]
	if r.CallsPerSec() != 0 || r.Delta.Calls != 0 || !near(r.NsPerRow(), 400) {
		t.Fatalf("quiet interval: calls/s %v delta %d ns/row %v", r.CallsPerSec(), r.Delta.Calls, r.NsPerRow())
	}
	if h := r.RowsHistory; len(h) != 2 || !near(h[0], float64(rows)/2) || h[1] != 0 {
		t.Fatalf("history %v", h)
	}
}

func TestLoaderAndRemovedVar(t *testing.T) {
	dir := t.TempDir()
	w := writer(t, telemetry.WriterOptions{Dir: dir, Job: "j"})
	id, _ := w.AddVar("a", "int64", 8, 10, 10)
	clk := newClock()
	p, _ := NewPoller(Options{Dir: dir, Now: clk.now})
	defer p.Close()
	recordCalls(w, int32(id), 0, 4)
	p.Poll()
	// Replace the variable: same slot, new generation; counters restart.
	w.RemoveVar(id)
	id2, _ := w.AddVar("b", "int64", 8, 10, 10)
	c := testCall(int32(id2), 0)
	w.Record(&c)
	w.RecordLoader(1_000_000, 3_000_000)
	w.RecordLoader(3_000_000, 3_000_000)
	clk.advance(time.Second)
	f, _ := p.Poll()
	r := f.Ranks[0]
	if len(r.Vars) != 1 || r.Vars[0].Name != "b" || r.Vars[0].Delta.Calls != 1 || r.Delta.Calls != 1 {
		t.Fatalf("after replace: vars %+v delta %d", r.Vars, r.Delta.Calls)
	}
	if !r.Loader.Present() || r.Loader.Delta.Batches != 2 || !near(r.Loader.WaitShare(), 0.4) || !near(r.Loader.MeanWaitNs(), 2e6) {
		t.Fatalf("loader %+v share %v", r.Loader, r.Loader.WaitShare())
	}
}

func TestStatesAndFollow(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	p, _ := NewPoller(Options{Dir: dir, Now: clk.now})
	defer p.Close()
	f, err := p.Poll()
	if err != nil || len(f.Ranks) != 0 {
		t.Fatalf("empty dir: %v %v", f, err)
	}

	live := writer(t, telemetry.WriterOptions{Dir: dir, Job: "j", Rank: 0, World: 3})
	exited := writer(t, telemetry.WriterOptions{Dir: dir, Job: "j", Rank: 1, World: 3, Pid: segtest.ExitedPid(t)})
	stale := writer(t, telemetry.WriterOptions{Dir: dir, Job: "j", Rank: 2, World: 3})
	other := writer(t, telemetry.WriterOptions{Dir: dir, Job: "k", Rank: 0, World: 1})
	_, _ = live, exited
	segtest.SetHeartbeat(t, stale.Path(), time.Now().Add(-time.Minute))

	f, _ = p.Poll()
	got := map[int]string{}
	for _, r := range f.Ranks {
		if r.Job == "j" {
			got[r.Rank] = r.State
		}
	}
	want := map[int]string{0: "live", 1: "exited", 2: "stale"}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("states %v, want %v", got, want)
		}
	}
	if len(f.Ranks) != 4 {
		t.Fatalf("%d ranks, want 4", len(f.Ranks))
	}

	// --job filter.
	pj, _ := NewPoller(Options{Dir: dir, Job: "k", Now: clk.now})
	defer pj.Close()
	fj, _ := pj.Poll()
	if len(fj.Ranks) != 1 || fj.Ranks[0].Job != "k" {
		t.Fatalf("job filter: %+v", fj.Ranks)
	}

	// A rank that goes away is dropped and its segment closed.
	other.Close()
	f, _ = p.Poll()
	if len(f.Ranks) != 3 || len(p.ranks) != 3 {
		t.Fatalf("after close: %d ranks, %d tracked", len(f.Ranks), len(p.ranks))
	}
	// A foreign file is reported, not fatal.
	os.WriteFile(dir+"/ddstore-junk-0.tel", []byte("not a segment, just junk bytes padded out to be long enough"), 0o600)
	f, err = p.Poll()
	if err != nil || len(f.Ranks) != 3 || len(f.Problems) != 1 {
		t.Fatalf("foreign file: err %v ranks %d problems %v", err, len(f.Ranks), f.Problems)
	}
	// A missing directory is an error that names it.
	pm, _ := NewPoller(Options{Dir: dir + "/nope"})
	if _, err := pm.Poll(); err == nil {
		t.Fatal("missing dir: no error")
	}
}

func TestRingDrops(t *testing.T) {
	w, id, p := tailPoller(t, 16, 8)
	p.Poll()
	recordCalls(w, id, 0, 40)
	f, _ := p.Poll()
	r := f.Ranks[0]
	// 40 records into a ring of 16 between two polls: 24 lost, the last 8 kept.
	if r.Dropped != 24 || r.Recent.Len() != 8 {
		t.Fatalf("dropped %d recent %d, want 24 8", r.Dropped, r.Recent.Len())
	}
	checkRecent(t, "after drops", r, 40, 8)
}

// TestShowCalls: while no page shows recent calls, polls copy no record
// and count no loss (nobody watched those calls); shown again, the next
// poll reads back what the ring still holds after the last record read,
// and losses count again from there.
func TestShowCalls(t *testing.T) {
	w, id, p := tailPoller(t, 16, 8)
	p.Poll()
	next := recordCalls(w, id, 0, 5)
	f, _ := p.Poll()
	checkRecent(t, "shown", f.Ranks[0], 5, 5)
	p.ShowCalls(false)
	next = recordCalls(w, id, next, 8)
	f, _ = p.Poll()
	if r := f.Ranks[0]; r.Recent.Len() != 5 || r.Dropped != 0 {
		t.Fatalf("hidden: recent %d dropped %d, want 5 0", r.Recent.Len(), r.Dropped)
	}
	p.ShowCalls(true)
	f, _ = p.Poll()
	checkRecent(t, "shown again", f.Ranks[0], 8, 8) // 3 read back from the ring
	p.ShowCalls(false)
	next = recordCalls(w, id, next, 8+40)
	f, _ = p.Poll()
	if r := f.Ranks[0]; r.Dropped != 0 {
		t.Fatalf("hidden, 40 calls into 16 slots: dropped %d, want 0", r.Dropped)
	}
	p.ShowCalls(true)
	f, _ = p.Poll()
	checkRecent(t, "after hidden calls", f.Ranks[0], next, 8)
	if r := f.Ranks[0]; r.Dropped != 0 {
		t.Fatalf("shown after hidden calls: dropped %d, want 0", r.Dropped)
	}
	recordCalls(w, id, next, next+40) // shown: 40 calls into 16 slots between polls
	f, _ = p.Poll()
	if r := f.Ranks[0]; r.Dropped != 24 {
		t.Fatalf("shown, 40 calls into 16 slots: dropped %d, want 24", r.Dropped)
	}
}

// The history ring keeps the last n values, oldest first, and a slice it
// returned never changes afterwards.
func TestRingShared(t *testing.T) {
	r := newRing(5)
	var got [][]float64
	for i := range 23 {
		r.push(float64(i))
		got = append(got, r.values())
	}
	for i, v := range got {
		n := min(i+1, 5)
		if len(v) != n {
			t.Fatalf("after %d pushes: %d values", i+1, len(v))
		}
		for j, x := range v {
			if want := float64(i + 1 - n + j); x != want {
				t.Fatalf("after %d pushes: values %v", i+1, v)
			}
		}
	}
	if z := newRing(0); len(z.values()) != 0 {
		t.Fatal("ring of 0 holds values")
	}
}

// Each frame's recent calls are the last Recent recorded before its poll,
// oldest first, and stay so while later polls read more (blocks of the
// tail fill and leave it many times here).
func TestRecentShared(t *testing.T) {
	const keep = 8
	w, id, p := tailPoller(t, 0, keep)
	var frames []*Frame
	var recorded []int
	n := 0
	for poll := range 120 {
		n = recordCalls(w, id, n, n+poll%7) // 0 to 6 calls between polls
		f, err := p.Poll()
		if err != nil || len(f.Ranks) != 1 {
			t.Fatalf("poll %d: %v %v", poll, f, err)
		}
		frames = append(frames, f)
		recorded = append(recorded, n)
	}
	for i, f := range frames {
		checkRecent(t, fmt.Sprintf("poll %d", i), f.Ranks[0], recorded[i], keep)
	}
}

// TestRecycleReusesMemory polls a writer that records faster than the
// recent-call tail keeps, giving each frame back once the next is made:
// every frame still shows exactly its own calls, and the ranks and call
// blocks are reused instead of allocated (the 20905 calls would fill 327
// blocks).
func TestRecycleReusesMemory(t *testing.T) {
	const keep = 16
	w, id, p := tailPoller(t, 0, keep)
	blocks := map[*[callBlock]telemetry.Record]bool{}
	ranks := map[*Rank]bool{}
	var prev *Frame
	n, prevN := 0, 0
	for poll := range 200 {
		n = recordCalls(w, id, n, n+10+poll%3*95) // up to 200 calls: some polls fill whole blocks
		f, err := p.Poll()
		if err != nil || len(f.Ranks) != 1 {
			t.Fatalf("poll %d: %v %v", poll, f, err)
		}
		r := f.Ranks[0]
		if r.Stat.Total.Calls != int64(n) {
			t.Fatalf("poll %d: %d calls, want %d", poll, r.Stat.Total.Calls, n)
		}
		checkRecent(t, fmt.Sprintf("poll %d, new frame", poll), r, n, keep)
		if prev != nil { // not given back yet: unchanged by this poll
			checkRecent(t, fmt.Sprintf("poll %d, previous frame", poll), prev.Ranks[0], prevN, keep)
		}
		for _, b := range r.Recent.blocks {
			blocks[b] = true
		}
		ranks[r] = true
		p.Recycle(prev)
		prev, prevN = f, n
	}
	if len(blocks) > 8 || len(ranks) > 3 {
		t.Fatalf("%d call blocks and %d ranks made for 200 polls: not reused", len(blocks), len(ranks))
	}
}

// TestNoCalls: a poller that shows no calls (ddtop --once) neither reads
// the rings nor counts their losses, while its counters stay exact.
func TestNoCalls(t *testing.T) {
	dir := t.TempDir()
	w := writer(t, telemetry.WriterOptions{Dir: dir, RingSize: 16, LaneRingSize: 16})
	id, _ := w.AddVar("x", "u8", 1, 1, 1)
	p, _ := NewPoller(Options{Dir: dir, Recent: 8, NoCalls: true})
	t.Cleanup(func() { p.Close() })
	p.Poll()
	recordCalls(w, int32(id), 0, 40)
	f, _ := p.Poll()
	r := f.Ranks[0]
	if r.Recent.Len() != 0 || r.Dropped != 0 {
		t.Fatalf("no calls: recent %d dropped %d, want 0 0", r.Recent.Len(), r.Dropped)
	}
	if r.Total.Calls != 40 {
		t.Fatalf("calls %d, want 40", r.Total.Calls)
	}
}
