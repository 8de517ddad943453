// Package report owns ddtop's HTML report of a recording: one
// self-contained page (inline SVG plots made with gonum/plot, no network)
// with per-rank throughput over time, the phase breakdown over time
// (stacked), call latency histograms and the findings of ui/diagnose over
// the whole run.
package report

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ddstore/ddstore/telemetry"
	"github.com/ddstore/ddstore/ui/data"
	"github.com/ddstore/ddstore/ui/diagnose"
	"github.com/ddstore/ddstore/ui/record"
)

// phaseColors are the phase colours of the plots (ddtop's dark-theme ones).
var phaseColors = [telemetry.NumPhases]color.RGBA{
	{0xF2, 0x5F, 0xD0, 0xff}, {0xFF, 0x5F, 0x5F, 0xff}, {0xFF, 0xC2, 0x47, 0xff}, {0x5F, 0x9F, 0xFF, 0xff},
	{0x4F, 0xD6, 0xE6, 0xff}, {0x6B, 0xD9, 0x6B, 0xff}, {0x9E, 0x9E, 0x9E, 0xff},
}

// barColor fills the latency bars (a colour no phase uses).
var barColor = color.RGBA{0x7B, 0x61, 0xFF, 0xff}

// Finding is one diagnosis over the run: first and last frame it was
// seen in, and the evidence of its worst frame.
type Finding struct {
	diagnose.Finding
	First, Last time.Duration // since the recording's start
	Frames      int
}

// Page is what the template draws.
type Page struct {
	Title, Dir, Job        string
	Start                  time.Time
	Duration               time.Duration
	Ticks, Ranks           int
	Calls, Rows, Errors    int64
	Throughput, Phases     template.HTML // inline SVG
	Latency                template.HTML
	Findings               []Finding
	RankTable              []rankRow
	Generated              string
	IntervalMs             float64
	PhaseNames             []string
	HasThroughput, HasHist bool
}

type rankRow struct {
	Job, Host         string
	Rank              int
	Calls, Rows, Errs int64
	UsPerRow, P99Us   float64
}

// Write renders the report of rec (frames: rec.Frames()) to w.
func Write(w io.Writer, rec *record.Recording, frames []*data.Frame) error {
	if len(frames) == 0 {
		return fmt.Errorf("ddtop report: the recording has no frame")
	}
	start := frames[0].At
	last := frames[len(frames)-1]
	p := Page{Title: "ddtop report", Dir: rec.Dir, Job: rec.Job, Start: start, Duration: last.At.Sub(start),
		Ticks: len(frames), Ranks: len(last.Ranks), Generated: time.Now().Format(time.RFC3339),
		IntervalMs: float64(rec.IntervalNs) / 1e6, PhaseNames: telemetry.PhaseNames[:]}
	// Totals from each rank's last frame (ranks may leave before the end).
	final := map[string]*data.Rank{}
	for _, f := range frames {
		for _, r := range f.Ranks {
			final[r.Path] = r
		}
	}
	var paths []string
	for k := range final {
		paths = append(paths, k)
	}
	sort.Slice(paths, func(i, j int) bool {
		a, b := final[paths[i]], final[paths[j]]
		if a.Job != b.Job {
			return a.Job < b.Job
		}
		return a.Rank < b.Rank
	})
	var hist telemetry.Histogram
	for _, k := range paths {
		r := final[k]
		t := r.Stat.Total
		p.Calls += t.Calls
		p.Rows += t.Rows
		p.Errors += t.Errors
		hist = hist.Add(t.CallHist)
		row := rankRow{Job: r.Job, Host: r.Host, Rank: r.Rank, Calls: t.Calls, Rows: t.Rows, Errs: t.Errors,
			P99Us: t.CallHist.Quantile(0.99) / 1e3}
		if t.Rows > 0 {
			row.UsPerRow = float64(t.TotalNs()) / float64(t.Rows) / 1e3
		}
		p.RankTable = append(p.RankTable, row)
	}
	p.Ranks = len(paths)
	var err error
	if p.Throughput, err = throughputSVG(frames, start); err != nil {
		return err
	}
	if p.Phases, err = phasesSVG(frames, start); err != nil {
		return err
	}
	if p.Latency, err = latencySVG(final, paths, hist); err != nil {
		return err
	}
	p.Findings = runFindings(frames, start)
	return page.Execute(w, p)
}

// runFindings diagnoses every frame and merges the findings by rule,
// job, rank, variable and reader, keeping the worst frame's evidence.
func runFindings(frames []*data.Frame, start time.Time) []Finding {
	type key struct {
		rule, job, v string
		rank, rd     int
	}
	by := map[key]*Finding{}
	var order []key
	for _, f := range frames {
		for _, d := range diagnose.Diagnose(f, diagnose.Thresholds{}) {
			k := key{d.Rule, d.Job, d.Var, d.Rank, d.Reader}
			at := f.At.Sub(start)
			x := by[k]
			if x == nil {
				x = &Finding{Finding: d, First: at}
				by[k] = x
				order = append(order, k)
			}
			x.Last = at
			x.Frames++
			if d.Severity > x.Severity {
				x.Finding = d
			}
		}
	}
	out := make([]Finding, 0, len(order))
	for _, k := range order {
		out = append(out, *by[k])
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Severity != out[j].Severity {
			return out[i].Severity > out[j].Severity
		}
		return out[i].Frames > out[j].Frames
	})
	return out
}

