package report

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/ddstore/ddstore/telemetry"
)

// svgPlot is one plot read back from the report's SVG: its paths (points
// in SVG coordinates, y up) with their style, and the axes' mappings from
// SVG coordinates to data, fitted from the numeric tick labels and the
// grid lines drawn at them.
type svgPlot struct {
	paths      []svgPath
	yOf, xOf   func(float64) float64
	hasX, hasY bool
}

type svgPath struct {
	pts   [][2]float64
	style string
}

var (
	svgPathRE = regexp.MustCompile(`<path d="([^"]*)" style="([^"]*)"`)
	svgTextRE = regexp.MustCompile(`<text x="([-0-9.e+]+)" y="([-0-9.e+]+)" transform="scale\(1, -1\)"\s*style="[^"]*">([^<]*)</text>`)
	svgNumRE  = regexp.MustCompile(`-?[0-9.]+(e[-+]?[0-9]+)?`)
)

func plotSVG(t *testing.T, html, id string) svgPlot {
	t.Helper()
	i := strings.Index(html, `id="`+id+`"`)
	if i < 0 {
		t.Fatalf("no %s", id)
	}
	s := html[i:]
	s = s[:strings.Index(s, "</svg>")]
	var p svgPlot
	var hGrid, vGrid []float64
	left := math.Inf(1) // where the horizontal grid lines start: the plot area's left
	for _, m := range svgPathRE.FindAllStringSubmatch(s, -1) {
		nums := svgNumRE.FindAllString(m[1], -1)
		var path svgPath
		path.style = m[2]
		for k := 0; k+1 < len(nums); k += 2 {
			x, _ := strconv.ParseFloat(nums[k], 64)
			y, _ := strconv.ParseFloat(nums[k+1], 64)
			path.pts = append(path.pts, [2]float64{x, y})
		}
		p.paths = append(p.paths, path)
		if strings.Contains(m[2], "stroke:#808080") && len(path.pts) == 2 {
			if path.pts[0][1] == path.pts[1][1] {
				hGrid = append(hGrid, path.pts[0][1])
				left = min(left, path.pts[0][0])
			} else if path.pts[0][0] == path.pts[1][0] {
				vGrid = append(vGrid, path.pts[0][0])
			}
		}
	}
	sort.Float64s(hGrid)
	sort.Float64s(vGrid)
	// Tick labels: numbers left of the plot area (y axis) or below it (x).
	var yLab, xLab []float64
	for _, m := range svgTextRE.FindAllStringSubmatch(s, -1) {
		v, err := strconv.ParseFloat(strings.TrimSpace(m[3]), 64)
		if err != nil {
			continue
		}
		x, _ := strconv.ParseFloat(m[1], 64)
		y, _ := strconv.ParseFloat(m[2], 64)
		switch {
		case x < left:
			yLab = append(yLab, v)
		case len(hGrid) > 0 && -y < hGrid[0]:
			xLab = append(xLab, v)
		}
	}
	sort.Float64s(yLab)
	sort.Float64s(xLab)
	p.yOf, p.hasY = fitAxis(t, id+" y", hGrid, yLab)
	p.xOf, p.hasX = fitAxis(t, id+" x", vGrid, xLab)
	return p
}

// fitAxis maps SVG coordinates to values through the grid lines at the
// tick labels (paired in order); every label must lie on the fitted line.
func fitAxis(t *testing.T, what string, grid, labels []float64) (func(float64) float64, bool) {
	if len(labels) < 2 {
		return nil, false
	}
	if len(grid) != len(labels) {
		t.Fatalf("%s axis: %d grid lines, %d tick labels %v", what, len(grid), len(labels), labels)
	}
	n := len(grid) - 1
	f := func(c float64) float64 { return labels[0] + (c-grid[0])*(labels[n]-labels[0])/(grid[n]-grid[0]) }
	for k := range grid {
		if d := math.Abs(f(grid[k]) - labels[k]); d > 1e-3*math.Abs(labels[n]-labels[0]) {
			t.Fatalf("%s axis: tick %v drawn at %v, where the axis puts %v", what, labels[k], grid[k], f(grid[k]))
		}
	}
	return f, true
}

// with is the paths whose style has s, in drawing order.
func (p svgPlot) with(s string) []svgPath {
	var out []svgPath
	for _, q := range p.paths {
		if strings.Contains(q.style, s) {
			out = append(out, q)
		}
	}
	return out
}

func hexColor(c interface{ RGBA() (r, g, b, a uint32) }) string {
	r, g, b, _ := c.RGBA()
	return fmt.Sprintf("#%02X%02X%02X", r>>8, g>>8, b>>8)
}

func near3(got, want float64) bool { return math.Abs(got-want) <= 2e-3*math.Abs(want)+1e-9 }

