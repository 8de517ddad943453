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
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/ddstore/ddstore/telemetry"
)

const ns = "ddstore"

var (
	lRank  = []string{"job", "rank", "host"}
	lVar   = []string{"job", "rank", "host", "var"}
	lPhase = []string{"job", "rank", "host", "var", "phase"}
	lPeer  = []string{"job", "rank", "host", "target"}
	lProc  = []string{"job", "rank", "host", "counter"}
)

// metric is one metric family: its description for client_golang, and
// its place among the collector's families.
type metric struct {
	desc  *prometheus.Desc
	name  string
	help  string
	typ   dto.MetricType
	index int
}

// metrics are every family, numbered by newMetric in the order declared.
var metrics []*metric

func newMetric(name, help string, typ dto.MetricType, labels []string) *metric {
	m := &metric{desc: prometheus.NewDesc(ns+"_"+name, help, labels, nil), name: ns + "_" + name, help: help, typ: typ, index: len(metrics)}
	metrics = append(metrics, m)
	return m
}

const (
	gauge   = dto.MetricType_GAUGE
	counter = dto.MetricType_COUNTER
)

var (
	mUp        = newMetric("rank_up", "1 while the rank's writer is live (heartbeat fresh, process alive), else 0.", gauge, append(lRank, "state"))
	mHeartbeat = newMetric("heartbeat_age_seconds", "Age of the rank's last telemetry heartbeat.", gauge, lRank)
	mWorld     = newMetric("world_size", "World size the rank's segment reports.", gauge, lRank)
	mCalls     = newMetric("calls_total", "Read calls (Get, GetBatch, ...).", counter, lVar)
	mRows      = newMetric("rows_total", "Rows read.", counter, lVar)
	mBytes     = newMetric("bytes_total", "Bytes read.", counter, lVar)
	mLocal     = newMetric("local_rows_total", "Rows copied from mapped (same-node) shards.", counter, lVar)
	mRemote    = newMetric("remote_rows_total", "Rows read through the fabric.", counter, lVar)
	mErrors    = newMetric("errors_total", "Read calls that failed.", counter, lVar)
	mRegs      = newMetric("mr_registrations_total", "Memory registrations made by read calls.", counter, lVar)
	mFailovers = newMetric("failovers_total", "Rows read from another replica after a failure.", counter, lVar)
	mPhase     = newMetric("phase_seconds_total", "Time spent in each phase of the read calls.", counter, lPhase)
	mLatency   = newMetric("call_latency_seconds", "Duration of read calls (log2 buckets).", dto.MetricType_HISTOGRAM, lVar)
	mBatches   = newMetric("loader_batches_total", "Batches the loader handed to the consumer.", counter, lRank)
	mWait      = newMetric("loader_wait_seconds_total", "Time the consumer waited for batches.", counter, lRank)
	mStep      = newMetric("loader_step_seconds_total", "Time between batches (the training step, wait included).", counter, lRank)
	mPeerCalls = newMetric("peer_calls_total", "Read calls that read from the target rank.", counter, lPeer)
	mPeerRows  = newMetric("peer_rows_total", "Rows read from the target rank.", counter, lPeer)
	mPeerSecs  = newMetric("peer_seconds_total", "Time attributed to reads from the target rank.", counter, lPeer)
	mPeerErrs  = newMetric("peer_errors_total", "Failed calls blamed on the target rank.", counter, lPeer)
	mProc      = newMetric("process_events_total", "Engine process counters (quarantined readers, leaked buffers, ...).", counter, lProc)
	mBad       = newMetric("unreadable_segments", "Segments in the directory that could not be read.", gauge, nil)
)

// byName are the metrics in the order of their names.
var byName = func() []*metric {
	s := slices.Clone(metrics)
	slices.SortFunc(s, func(a, b *metric) int { return strings.Compare(a.name, b.name) })
	return s
}()

// latencyTop are the telemetry buckets whose upper bounds are the
// Prometheus buckets' (every second log2 bucket, 256 ns to 68.7 s, then
// +Inf): 15 buckets a variable instead of 40 keep a scrape cheap.
var latencyTop = func() (t [latencyBuckets]int) {
	for k := range t {
		t[k] = 8 + 2*k
	}
	return t
}()

