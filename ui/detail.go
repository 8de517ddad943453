package ui

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/viewport"

	"github.com/ddstore/ddstore/telemetry"
	"github.com/ddstore/ddstore/ui/components/bar"
	"github.com/ddstore/ddstore/ui/components/columns"
	"github.com/ddstore/ddstore/ui/data"
	"github.com/ddstore/ddstore/ui/diagnose"
	"github.com/ddstore/ddstore/ui/styles"
)

// detail is the drill-down on one rank: phases, latency histogram,
// throughput sparkline, per-reader stripes and recent calls, in a
// scrolling viewport.
type detail struct {
	findings []diagnose.Finding // of the whole frame; the page shows the rank's
	path     string             // the rank's segment; "" = none chosen yet
	rank     *data.Rank
	vp       viewport.Model
	width    int
}

func newDetail() detail { return detail{vp: viewport.New(80, 10)} }

func (d *detail) setSize(w, h int) {
	d.width = w
	d.vp.Width, d.vp.Height = w, max(h, 1)
	d.render()
}

// setFrame finds the followed rank in the frame; a rank that vanished keeps
// its last contents, marked gone. The page is drawn again when draw is set
// (it is shown); otherwise when it is next sized (setView lays out).
func (d *detail) setFrame(f *data.Frame, draw bool) {
	if f == nil || d.path == "" {
		if draw {
			d.render()
		}
		return
	}
	found := false
	for _, r := range f.Ranks {
		if r.Path == d.path {
			d.rank, found = r, true
			break
		}
	}
	if !found && d.rank != nil && d.rank.State != "gone" {
		gone := d.rank.Clone() // its frame's ranks may be recycled
		gone.State = "gone"
		d.rank = gone
	}
	if draw {
		d.render()
	}
}

func (d *detail) follow(path string, f *data.Frame) {
	if path != d.path {
		d.vp.GotoTop()
	}
	d.path, d.rank = path, nil
	d.setFrame(f, true)
}

// render draws the page for the viewport's current offset (the recent
// calls are drawn only where they are on screen), so it runs again after
// every scroll.
func (d *detail) render() {
	off := d.vp.YOffset
	d.vp.SetContent(d.content(off))
	d.vp.SetYOffset(off)
	if d.vp.YOffset != off { // the page got shorter: draw for where it shows
		d.vp.SetContent(d.content(d.vp.YOffset))
	}
}

func (d *detail) view() string { return d.vp.View() }

