package doctor

// The job check (doctor --job): every rank of a job, launched as any
// engine job is (srun, mpiexec, ddrun), opens a store with every read
// through the fabric, reads from a bounded set of others (its ring
// neighbours and a few random ranks, the same draw on every rank), and the
// results are gathered on every rank. The view names the links and hosts
// slower than the job's median by a threshold, and checks that every rank
// made the same choices (provider, window, gather rounds, rxm eager limit,
// config values).

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ddstore/ddstore/engine"
	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/telemetry"
)

// JobOptions configure RunJob; the zero value means the defaults.
type JobOptions struct {
	Config    engine.Config // as engine.LoadConfig returned it
	Random    int           // random partners per rank besides the ring neighbours; default 2
	PerLink   time.Duration // measuring time per link; default 300ms
	Slower    float64       // a link or host is slow below median/Slower bandwidth; default 10
	Progress  io.Writer
	SmallRows int // 3 KB rows per rank (latency); default 256
	BigRows   int // 1 MiB rows per rank, read in one Get (bandwidth); default 4
	Seed      int64
}

func (o *JobOptions) ensureDefaults() {
	if o.Random == 0 {
		o.Random = 2
	}
	if o.PerLink == 0 {
		o.PerLink = 300 * time.Millisecond
	}
	if o.Slower == 0 {
		o.Slower = 10
	}
	if o.SmallRows == 0 {
		o.SmallRows = 256
	}
	if o.BigRows == 0 {
		o.BigRows = 4
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
}

// Choices are what a rank decided; every rank of a job should agree.
type Choices struct {
	Provider    string `json:"provider"`
	Domain      string `json:"domain"`
	Window      int    `json:"window"`
	GatherBytes int    `json:"gather_bytes"`
	EagerLimit  string `json:"eager_limit"` // FI_OFI_RXM_EAGER_LIMIT as libfabric sees it
	Config      string `json:"config"`      // the config's values (not its source)
}

// Link is one measured reader → target pair.
type Link struct {
	From, To         int     // ranks
	FromHost, ToHost string  //
	LatencyUs        float64 `json:"latency_us"` // median single 3 KB Get
	GBps             float64 `json:"gbps"`       // the best Get of 1 MiB rows
	Slow             bool    `json:"slow"`
	Error            string  `json:"error,omitempty"` // the read failed (the link counts as slow)
}

// RankResult is what one rank contributes.
type RankResult struct {
	Rank    int     `json:"rank"`
	Host    string  `json:"host"`
	Choices Choices `json:"choices"`
	Links   []Link  `json:"links"`
	Error   string  `json:"error,omitempty"`
}

// JobReport is the gathered view (every rank has it).
type JobReport struct {
	World        int                 `json:"world"`
	IsRankZero   bool                `json:"-"` // this process is rank 0 (it prints the view)
	Took         float64             `json:"took_s"`
	Ranks        []RankResult        `json:"ranks"`
	MedianLatUs  float64             `json:"median_latency_us"`
	MedianGBps   float64             `json:"median_gbps"`
	SlowLinks    []Link              `json:"slow_links"`
	SlowHosts    []string            `json:"slow_hosts"`
	Disagreement []string            `json:"disagreements"`
	Findings     []telemetry.Finding `json:"findings"`
}

// Partners are the ranks rank r reads from: its ring neighbours and k
// random others, drawn from seed alike on every rank (pure).
func Partners(r, world, k int, seed int64) []int {
	if world < 2 {
		return nil
	}
	set := map[int]bool{(r + 1) % world: true, (r - 1 + world) % world: true}
	rng := rand.New(rand.NewSource(seed + int64(r)*7919))
	for tries := 0; len(set) < min(world-1, 2+k) && tries < 16*world; tries++ {
		if q := rng.Intn(world); q != r {
			set[q] = true
		}
	}
	out := make([]int, 0, len(set))
	for q := range set {
		out = append(out, q)
	}
	sort.Ints(out)
	return out
}

// rowWord is the 8-byte word w of global row g of a doctor variable.
func rowWord(g int64, w int) uint64 { return uint64(g)<<20 ^ uint64(w)*0x9e3779b97f4a7c15 }

func fillRows(b []byte, first int64, rowBytes int) {
	for i := 0; i*rowBytes < len(b); i++ {
		row := b[i*rowBytes : (i+1)*rowBytes]
		for w := 0; w+8 <= rowBytes; w += 8 {
			binary.LittleEndian.PutUint64(row[w:], rowWord(first+int64(i), w/8))
		}
	}
}

func checkRows(b []byte, first int64, rowBytes int) error {
	for i := 0; i*rowBytes < len(b); i++ {
		for w := 0; w+8 <= rowBytes; w += 8 {
			if got := binary.LittleEndian.Uint64(b[i*rowBytes+w:]); got != rowWord(first+int64(i), w/8) {
				return fmt.Errorf("row %d word %d read back wrong: %#x", first+int64(i), w/8, got)
			}
		}
	}
	return nil
}

const (
	smallRow = 3072
	bigRowJ  = 1 << 20
)

// RunJob runs this rank's part of the job check and returns the gathered
// view.
func RunJob(o JobOptions) (*JobReport, error) {
	o.ensureDefaults()
	t0 := time.Now()
	opts := o.Config.StoreOptions()
	opts.NodeMode = engine.NodeModeFabric // every read crosses the fabric: links, not memcpy
	s, err := engine.Open(opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	rank, world := s.Rank(), s.World()
	say := func(format string, a ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "doctor --job rank %d: "+format+"\n", append([]any{rank}, a...)...)
		}
	}
	say("open, %d ranks (%.2fs)", world, time.Since(t0).Seconds())
	host, _ := os.Hostname()
	small := make([]byte, o.SmallRows*smallRow)
	big := make([]byte, o.BigRows*bigRowJ)
	fillRows(small, int64(rank*o.SmallRows), smallRow)
	fillRows(big, int64(rank*o.BigRows), bigRowJ)
	if err := s.Add("doctor.small", engine.Bytes, smallRow, small); err != nil {
		return nil, err
	}
	if err := s.Add("doctor.big", engine.Bytes, bigRowJ, big); err != nil {
		return nil, err
	}
	me := RankResult{Rank: rank, Host: host, Choices: choicesOf(s, o.Config)}
	dst := make([]byte, o.BigRows*bigRowJ)
	partners := Partners(rank, world, o.Random, o.Seed)
	// Connect to every partner before measuring (first contact sets up
	// the connection), then start together.
	for _, q := range partners {
		if err := s.Get("doctor.small", int64(q*o.SmallRows), 1, dst[:smallRow]); err != nil {
			return nil, fmt.Errorf("first read from rank %d: %w", q, err)
		}
	}
	if err := s.Barrier(); err != nil {
		return nil, err
	}
	say("connected to ranks %v (%.2fs)", partners, time.Since(t0).Seconds())
	for _, q := range partners {
		l, err := measureLink(s, q, o, dst)
		l.From, l.FromHost = rank, host
		if err != nil {
			l.Error = err.Error()
			say("reading rank %d: %v", q, err)
		}
		me.Links = append(me.Links, l)
		say("from rank %d: %.1f µs, %.3f GB/s", q, l.LatencyUs, l.GBps)
	}
	rep, err := gatherJob(s, "doctor.job", me, o.Slower)
	if err != nil {
		return nil, err
	}
	// Second chance: each rank measures again the links of its own that
	// were judged slow, and keeps the better figure, so that a link slowed
	// for a moment by the node's load is not named; a rate-limited link
	// stays slow. Every rank gathers twice, whatever it measured.
	for i := range me.Links {
		l := &me.Links[i]
		if !isSlow(rep, rank, l.To) {
			continue
		}
		again, err := measureLink(s, l.To, o, dst)
		if err != nil {
			say("reading rank %d again: %v", l.To, err)
			continue
		}
		say("from rank %d again: %.1f µs, %.3f GB/s", l.To, again.LatencyUs, again.GBps)
		l.GBps, l.Error = max(l.GBps, again.GBps), ""
		l.LatencyUs = min(l.LatencyUs, again.LatencyUs)
	}
	if rep, err = gatherJob(s, "doctor.job.again", me, o.Slower); err != nil {
		return nil, err
	}
	rep.IsRankZero = rank == 0
	rep.Took = time.Since(t0).Seconds()
	return rep, nil
}

