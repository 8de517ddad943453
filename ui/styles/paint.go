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
	pre, post, exact := p.codes()
	if !exact {
		return p.st.Render(s)
	}
	return pre + s + post
}

// PaintRepeat writes Paint(strings.Repeat(unit, n)) to b, without the
// intermediate strings when it can (unit without newlines, n > 0).
func (p *Painter) PaintRepeat(b *strings.Builder, unit string, n int) {
	if n <= 0 || unit == "" || strings.ContainsRune(unit, '\n') {
		b.WriteString(p.Paint(strings.Repeat(unit, max(n, 0))))
		return
	}
	pre, post, exact := p.codes()
	if !exact {
		b.WriteString(p.st.Render(strings.Repeat(unit, n)))
		return
	}
	b.WriteString(pre)
	for range n {
		b.WriteString(unit)
	}
	b.WriteString(post)
}

// codes are the escape sequences around painted text for the colour
// profile and background now; exact is false where st.Render(s) is not
// pre+s+post.
func (p *Painter) codes() (pre, post string, exact bool) {
	prof, dark := lipgloss.ColorProfile(), lipgloss.HasDarkBackground()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ok || p.prof != prof || p.dark != dark {
		const probe = "x"
		r := p.st.Render(probe)
		pre, post, found := strings.Cut(r, probe)
		p.ok, p.prof, p.dark = true, prof, dark
		p.pre, p.post, p.exact = pre, post, found && !strings.Contains(post, probe)
	}
	return p.pre, p.post, p.exact
}
