package ui

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/ddstore/ddstore/internal/segtest"
	"github.com/ddstore/ddstore/ui/data"
	"github.com/ddstore/ddstore/ui/diagnose"
)

const liveJob = "pmi-kvs_26094_0_487958802_vm"

// pileUp is issue 31's /dev/shm: four older jobs of 8 exited ranks each
// (their ids sort first), then liveJob's 4 live ranks, all on this host.
func pileUp(t *testing.T) *fixture {
	fx := newFixture(t)
	dead := segtest.ExitedPid(t)
	for j := range 4 {
		for r := range 8 {
			fx.jobRank(fmt.Sprintf("pmi-kvs_1000%d_0_1_vm", j), r, 8, "", dead, "x")
		}
	}
	for r := range 4 {
		fx.jobRank(liveJob, r, 4, "", 0, "x")
	}
	return fx
}

// selectedRow is the ranks page's row under the cursor.
func selectedRow(t *testing.T, m *Model) *row {
	t.Helper()
	r := m.ranks.selected()
	if r == nil {
		t.Fatal("no row selected")
	}
	return r
}

// In a 160x45 terminal the live job's ranks come first, all four on
// screen, with the cursor on the first; the exited ones follow in job and
// rank order, and the title counts them.
func TestLiveJobsFirst(t *testing.T) {
	fx := pileUp(t)
	m := fx.model()
	m.Update(tea.WindowSizeMsg{Width: 160, Height: 45})
	refresh(t, m)
	v := m.View()
	lineWith(t, v, "36 ranks: 4 live, 32 exited")
	if strings.Contains(v, "hidden") {
		t.Fatalf("exited ranks hidden before the grace period:\n%s", v)
	}
	if n := len(m.ranks.shown); n != 36 {
		t.Fatalf("%d ranks listed, want 36 (4 live, 32 exited)", n)
	}
	for i, r := range m.ranks.shown {
		wantJob, wantRank, wantState := liveJob, i, "live"
		if i >= 4 {
			wantJob, wantRank, wantState = fmt.Sprintf("pmi-kvs_1000%d_0_1_vm", (i-4)/8), (i-4)%8, "exited"
		}
		if !strings.Contains(r.key, wantJob) || r.rank != wantRank || r.state != wantState {
			t.Fatalf("row %d: %s rank %d %s, want %s rank %d %s", i, r.key, r.rank, r.state, wantJob, wantRank, wantState)
		}
	}
	live := 0
	for _, l := range strings.Split(v, "\n") {
		if f := fields(l); len(f) > 3 && f[3] == "live" {
			live++
		}
	}
	if live != 4 {
		t.Fatalf("%d live rows on screen, want 4:\n%s", live, v)
	}
	if r := selectedRow(t, m); !strings.Contains(r.key, liveJob) || r.rank != 0 {
		t.Fatalf("cursor on %s rank %d", r.key, r.rank)
	}
	if cur := lineWith(t, v, "▸"); !strings.Contains(cur, "live") {
		t.Fatalf("cursor line %q", cur)
	}
}

// The cursor starts on the first live rank, even below an exited one of
// the same job; a refresh keeps it there, moves it off a rank that exits
// to the first live one, and keeps an exited rank the user picked.
func TestCursorOnLiveRank(t *testing.T) {
	fx := newFixture(t)
	dead := segtest.ExitedPid(t)
	fx.jobRank("a", 0, 2, "", dead, "x")
	fx.jobRank("a", 1, 2, "", dead, "x")
	fx.jobRank("b", 0, 3, "", dead, "x")
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	fx.jobRank("b", 1, 3, "", sleeper.Process.Pid, "x")
	fx.jobRank("b", 2, 3, "", 0, "x")
	m := fx.model()
	refresh(t, m)
	if got := shownOrder(m); got != "b0 b1 b2 a0 a1" {
		t.Fatalf("order %q, want b0 b1 b2 a0 a1", got)
	}
	if r := selectedRow(t, m); r.rank != 1 || r.state != "live" {
		t.Fatalf("cursor on rank %d (%s), want b's rank 1", r.rank, r.state)
	}
	fx.clk.advance(time.Second)
	refresh(t, m)
	if r := selectedRow(t, m); r.rank != 1 {
		t.Fatalf("after a refresh the cursor is on rank %d", r.rank)
	}
	// The process of the rank under the cursor (picked by the user while
	// live) exits: the cursor moves to the next live rank.
	press(m, "down", "up")
	sleeper.Process.Kill()
	sleeper.Wait()
	// Without a pidfd ddtop may trust a live answer for a few ms more.
	b1 := func() *data.Rank { return m.Frame().Ranks[3] } // frame order: a0 a1 b0 b1 b2
	for deadline := time.Now().Add(30 * time.Second); b1().State != "exited"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("rank b1 not seen exited: %s", b1().State)
		}
		refresh(t, m)
	}
	if r := selectedRow(t, m); r.rank != 2 || r.state != "live" {
		t.Fatalf("after rank 1 exited the cursor is on rank %d (%s)", r.rank, r.state)
	}
	// An exited rank the user picks stays picked.
	press(m, "down")
	picked := selectedRow(t, m).key
	fx.clk.advance(time.Second)
	refresh(t, m)
	if r := selectedRow(t, m); r.key != picked || r.state != "exited" {
		t.Fatalf("picked %s, cursor on %s (%s)", picked, r.key, r.state)
	}
}

