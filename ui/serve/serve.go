// Package serve owns ddtop serve: every telemetry segment of a directory
// exposed at /metrics in the Prometheus exposition format
// (prometheus/client_golang), labelled by job, rank, host, variable and
// phase. It reads the segments only when scraped (read-only, no
// background polling): counters are the segments' own cumulative
// counters (names end in _total, times in seconds; a series appears with
// its first non-zero count, calls excepted), and each variable's
// call-latency histogram becomes a Prometheus histogram of up to 15
// buckets (every second log2 bucket of the segment's, 256 ns to 68.7 s;
// a bucket appears with its first count).
package serve

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/ddstore/ddstore/telemetry"
)

const ns = "ddstore"

var (
	lRank  = []string{"job", "rank", "host"}
	lVar   = []string{"job", "rank", "host", "var"}
	lPhase = []string{"job", "rank", "host", "var", "phase"}
	lPeer  = []string{"job", "rank", "host", "target"}
	lProc  = []string{"job", "rank", "host", "counter"}

	dUp        = prometheus.NewDesc(ns+"_rank_up", "1 while the rank's writer is live (heartbeat fresh, process alive), else 0.", append(lRank, "state"), nil)
	dHeartbeat = prometheus.NewDesc(ns+"_heartbeat_age_seconds", "Age of the rank's last telemetry heartbeat.", lRank, nil)
	dWorld     = prometheus.NewDesc(ns+"_world_size", "World size the rank's segment reports.", lRank, nil)
	dCalls     = prometheus.NewDesc(ns+"_calls_total", "Read calls (Get, GetBatch, ...).", lVar, nil)
	dRows      = prometheus.NewDesc(ns+"_rows_total", "Rows read.", lVar, nil)
	dBytes     = prometheus.NewDesc(ns+"_bytes_total", "Bytes read.", lVar, nil)
	dLocal     = prometheus.NewDesc(ns+"_local_rows_total", "Rows copied from mapped (same-node) shards.", lVar, nil)
	dRemote    = prometheus.NewDesc(ns+"_remote_rows_total", "Rows read through the fabric.", lVar, nil)
	dErrors    = prometheus.NewDesc(ns+"_errors_total", "Read calls that failed.", lVar, nil)
	dRegs      = prometheus.NewDesc(ns+"_mr_registrations_total", "Memory registrations made by read calls.", lVar, nil)
	dFailovers = prometheus.NewDesc(ns+"_failovers_total", "Rows read from another replica after a failure.", lVar, nil)
	dPhase     = prometheus.NewDesc(ns+"_phase_seconds_total", "Time spent in each phase of the read calls.", lPhase, nil)
	dLatency   = prometheus.NewDesc(ns+"_call_latency_seconds", "Duration of read calls (log2 buckets).", lVar, nil)
	dBatches   = prometheus.NewDesc(ns+"_loader_batches_total", "Batches the loader handed to the consumer.", lRank, nil)
	dWait      = prometheus.NewDesc(ns+"_loader_wait_seconds_total", "Time the consumer waited for batches.", lRank, nil)
	dStep      = prometheus.NewDesc(ns+"_loader_step_seconds_total", "Time between batches (the training step, wait included).", lRank, nil)
	dPeerCalls = prometheus.NewDesc(ns+"_peer_calls_total", "Read calls that read from the target rank.", lPeer, nil)
	dPeerRows  = prometheus.NewDesc(ns+"_peer_rows_total", "Rows read from the target rank.", lPeer, nil)
	dPeerSecs  = prometheus.NewDesc(ns+"_peer_seconds_total", "Time attributed to reads from the target rank.", lPeer, nil)
	dPeerErrs  = prometheus.NewDesc(ns+"_peer_errors_total", "Failed calls blamed on the target rank.", lPeer, nil)
	dProc      = prometheus.NewDesc(ns+"_process_events_total", "Engine process counters (quarantined readers, leaked buffers, ...).", lProc, nil)
	dBad       = prometheus.NewDesc(ns+"_unreadable_segments", "Segments in the directory that could not be read.", nil, nil)
)

// latencyTop are the telemetry buckets whose upper bounds are the
// Prometheus buckets' (every second log2 bucket, 256 ns to 68.7 s, then
// +Inf): 15 buckets a variable instead of 40 keep a scrape cheap.
var latencyTop = func() []int {
	var t []int
	for i := 8; i <= 36; i += 2 {
		t = append(t, i)
	}
	return t
}()

// latencyBounds are latencyTop's upper bounds in seconds.
var latencyBounds = func() []float64 {
	b := make([]float64, len(latencyTop))
	for k, i := range latencyTop {
		_, hi := telemetry.BucketBounds(i)
		b[k] = float64(hi) / 1e9
	}
	return b
}()