const latencyBuckets = 15

// latencyBounds are latencyTop's upper bounds in seconds.
var latencyBounds = func() []float64 {
	b := make([]float64, len(latencyTop))
	for k, i := range latencyTop {
		_, hi := telemetry.BucketBounds(i)
		b[k] = float64(hi) / 1e9
	}
	return b
}()

// Collector reads the segments of one directory when scraped. It is a
// prometheus.TransactionalGatherer, which Handler serves: a scrape fills
// families, samples and label pairs kept from the scrapes before it, sorts
// them as client_golang's registry would, and allocates little. It is
// also a prometheus.Collector, for a registry of one's own (at the
// registry's price: a copy of every sample, then its checks and sort).
type Collector struct {
	// Gzip makes Handler compress /metrics when the scraper accepts it.
	// Off by default: compressing a scrape costs more of ddtop's CPU than
	// encoding it (a third of a scrape's time), and a scrape (~370 KiB of
	// text for 64 ranks) is small beside any cluster network.
	Gzip bool

	dir, job string
	segDir   *telemetry.SegmentDir
	mu       sync.Mutex                    // held from Gather to its done
	segs     map[string]*telemetry.Segment // open segments by path
	seen     map[string]bool               // scratch for Gather
	checked  []*telemetry.Segment          // scratch for check
	infos    []telemetry.SegmentInfo       // scratch for Gather
	check    telemetry.WriterCheck
	// Label pairs of every series, built once rather than
	// on every scrape, by metric and label values; entries not used by a
	// scrape are dropped after it.
	labels map[string]*labelSet
	scrape uint64
	key    []byte
	snap   telemetry.Snapshot // each segment's snapshot in turn (emit keeps only its strings)

	fams    []*dto.MetricFamily // by metric index
	rows    [][]*sample         // this scrape's samples, by metric index
	out     []*dto.MetricFamily // what Gather returns
	samples []*sample           // every sample made so far; the first used are this scrape's
	used    int
}

// labelSet is one series' label pairs, and their values in the same
// order (by label name): what a scrape sorts the series by.
type labelSet struct {
	pairs  []*dto.LabelPair
	values []string
	used   uint64
}

// sample is one series of a scrape, reused by the scrapes after it.
type sample struct {
	m      dto.Metric
	c      dto.Counter
	g      dto.Gauge
	v      float64
	values []string // the labelSet's
	h      *latency // for mLatency
}

// latency is the histogram of one sample.
type latency struct {
	h     dto.Histogram
	b     [latencyBuckets]dto.Bucket
	ptrs  [latencyBuckets]*dto.Bucket
	cum   [latencyBuckets]uint64
	count uint64
	sum   float64
}

// NewCollector follows dir (only job's segments when job is not "").
func NewCollector(dir, job string) *Collector {
	c := &Collector{dir: dir, job: job, segDir: telemetry.NewSegmentDir(dir), segs: map[string]*telemetry.Segment{},
		seen: map[string]bool{}, labels: map[string]*labelSet{}, rows: make([][]*sample, len(metrics))}
	for _, m := range metrics {
		c.fams = append(c.fams, &dto.MetricFamily{Name: &m.name, Help: &m.help, Type: &m.typ})
	}
	return c
}

// pairs are the label set of metric m with values l, from the cache.
func (c *Collector) pairs(m *metric, l []string) *labelSet {
	k := append(c.key[:0], byte(m.index))
	for _, v := range l {
		k = append(append(k, 0xff), v...)
	}
	c.key = k
	ls := c.labels[string(k)]
	if ls == nil {
		// Valid UTF-8, as the exposition format needs: telemetry
		// decodes every name so.
		ls = &labelSet{pairs: prometheus.MakeLabelPairs(m.desc, l)}
		for _, p := range ls.pairs {
			ls.values = append(ls.values, p.GetValue())
		}
		c.labels[string(k)] = ls
	}
	ls.used = c.scrape
	return ls
}

// add starts a sample of m with labels l in this scrape.
func (c *Collector) add(m *metric, l []string) *sample {
	if c.used == len(c.samples) {
		c.samples = append(c.samples, &sample{})
	}
	s := c.samples[c.used]
	c.used++
	ls := c.pairs(m, l)
	s.m.Label, s.values = ls.pairs, ls.values
	s.m.Counter, s.m.Gauge, s.m.Histogram = nil, nil, nil
	c.rows[m.index] = append(c.rows[m.index], s)
	return s
}

