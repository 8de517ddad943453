package bar

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/ddstore/ddstore/ui/styles"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		shares []float64
		w      int
		want   []int
	}{
		{[]float64{1, 1, 2}, 8, []int{2, 2, 4}},
		{[]float64{1, 1, 1}, 10, []int{4, 3, 3}},
		{[]float64{0, 0.001, 0.999}, 10, []int{0, 0, 10}},
		{[]float64{0, 0}, 10, []int{0, 0}},
		{[]float64{5, -1, 5}, 3, []int{2, 0, 1}},
	} {
		got := Split(tc.shares, tc.w)
		sum := 0
		for i := range got {
			sum += got[i]
			if got[i] != tc.want[i] {
				t.Fatalf("Split(%v, %d) = %v, want %v", tc.shares, tc.w, got, tc.want)
			}
		}
		if pos := tc.shares[0] > 0 || tc.shares[len(tc.shares)-1] > 0; pos && sum != tc.w {
			t.Fatalf("Split(%v, %d) sums to %d", tc.shares, tc.w, sum)
		}
	}
}

func TestPlainPhasesAndSpark(t *testing.T) {
	prev := lipgloss.ColorProfile()
	lipgloss.SetColorProfile(termenv.Ascii)
	defer lipgloss.SetColorProfile(prev)
	if got := Phases([]float64{0, 0.25, 0, 0, 0.75, 0, 0}, 8); got != "llqqqqqq" {
		t.Fatalf("phases %q", got)
	}
	if got := Phases(make([]float64, 7), 4); got != "····" {
		t.Fatalf("empty phases %q", got)
	}
	// Glyphs is the same plain bar whatever the colour profile.
	lipgloss.SetColorProfile(termenv.TrueColor)
	if got := Glyphs([]float64{0, 0.25, 0, 0, 0.75, 0, 0}, 8); got != "llqqqqqq" {
		t.Fatalf("glyphs %q", got)
	}
	if got := Glyphs([]float64{0, 0, 0, 0, 0, 1, 0}, 0); got != "" {
		t.Fatalf("zero-width glyphs %q", got)
	}
	if got := Phases([]float64{0, 0.25, 0, 0, 0.75, 0, 0}, 8); !strings.Contains(got, "\x1b[") || !strings.Contains(got, "██") {
		t.Fatalf("coloured phases %q", got)
	}
	lipgloss.SetColorProfile(termenv.Ascii)
	if got := Legend([]string{"gpu_sync", "lock_wait"}); got != "g=gpu_sync l=lock_wait" {
		t.Fatalf("legend %q", got)
	}
	if got := Spark([]float64{0, 1, 2, 4, 8}, 7); got != "  ▁▁▂▄█" {
		t.Fatalf("spark %q", got)
	}
	if got := Spark([]float64{1, 2, 3, 4}, 2); utf8.RuneCountInString(got) != 2 || !strings.HasSuffix(got, "█") {
		t.Fatalf("spark tail %q", got)
	}
	if got := Horizontal(1, 100, 10); got != "█" {
		t.Fatalf("horizontal min %q", got)
	}
}

// TestColorizeIsLipgloss: a table cell's glyph bar, coloured by Colorize,
// is what lipgloss renders for each phase's segment and the faint empty
// part, in every colour profile, for random breakdowns and widths.
func TestColorizeIsLipgloss(t *testing.T) {
	prev := lipgloss.ColorProfile()
	defer lipgloss.SetColorProfile(prev)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, prof := range []termenv.Profile{termenv.TrueColor, termenv.ANSI256, termenv.ANSI} {
		lipgloss.SetColorProfile(prof)
		for range 2000 {
			shares := make([]float64, styles.NumPhases)
			for i := range shares {
				if rng.IntN(3) > 0 {
					shares[i] = rng.Float64()
				}
			}
			width := rng.IntN(40)
			var want strings.Builder
			total := 0
			for p, n := range Split(shares, width) {
				if n > 0 && width > 0 {
					want.WriteString(styles.PhaseStyle(p).Render(strings.Repeat("█", n)))
					total += n
				}
			}
			if rest := width - total; rest > 0 {
				want.WriteString(styles.Faint.Render(strings.Repeat("·", rest)))
			}
			glyphs := Glyphs(shares, width)
			if got := Colorize(glyphs); got != want.String() {
				t.Fatalf("profile %v, %q: Colorize gave %q, lipgloss %q", prof, glyphs, got, want.String())
			}
		}
	}
	// Other runes pass through.
	if got := Colorize("a b"); got != "a b" {
		t.Fatalf("Colorize(%q) = %q", "a b", got)
	}
}