// TestReportData reads the numbers back from the report of synthetic's
// recording and compares them with what synthetic recorded: the summary
// table (calls, rows, errors, µs per row, p99 within its histogram
// bucket), each rank's throughput line (rows/s per tick), each phase's
// band in the stacked plot (busy seconds per second per tick) and the
// latency bars (calls per bucket), all read from the SVG through the
// axes' tick labels. A report that computed or plotted any of them wrong
// fails here.
func TestReportData(t *testing.T) {
	_, html := writeReport(t)
	// What synthetic recorded: rank r makes calls(r) calls a tick of 16
	// rows; a call at tick k spends 4000+100k ns in lock_wait, 12000 in
	// cq_wait and 500 in copy.
	calls := func(r int) int64 { return 10 * int64(r+1) }
	const ticks = 20
	phaseNs := func(k int) [telemetry.NumPhases]int64 {
		var ph [telemetry.NumPhases]int64
		ph[telemetry.PhaseLockWait], ph[telemetry.PhaseCQWait], ph[telemetry.PhaseCopy] = 4000+100*int64(k), 12000, 500
		return ph
	}
	callNs := func(k int) (n int64) {
		for _, v := range phaseNs(k) {
			n += v
		}
		return n
	}

	// The summary table.
	row := regexp.MustCompile(`<tr><td class="l">[^<]*</td><td>(\d+)</td><td class="l">(h\d)</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td><td>([0-9.]+)</td><td>([0-9.]+)</td></tr>`)
	rows := row.FindAllStringSubmatch(html, -1)
	if len(rows) != 3 {
		t.Fatalf("summary has %d rank rows, want 3", len(rows))
	}
	var allCalls, allRows int64
	for _, m := range rows {
		r, _ := strconv.Atoi(m[1])
		var ns int64
		for k := range ticks {
			ns += calls(r) * callNs(k)
		}
		wantCalls, wantRows := calls(r)*ticks, calls(r)*ticks*16
		allCalls += wantCalls
		allRows += wantRows
		usRow := float64(ns) / float64(wantRows) / 1e3
		p99, _ := strconv.ParseFloat(m[7], 64)
		lo, hi := telemetry.BucketBounds(telemetry.BucketIndex(callNs(ticks - 1)))
		if m[2] != fmt.Sprintf("h%d", r) || m[3] != fmt.Sprint(wantCalls) || m[4] != fmt.Sprint(wantRows) || m[5] != "0" ||
			m[6] != fmt.Sprintf("%.1f", usRow) || p99 < float64(lo)/1e3 || p99 > float64(hi)/1e3 {
			t.Fatalf("rank %d row %q: want host h%d, %d calls, %d rows, 0 errors, %.1f µs/row, p99 in [%d, %d) ns",
				r, m[0], r, wantCalls, wantRows, usRow, lo, hi)
		}
	}
	if tot := fmt.Sprintf(`total</th><th>%d</th><th>%d</th><th>0</th>`, allCalls, allRows); !strings.Contains(html, tot) {
		t.Fatalf("summary lacks the totals %q", tot)
	}

	// Throughput: one line per rank, a point per tick after the first
	// (rows/s over the tick), in rank colour order.
	tp := plotSVG(t, html, "plot-throughput")
	if !tp.hasX || !tp.hasY {
		t.Fatal("throughput plot: axes without tick labels")
	}
	for r := range 3 {
		lines := tp.with("stroke:" + hexColor(rankColor(r)) + ";stroke-width:1.5")
		if len(lines) != 2 || len(lines[0].pts) != ticks-1 { // the line, and its legend sample
			t.Fatalf("rank %d: %d lines in its colour, the first of %d points; want the line of %d and a legend sample", r, len(lines), len(lines[0].pts), ticks-1)
		}
		for k, pt := range lines[0].pts {
			x, y := tp.xOf(pt[0]), tp.yOf(pt[1])
			if want := float64(calls(r) * 16); !near3(x, float64(k+1)) || !near3(y, want) {
				t.Fatalf("rank %d point %d: (%.3f s, %.2f rows/s), want (%d s, %.0f rows/s)", r, k, x, y, k+1, want)
			}
		}
	}

	// Phases: per phase a band (polygon: its top left to right, then its
	// bottom right to left) whose height at tick k is the phase's busy
	// seconds per second over all ranks.
	ph := plotSVG(t, html, "plot-phases")
	if !ph.hasX || !ph.hasY {
		t.Fatal("phase plot: axes without tick labels")
	}
	for i := range telemetry.NumPhases {
		bands := ph.with("fill:" + hexColor(phaseColors[i]))
		if len(bands) != 2 || len(bands[0].pts) != 2*(ticks-1) {
			t.Fatalf("phase %s: %d shapes in its colour; want its band of %d points and a legend box", telemetry.PhaseNames[i], len(bands), 2*(ticks-1))
		}
		pts := bands[0].pts
		for k := range ticks - 1 {
			top, bottom := pts[k], pts[len(pts)-1-k]
			h := ph.yOf(top[1]) - ph.yOf(bottom[1])
			want := float64((calls(0)+calls(1)+calls(2))*phaseNs(k + 1)[i]) / 1e9
			if !near3(ph.xOf(top[0]), float64(k+1)) || top[0] != bottom[0] || !near3(h, want) {
				t.Fatalf("phase %s at tick %d: band %.3g busy s/s at %.3f s, want %.3g at %d s",
					telemetry.PhaseNames[i], k+1, h, ph.xOf(top[0]), want, k+1)
			}
		}
	}

	// Latency: the bars are the calls per histogram bucket, all ranks:
	// every call took 16.5-18.4 µs, one bucket.
	lat := plotSVG(t, html, "plot-latency")
	if !lat.hasY {
		t.Fatal("latency plot: y axis without tick labels")
	}
	bars := lat.with("fill:" + hexColor(barColor))
	if len(bars) != 2 { // the bar, and the legend box
		t.Fatalf("%d shapes in the bar colour, want one bar and a legend box", len(bars))
	}
	var top float64
	for _, pt := range bars[0].pts {
		top = max(top, pt[1])
	}
	if got, want := lat.yOf(top), float64(allCalls); !near3(got, want) {
		t.Fatalf("latency bar of %.1f calls, want %.0f", got, want)
	}
}