// value adds a counter or gauge sample.
func (c *Collector) value(m *metric, v float64, l []string) {
	s := c.add(m, l)
	s.v = v
	if m.typ == counter {
		s.c.Value, s.m.Counter = &s.v, &s.c
	} else {
		s.g.Value, s.m.Gauge = &s.v, &s.g
	}
}

// Gather reads every segment and returns their families, sorted as
// client_golang's registry sorts them (families by name, series by label
// values; a series that two segments carry, such as two incarnations of
// one rank, is sent once, from the segment read first, as the registry
// does). They stay valid until done is called, and no other scrape runs
// until then.
func (c *Collector) Gather() (_ []*dto.MetricFamily, done func(), _ error) {
	c.mu.Lock()
	done = c.mu.Unlock
	defer func() {
		if r := recover(); r != nil {
			c.mu.Unlock() // no done for a panic: the next scrape must not wait forever
			panic(r)
		}
	}()
	if err := c.gather(); err != nil {
		return nil, done, err
	}
	c.out = c.out[:0]
	for _, m := range byName {
		rows := c.rows[m.index]
		if len(rows) == 0 {
			continue
		}
		slices.SortStableFunc(rows, func(a, b *sample) int { return slices.Compare(a.values, b.values) })
		f := c.fams[m.index]
		f.Metric = f.Metric[:0]
		for k, s := range rows {
			if k > 0 && slices.Equal(s.values, rows[k-1].values) {
				continue
			}
			f.Metric = append(f.Metric, &s.m)
		}
		c.out = append(c.out, f)
	}
	return c.out, done, nil
}

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range metrics {
		ch <- m.desc
	}
}

// Collect sends a copy of every sample of a scrape.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	fams, done, err := c.Gather()
	defer done()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(mBad.desc, err)
		return
	}
	for _, f := range fams {
		d := metricNamed(f.GetName()).desc
		for _, m := range f.Metric {
			ch <- &copied{desc: d, m: proto.Clone(m).(*dto.Metric)}
		}
	}
}

func metricNamed(name string) *metric {
	i, _ := slices.BinarySearchFunc(byName, name, func(m *metric, n string) int { return strings.Compare(m.name, n) })
	return byName[i]
}

// copied is one sample as Collect sends it.
type copied struct {
	desc *prometheus.Desc
	m    *dto.Metric
}

func (s *copied) Desc() *prometheus.Desc { return s.desc }