// gatherJob gathers every rank's result under tag and judges them.
func gatherJob(s *engine.Store, tag string, me RankResult, slower float64) (*JobReport, error) {
	mine, _ := json.Marshal(me)
	all, err := s.AllGather(tag, mine)
	if err != nil {
		return nil, err
	}
	rep := &JobReport{World: len(all)}
	for r, b := range all {
		var rr RankResult
		if err := json.Unmarshal(b, &rr); err != nil {
			return nil, fmt.Errorf("rank %d sent a result that does not decode: %v", r, err)
		}
		rep.Ranks = append(rep.Ranks, rr)
	}
	judgeJob(rep, slower)
	return rep, nil
}

// isSlow reports whether rep judged the link from → to slow.
func isSlow(rep *JobReport, from, to int) bool {
	for _, l := range rep.SlowLinks {
		if l.From == from && l.To == to {
			return true
		}
	}
	return false
}

func choicesOf(s *engine.Store, c engine.Config) Choices {
	cc := c.Config
	cc.Source = ""
	ch := Choices{Config: fmt.Sprintf("%+v", cc), EagerLimit: fabric.EagerLimit()}
	if f := s.Fabric(); f != nil {
		inf := f.Info()
		ch.Provider, ch.Domain, ch.Window, ch.GatherBytes = inf.Provider, inf.Domain, inf.Window, inf.GatherMaxBytes
	}
	return ch
}