func svg(p *plot.Plot, w, h vg.Length) (template.HTML, error) {
	var b bytes.Buffer
	wt, err := p.WriterTo(w, h, "svg")
	if err != nil {
		return "", err
	}
	if _, err := wt.WriteTo(&b); err != nil {
		return "", err
	}
	s := b.String()
	// Inline in HTML: drop the XML prolog, keep the <svg> element.
	if i := strings.Index(s, "<svg"); i > 0 {
		s = s[i:]
	}
	return template.HTML(s), nil
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

// rankColor is a distinct colour per rank index.
func rankColor(i int) color.Color {
	h := math.Mod(float64(i)*0.618034, 1)
	return hsv(h, 0.75, 0.85)
}

func hsv(h, s, v float64) color.RGBA {
	i := math.Floor(h * 6)
	f := h*6 - i
	p, q, t := v*(1-s), v*(1-f*s), v*(1-(1-f)*s)
	var r, g, b float64
	switch int(i) % 6 {
	case 0:
		r, g, b = v, t, p
	case 1:
		r, g, b = q, v, p
	case 2:
		r, g, b = p, v, t
	case 3:
		r, g, b = p, q, v
	case 4:
		r, g, b = t, p, v
	default:
		r, g, b = v, p, q
	}
	return color.RGBA{uint8(r * 255), uint8(g * 255), uint8(b * 255), 255}
}

// throughputSVG: rows/s of each rank over time.
func throughputSVG(frames []*data.Frame, start time.Time) (template.HTML, error) {
	p := newPlot("Throughput per rank", "time (s)", "rows/s")
	series := map[string]plotter.XYs{}
	names := map[string]string{}
	jobs := map[string]bool{}
	for _, f := range frames {
		for _, r := range f.Ranks {
			jobs[r.Job] = true
		}
	}
	var keys []string
	for _, f := range frames {
		x := f.At.Sub(start).Seconds()
		for _, r := range f.Ranks {
			if r.Interval <= 0 {
				continue
			}
			if _, ok := series[r.Path]; !ok {
				keys = append(keys, r.Path)
				names[r.Path] = fmt.Sprintf("rank %d", r.Rank)
				if len(jobs) > 1 {
					names[r.Path] = r.Job + " " + names[r.Path]
				}
			}
			series[r.Path] = append(series[r.Path], plotter.XY{X: x, Y: r.RowsPerSec()})
		}
	}
	sort.Slice(keys, func(i, j int) bool { return names[keys[i]] < names[keys[j]] })
	for i, k := range keys {
		l, err := plotter.NewLine(series[k])
		if err != nil {
			return "", err
		}
		l.Color = rankColor(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		if len(keys) <= 16 {
			p.Legend.Add(names[k], l)
		}
	}
	p.Y.Min = 0
	return svg(p, 18*vg.Centimeter, 8*vg.Centimeter)
}

// phasesSVG: time spent per phase each second, summed over ranks, stacked.
func phasesSVG(frames []*data.Frame, start time.Time) (template.HTML, error) {
	p := newPlot("Phase breakdown over time (all ranks, stacked)", "time (s)", "busy seconds per second")
	var xs []float64
	var ys [][telemetry.NumPhases]float64
	for _, f := range frames {
		var iv time.Duration
		var ph [telemetry.NumPhases]float64
		for _, r := range f.Ranks {
			iv = max(iv, r.Interval)
			for i, ns := range r.Stat.Delta.PhaseNs {
				ph[i] += float64(ns)
			}
		}
		if iv <= 0 {
			continue
		}
		for i := range ph {
			ph[i] /= float64(iv)
		}
		xs = append(xs, f.At.Sub(start).Seconds())
		ys = append(ys, ph)
	}
	if len(xs) > 0 {
		lower := make([]float64, len(xs))
		for i := 0; i < telemetry.NumPhases; i++ {
			upper := make([]float64, len(xs))
			pts := make(plotter.XYs, 0, 2*len(xs))
			for k := range xs {
				upper[k] = lower[k] + ys[k][i]
				pts = append(pts, plotter.XY{X: xs[k], Y: upper[k]})
			}
			for k := len(xs) - 1; k >= 0; k-- {
				pts = append(pts, plotter.XY{X: xs[k], Y: lower[k]})
			}
			poly, err := plotter.NewPolygon(pts)
			if err != nil {
				return "", err
			}
			poly.Color = phaseColors[i]
			poly.LineStyle.Width = 0
			p.Add(poly)
			p.Legend.Add(telemetry.PhaseNames[i], poly)
			lower = upper
		}
	}
	p.Y.Min = 0
	return svg(p, 18*vg.Centimeter, 8*vg.Centimeter)
}

// latencySVG: call latency histograms, all ranks together (bars) and per
// rank (lines), over the whole recording.
func latencySVG(final map[string]*data.Rank, paths []string, all telemetry.Histogram) (template.HTML, error) {
	p := newPlot("Call latency (whole run)", "call latency (log2 buckets)", "calls")
	lo, hi := -1, -1
	for i, c := range all {
		if c > 0 {
			if lo < 0 {
				lo = i
			}
			hi = i
		}
	}
	if lo < 0 {
		lo, hi = 1, 20
	}
	var labels []string
	vals := make(plotter.Values, 0, hi-lo+1)
	for i := lo; i <= hi; i++ {
		vals = append(vals, float64(all[i]))
		_, up := telemetry.BucketBounds(i)
		labels = append(labels, "<"+shortDur(float64(up)))
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(14))
	if err != nil {
		return "", err
	}
	bars.Color = barColor
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.Legend.Add("all ranks", bars)
	for k, path := range paths {
		if k >= 16 {
			break
		}
		r := final[path]
		pts := make(plotter.XYs, 0, hi-lo+1)
		for i := lo; i <= hi; i++ {
			pts = append(pts, plotter.XY{X: float64(i - lo), Y: float64(r.Stat.Total.CallHist[i])})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return "", err
		}
		l.Color = rankColor(k)
		l.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("rank %d", r.Rank), l)
	}
	p.NominalX(labels...)
	p.X.Tick.Label.Rotation = math.Pi / 4
	p.X.Tick.Label.XAlign = draw.XRight
	p.Y.Min = 0
	return svg(p, 18*vg.Centimeter, 9*vg.Centimeter)
}

func shortDur(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.3gs", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.3gms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.3gµs", ns/1e3)
	}
	return fmt.Sprintf("%.0fns", ns)
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"dur": func(d time.Duration) string { return d.Round(time.Millisecond).String() },
	"f1":  func(v float64) string { return fmt.Sprintf("%.1f", v) },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font-family:sans-serif;margin:1.5em auto;max-width:62em;color:#222}
