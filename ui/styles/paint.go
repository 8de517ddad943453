package styles

import (
	"strings"
	"sync"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// Painter colours text as a colour-only style (foreground, bold, faint,
// reverse: no padding, width or border) renders it, with the escape
// sequences worked out once per colour profile and background instead of
// on every call: lipgloss converts an adaptive colour to the terminal's
// palette each time it renders, which was most of drawing a coloured
// list of 64 ranks ten times a second.
type Painter struct {
	st lipgloss.Style

	mu        sync.Mutex
	ok        bool
	prof      termenv.Profile
	dark      bool
	pre, post string
	exact     bool // pre+s+post is what st.Render(s) gives
}

// NewPainter returns a Painter for st.
func NewPainter(st lipgloss.Style) *Painter { return &Painter{st: st} }

// Paint is st.Render(s) for s without newlines.
func (p *Painter) Paint(s string) string {
	if s == "" || strings.ContainsRune(s, '\n') {
		return p.st.Render(s)
	}
	prof, dark := lipgloss.ColorProfile(), lipgloss.HasDarkBackground()
	p.mu.Lock()
	if !p.ok || p.prof != prof || p.dark != dark {
		const probe = "x"
		r := p.st.Render(probe)
		pre, post, found := strings.Cut(r, probe)
		p.ok, p.prof, p.dark = true, prof, dark
		p.pre, p.post, p.exact = pre, post, found && !strings.Contains(post, probe)
	}
	pre, post, exact := p.pre, p.post, p.exact
	p.mu.Unlock()
	if !exact {
		return p.st.Render(s)
	}
	return pre + s + post
}