// measureLink reads rank q's rows: single 3 KB Gets (median latency),
// then Gets of all its 1 MiB rows, at least twice and until o.PerLink has
// passed (bandwidth: the best Get, which scheduling noise on a loaded
// node can only lower); every row checked.
func measureLink(s *engine.Store, q int, o JobOptions, dst []byte) (Link, error) {
	l := Link{To: q}
	t0 := time.Now()
	first := int64(q * o.SmallRows)
	var lats []float64
	for i := 0; i < 10 || time.Since(t0) < o.PerLink/4 && i < 1000; i++ {
		g := first + int64(i%o.SmallRows)
		t := time.Now()
		if err := s.Get("doctor.small", g, 1, dst[:smallRow]); err != nil {
			return l, err
		}
		lats = append(lats, float64(time.Since(t).Nanoseconds())/1e3)
		if err := checkRows(dst[:smallRow], g, smallRow); err != nil {
			return l, err
		}
	}
	l.LatencyUs = median(lats)
	bfirst := int64(q * o.BigRows)
	for i := 0; i < 2 || time.Since(t0) < o.PerLink && i < 8; i++ {
		t := time.Now()
		if err := s.Get("doctor.big", bfirst, int64(o.BigRows), dst); err != nil {
			return l, err
		}
		l.GBps = max(l.GBps, float64(len(dst))/time.Since(t).Seconds()/1e9)
		if err := checkRows(dst, bfirst, bigRowJ); err != nil {
			return l, err
		}
	}
	return l, nil
}