h1{margin-bottom:0}.sub{color:#666;margin-top:.2em}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}
.plot{margin:1em 0;border:1px solid #ddd;padding:.5em;background:#fff}
.sev{font-weight:bold}.hi{color:#c0262d}.mid{color:#a66300}
code{background:#f5f5f5;padding:0 .2em}
</style></head><body>
<h1>ddtop report</h1>
<p class="sub">{{.Ticks}} snapshots every {{f1 .IntervalMs}} ms from {{.Start.Format "2006-01-02 15:04:05 MST"}} for {{dur .Duration}} · {{.Ranks}} ranks · directory <code>{{.Dir}}</code>{{if .Job}} · job <code>{{.Job}}</code>{{end}} · generated {{.Generated}}</p>
<h2>Summary</h2>
<table><tr><th class="l">job</th><th>rank</th><th class="l">host</th><th>calls</th><th>rows</th><th>errors</th><th>µs/row</th><th>call p99 µs</th></tr>
{{range .RankTable}}<tr><td class="l">{{.Job}}</td><td>{{.Rank}}</td><td class="l">{{.Host}}</td><td>{{.Calls}}</td><td>{{.Rows}}</td><td>{{.Errs}}</td><td>{{f1 .UsPerRow}}</td><td>{{f1 .P99Us}}</td></tr>
{{end}}<tr><th class="l" colspan="3">total</th><th>{{.Calls}}</th><th>{{.Rows}}</th><th>{{.Errors}}</th><th></th><th></th></tr></table>
<h2>Findings</h2>
{{if .Findings}}<table id="findings"><tr><th class="l">rule</th><th class="l">where</th><th class="l">evidence (worst snapshot)</th><th class="l">fix</th><th>seen</th></tr>
{{range .Findings}}<tr><td class="l sev {{if ge .Severity 0.7}}hi{{else}}mid{{end}}">{{.Rule}}</td><td class="l">{{.Where}}</td><td class="l">{{.Evidence}}</td><td class="l">{{.Fix}}{{if .Env}} (<code>{{.Env}}</code>){{else if .Key}} (<code>{{.Key}}</code>){{end}}</td><td>{{.Frames}}× {{dur .First}}–{{dur .Last}}</td></tr>
{{end}}</table>{{else}}<p id="findings">No finding: no rule fired in any snapshot.</p>{{end}}
<h2>Throughput</h2><div class="plot" id="plot-throughput">{{.Throughput}}</div>
<h2>Phase breakdown</h2><div class="plot" id="plot-phases">{{.Phases}}</div>
<h2>Latency</h2><div class="plot" id="plot-latency">{{.Latency}}</div>
</body></html>
`))