// shownOrder is the ranks page's rows as "<job><rank>" in order.
func shownOrder(m *Model) string {
	job := map[string]string{}
	for _, r := range m.Frame().Ranks {
		job[r.Path] = r.Job
	}
	var s []string
	for _, r := range m.ranks.shown {
		s = append(s, fmt.Sprintf("%s%d", job[r.key], r.rank))
	}
	return strings.Join(s, " ")
}

// exitedAndStale: job "new" with a live rank 0 and a stale rank 1, job
// "old" with two exited ranks, polled once at the fixture's time.
func exitedAndStale(t *testing.T) (*fixture, *Model) {
	fx := newFixture(t)
	dead := segtest.ExitedPid(t)
	fx.jobRank("new", 0, 2, "", 0, "x")
	fx.hang(fx.jobRank("new", 1, 2, "", 0, "x"))
	fx.jobRank("old", 0, 2, "", dead, "x")
	fx.jobRank("old", 1, 2, "", dead, "x")
	m := fx.model()
	refresh(t, m)
	return fx, m
}

// panelRules lists the ranks page's findings as "rule job rank".
func panelRules(m *Model) []string {
	var out []string
	for _, f := range m.findings {
		out = append(out, fmt.Sprintf("%s %s %d", f.Rule, f.Job, f.Rank))
	}
	return out
}

// Exited ranks stay on the page for DefaultExitedGrace after ddtop first
// saw them exited (by the poller's clock), then hide; X shows and hides
// them. The title keeps counting them, their findings collapse into one
// last line, and the stale rank is never hidden.
func TestExitedHiddenAfterGrace(t *testing.T) {
	fx, m := exitedAndStale(t)
	check := func(what string, rows int, title string) {
		t.Helper()
		v := m.View()
		if len(m.ranks.shown) != rows {
			t.Fatalf("%s: %d rows, want %d:\n%s", what, len(m.ranks.shown), rows, v)
		}
		if got := lineWith(t, v, "ddtop"); !strings.Contains(got, title) {
			t.Fatalf("%s: title %q lacks %q", what, got, title)
		}
	}
	check("at first", 4, "4 ranks: 1 live, 1 stale, 2 exited")
	if n := len(m.findings); n != 3 || m.findings[n-1].Rule != diagnose.RuleRankState {
		t.Fatalf("at first: findings %q", panelRules(m))
	}
	fx.clk.advance(DefaultExitedGrace - time.Second)
	refresh(t, m)
	check("before the grace period ends", 4, "1 stale, 2 exited")
	if strings.Contains(m.View(), "hidden") {
		t.Fatalf("hidden before the grace period ends:\n%s", m.View())
	}

	fx.clk.advance(time.Second)
	refresh(t, m)
	check("after the grace period", 2, "4 ranks: 1 live, 1 stale, 2 exited (hidden; press X to show)")
	if got := shownOrder(m); got != "new0 new1" {
		t.Fatalf("after the grace period: rows %q, want new0 new1", got)
	}
	got := panelRules(m)
	if len(got) != 2 || got[0] != "rank_state new 1" || got[1] != "rank_state  -1" {
		t.Fatalf("findings after the grace period: %q", got)
	}
	lineWith(t, m.View(), "rank_state: 2 exited ranks hidden (2 findings) → press X to show them")

	press(m, "X")
	check("X", 4, "2 exited (shown; press X to hide)")
	if len(m.findings) != 3 {
		t.Fatalf("X: findings %q", panelRules(m))
	}
	press(m, "?")
	lineWith(t, m.View(), "X hide exited")
	press(m, "X")
	check("X again", 2, "2 exited (hidden; press X to show)")
	lineWith(t, m.View(), "X show exited")
}

