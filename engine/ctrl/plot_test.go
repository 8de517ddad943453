package ctrl

import (
	"fmt"
	"image/color"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plotScale draws the times of the scale runs at 8 ranks per node against
// the number of ranks (log-log) to an SVG.
func plotScale(rs []scaleResult, path string) error {
	var at8 []scaleResult
	for _, r := range rs {
		if r.PPN == 8 {
			at8 = append(at8, r)
		}
	}
	if len(at8) == 0 {
		at8 = rs
	}
	sort.Slice(at8, func(i, j int) bool { return at8[i].World < at8[j].World })
	p := plot.New()
	p.Title.Text = fmt.Sprintf("engine/ctrl: simulated ranks on one 2-core machine, %d per node", at8[0].PPN)
	p.X.Label.Text = "ranks"
	p.Y.Label.Text = "milliseconds"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	series := []struct {
		name string
		f    func(scaleResult) float64
		c    color.RGBA
	}{
		{"bootstrap", func(r scaleResult) float64 { return r.BootS * 1000 }, color.RGBA{R: 200, A: 255}},
		{"all-reduce 80 KB", func(r scaleResult) float64 { return r.AR80Kms }, color.RGBA{B: 200, A: 255}},
		{"all-reduce 8 B", func(r scaleResult) float64 { return r.AR8us / 1000 }, color.RGBA{G: 150, A: 255}},
		{"killed agent known by all", func(r scaleResult) float64 { return max(r.KillKnownMs, 0.01) }, color.RGBA{R: 150, B: 150, A: 255}},
	}
	for _, s := range series {
		pts := make(plotter.XYs, len(at8))
		for i, r := range at8 {
			pts[i].X, pts[i].Y = float64(r.World), s.f(r)
		}
		var kept plotter.XYs
		for _, pt := range pts {
			if pt.Y > 0 {
				kept = append(kept, pt)
			}
		}
		if len(kept) == 0 {
			continue
		}
		l, sc, err := plotter.NewLinePoints(kept)
		if err != nil {
			return err
		}
		l.Color, sc.Color = s.c, s.c
		p.Add(l, sc)
		p.Legend.Add(s.name, l, sc)
	}
	p.Legend.Top, p.Legend.Left = true, true
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}