// Collector is a prometheus.Collector over the segments of one directory.
type Collector struct {
	// Gzip makes Handler compress /metrics when the scraper accepts it.
	// Off by default: compressing a scrape costs more of ddtop's CPU than
	// encoding it (a third of a scrape's time), and a scrape (~370 KiB of
	// text for 64 ranks) is small beside any cluster network.
	Gzip bool

	dir, job string
	segDir   *telemetry.SegmentDir
	mu       sync.Mutex
	segs     map[string]*telemetry.Segment // open segments by path
	checked  []*telemetry.Segment          // scratch for check
	check    telemetry.WriterCheck
	// Label pairs of every series, built (and checked) once rather than
	// on every scrape, by desc and label values; entries not used by a
	// scrape are dropped after it.
	labels map[string]*labelSet
	scrape uint64
	key    []byte
	snap   telemetry.Snapshot // each segment's snapshot in turn (emit keeps nothing of it)
}

type labelSet struct {
	pairs []*dto.LabelPair
	used  uint64
}

// NewCollector follows dir (only job's segments when job is not "").
func NewCollector(dir, job string) *Collector {
	return &Collector{dir: dir, job: job, segDir: telemetry.NewSegmentDir(dir), segs: map[string]*telemetry.Segment{}, labels: map[string]*labelSet{}}
}

// pairs are the label pairs of desc d with values l, from the cache.
func (c *Collector) pairs(d *prometheus.Desc, l []string) []*dto.LabelPair {
	k := append(c.key[:0], descIndex[d])
	for _, v := range l {
		k = append(append(k, 0xff), v...)
	}
	c.key = k
	ls := c.labels[string(k)]
	if ls == nil {
		ls = &labelSet{pairs: prometheus.MakeLabelPairs(d, l)}
		c.labels[string(k)] = ls
	}
	ls.used = c.scrape
	return ls.pairs
}

// series is one counter or gauge sample with cached label pairs: what
// prometheus.MustNewConstMetric makes, without building and checking
// the labels again on every scrape.
type series struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair
	counter bool
	v       float64
}

func (s *series) Desc() *prometheus.Desc { return s.desc }

func (s *series) Write(out *dto.Metric) error {
	out.Label = s.labels
	if s.counter {
		out.Counter = &dto.Counter{Value: &s.v}
	} else {
		out.Gauge = &dto.Gauge{Value: &s.v}
	}
	return nil
}

// histogram is a histogram sample with cached label pairs (as
// prometheus.MustNewConstHistogram makes it).
type histogram struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	h      dto.Histogram
}

func (h *histogram) Desc() *prometheus.Desc { return h.desc }

func (h *histogram) Write(out *dto.Metric) error {
	out.Label = h.labels
	out.Histogram = &h.h
	return nil
}

// descs are every metric's description; descIndex numbers them.
var (
	descs = []*prometheus.Desc{dUp, dHeartbeat, dWorld, dCalls, dRows, dBytes, dLocal, dRemote, dErrors,
		dRegs, dFailovers, dPhase, dLatency, dBatches, dWait, dStep, dPeerCalls, dPeerRows, dPeerSecs, dPeerErrs, dProc, dBad}
	descIndex = func() map[*prometheus.Desc]byte {
		m := map[*prometheus.Desc]byte{}
		for i, d := range descs {
			m[d] = byte(i)
		}
		return m
	}()
)

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descs {
		ch <- d
	}
}

// Close unmaps every segment.
func (c *Collector) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, s := range c.segs {
		s.Close()
		delete(c.segs, p)
	}
}

func (c *Collector) open(path string) *telemetry.Segment { return c.segs[path] }

// Collect snapshots every segment and sends its metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scrape++
	defer c.prune()
	c.checked = c.checked[:0]
	for _, s := range c.segs {
		c.checked = append(c.checked, s)
	}
	c.check.Check(c.checked) // one poll tells which writers exited
	clear(c.checked)
	infos, err := c.segDir.Discover(c.open)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(dBad, err)
		return
	}
	seen := map[string]bool{}
	bad := 0
	for _, in := range infos {
		if c.job != "" && in.Job != c.job {
			continue
		}
		if in.State == telemetry.StateInvalid {
			bad++
			continue
		}
		seen[in.Path] = true
		s := c.segs[in.Path]
		if s == nil {
			if s, err = telemetry.Open(in.Path); err != nil {
				bad++
				continue
			}
			c.segs[in.Path] = s
		}
		err := s.SnapshotTo(&c.snap)
		snap := &c.snap
		if err != nil || snap.StartNs != in.StartNs {
			s.Close() // replaced by a new incarnation, or gone: reopen next time
			delete(c.segs, in.Path)
			if err != nil {
				bad++
			}
			continue
		}
		c.emit(ch, snap)
	}
	for p, s := range c.segs {
		if !seen[p] {
			s.Close()
			delete(c.segs, p)
		}
	}
	ch <- prometheus.MustNewConstMetric(dBad, prometheus.GaugeValue, float64(bad))
}

// prune drops the label sets the last scrape did not use (vanished
// segments, variables and states).
func (c *Collector) prune() {
	for k, ls := range c.labels {
		if ls.used != c.scrape {
			delete(c.labels, k)
		}
	}
}