func (s *copied) Write(out *dto.Metric) error {
	out.Label, out.Counter, out.Gauge, out.Histogram = s.m.Label, s.m.Counter, s.m.Gauge, s.m.Histogram
	return nil
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

// gather snapshots every segment into this scrape's samples.
func (c *Collector) gather() error {
	c.scrape++
	defer c.prune()
	c.used = 0
	for i := range c.rows {
		clear(c.rows[i])
		c.rows[i] = c.rows[i][:0]
	}
	c.checked = c.checked[:0]
	for _, s := range c.segs {
		c.checked = append(c.checked, s)
	}
	c.check.Check(c.checked) // one poll tells which writers exited
	clear(c.checked)
	infos, err := c.segDir.AppendDiscover(c.infos[:0], c.open)
	c.infos = infos[:0]
	if err != nil {
		return fmt.Errorf("ddtop serve: %w", err)
	}
	clear(c.seen)
	bad := 0
	for _, in := range infos {
		if c.job != "" && in.Job != c.job {
			continue
		}
		if in.State == telemetry.StateInvalid {
			bad++
			continue
		}
		c.seen[in.Path] = true
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
		c.emit(snap)
	}
	for p, s := range c.segs {
		if !c.seen[p] {
			s.Close()
			delete(c.segs, p)
		}
	}
	c.value(mBad, float64(bad), nil)
	return nil
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

// emit adds one segment's samples.
func (c *Collector) emit(s *telemetry.Snapshot) {
	var l [5]string // job, rank, host, then var and phase, target or counter
	l[0], l[1], l[2] = s.Job, strconv.Itoa(s.Rank), s.Host
	rl := l[:3]
	up := 0.0
	if s.State == telemetry.StateLive {
		up = 1
	}
	// A counter series appears with its first count, as a labelled
	// counter of client_golang does on first use: the many counters that
	// stay zero (gpu_sync without a GPU, errors, failovers) cost nothing.
	count := func(m *metric, v float64, l []string) {
		if v != 0 {
			c.value(m, v, l)
		}
	}
	l[3] = s.State
	c.value(mUp, up, l[:4])
	c.value(mHeartbeat, math.Max(s.HeartbeatAge.Seconds(), 0), rl)
	c.value(mWorld, float64(s.World), rl)
	for i := range s.Vars {
		v := &s.Vars[i]
		t := v.Total()
		l[3] = v.Name
		vl := l[:4]
		c.value(mCalls, float64(t.Calls), vl) // even 0: the variable exists
		count(mRows, float64(t.Rows), vl)
		count(mBytes, float64(t.Bytes), vl)
		count(mLocal, float64(t.LocalRows), vl)
		count(mRemote, float64(t.RemoteRows), vl)
		count(mErrors, float64(t.Errors), vl)
		count(mRegs, float64(t.MRRegs), vl)
		count(mFailovers, float64(t.Failovers), vl)
		for p, n := range t.PhaseNs {
			l[4] = telemetry.PhaseNames[p]
			count(mPhase, float64(n)/1e9, l[:5])
		}
		c.latency(vl, &t)
	}
	ld := s.Loader
	if ld.Batches > 0 {
		count(mBatches, float64(ld.Batches), rl)
		count(mWait, float64(ld.WaitNs)/1e9, rl)
		count(mStep, float64(ld.StepNs)/1e9, rl)
	}
	for _, p := range s.Peers {
		l[3] = strconv.Itoa(p.Rank)
		pl := l[:4]
		count(mPeerCalls, float64(p.Calls), pl)
		count(mPeerRows, float64(p.Rows), pl)
		count(mPeerSecs, float64(p.Ns)/1e9, pl)
		count(mPeerErrs, float64(p.Errors), pl)
	}
	for i, v := range s.Proc {
		l[3] = telemetry.ProcNames[i]
		count(mProc, float64(v), l[:4])
	}
}

// latency adds a variable's call-latency histogram. Prometheus
// histograms are cumulative; the last bucket is +Inf (the count). The sum
// is exact: the calls' phases add up to it.
func (c *Collector) latency(vl []string, t *telemetry.Counters) {
	s := c.add(mLatency, vl)
	if s.h == nil {
		s.h = &latency{}
	}
	h := s.h
	h.h.Bucket = h.ptrs[:0]
	var cum uint64
	next := 0
	for k, top := range latencyTop {
		for ; next <= top; next++ {
			cum += t.CallHist[next]
		}
		if cum == 0 {
			// Like a counter, a bucket appears with its first count:
			// the empty buckets below the fastest call say nothing
			// (histogram_quantile reads the first bucket present as
			// starting at 0 either way).
			continue
		}
		h.cum[k] = cum
		h.b[k].CumulativeCount, h.b[k].UpperBound = &h.cum[k], &latencyBounds[k]
		h.h.Bucket = append(h.h.Bucket, &h.b[k])
	}
	h.count = cum
	for ; next < telemetry.NumBuckets; next++ {
		h.count += t.CallHist[next]
	}
	h.sum = float64(t.TotalNs()) / 1e9
	h.h.SampleCount, h.h.SampleSum = &h.count, &h.sum
	s.m.Histogram = &h.h
}

// Handler serves /metrics for the collector (and nothing else of ours:
// client_golang's own process metrics are left out, ddtop is not what
// is being watched).
func Handler(c *Collector) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", whole(promhttp.HandlerForTransactional(c, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, DisableCompression: !c.Gzip})))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "ddtop serve: ddstore telemetry of", c.dir, "at /metrics")
	})
	return mux
}

// whole sends h's response in one piece with its Content-Length: a scrape
// of 64 ranks (~320 KiB of text) goes out in a few large writes instead of
// ~80 chunks of 4 KiB, each a system call. It also keeps the network out
// of the Collector's lock, held from Gather until the body is encoded: a
// slow scraper never stalls another.
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
