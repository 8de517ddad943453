package styles

import (
	"testing"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// Painter gives what lipgloss renders, in every colour profile, after the
// profile changes too.
func TestPainterMatchesRender(t *testing.T) {
	defer lipgloss.SetColorProfile(lipgloss.ColorProfile())
	sts := []lipgloss.Style{Good, Warn, Bad, Faint, Selected, Header, PhaseStyle(0), PhaseStyle(6)}
	ps := make([]*Painter, len(sts))
	for i, st := range sts {
		ps[i] = NewPainter(st)
	}
	for _, prof := range []termenv.Profile{termenv.TrueColor, termenv.ANSI256, termenv.ANSI, termenv.Ascii, termenv.TrueColor} {
		lipgloss.SetColorProfile(prof)
		for i, st := range sts {
			for _, s := range []string{"live", "   1 ", "████", "x", "a x b", "▸ 0 alpha"} {
				if got, want := ps[i].Paint(s), st.Render(s); got != want {
					t.Errorf("profile %v style %d %q: painted %q, rendered %q", prof, i, s, got, want)
				}
			}
		}
	}
}