// content draws the page for a viewport scrolled to line off.
func (d *detail) content(off int) string {
	r := d.rank
	if r == nil {
		return styles.Faint.Render("no rank selected: pick one in the ranks view and press enter")
	}
	w := max(d.width, 20)
	var b strings.Builder
	line := func(s string) { b.WriteString(s); b.WriteByte('\n') }

	line(styles.Title.Render(fmt.Sprintf("rank %d/%d", r.Rank, r.World)) +
		fmt.Sprintf(" %s pid %d ", r.Host, r.Pid) + styles.State(r.State) +
		fmt.Sprintf("  job %s  up %s  heartbeat %s ago", r.Job, age(time.Since(r.Start)), age(r.HeartbeatAge)))
	line(fmt.Sprintf("provider %s  readers %s  bootstrap %s", orDash(r.Provider), orDash(r.ReaderMode), orDash(r.Method)))
	s := r.Stat
	line(fmt.Sprintf("calls/s %s  rows/s %s  MB/s %s  µs/row %s  call p50 %s  p99 %s",
		si(s.CallsPerSec()), si(s.RowsPerSec()), mbps(s.BytesPerSec()), us(s.NsPerRow()),
		dur(s.CallQuantile(0.5)), dur(s.CallQuantile(0.99))))
	line(fmt.Sprintf("total: calls %s  rows %s (local %s, remote %s)  bytes %s  errors %d",
		si(float64(s.Total.Calls)), si(float64(s.Total.Rows)), si(float64(s.Total.LocalRows)),
		si(float64(s.Total.RemoteRows)), si(float64(s.Total.Bytes)), s.Total.Errors))
	if r.Loader.Present() {
		l := r.Loader
		line(fmt.Sprintf("loader: fetch wait %s/batch vs step %s/batch, waiting %s of the time (%d batches)",
			dur(l.MeanWaitNs()), dur(l.MeanStepNs()), pct(l.WaitShare()), l.Total.Batches))
	}
	if c := r.Loader.Total.Config; c != (telemetry.LoaderConfig{}) {
		pre := fmt.Sprint(c.Prefetch)
		if c.PrefetchMax > 0 {
			pre = fmt.Sprintf("%d (auto, max %d)", c.Prefetch, c.PrefetchMax)
		}
		line(fmt.Sprintf("loader config: workers %d  prefetch %s  readers %s  batch %d rows",
			c.Workers, pre, loaderReaders(c.Readers), c.BatchRows))
	}
	if pc := procLine(r.Proc); pc != "" {
		line(styles.Warn.Render(pc))
	}
	if r.BadCalls > 0 {
		line(styles.Warn.Render(fmt.Sprintf("%d calls recorded for an unknown variable or reader", r.BadCalls)))
	}
	if fs := rankFindings(d.findings, r); len(fs) > 0 {
		line("")
		line(styles.Section.Render("FINDINGS") + fmt.Sprintf(" (%d, worst first)", len(fs)))
		for _, f := range fs {
			line(findingLine(f, w))
		}
	}

	line("")
	line(styles.Section.Render("PHASES") + styles.Faint.Render(" (interval when it saw calls, else cumulative)"))
	win := s.Window()
	share := s.PhaseShare()
	pt := columns.New([]columns.Column{
		{Title: "PHASE", Width: 10}, {Title: "TOTAL", Width: 9, Right: true}, {Title: "SHARE", Width: 6, Right: true},
		{Title: "PER CALL", Width: 9, Right: true}, {Title: "", Width: 10, Flex: true}})
	pt.SetStatic(true)
	rows := make([][]string, telemetry.NumPhases)
	for i := range telemetry.NumPhases {
		per := 0.0
		if win.Calls > 0 {
			per = float64(win.PhaseNs[i]) / float64(win.Calls)
		}
		bw := max(w-40, 10)
		rows[i] = []string{telemetry.PhaseNames[i], dur(float64(win.PhaseNs[i])), pct(share[i]), dur(per),
			bar.Horizontal(share[i], 1, bw)}
	}
	pt.SetSize(w, telemetry.NumPhases+1)
	pt.SetRows(rows, nil)
	line(pt.View())
	// The stacked bar in colour (table cells are plain text).
	line(" " + bar.Phases(share[:], w-2))

	line("")
	hist := win.CallHist
	line(styles.Section.Render("CALL LATENCY") + fmt.Sprintf(" (%d calls, p50 %s, p99 %s)", hist.Count(),
		dur(hist.Quantile(0.5)), dur(hist.Quantile(0.99))))
	lo, hi := -1, -1
	var most uint64
	for i, c := range hist {
		if c > 0 {
			if lo < 0 {
				lo = i
			}
			hi = i
			most = max(most, c)
		}
	}
	if lo < 0 {
		line(styles.Faint.Render("  no calls"))
	}
	for i := lo; i >= 0 && i <= hi; i++ {
		_, up := telemetry.BucketBounds(i)
		label := "< " + dur(float64(up))
		if i == telemetry.NumBuckets-1 {
			blo, _ := telemetry.BucketBounds(i)
			label = "≥ " + dur(float64(blo))
		}
		line(fmt.Sprintf("  %9s %8d %s", label, hist[i], bar.Horizontal(float64(hist[i]), float64(most), max(w-24, 5))))
	}

	line("")
	peak := 0.0
	for _, v := range r.RowsHistory {
		peak = max(peak, v)
	}
	line(styles.Section.Render("THROUGHPUT") + fmt.Sprintf(" rows/s over the last %d intervals (peak %s, now %s)",
		len(r.RowsHistory), si(peak), si(s.RowsPerSec())))
	if len(r.RowsHistory) == 0 {
		line(styles.Faint.Render("  waiting for a second snapshot"))
	} else {
		line(" " + bar.Spark(r.RowsHistory, w-2))
		peakB := 0.0
		for _, v := range r.BytesHistory {
			peakB = max(peakB, v)
		}
		line(fmt.Sprintf(" MB/s (peak %s, now %s)", mbps(peakB), mbps(s.BytesPerSec())))
		line(" " + bar.Spark(r.BytesHistory, w-2))
	}

	line("")
	line(styles.Section.Render("READERS") + fmt.Sprintf(" (%d stripes)", len(r.Readers)))
	rt := columns.New([]columns.Column{
		{Title: "VARIABLE", Width: 12}, {Title: "RDR", Width: 3, Right: true}, {Title: "CALLS", Width: 7, Right: true},
		{Title: "ROWS", Width: 7, Right: true}, {Title: "ROW/S", Width: 7, Right: true}, {Title: "MB/S", Width: 7, Right: true},
		{Title: "µS/ROW", Width: 7, Right: true}, {Title: "ERR", Width: 4, Right: true}, {Title: "PHASES", Width: 8, Flex: true}})
	rt.SetStatic(true)
	rrows := make([][]string, len(r.Readers))
	rt.SetSize(w, len(rrows)+1)
	bw := rt.Layout()[8]
	for i, rs := range r.Readers {
		sh := rs.PhaseShare()
		rrows[i] = []string{rs.Var, fmt.Sprint(rs.Reader), si(float64(rs.Total.Calls)), si(float64(rs.Total.Rows)),
			si(rs.RowsPerSec()), mbps(rs.BytesPerSec()), us(rs.NsPerRow()), fmt.Sprint(rs.Total.Errors), bar.Glyphs(sh[:], bw)}
	}
	rt.SetRows(rrows, nil)
	line(rt.View())

	line("")
	line(styles.Section.Render("PEERS") + fmt.Sprintf(" (reads by target rank; %d ranks)", len(r.Peers)))
	if r.Version < 2 {
		line(styles.Faint.Render(fmt.Sprintf("  segment format v%d has no peer table", r.Version)))
	} else {
		pt := columns.New([]columns.Column{
			{Title: "TARGET", Width: 6, Right: true}, {Title: "CALLS", Width: 7, Right: true}, {Title: "ROWS", Width: 7, Right: true},
			{Title: "ROW/S", Width: 7, Right: true}, {Title: "MB", Width: 7, Right: true}, {Title: "µS/ROW", Width: 7, Right: true},
			{Title: "P50", Width: 7, Right: true}, {Title: "P99", Width: 7, Right: true}, {Title: "ERR", Width: 4, Right: true},
			{Title: "MOVED", Width: 6, Right: true}, {Title: "SERVED", Width: 6, Right: true}})
		pt.SetStatic(true)
		prows := make([][]string, len(r.Peers))
		for i, p := range r.Peers {
			win := p.Window()
			prows[i] = []string{fmt.Sprint(p.Total.Rank), si(float64(p.Total.Calls)), si(float64(p.Total.Rows)),
				si(p.RowsPerSec()), mbps(float64(p.Total.Bytes)), us(p.NsPerRow()),
				dur(win.Hist.Quantile(0.5)), dur(win.Hist.Quantile(0.99)), fmt.Sprint(p.Total.Errors),
				si(float64(p.Total.FailedFrom)), si(float64(p.Total.ServedFor))}
		}
		// Name the failed owners: reads of their rows went to a replica.
		for _, p := range r.Peers {
			if p.Total.FailedFrom > 0 {
				line(styles.Warn.Render(fmt.Sprintf("  failed owner: rank %d (%s row reads moved to a replica)",
					p.Total.Rank, si(float64(p.Total.FailedFrom)))))
			}
		}
		pt.SetSize(w, len(prows)+1)
		pt.SetRows(prows, nil)
		line(pt.View())
	}

	line("")
	drops := fmt.Sprintf("%d dropped", r.Dropped)
	if r.Dropped > 0 {
		drops = styles.Warn.Render(drops)
	}
	line(styles.Section.Render("RECENT CALLS") + fmt.Sprintf(" (newest first, %d kept, ", r.Recent.Len()) + drops + ")")
	ct := columns.New([]columns.Column{
		{Title: "TIME", Width: 12}, {Title: "VARIABLE", Width: 12}, {Title: "RDR", Width: 3, Right: true},
		{Title: "ROWS", Width: 6, Right: true}, {Title: "BYTES", Width: 7, Right: true}, {Title: "LOCAL", Width: 6, Right: true, Drop: 2},
		{Title: "REMOTE", Width: 6, Right: true, Drop: 2}, {Title: "TOTAL", Width: 8, Right: true}, {Title: "ERR", Width: 3}})
	ct.SetStatic(true)
	// Row k (newest first) lands on line top+1+k of the page; only the
	// rows inside the viewport's window are drawn, the others are blank
	// lines that keep the page's length (and so the scrolling) right.
	n := r.Recent.Len()
	top := strings.Count(b.String(), "\n")
	from := min(max(off-top-1, 0), n)
	to := max(min(off+d.vp.Height-top-1, n), from)
	crows := make([][]string, 0, to-from)
	for k := from; k < to; k++ {
		c := r.Recent.At(n - 1 - k)
		e := ""
		if c.Err {
			e = "err"
		}
		crows = append(crows, []string{c.Time().Format("15:04:05.000"), r.VarName(c.Var), fmt.Sprint(c.Reader),
			si(float64(c.Rows)), si(float64(c.Bytes)), si(float64(c.LocalRows)), si(float64(c.RemoteRows)),
			dur(float64(c.Total())), e})
	}
	ct.SetSize(w, len(crows)+1)
	ct.SetRows(crows, nil)
	tv := ct.View()
	head, body, _ := strings.Cut(tv, "\n")
	b.WriteString(head)
	if len(crows) == 0 {
		b.WriteString(strings.Repeat("\n", n))
	} else {
		// A drawn row is never blank (it has a time), so the table kept
		// them all: body is len(crows) lines.
		b.WriteString(strings.Repeat("\n", from+1))
		b.WriteString(body)
		b.WriteString(strings.Repeat("\n", n-to))
	}
	return b.String()
}

// loaderReaders names a telemetry.LoaderReaders* kind.
func loaderReaders(k int64) string {
	switch k {
	case telemetry.LoaderReadersShared:
		return "shared"
	case telemetry.LoaderReadersThread:
		return "thread"
	}
	return "?"
}

// procLine lists the non-zero process counters, "" if none.
func procLine(p [telemetry.NumProc]int64) string {
	var parts []string
	for i, v := range p {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s %d", telemetry.ProcNames[i], v))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "process: " + strings.Join(parts, "  ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
