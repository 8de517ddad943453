package record

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ddstore/ddstore/telemetry"
)

// record runs Record over dir while two ranks record calls, then loads
// the file.
func recordRun(t *testing.T) (*Recording, [2]int64, string) {
	t.Helper()
	dir := t.TempDir()
	var ws [2]*telemetry.Writer
	var ids [2]int
	for r := range 2 {
		w, err := telemetry.Create(telemetry.WriterOptions{Dir: dir, Job: "rec", Rank: r, World: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		ws[r] = w
		ids[r], _ = w.AddVar("x", "float32", 16, 1000, 500)
	}
	path := filepath.Join(t.TempDir(), "run.ddrec")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var n int
	var rerr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		n, rerr = Record(ctx, f, Options{Dir: dir, Interval: 20 * time.Millisecond})
	}()
	// Rank r records (r+1)*100 calls of k+1 rows over ~10 ticks.
	var calls [2]int64
	for k := 0; k < 100; k++ {
		for r := range 2 {
			for range r + 1 {
				c := telemetry.Call{Var: int32(ids[r]), Reader: 1, Rows: int64(k + 1), Bytes: 16 * int64(k+1), RemoteRows: int64(k + 1)}
				c.Targets.Add(1-r, int64(k+1))
				c.Phases[telemetry.PhaseCQWait] = 1000 * int64(k+1)
				ws[r].Record(&c)
				calls[r]++
			}
		}
		if k%10 == 9 {
			time.Sleep(25 * time.Millisecond)
		}
	}
	time.Sleep(60 * time.Millisecond) // a tick after the last call
	cancel()
	wg.Wait()
	f.Close()
	if rerr != nil || n < 3 {
		t.Fatalf("Record: %d ticks, %v", n, rerr)
	}
	rec, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Ticks) != n {
		t.Fatalf("loaded %d ticks, wrote %d", len(rec.Ticks), n)
	}
	return rec, calls, path
}

// Every call is in the recording: the last snapshot's counters, and the
// ring records of all ticks together (nothing dropped: the ring holds
// them); the frames give the same totals.
func TestRecordLoadFrames(t *testing.T) {
	rec, calls, _ := recordRun(t)
	if rec.Format != Format || rec.Version != Version || rec.IntervalNs != int64(20*time.Millisecond) {
		t.Fatalf("header %+v", rec.Header)
	}
	var ringCalls [2]int64
	var rows [2]int64
	for _, tk := range rec.Ticks {
		for _, s := range tk.Segments {
			if s.Dropped != 0 {
				t.Fatalf("dropped %d", s.Dropped)
			}
			for _, c := range s.Calls {
				ringCalls[s.Snap.Rank]++
				rows[s.Snap.Rank] += c.Rows
				if c.Bytes != 16*c.Rows || c.Phases[telemetry.PhaseCQWait] != 1000*c.Rows || c.NTargets != 1 || c.FirstTargets[0] != int32(1-s.Snap.Rank) {
					t.Fatalf("record %+v", c)
				}
			}
		}
	}
	last := rec.Ticks[len(rec.Ticks)-1]
	frames := rec.Frames()
	lf := frames[len(frames)-1]
	for r := range 2 {
		wantRows := int64(r+1) * 5050
		if ringCalls[r] != calls[r] || rows[r] != wantRows {
			t.Fatalf("rank %d: ring %d calls %d rows, want %d and %d", r, ringCalls[r], rows[r], calls[r], wantRows)
		}
		if tot := last.Segments[r].Snap.Total(); tot.Calls != calls[r] || tot.Rows != wantRows {
			t.Fatalf("rank %d: last snapshot %+v", r, tot)
		}
		if got := lf.Ranks[r].Stat.Total; got.Calls != calls[r] || got.Rows != wantRows || len(lf.Ranks[r].Peers) != 1 {
			t.Fatalf("rank %d: frame %+v", r, got)
		}
	}
	// Frames diff consecutive ticks: their interval rows add up to the total.
	var sum int64
	for _, f := range frames[1:] {
		for _, r := range f.Ranks {
			if r.Rank == 1 {
				sum += r.Stat.Delta.Rows
			}
		}
	}
	if first := frames[0].Ranks[1].Stat.Total.Rows; sum+first != 2*5050 {
		t.Fatalf("interval rows %d + first %d != %d", sum, first, 2*5050)
	}
}

func TestLoadBadFiles(t *testing.T) {
	rec, _, path := recordRun(t)
	good, _ := os.ReadFile(path)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		return p
	}
	gz := func(s string) []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write([]byte(s))
		w.Close()
		return b.Bytes()
	}
	for name, b := range map[string][]byte{
		"plain":   []byte(`{"format":"ddrec"}`),
		"foreign": gz(`{"format":"other","version":1}` + "\n"),
		"newer":   gz(`{"format":"ddrec","version":99}` + "\n"),
		"empty":   gz(`{"format":"ddrec","version":1}` + "\n"),
		"garbage": gz(`{"format":"ddrec","version":1}` + "\n{nope\n"),
	} {
		if _, err := Load(write(name, b)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Cut short (a killed recorder): exactly the complete ticks load, the
	// same as in the whole file. Count them independently of Load: the
	// gzip data up to the cut is the header line, then one JSON line a
	// tick; the last fragment is a tick only if it is whole.
	cutBytes := good[:len(good)*3/4]
	zr, err := gzip.NewReader(bytes.NewReader(cutBytes))
	if err != nil {
		t.Fatal(err)
	}
	text, err := io.ReadAll(zr)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("reading the cut file: %v, want unexpected EOF", err)
	}
	lines := bytes.Split(text, []byte("\n"))
	complete := len(lines) - 2 // less the header and the last fragment
	if last := lines[len(lines)-1]; len(last) > 0 && json.Valid(last) {
		complete++
	}
	if complete <= 0 || complete >= len(rec.Ticks) {
		t.Fatalf("the cut keeps %d of %d ticks: pick another cut", complete, len(rec.Ticks))
	}
	cut, err := Load(write("cut", cutBytes))
	if err != nil {
		t.Fatalf("cut recording: %v", err)
	}
	if len(cut.Ticks) != complete || !reflect.DeepEqual(cut.Ticks, rec.Ticks[:complete]) {
		t.Fatalf("cut recording: %d ticks, want the first %d of %d", len(cut.Ticks), complete, len(rec.Ticks))
	}
	// Cut short before anything complete: refused, and the error says so.
	flushed := func(s string) []byte { // a gzip stream as a killed recorder leaves it
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write([]byte(s))
		w.Flush()
		return b.Bytes()
	}
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"cut in header": {flushed(`{"format":"ddrec","ver`), "truncated: cut short in the header"},
		"cut in tick 0": {flushed(`{"format":"ddrec","version":1}` + "\n" + `{"t":1,"segments":[{"path":"/dev/shm/x`),
			"truncated: cut short before the first complete tick"},
	} {
		_, err := Load(write(name, c.b))
		if !errors.Is(err, ErrFormat) || !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("%s: %v, want ErrFormat wrapping io.ErrUnexpectedEOF saying %q", name, err, c.want)
		}
	}
	missing := filepath.Join(dir, "missing")
	if _, err := Load(missing); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("missing file: %v, want fs.ErrNotExist naming %s", err, missing)
	}
}
