package ui

import (
	"fmt"
	"strings"
	"time"

	"github.com/ddstore/ddstore/telemetry"
	"github.com/ddstore/ddstore/ui/data"
	"github.com/ddstore/ddstore/ui/diagnose"
	"github.com/ddstore/ddstore/ui/styles"
)

// DefaultExitedGrace is how long the ranks page keeps showing a rank after
// ddtop first saw its process exited (Options.ExitedGrace): segments of
// exited processes pile up in /dev/shm and would crowd out the live ranks.
const DefaultExitedGrace = 30 * time.Second

// exitedFilter decides which exited ranks the pages hide: those first seen
// exited at least grace ago (by the poller's clock), unless show (key X).
// Stale ranks are never hidden.
type exitedFilter struct {
	grace time.Duration // < 0: never hide
	show  bool
}

// expired reports whether rank r of a frame taken at time at exited at
// least grace ago.
func (e exitedFilter) expired(at time.Time, r *data.Rank) bool {
	return e.grace >= 0 && r.State == telemetry.StateExited && !r.ExitedAt.IsZero() && at.Sub(r.ExitedAt) >= e.grace
}

// hider is the predicate of the ranks that the pages hide in frame f.
func (e exitedFilter) hider(f *data.Frame) func(*data.Rank) bool {
	return func(r *data.Rank) bool { return !e.show && e.expired(f.At, r) }
}

// showAll hides no rank (--once).
func showAll(*data.Rank) bool { return false }

// rankCounts are a frame's ranks by state; expired counts the exited ranks
// past the grace period (hidden unless shown).
type rankCounts struct{ all, live, stale, exited, expired int }

func countRanks(f *data.Frame, e exitedFilter) rankCounts {
	c := rankCounts{all: len(f.Ranks)}
	for _, r := range f.Ranks {
		switch r.State {
		case telemetry.StateLive:
			c.live++
		case telemetry.StateStale:
			c.stale++
		default:
			c.exited++
		}
		if e.expired(f.At, r) {
			c.expired++
		}
	}
	return c
}

// rankSummary is the title's "N ranks: L live, S stale, E exited" with
// what the exited key does to them; key names the key.
func rankSummary(c rankCounts, show bool, key string) string {
	s := fmt.Sprintf("%d ranks: %d live", c.all, c.live)
	if c.stale > 0 {
		s += ", " + styles.Warn.Render(fmt.Sprintf("%d stale", c.stale))
	}
	if c.exited > 0 {
		s += ", " + styles.Bad.Render(fmt.Sprintf("%d exited", c.exited))
	}
	switch {
	case c.expired == 0:
	case show:
		s += fmt.Sprintf(" (shown; press %s to hide)", key)
	case c.expired == c.exited:
		s += fmt.Sprintf(" (hidden; press %s to show)", key)
	default:
		s += fmt.Sprintf(" (%d hidden; press %s to show)", c.expired, key)
	}
	return s
}

// liveJobsFirst orders ranks grouped by job (as a frame's are) so that
// the jobs with a live rank come first; each job keeps its ranks' order.
func liveJobsFirst(ranks []*data.Rank) []*data.Rank {
	out := make([]*data.Rank, 0, len(ranks))
	var rest []*data.Rank
	for i := 0; i < len(ranks); {
		j, live := i, false
		for ; j < len(ranks) && ranks[j].Job == ranks[i].Job; j++ {
			live = live || ranks[j].State == telemetry.StateLive
		}
		if live {
			out = append(out, ranks[i:j]...)
		} else {
			rest = append(rest, ranks[i:j]...)
		}
		i = j
	}
	return append(out, rest...)
}

// rankID names a rank in findings.
type rankID struct {
	job, host string
	rank      int
}

// panelFindings are the findings the ranks page lists: those about ranks
// it hides are left out, and one last line says how many ranks that hides
// (so exited ranks never outrank the live ones); key names the show key.
func panelFindings(fs []diagnose.Finding, f *data.Frame, hide func(*data.Rank) bool, key string) []diagnose.Finding {
	hidden := map[rankID]bool{}
	for _, r := range f.Ranks {
		if hide(r) {
			hidden[rankID{r.Job, r.Host, r.Rank}] = true
		}
	}
	if len(hidden) == 0 {
		return fs
	}
	out := make([]diagnose.Finding, 0, len(fs)+1)
	for _, d := range fs {
		if d.Rank < 0 || !hidden[rankID{d.Job, d.Host, d.Rank}] {
			out = append(out, d)
		}
	}
	return append(out, diagnose.Finding{Rule: diagnose.RuleRankState, Rank: -1, Reader: -1,
		Evidence: fmt.Sprintf("%s hidden (%s)", counted(len(hidden), "exited rank"), counted(len(fs)-len(out), "finding")),
		Fix:      "press " + key + " to show them"})
}

// counted is "n things", "1 thing" for n = 1.
func counted(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// pick notes the rank the user moved the ranks page's cursor to: one that
// is not live stays under the cursor (cursorToLive), a live one only while
// it is live.
func (m *Model) pick(r *row) {
	m.picked = ""
	if r.state != telemetry.StateLive {
		m.picked = r.key
	}
}

// cursorToLive moves the ranks page's cursor to its first live rank when
// it is on a rank that is not live and that the user did not pick so.
func (m *Model) cursorToLive() {
	l := &m.ranks
	if l.hidden {
		return // the table's rows are not the list's until it is on screen
	}
	sel := l.selected()
	if sel == nil || sel.state == telemetry.StateLive || sel.key == m.picked {
		return
	}
	for i, r := range l.shown {
		if r.state == telemetry.StateLive {
			l.tbl.SetCursor(i)
			return
		}
	}
}

// toggleExited shows or hides the exited ranks past the grace period.
func (m *Model) toggleExited() {
	m.exited.show = !m.exited.show
	m.keys.ShowingExited(m.exited.show)
	if m.frame != nil {
		m.showRows()
	}
	m.layout()
}

// jobErrorText is the empty page's account of a --job that names no job
// or several, with the jobs of the directory.
func jobErrorText(e *data.JobError) string {
	first, _, _ := strings.Cut(e.Error(), "\n")
	lines := []string{styles.Warn.Render(first)}
	for _, l := range e.JobLines() {
		if len(e.Jobs) > 0 {
			lines = append(lines, "  "+l)
		}
	}
	return strings.Join(lines, "\n")
}

// jobErrorTitle is the title's short form of a job selection error.
func jobErrorTitle(e *data.JobError) string {
	if len(e.Matches) > 1 {
		return styles.Warn.Render(fmt.Sprintf("job %q matches %d jobs", e.Want, len(e.Matches)))
	}
	return styles.Warn.Render(fmt.Sprintf("job %q: no such job", e.Want))
}
