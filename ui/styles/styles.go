// Package styles owns ddtop's lipgloss styles and colours: one place for the
// look of every page and component, including the per-phase colours and the
// glyphs used when the terminal has no colour.
package styles

import (
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// NumPhases mirrors telemetry.NumPhases; the ui package checks they agree.
const NumPhases = 7

// PhaseColors are the bar colours of gpu_sync, lock_wait, mr, post, cq_wait,
// copy and other, in telemetry's phase order.
var PhaseColors = [NumPhases]lipgloss.AdaptiveColor{
	{Light: "#A0168C", Dark: "#F25FD0"}, // gpu_sync: magenta
	{Light: "#C0262D", Dark: "#FF5F5F"}, // lock_wait: red
	{Light: "#A66300", Dark: "#FFC247"}, // mr: amber
	{Light: "#1F5BC7", Dark: "#5F9FFF"}, // post: blue
	{Light: "#0B7A8A", Dark: "#4FD6E6"}, // cq_wait: cyan
	{Light: "#2E7D32", Dark: "#6BD96B"}, // copy: green
	{Light: "#6B6B6B", Dark: "#9E9E9E"}, // other: grey
}

// PhaseGlyphs are the bar characters used without colour, one per phase, so
// a monochrome terminal (or a test with the ASCII profile) still tells the
// phases apart. The legend shows them.
var PhaseGlyphs = [NumPhases]rune{'g', 'l', 'm', 'p', 'q', 'c', 'o'}

// Plain reports whether the terminal renders no colour at all.
func Plain() bool { return lipgloss.ColorProfile() == termenv.Ascii }

// Styles used across ddtop.
var (
	Title    = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.AdaptiveColor{Light: "#5A2CA0", Dark: "#B69CFF"})
	TabOn    = lipgloss.NewStyle().Bold(true).Underline(true)
	TabOff   = lipgloss.NewStyle().Faint(true)
	Header   = lipgloss.NewStyle().Bold(true)
	Selected = lipgloss.NewStyle().Reverse(true)
	Faint    = lipgloss.NewStyle().Faint(true)
	Warn     = lipgloss.NewStyle().Foreground(lipgloss.AdaptiveColor{Light: "#A66300", Dark: "#FFC247"})
	Bad      = lipgloss.NewStyle().Foreground(lipgloss.AdaptiveColor{Light: "#C0262D", Dark: "#FF5F5F"})
	Good     = lipgloss.NewStyle().Foreground(lipgloss.AdaptiveColor{Light: "#2E7D32", Dark: "#6BD96B"})
	Paused   = lipgloss.NewStyle().Bold(true).Reverse(true)
	Section  = lipgloss.NewStyle().Bold(true).Underline(true)
	Spark    = lipgloss.NewStyle().Foreground(lipgloss.AdaptiveColor{Light: "#1F5BC7", Dark: "#5F9FFF"})
)

// PhaseStyle is the foreground style of phase i's bar segment.
func PhaseStyle(i int) lipgloss.Style {
	return lipgloss.NewStyle().Foreground(PhaseColors[i])
}

// Painters of the styles drawn most often: per-phase bar colours, the
// state colours and faint.
var (
	phasePainters [NumPhases]*Painter
	GoodP         = NewPainter(Good)
	WarnP         = NewPainter(Warn)
	BadP          = NewPainter(Bad)
	FaintP        = NewPainter(Faint)
)

func init() {
	for i := range phasePainters {
		phasePainters[i] = NewPainter(PhaseStyle(i))
	}
}

// PhasePaint colours s as phase i's bar segment (PhaseStyle(i).Render).
func PhasePaint(i int, s string) string { return phasePainters[i].Paint(s) }

// PhasePainter is the Painter of phase i's bar segments.
func PhasePainter(i int) *Painter { return phasePainters[i] }

// State colours a rank's state word: live, stale or exited.
func State(s string) string {
	switch s {
	case "live":
		return GoodP.Paint(s)
	case "stale":
		return WarnP.Paint(s)
	default:
		return BadP.Paint(s)
	}
}