// A negative grace never hides exited ranks.
func TestExitedNeverHidden(t *testing.T) {
	fx := newFixture(t)
	fx.jobRank("old", 0, 1, "", segtest.ExitedPid(t), "x")
	m, err := New(Options{Dir: fx.dir, Now: fx.clk.now, ExitedGrace: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	refresh(t, m)
	fx.clk.advance(time.Hour)
	refresh(t, m)
	if len(m.ranks.shown) != 1 || strings.Contains(m.View(), "hidden") {
		t.Fatalf("exited rank hidden with a negative grace:\n%s", m.View())
	}
}

// When every rank is hidden the page says so and names the key.
func TestAllExitedHidden(t *testing.T) {
	fx := newFixture(t)
	fx.jobRank("old", 0, 1, "", segtest.ExitedPid(t), "x")
	m := fx.model()
	refresh(t, m)
	fx.clk.advance(DefaultExitedGrace)
	refresh(t, m)
	lineWith(t, m.View(), "every rank exited a while ago and is hidden; press X to show them")
}

// jobsDir holds liveJob (2 live ranks), another pmi-kvs job (1 live, 1
// exited) and jobs "abc" and "abcd".
func jobsDir(t *testing.T) *fixture {
	fx := newFixture(t)
	fx.jobRank(liveJob, 0, 2, "", 0, "x")
	fx.jobRank(liveJob, 1, 2, "", 0, "x")
	fx.jobRank("pmi-kvs_27000_0_5_vm", 0, 2, "", 0, "x")
	fx.jobRank("pmi-kvs_27000_0_5_vm", 1, 2, "", segtest.ExitedPid(t), "x")
	fx.jobRank("abc", 0, 1, "", 0, "x")
	fx.jobRank("abcd", 0, 1, "", 0, "x")
	return fx
}

// --job takes a unique prefix of a job id; an exact id wins over a prefix.
func TestJobPrefix(t *testing.T) {
	fx := jobsDir(t)
	for _, c := range []struct{ want, job string }{{"pmi-kvs_26", liveJob}, {liveJob, liveJob}, {"abc", "abc"}, {"abcd", "abcd"}} {
		m := fx.jobModel(c.want)
		refresh(t, m)
		if m.Frame().Job != c.job || len(m.ranks.shown) == 0 {
			t.Fatalf("--job %s: job %q, %d rows", c.want, m.Frame().Job, len(m.ranks.shown))
		}
		for _, r := range m.Frame().Ranks {
			if r.Job != c.job {
				t.Fatalf("--job %s shows a rank of %s", c.want, r.Job)
			}
		}
	}
}

// A --job that matches several jobs, or none, says so in the title and
// lists the directory's jobs (id, ranks, live) on the page.
func TestJobNoMatch(t *testing.T) {
	fx := jobsDir(t)
	for _, c := range []struct{ want, title, page string }{
		{"pmi-kvs", `job "pmi-kvs" matches 2 jobs`, `job "pmi-kvs" matches 2 jobs in ` + fx.dir + `: give more of the job id`},
		{"nope", `job "nope": no such job`, `no job in ` + fx.dir + ` matches "nope"`},
	} {
		m := fx.jobModel(c.want)
		refresh(t, m)
		v := m.View()
		if len(m.ranks.shown) != 0 || !strings.Contains(lineWith(t, v, "ddtop"), c.title) {
			t.Fatalf("--job %s: %d rows, title %q", c.want, len(m.ranks.shown), lineWith(t, v, "ddtop"))
		}
		lineWith(t, v, c.page)
		for job, want := range map[string]string{liveJob: "2 2", "pmi-kvs_27000_0_5_vm": "2 1", "abc": "1 1", "abcd": "1 1"} {
			if got := strings.Join(rowFields(t, v, job)[1:], " "); got != want {
				t.Fatalf("--job %s: job %s listed with %q, want ranks and live %q", c.want, job, got, want)
			}
		}
	}
}