// emit sends one segment's metrics.
func (c *Collector) emit(ch chan<- prometheus.Metric, s *telemetry.Snapshot) {
	rank := strconv.Itoa(s.Rank)
	rl := []string{s.Job, rank, s.Host}
	up := 0.0
	if s.State == telemetry.StateLive {
		up = 1
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- &series{desc: d, labels: c.pairs(d, l), v: v}
	}
	// A counter series appears with its first count, as a labelled
	// counter of client_golang does on first use: the many counters that
	// stay zero (gpu_sync without a GPU, errors, failovers) cost nothing.
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		if v != 0 {
			ch <- &series{desc: d, labels: c.pairs(d, l), counter: true, v: v}
		}
	}
	gauge(dUp, up, append(rl, s.State)...)
	gauge(dHeartbeat, math.Max(s.HeartbeatAge.Seconds(), 0), rl...)
	gauge(dWorld, float64(s.World), rl...)
	for i := range s.Vars {
		v := &s.Vars[i]
		t := v.Total()
		vl := append(rl[:3:3], v.Name)
		ch <- &series{desc: dCalls, labels: c.pairs(dCalls, vl), counter: true, v: float64(t.Calls)} // even 0: the variable exists
		counter(dRows, float64(t.Rows), vl...)
		counter(dBytes, float64(t.Bytes), vl...)
		counter(dLocal, float64(t.LocalRows), vl...)
		counter(dRemote, float64(t.RemoteRows), vl...)
		counter(dErrors, float64(t.Errors), vl...)
		counter(dRegs, float64(t.MRRegs), vl...)
		counter(dFailovers, float64(t.Failovers), vl...)
		for p, n := range t.PhaseNs {
			counter(dPhase, float64(n)/1e9, append(vl[:4:4], telemetry.PhaseNames[p])...)
		}
		// Prometheus histograms are cumulative; the last bucket is +Inf
		// (the count). The sum is exact: the calls' phases add up to it.
		h := &histogram{desc: dLatency, labels: c.pairs(dLatency, vl)}
		bs := make([]dto.Bucket, len(latencyBounds))
		cums := make([]uint64, len(latencyBounds))
		h.h.Bucket = make([]*dto.Bucket, 0, len(latencyBounds))
		var cum uint64
		next := 0
		for k, top := range latencyTop {
			for ; next <= top; next++ {
				cum += t.CallHist[next]
			}
			if cum == 0 {
				// Like a counter, a bucket appears with its first
				// count: the empty buckets below the fastest call
				// say nothing (histogram_quantile reads the first
				// bucket present as starting at 0 either way).
				continue
			}
			cums[k] = cum
			bs[k].CumulativeCount, bs[k].UpperBound = &cums[k], &latencyBounds[k]
			h.h.Bucket = append(h.h.Bucket, &bs[k])
		}
		count := cum
		for ; next < telemetry.NumBuckets; next++ {
			count += t.CallHist[next]
		}
		sum := float64(t.TotalNs()) / 1e9
		h.h.SampleCount, h.h.SampleSum = &count, &sum
		ch <- h
	}
	l := s.Loader
	if l.Batches > 0 {
		counter(dBatches, float64(l.Batches), rl...)
		counter(dWait, float64(l.WaitNs)/1e9, rl...)
		counter(dStep, float64(l.StepNs)/1e9, rl...)
	}
	for _, p := range s.Peers {
		pl := append(rl[:3:3], strconv.Itoa(p.Rank))
		counter(dPeerCalls, float64(p.Calls), pl...)
		counter(dPeerRows, float64(p.Rows), pl...)
		counter(dPeerSecs, float64(p.Ns)/1e9, pl...)
		counter(dPeerErrs, float64(p.Errors), pl...)
	}
	for i, v := range s.Proc {
		if v != 0 {
			counter(dProc, float64(v), append(rl[:3:3], telemetry.ProcNames[i])...)
		}
	}
}

// Handler serves /metrics for the collector (and nothing else of ours:
// client_golang's own process metrics are left out, ddtop is not what
// is being watched).
func Handler(c *Collector) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("ddtop serve: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", whole(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, DisableCompression: !c.Gzip})))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "ddtop serve: ddstore telemetry of", c.dir, "at /metrics")
	})
	return mux, nil
}

// whole sends h's response in one piece with its Content-Length: a scrape
// of 64 ranks (~320 KiB of text) goes out in a few large writes instead of
// ~80 chunks of 4 KiB, each a system call.
func whole(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := bodies.Get().(*bytes.Buffer)
		defer bodies.Put(b)
		b.Reset()
		bw := &bufferedResponse{ResponseWriter: w, body: b, code: http.StatusOK}
		h.ServeHTTP(bw, r)
		w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
		w.WriteHeader(bw.code)
		w.Write(b.Bytes())
	})
}

// bodies are the response buffers of whole, kept between scrapes.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// bufferedResponse keeps a handler's status and body for whole.
type bufferedResponse struct {
	http.ResponseWriter
	body *bytes.Buffer
	code int
}

func (b *bufferedResponse) WriteHeader(code int)        { b.code = code }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.body.Write(p) }
