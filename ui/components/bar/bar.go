// Package bar draws ddtop's text graphics: the stacked phase bar, the
// sparkline of throughput over time and horizontal histogram bars.
package bar

import (
	"math"
	"strings"
	"unicode/utf8"

	"github.com/ddstore/ddstore/ui/styles"
)

// Split divides width cells among shares (any non-negative weights) by the
// largest remainder, so the parts always add up to width when any share is
// positive.
func Split(shares []float64, width int) []int {
	out := make([]int, len(shares))
	var sum float64
	for _, s := range shares {
		if s > 0 {
			sum += s
		}
	}
	if sum <= 0 || width <= 0 {
		return out
	}
	type rem struct {
		i int
		r float64
	}
	rems := make([]rem, 0, len(shares))
	used := 0
	for i, s := range shares {
		if s <= 0 {
			continue
		}
		exact := s / sum * float64(width)
		out[i] = int(exact)
		used += out[i]
		rems = append(rems, rem{i, exact - float64(out[i])})
	}
	for left := width - used; left > 0; left-- {
		best := -1
		for j, r := range rems {
			if best < 0 || r.r > rems[best].r {
				best = j
			}
		}
		out[rems[best].i]++
		rems[best].r = -1
	}
	return out
}

// Phases draws a stacked bar of width cells, one coloured segment per
// phase (telemetry's phase order). Without colour it is Glyphs. An all-zero
// breakdown draws a faint empty bar.
func Phases(shares []float64, width int) string {
	if styles.Plain() {
		return Glyphs(shares, width)
	}
	return stack(shares, width, func(phase, n int) string {
		return styles.PhasePaint(phase, strings.Repeat("█", n))
	}, func(n int) string {
		if n == 0 {
			return ""
		}
		return styles.Faint.Render(strings.Repeat("·", n))
	})
}

// Glyphs draws the stacked bar as plain text, each phase in its own glyph
// (styles.PhaseGlyphs, as the legend shows without colour) and "·" for an
// empty part. Tables use it: their cells hold no ANSI sequences.
func Glyphs(shares []float64, width int) string {
	return stack(shares, width, func(phase, n int) string {
		return strings.Repeat(string(styles.PhaseGlyphs[phase]), n)
	}, func(n int) string { return strings.Repeat("·", n) })
}

// stack draws a stacked bar of width cells: part(phase, n) for each
// phase's n cells, in phase order, then empty(n) for the n cells left.
func stack(shares []float64, width int, part func(phase, n int) string, empty func(n int) string) string {
	if width <= 0 {
		return ""
	}
	var b strings.Builder
	total := 0
	for i, n := range Split(shares, width) {
		if n == 0 || i >= styles.NumPhases {
			continue
		}
		total += n
		b.WriteString(part(i, n))
	}
	b.WriteString(empty(width - total))
	return b.String()
}

// Legend names the phases with their glyph, as table bars draw them, and,
// with colour, the colour that the detail view's bars use.
func Legend(names []string) string {
	parts := make([]string, len(names))
	plain := styles.Plain()
	for i, n := range names {
		if i >= styles.NumPhases {
			break
		}
		if plain {
			parts[i] = string(styles.PhaseGlyphs[i]) + "=" + n
		} else {
			parts[i] = styles.PhaseStyle(i).Render("█") + string(styles.PhaseGlyphs[i]) + "=" + n
		}
	}
	return strings.Join(parts, " ")
}

var sparkRunes = []rune("▁▂▃▄▅▆▇█")

// Spark draws the last width values as a sparkline scaled to their maximum.
// Fewer values than width are right-aligned (padded on the left).
func Spark(values []float64, width int) string {
	if width <= 0 {
		return ""
	}
	if len(values) > width {
		values = values[len(values)-width:]
	}
	hi := 0.0
	for _, v := range values {
		if v > hi {
			hi = v
		}
	}
	var b strings.Builder
	b.WriteString(strings.Repeat(" ", width-len(values)))
	for _, v := range values {
		i := 0
		if hi > 0 && v > 0 {
			i = int(math.Ceil(v/hi*float64(len(sparkRunes)))) - 1
			i = min(max(i, 0), len(sparkRunes)-1)
		}
		b.WriteRune(sparkRunes[i])
	}
	return styles.Spark.Render(b.String())
}

// Horizontal draws v out of hi as a bar of at most width cells (at least one
// cell for any positive v).
func Horizontal(v, hi float64, width int) string {
	if width <= 0 || hi <= 0 || v <= 0 {
		return ""
	}
	n := int(math.Round(v / hi * float64(width)))
	n = min(max(n, 1), width)
	return strings.Repeat("█", n)
}

// Colorize turns a bar drawn by Glyphs into the coloured bar Phases draws
// (same width): each phase glyph becomes a coloured block, '·' faint. Other
// runes are kept. Without colour it returns s.
func Colorize(s string) string {
	if styles.Plain() {
		return s
	}
	var b strings.Builder
	b.Grow(4 * len(s)) // the glyphs' bytes and, per run, its escape sequences
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		j := i + size
		for strings.HasPrefix(s[j:], s[i:i+size]) {
			j += size
		}
		run := (j - i) / size
		switch p := glyphPhase(r); {
		case p >= 0:
			styles.PhasePainter(p).PaintRepeat(&b, "█", run)
		case r == '·':
			styles.FaintP.PaintRepeat(&b, "·", run)
		default:
			b.WriteString(s[i:j])
		}
		i = j
	}
	return b.String()
}

// glyphPhase is the phase whose glyph is r, -1 if none.
func glyphPhase(r rune) int {
	for i, g := range styles.PhaseGlyphs {
		if g == r {
			return i
		}
	}
	return -1
}