// judgeJob fills the medians, the slow links and hosts, the
// disagreements and the findings (pure over rep.Ranks). A link is slow
// when its read failed or its bandwidth is below median/slower (latency is
// reported, not judged: a rate-limited link delays bulk data, and single
// small reads on a loaded node vary more than they tell); a host is slow
// when every measured link that reads from it (or every one it reads
// over) is slow.
func judgeJob(rep *JobReport, slower float64) {
	var lats, bws []float64
	var links []*Link
	for i := range rep.Ranks {
		for j := range rep.Ranks[i].Links {
			l := &rep.Ranks[i].Links[j]
			links = append(links, l)
			if l.Error == "" {
				lats, bws = append(lats, l.LatencyUs), append(bws, l.GBps)
			}
		}
	}
	rep.MedianLatUs, rep.MedianGBps = median(lats), median(bws)
	hosts := map[int]string{}
	for _, r := range rep.Ranks {
		hosts[r.Rank] = r.Host
	}
	type tally struct{ n, slow int }
	asTarget, asReader := map[string]*tally{}, map[string]*tally{}
	count := func(m map[string]*tally, h string, slow bool) {
		if m[h] == nil {
			m[h] = &tally{}
		}
		m[h].n++
		if slow {
			m[h].slow++
		}
	}
	for _, l := range links {
		l.ToHost = hosts[l.To]
		l.Slow = l.Error != "" || l.GBps < rep.MedianGBps/slower
		if l.Slow {
			rep.SlowLinks = append(rep.SlowLinks, *l)
		}
		count(asTarget, l.ToHost, l.Slow)
		count(asReader, l.FromHost, l.Slow)
	}
	seen := map[string]bool{}
	for _, m := range []map[string]*tally{asTarget, asReader} {
		for h, t := range m {
			if t.n > 0 && t.slow == t.n && !seen[h] {
				seen[h] = true
				rep.SlowHosts = append(rep.SlowHosts, h)
			}
		}
	}
	sort.Strings(rep.SlowHosts)
	ref := rep.Ranks[0].Choices
	for _, r := range rep.Ranks[1:] {
		if d := diffChoices(ref, r.Choices); d != "" {
			rep.Disagreement = append(rep.Disagreement, fmt.Sprintf("rank %d (%s) vs rank 0: %s", r.Rank, r.Host, d))
		}
	}
	rep.Findings = []telemetry.Finding{}
	for _, h := range rep.SlowHosts {
		var ev []string
		for _, l := range rep.SlowLinks {
			if l.ToHost == h || l.FromHost == h {
				ev = append(ev, fmt.Sprintf("%s→%s %.3f GB/s %.0f µs", l.ToHost, l.FromHost, l.GBps, l.LatencyUs))
			}
		}
		rep.Findings = append(rep.Findings, telemetry.Finding{Rule: "slow_host", Severity: 1, Rank: -1, Reader: -1, Host: h,
			Evidence: fmt.Sprintf("every link of %s is slower than the job's median %.3f GB/s, %.0f µs by more than %gx: %s",
				h, rep.MedianGBps, rep.MedianLatUs, slower, strings.Join(ev, "; ")),
			Fix: "check the host's NIC, link and switch port (ethtool, tc qdisc show), or leave the host out of the allocation"})
	}
	for _, l := range rep.SlowLinks {
		if seen[l.ToHost] || seen[l.FromHost] {
			continue
		}
		rep.Findings = append(rep.Findings, telemetry.Finding{Rule: "slow_link", Severity: 0.8, Rank: l.From, Reader: -1, Host: l.FromHost,
			Evidence: fmt.Sprintf("reading rank %d on %s: %.3f GB/s, %.0f µs against the job's median %.3f GB/s, %.0f µs (threshold %gx)",
				l.To, l.ToHost, l.GBps, l.LatencyUs, rep.MedianGBps, rep.MedianLatUs, slower),
			Fix: "check the path between the two hosts (routes, MTU, switch ports)"})
	}
	for _, d := range rep.Disagreement {
		rep.Findings = append(rep.Findings, telemetry.Finding{Rule: "choices_differ", Severity: 1, Rank: -1, Reader: -1, Evidence: d,
			Fix: "give every rank the same config (DDSTORE_CONFIG) and environment; set fabric.provider and fabric.iface explicitly",
			Key: "fabric.provider", Env: "DDSTORE_FABRIC"})
	}
}

func diffChoices(a, b Choices) string {
	var d []string
	if a.Provider != b.Provider {
		d = append(d, fmt.Sprintf("provider %s vs %s", b.Provider, a.Provider))
	}
	if a.Window != b.Window {
		d = append(d, fmt.Sprintf("window %d vs %d", b.Window, a.Window))
	}
	if a.GatherBytes != b.GatherBytes {
		d = append(d, fmt.Sprintf("gather rounds %d vs %d bytes", b.GatherBytes, a.GatherBytes))
	}
	if a.EagerLimit != b.EagerLimit {
		d = append(d, fmt.Sprintf("rxm eager limit %q vs %q", b.EagerLimit, a.EagerLimit))
	}
	if a.Config != b.Config {
		d = append(d, "config values differ")
	}
	return strings.Join(d, ", ")
}

// WriteTable writes the job view for people.
func (rep *JobReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "ddstore doctor --job: %d ranks, %.1fs; median %.1f µs, %.3f GB/s\n\n", rep.World, rep.Took, rep.MedianLatUs, rep.MedianGBps)
	fmt.Fprintln(tw, "READER\tHOST\tTARGET\tHOST\tLATENCY µs\tGB/s\t")
	for _, r := range rep.Ranks {
		if r.Error != "" {
			fmt.Fprintf(tw, "%d\t%s\tFAILED: %s\n", r.Rank, r.Host, r.Error)
		}
		for _, l := range r.Links {
			mark := ""
			if l.Slow {
				mark = "SLOW " + l.Error
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%.1f\t%.3f\t%s\n", l.From, l.FromHost, l.To, l.ToHost, l.LatencyUs, l.GBps, mark)
		}
	}
	c := rep.Ranks[0].Choices
	fmt.Fprintf(tw, "\nchoices of rank 0\t%s on %s, window %d, gather rounds %d B, rxm eager limit %s\n",
		c.Provider, c.Domain, c.Window, c.GatherBytes, c.EagerLimit)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.Findings) == 0 {
		fmt.Fprintln(w, "findings: none (every rank agrees, no link slower than the median by the threshold)")
	}
	for _, f := range rep.Findings {
		fmt.Fprintf(w, "  %s %s: %s\n    fix: %s\n", f.Rule, f.Host, f.Evidence, f.Fix)
	}
	return nil
}
