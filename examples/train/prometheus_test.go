package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ddstore/ddstore/telemetry"
)

// TestPrometheus: a real Prometheus scrapes `ddtop serve` every second
// while three ranks of the trainer run; the counter samples it stored
// match the segment's own counter at the scrape times, and the rate its
// HTTP API computes matches the rate of calls the segment counts.
// DDTOP_REQUIRE_PROMETHEUS=1 (make test, mk/ui.mk) makes a missing
// prometheus a failure instead of a skip.
func TestPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("DDTOP_REQUIRE_PROMETHEUS") == "1" {
			t.Fatal("no prometheus (make deps installs Debian's)")
		}
		t.Skip("no prometheus")
	}
	ddtop, ddrun := tools(t)
	j := startPJob(t, ddtop, ddrun, "--workers 2 --prefetch 4 --node-mode auto")
	j.reading()

	// ddtop serve on a free port; it prints where.
	// (The contexts are hang guards; the cleanups kill both servers.)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	srv := exec.CommandContext(ctx, ddtop, "serve", "--dir", j.dir, "--listen", "127.0.0.1:0", "--nice", "0")
	so, _ := srv.StdoutPipe()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	type readLine struct {
		s   string
		err error
	}
	addr := make(chan readLine, 1)
	go func() {
		s, err := bufio.NewReader(so).ReadString('\n')
		addr <- readLine{s, err}
	}()
	var line string
	select {
	case l := <-addr:
		if l.err != nil {
			t.Fatalf("ddtop serve: %v", l.err)
		}
		line = l.s
	case <-time.After(60 * time.Second):
		srv.Process.Kill()
		t.Fatal("ddtop serve printed no address line in 60 s")
	}
	target := strings.TrimSuffix(strings.TrimPrefix(line[strings.Index(line, "http://"):], "http://"), "/metrics\n")
	go io.Copy(io.Discard, so)

	// Prometheus, scraping it every second.
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: ddtop\n    static_configs:\n      - targets: ['%s']\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	web := "127.0.0.1:" + strconv.Itoa(freeTCPPort(t))
	pc := exec.CommandContext(ctx, prom, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+web, "--log.level=warn")
	var plog strings.Builder
	pc.Stdout, pc.Stderr = &plog, &plog
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Process.Kill(); pc.Wait() })
	api := "http://" + web

	// The truth: rank 0's segment, sampled every 100 ms by the test.
	seg := rankSegment(t, j.dir, 0)
	type sample struct {
		t0, t1 time.Time // the snapshot was read between t0 and t1
		calls  float64
	}
	var truth []sample
	take := func() {
		t0 := time.Now()
		s, err := seg.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		v := s.Var("image")
		if v == nil {
			t.Fatal("no variable image")
		}
		truth = append(truth, sample{t0, time.Now(), float64(v.Total().Calls)})
	}
	ready := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(api + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(ready) {
			t.Fatalf("prometheus not ready: %v\n%s", err, plog.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Sample until Prometheus has scraped for 9 s.
	sel := `ddstore_calls_total{job="ddtop",rank="0",var="image"}`
	var first time.Time
	deadline := time.Now().Add(40 * time.Second)
	for first.IsZero() || time.Since(first) < 9*time.Second {
		take()
		if first.IsZero() && len(query(t, api, sel, time.Now())) > 0 {
			first = time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus stored no %s:\n%s", sel, plog.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	take()
	mid := func(s sample) time.Time { return s.t0.Add(s.t1.Sub(s.t0) / 2) }
	at := func(ts time.Time) float64 { // the segment's count at ts (linear between samples)
		for i := 1; i < len(truth); i++ {
			if !mid(truth[i]).Before(ts) {
				a, b := truth[i-1], truth[i]
				f := float64(ts.Sub(mid(a))) / float64(mid(b).Sub(mid(a)))
				return a.calls + math.Max(0, math.Min(1, f))*(b.calls-a.calls)
			}
		}
		return truth[len(truth)-1].calls
	}
	// Bounds that no load can break: a snapshot read before ts (it ended
	// by then) counts at most what the segment held at ts; one read after
	// ts (it began then) at least.
	atLeast := func(ts time.Time) float64 {
		lo := 0.0
		for _, s := range truth {
			if !s.t1.After(ts) {
				lo = s.calls
			}
		}
		return lo
	}
	atMost := func(ts time.Time) float64 {
		for _, s := range truth {
			if !s.t0.Before(ts) {
				return s.calls
			}
		}
		return math.Inf(1)
	}

	// Every stored sample lies between the segment's counts at its scrape's
	// timestamp (Prometheus stamps the scrape's start; the count is read
	// after it) and 3 s later (the scrape itself on a loaded machine).
	end := truth[len(truth)-1].t1
	res := query(t, api, sel+"[15s]", end)
	if len(res) != 1 || len(res[0].Values) < 5 {
		t.Fatalf("samples of %s: %+v\nprometheus log:\n%s", sel, res, plog.String())
	}
	for _, v := range res[0].Values {
		ts, val := v.at(), v.val()
		lo, hi := atLeast(ts.Add(-50*time.Millisecond)), atMost(ts.Add(3*time.Second))
		if val < lo || val > hi {
			t.Fatalf("sample %v at %v outside the segment's [%v, %v]", val, ts, lo, hi)
		}
	}
	// The rate over the last 6 s matches the segment's own rate.
	for _, back := range []time.Duration{time.Second, 2 * time.Second} {
		T := end.Add(-back)
		r := query(t, api, "rate("+sel+"[6s])", T)
		if len(r) != 1 {
			t.Fatalf("rate: %+v", r)
		}
		got := r[0].Value.val()
		want := (at(T) - at(T.Add(-6*time.Second))) / 6
		t.Logf("rate at -%v: prometheus %.2f calls/s, segment %.2f calls/s", back, got, want)

		if want <= 0 || math.Abs(got-want) > 0.3*want {
			t.Fatalf("prometheus rate %.2f calls/s, the segment's %.2f", got, want)
		}
	}
}

// rankSegment opens rank's segment in dir.
func rankSegment(t *testing.T, dir string, rank int) *telemetry.Segment {
	t.Helper()
	infos, err := telemetry.Discover(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		if in.Rank == rank && in.State != telemetry.StateInvalid {
			s, err := telemetry.Open(in.Path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	}
	t.Fatalf("no segment of rank %d in %s", rank, dir)
	return nil
}

type promPoint [2]any // [unix seconds (float), "value"]

func (p promPoint) at() time.Time {
	f, _ := p[0].(float64)
	return time.Unix(0, int64(f*1e9))
}

func (p promPoint) val() float64 {
	s, _ := p[1].(string)
	v, _ := strconv.ParseFloat(s, 64)
	return v
}

type promSeries struct {
	Metric map[string]string `json:"metric"`
	Value  promPoint         `json:"value"`
	Values []promPoint       `json:"values"`
}

// query runs an instant query at ts through Prometheus's HTTP API.
func query(t *testing.T, api, q string, ts time.Time) []promSeries {
	t.Helper()
	u := api + "/api/v1/query?query=" + url.QueryEscape(q) + "&time=" + strconv.FormatFloat(float64(ts.UnixNano())/1e9, 'f', 3, 64)
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []promSeries `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" {
		t.Fatalf("query %s: %v %s %s", q, err, r.Status, r.Error)
	}
	return r.Data.Result
}
