package ui

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/x/ansi"

	"github.com/ddstore/ddstore/ui/data"
	"github.com/ddstore/ddstore/ui/diagnose"
	"github.com/ddstore/ddstore/ui/styles"
)

// maxPanel is the most findings the ranks view lists (worst first).
const maxPanel = 5

// panelLines is how many lines the findings panel takes out of a page of
// body lines: a title and up to maxPanel findings, leaving the list at
// least 4 lines; 0 when there is no finding.
func panelLines(n, body int) int {
	if n == 0 {
		return 0
	}
	return max(min(n, maxPanel, body-5), 0) + 1
}

// findingLine draws one finding on one line of at most w cells: severity
// colour, rule, place, evidence, fix with its setting.
func findingLine(f diagnose.Finding, w int) string {
	mark := styles.Warn.Render("!")
	if f.Severity >= 0.7 {
		mark = styles.Bad.Render("!")
	}
	fix := f.Fix
	if f.Env != "" {
		fix += " (" + f.Env + ")"
	} else if f.Key != "" {
		fix += " (" + f.Key + ")"
	}
	place := f.Where()
	if place != "" {
		place = " " + place
	}
	s := fmt.Sprintf("%s %s%s: %s → %s", mark, styles.Header.Render(f.Rule), place, f.Evidence, fix)
	return ansi.Truncate(s, w, "…")
}

// findingsPanel draws the panel of the ranks view in exactly lines lines.
func findingsPanel(fs []diagnose.Finding, lines, w int) string {
	if lines <= 0 {
		return ""
	}
	title := styles.Section.Render("FINDINGS") + fmt.Sprintf(" %d, worst first", len(fs))
	if n := len(fs) - (lines - 1); n > 0 {
		title += styles.Faint.Render(fmt.Sprintf(" (%d more: --once lists all)", n))
	}
	out := []string{ansi.Truncate(title, w, "…")}
	for _, f := range fs[:lines-1] {
		out = append(out, findingLine(f, w))
	}
	return strings.Join(out, "\n")
}

// rankFindings are the findings about rank r (its own, or naming it as a
// straggler target).
func rankFindings(fs []diagnose.Finding, r *data.Rank) []diagnose.Finding {
	var out []diagnose.Finding
	for _, f := range fs {
		if f.Job == r.Job && (f.Rank == r.Rank || f.Rank < 0) {
			out = append(out, f)
		}
	}
	return out
}
