package serve

import (
	"bytes"
	"compress/gzip"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"

	"github.com/ddstore/ddstore/telemetry"
	"github.com/ddstore/ddstore/telemetry/synthetic"
)

// The metrics are the segment's counters, in seconds where they are
// times, with the call-latency histogram bucket by bucket.
func TestMetrics(t *testing.T) {
	dir := t.TempDir()
	w, err := telemetry.Create(telemetry.WriterOptions{Dir: dir, Job: "pj", Rank: 1, World: 2, Host: "hx"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	id, _ := w.AddVar("img", "float32", 100, 1000, 500)
	var hist telemetry.Histogram
	for k := range 50 {
		rows := int64(k%4 + 1)
		c := telemetry.Call{Var: int32(id), Reader: int32(k % 2), Concurrent: k%2 == 0, Rows: rows, Bytes: 100 * rows, RemoteRows: rows, MRRegs: 1}
		c.Targets.Add(0, rows)
		c.Phases[telemetry.PhaseCQWait] = 1000 * rows
		c.Phases[telemetry.PhasePost] = 500
		c.Err = k == 7
		w.Record(&c)
		hist[telemetry.BucketIndex(c.Total())]++
	}
	w.RecordLoader(2_000_000, 10_000_000)
	c := NewCollector(dir, "")
	defer c.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf
	}
	one := func(name string, labels map[string]string) *dto.Metric {
		t.Helper()
		mf := got[name]
		if mf == nil {
			t.Fatalf("no %s", name)
		}
	next:
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return m
		}
		t.Fatalf("no %s with %v", name, labels)
		return nil
	}
	vl := map[string]string{"job": "pj", "rank": "1", "host": "hx", "var": "img"}
	rows := int64(0)
	for k := range 50 {
		rows += int64(k%4 + 1)
	}
	for name, want := range map[string]float64{
		"ddstore_calls_total": 50, "ddstore_rows_total": float64(rows), "ddstore_bytes_total": float64(100 * rows),
		"ddstore_errors_total": 1, "ddstore_mr_registrations_total": 50, "ddstore_remote_rows_total": float64(rows),
	} {
		if v := one(name, vl).GetCounter().GetValue(); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	cq := map[string]string{"job": "pj", "rank": "1", "var": "img", "phase": "cq_wait"}
	if v := one("ddstore_phase_seconds_total", cq).GetCounter().GetValue(); v != float64(1000*rows)/1e9 {
		t.Errorf("cq_wait seconds %v", v)
	}
	h := one("ddstore_call_latency_seconds", vl).GetHistogram()
	if h.GetSampleCount() != 50 || h.GetSampleSum() != float64(1000*rows+50*500)/1e9 {
		t.Errorf("histogram count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
	// The 15 bounds, every second log2 bucket from 256 ns; the empty ones
	// below the fastest call are left out.
	var wantB []*dto.Bucket
	for k, le := 0, 256e-9; k < 15; k, le = k+1, le*4 {
		var want uint64 // calls of at most le seconds
		for j, c := range hist {
			if _, hi := telemetry.BucketBounds(j); float64(hi)/1e9 <= le*(1+1e-9) {
				want += c
			}
		}
		if want > 0 {
			wantB = append(wantB, &dto.Bucket{CumulativeCount: &want, UpperBound: &le})
		}
	}
	if len(h.Bucket) != len(wantB) || len(wantB) == 0 || len(wantB) == 15 {
		t.Fatalf("%d buckets, want %d (of 15)", len(h.Bucket), len(wantB))
	}
	for i, b := range h.Bucket {
		w := wantB[i]
		if b.GetCumulativeCount() != w.GetCumulativeCount() || math.Abs(b.GetUpperBound()-w.GetUpperBound()) > 1e-9*w.GetUpperBound() {
			t.Fatalf("bucket %d (le %v): %d, want %d (le %v)", i, b.GetUpperBound(), b.GetCumulativeCount(), w.GetCumulativeCount(), w.GetUpperBound())
		}
	}
	if v := one("ddstore_loader_wait_seconds_total", map[string]string{"rank": "1"}).GetCounter().GetValue(); v != 0.002 {
		t.Errorf("loader wait %v", v)
	}
	if v := one("ddstore_peer_rows_total", map[string]string{"target": "0"}).GetCounter().GetValue(); v != float64(rows) {
		t.Errorf("peer rows %v", v)
	}
	// Host "hx" is not this one: the fresh heartbeat alone says live.
	if v := one("ddstore_rank_up", map[string]string{"rank": "1", "state": "live"}).GetGauge().GetValue(); v != 1 {
		t.Errorf("rank_up %v", v)
	}

	// Over HTTP, in the text format, with the labels the issue asks for.
	hd := Handler(NewCollector(dir, ""))
	srv := httptest.NewServer(hd)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, s := range []string{
		`ddstore_calls_total{host="hx",job="pj",rank="1",var="img"} 50`,
		`ddstore_phase_seconds_total{host="hx",job="pj",phase="post",rank="1",var="img"} 2.5e-05`,
		`ddstore_call_latency_seconds_bucket{host="hx",job="pj",rank="1",var="img",le="+Inf"} 50`,
		"# TYPE ddstore_call_latency_seconds histogram", "# TYPE ddstore_rows_total counter",
	} {
		if !strings.Contains(string(b), s) {
			t.Fatalf("/metrics lacks %q:\n%s", s, b)
		}
	}
	// In one piece, with its length; with --gzip, compressed when asked.
	if resp.ContentLength != int64(len(b)) || len(b) == 0 {
		t.Fatalf("Content-Length %d, body %d bytes", resp.ContentLength, len(b))
	}
	gc := NewCollector(dir, "")
	gc.Gzip = true
	gh := Handler(gc)
	gsrv := httptest.NewServer(gh)
	defer gsrv.Close()
	req, _ := http.NewRequest("GET", gsrv.URL+"/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	gresp, err := gsrv.Client().Transport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer gresp.Body.Close()
	zr, err := gzip.NewReader(gresp.Body)
	if gresp.Header.Get("Content-Encoding") != "gzip" || err != nil {
		t.Fatalf("--gzip: Content-Encoding %q, %v", gresp.Header.Get("Content-Encoding"), err)
	}
	gb, err := io.ReadAll(zr)
	if err != nil || !strings.Contains(string(gb), `ddstore_calls_total{host="hx",job="pj",rank="1",var="img"} 50`) {
		t.Fatalf("--gzip body (%v):\n%s", err, gb)
	}
}

// BenchmarkScrape is one /metrics scrape of examples/ddtopcost's job
// (synthetic.Job: 64 segments on this host, so their writers' liveness is
// checked), 20 calls per rank between scrapes. Besides ns/op it reports
// cpu-ms/scrape (the process's user + system time over the scrapes, GC
// included), core-%@1Hz (issue 11's goal for serve is 1% at one scrape a
// second) and the body's size. Handler is ddtop serve's; registry is the Collector in a
// client_golang registry, served by promhttp.HandlerFor, side by side.
func BenchmarkScrape(b *testing.B) {
	dir := b.TempDir()
	job, err := synthetic.New(synthetic.Options{Dir: dir, Job: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer job.Close()
	for _, way := range []string{"handler", "registry"} {
		b.Run(way, func(b *testing.B) {
			c := NewCollector(dir, "")
			defer c.Close()
			h := Handler(c)
			if way == "registry" {
				reg := prometheus.NewRegistry()
				reg.MustRegister(c)
				h = whole(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, DisableCompression: true}))
			}
			req := httptest.NewRequest("GET", "/metrics", nil)
			scrape := func() int {
				var w sizeWriter
				h.ServeHTTP(&w, req)
				if w.code != http.StatusOK || !bytes.Contains(w.start, []byte("ddstore_bytes_total")) {
					b.Fatalf("scrape: %d %.200q", w.code, w.start)
				}
				return w.n
			}
			job.Record(20)
			scrape() // opens the segments
			var cpu time.Duration
			size := 0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				job.Record(20)
				b.StartTimer()
				t0 := cpuTime()
				size = scrape()
				cpu += cpuTime() - t0
			}
			b.StopTimer()
			ms := cpu.Seconds() * 1e3 / float64(b.N)
			b.ReportMetric(ms, "cpu-ms/scrape")
			b.ReportMetric(ms/1e3*100, "core-%@1Hz")
			b.ReportMetric(float64(size)/1024, "KiB/scrape")
		})
	}
}

// sizeWriter is an http.ResponseWriter that keeps a response's status,
// size and first bytes: what a scrape costs the server, not its client.
type sizeWriter struct {
	h     http.Header
	code  int
	n     int
	start []byte
}

func (w *sizeWriter) Header() http.Header {
	if w.h == nil {
		w.h = http.Header{}
	}
	return w.h
}

func (w *sizeWriter) WriteHeader(code int) { w.code = code }

func (w *sizeWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if w.n == 0 {
		w.start = p[:min(len(p), 4096)]
	}
	w.n += len(p)
	return len(p), nil
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Handler serves what client_golang's registry serves for the same
// segments, family by family and series by series, in the text and the
// protobuf format: the same sort (rank "10" before "2"), and a series
// that two segments carry (a copy of rank 3's file) sent once. One
// handler serves every step, so its reused samples and label sets are
// checked while series appear and vanish; each step's reference is a new
// Collector in a pedantic registry.
func TestHandlerSameAsRegistry(t *testing.T) {
	dir := t.TempDir()
	ws := map[int]*telemetry.Writer{}
	start := func(r int) {
		w, err := telemetry.Create(telemetry.WriterOptions{Dir: dir, Job: "eq", Rank: r, World: 13, Host: []string{"hb", "ha"}[r%2]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		w.AddVar("img", "float32", 64, 1200, 100)
		w.AddVar("lbl", "int64", 8, 1200, 100)
		ws[r] = w
	}
	record := func(r, calls, step int) {
		w := ws[r]
		for k := range calls {
			c := telemetry.Call{Var: int32(k % 2), Reader: int32(k % 3), Rows: int64(k + 1), Bytes: 64, RemoteRows: int64(k + 1)}
			c.Targets.Add((r+k+step)%12, int64(k+1))
			c.Phases[telemetry.PhaseCQWait] = int64(1000 << ((k + step) % 12))
			c.Phases[telemetry.PhaseCopy] = 300
			if step > 0 {
				c.Phases[telemetry.PhaseMR] = 700 // a phase series appears
				c.MRRegs = 1
			}
			c.Err = k == 3
			w.Record(&c)
		}
		w.AddProc(step%2, int64(r+1))
		if r%3 == step%3 {
			w.RecordLoader(int64(r+1)*1000, 1_000_000)
		}
	}
	for r := range 12 {
		start(r)
		record(r, 5+r, 0)
	}
	b, err := os.ReadFile(telemetry.SegmentPath(dir, "eq", 3))
	if err != nil {
		t.Fatal(err)
	}
	copied := telemetry.SegmentPath(dir, "eqcopy", 3)
	if err := os.WriteFile(copied, b, 0o644); err != nil {
		t.Fatal(err)
	}
	c := NewCollector(dir, "")
	defer c.Close()
	ours := Handler(c)
	check := func(step string, wantCalls int) {
		t.Helper()
		reg := prometheus.NewPedanticRegistry()
		rc := NewCollector(dir, "")
		defer rc.Close()
		reg.MustRegister(rc)
		if _, err := reg.Gather(); err != nil {
			t.Fatalf("%s: the registry: %v", step, err)
		}
		theirs := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
		for _, accept := range []string{"", `application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited`} {
			get := func(h http.Handler) []*dto.MetricFamily {
				t.Helper()
				req := httptest.NewRequest("GET", "/metrics", nil)
				if accept != "" {
					req.Header.Set("Accept", accept)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					t.Fatalf("%s, accept %q: %d %s", step, accept, rec.Code, rec.Body)
				}
				var types []string // the text's families, in order
				for _, line := range strings.Split(rec.Body.String(), "\n") {
					if strings.HasPrefix(line, "# TYPE ") {
						types = append(types, line)
					}
				}
				if !slices.IsSorted(types) {
					t.Errorf("%s, accept %q: families out of order: %q", step, accept, types)
				}
				dec := expfmt.NewDecoder(rec.Body, expfmt.ResponseFormat(rec.Header()))
				var fams []*dto.MetricFamily
				for {
					mf := &dto.MetricFamily{}
					if err := dec.Decode(mf); err == io.EOF {
						// The text decoder returns families in no order.
						slices.SortFunc(fams, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
						return fams
					} else if err != nil {
						t.Fatalf("%s, accept %q: %v", step, accept, err)
					}
					if mf.GetName() == "ddstore_heartbeat_age_seconds" {
						for _, m := range mf.Metric {
							m.Gauge.Value = nil // the two scrapes are not at one instant
						}
					}
					fams = append(fams, mf)
				}
			}
			got, want := get(ours), get(theirs)
			if len(got) != len(want) || len(got) < 15 {
				t.Fatalf("%s, accept %q: %d families, the registry's %d", step, accept, len(got), len(want))
			}
			for i := range got {
				g, w := got[i], want[i]
				if g.GetName() != w.GetName() || len(g.Metric) != len(w.Metric) {
					t.Fatalf("%s, accept %q: family %d: %s with %d series, the registry's %s with %d", step, accept, i, g.GetName(), len(g.Metric), w.GetName(), len(w.Metric))
				}
				for k := range g.Metric {
					if !proto.Equal(g.Metric[k], w.Metric[k]) {
						t.Fatalf("%s, accept %q: %s series %d:\n%v\nthe registry's:\n%v", step, accept, g.GetName(), k, g.Metric[k], w.Metric[k])
					}
				}
				if !proto.Equal(g, w) {
					t.Fatalf("%s, accept %q: family %s differs in its name, help or type", step, accept, g.GetName())
				}
			}
			calls := got[slices.IndexFunc(got, func(f *dto.MetricFamily) bool { return f.GetName() == "ddstore_calls_total" })]
			if n := len(calls.Metric); n != wantCalls {
				t.Errorf("%s, accept %q: %d calls series, want %d", step, accept, n, wantCalls)
			}
		}
	}
	check("12 ranks and a copy of rank 3", 24) // 12 ranks × 2 variables
	for r := range 12 {
		record(r, 3, 1)
	}
	ws[5].Close()
	os.Remove(telemetry.SegmentPath(dir, "eq", 5))
	ws[7].AddVar("extra", "uint8", 1, 1200, 100)
	check("rank 5 gone, rank 7 with a third variable, new phase and process series", 23)
	os.Remove(copied)
	start(12)
	record(12, 4, 2)
	for r := range 12 {
		if r != 5 {
			record(r, 2, 2)
		}
	}
	check("the copy gone, rank 12 new", 25)
}
