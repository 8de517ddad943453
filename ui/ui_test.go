package ui

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"

	"github.com/ddstore/ddstore/internal/segtest"
	"github.com/ddstore/ddstore/telemetry"
	"github.com/ddstore/ddstore/ui/data"
)

func TestMain(m *testing.M) {
	lipgloss.SetColorProfile(termenv.Ascii)
	os.Exit(m.Run())
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// fixture is a directory of real telemetry writers.
type fixture struct {
	t   *testing.T
	dir string
	clk *clock
	ws  []*telemetry.Writer
	ids []map[string]int
	// rowBytes is the size of a row in the calls record makes; 0 means 16.
	rowBytes int64
}

func newFixture(t *testing.T) *fixture {
	return &fixture{t: t, dir: t.TempDir(), clk: &clock{t: time.Unix(1_700_000_000, 0)}}
}

// rank creates rank r of job1 on host with the given variables.
func (fx *fixture) rank(r, world int, host string, pid int, vars ...string) int {
	fx.t.Helper()
	return fx.jobRank("job1", r, world, host, pid, vars...)
}

// jobRank creates rank r of job on host with the given variables; pid 0
// is this process (live).
func (fx *fixture) jobRank(job string, r, world int, host string, pid int, vars ...string) int {
	fx.t.Helper()
	w, err := telemetry.Create(telemetry.WriterOptions{Dir: fx.dir, Job: job, Rank: r, World: world, Host: host, Pid: pid,
		Provider: "tcp;ofi_rxm", ReaderMode: "thread", Method: "tcp"})
	if err != nil {
		fx.t.Fatalf("create rank %d: %v", r, err)
	}
	fx.t.Cleanup(func() { w.Close() })
	ids := map[string]int{}
	for _, v := range vars {
		id, err := w.AddVar(v, "float32", 16, 1000, 250)
		if err != nil {
			fx.t.Fatal(err)
		}
		ids[v] = id
	}
	fx.ws = append(fx.ws, w)
	fx.ids = append(fx.ids, ids)
	return len(fx.ws) - 1
}

// record makes writer i record n calls of variable v on reader rd: call k
// has k+1 rows of fx.rowBytes (default 16) bytes, lock_wait 100 ns and
// cq_wait 300 ns a row.
func (fx *fixture) record(i int, v string, rd int32, n int) {
	rowBytes := fx.rowBytes
	if rowBytes == 0 {
		rowBytes = 16
	}
	for k := range n {
		rows := int64(k + 1)
		c := telemetry.Call{Var: int32(fx.ids[i][v]), Reader: rd, Rows: rows, Bytes: rowBytes * rows, RemoteRows: rows}
		c.Phases[telemetry.PhaseLockWait] = 100 * rows
		c.Phases[telemetry.PhaseCQWait] = 300 * rows
		fx.ws[i].Record(&c)
	}
}

func (fx *fixture) model() *Model {
	fx.t.Helper()
	return fx.jobModel("")
}

// jobModel is a model of the fixture's directory showing job (an id or a
// prefix; "" = every job).
func (fx *fixture) jobModel(job string) *Model {
	fx.t.Helper()
	m, err := New(Options{Dir: fx.dir, Job: job, Now: fx.clk.now, Interval: 100 * time.Millisecond})
	if err != nil {
		fx.t.Fatal(err)
	}
	fx.t.Cleanup(func() { m.Close() })
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
	return m
}

// oneRankDetail is a model over rank 0 of 4 (host alpha, variable x)
// showing the rank's drill-down after a second in which write recorded on
// its writer (x: the variable's id).
func oneRankDetail(t *testing.T, write func(w *telemetry.Writer, x int32)) *Model {
	fx := newFixture(t)
	i := fx.rank(0, 4, "alpha", 0, "x")
	m := fx.model()
	refresh(t, m)
	write(fx.ws[i], int32(fx.ids[i]["x"]))
	fx.clk.advance(time.Second)
	refresh(t, m)
	press(m, "enter")
	return m
}

func refresh(t *testing.T, m *Model) {
	t.Helper()
	if err := m.Refresh(); err != nil {
		t.Fatal(err)
	}
}

func press(m *Model, keys ...string) {
	for _, k := range keys {
		var msg tea.KeyMsg
		switch k {
		case "enter":
			msg = tea.KeyMsg{Type: tea.KeyEnter}
		case "esc":
			msg = tea.KeyMsg{Type: tea.KeyEsc}
		case "tab":
			msg = tea.KeyMsg{Type: tea.KeyTab}
		case "down":
			msg = tea.KeyMsg{Type: tea.KeyDown}
		case "backspace":
			msg = tea.KeyMsg{Type: tea.KeyBackspace}
		default:
			msg = tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
		}
		m.Update(msg)
	}
}

// lineWith returns the first line of the view that contains s.
func lineWith(t *testing.T, view, s string) string {
	t.Helper()
	for _, l := range strings.Split(view, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	t.Fatalf("no line contains %q in:\n%s", s, view)
	return ""
}

// rowFields returns the fields of the first line whose first field is first.
func rowFields(t *testing.T, view, first string) []string {
	t.Helper()
	for _, l := range strings.Split(view, "\n") {
		if f := fields(l); len(f) > 0 && f[0] == first {
			return f
		}
	}
	t.Fatalf("no row starts with %q in:\n%s", first, view)
	return nil
}

func fields(l string) []string { return strings.Fields(strings.TrimPrefix(l, "▸")) }

// shownRanks is the rank column of the ranks list, in display order.
func shownRanks(m *Model) []int {
	var out []int
	for _, r := range m.ranks.shown {
		out = append(out, r.rank)
	}
	return out
}

// threeRanks: rank r on host h<r> records 10*(r+1) calls of "x" between two
// refreshes 2 s apart, so calls/s = 5*(r+1) and rows/s = sum(1..n)/2.
func threeRanks(t *testing.T) (*fixture, *Model) {
	return threeRanksBytes(t, 16)
}

// threeRanksBytes is threeRanks with rowBytes bytes a row.
func threeRanksBytes(t *testing.T, rowBytes int64) (*fixture, *Model) {
	fx := newFixture(t)
	fx.rowBytes = rowBytes
	hosts := []string{"alpha", "beta", "gamma"}
	for r := range 3 {
		fx.rank(r, 3, hosts[r], 0, "x", "y")
	}
	m := fx.model()
	refresh(t, m)
	for r := range 3 {
		fx.record(r, "x", 0, 10*(r+1))
	}
	fx.record(1, "y", 2, 4)
	fx.clk.advance(2 * time.Second)
	refresh(t, m)
	return fx, m
}

func TestRanksViewRates(t *testing.T) {
	// 200 kB a row, so that MB/s is far from 0. Over the 2 s interval:
	// rank 0: 10 calls of x, 1+..+10 = 55 rows;
	// rank 1: 20 calls of x (210 rows) + 4 of y (1+2+3+4 = 10 rows): 24 calls, 220 rows;
	// rank 2: 30 calls of x, 1+..+30 = 465 rows.
	// CALL/S = calls/2; ROW/S = rows/2 (%.0f rounds half to even:
	// 27.5 -> 28, 232.5 -> 232); MB/S = rows*2e5/2/1e6 = rows/10
	// (5.5, 22, 46.5: below 10 two decimals, else one);
	// µS/ROW = (100+300) ns = 0.40 µs.
	_, m := threeRanksBytes(t, 200_000)
	v := m.View()
	pid := fmt.Sprint(os.Getpid())
	for _, want := range [][]string{
		{"0", "alpha", pid, "live", "5", "28", "5.50", "0.40"},
		{"1", "beta", pid, "live", "12", "110", "22.0", "0.40"},
		{"2", "gamma", pid, "live", "15", "232", "46.5", "0.40"},
	} {
		// RANK HOST PID STATE CALL/S ROW/S MB/S µS/ROW ...
		f := fields(lineWith(t, v, want[1]))
		if len(f) < len(want) {
			t.Fatalf("row %q: want at least %d fields", f, len(want))
		}
		for i, w := range want {
			if f[i] != w {
				t.Fatalf("rank %s row %q: field %d = %q, want %q", want[0], f, i, f[i], w)
			}
		}
	}
	// Title counts ranks by state; the summary sums over ranks:
	// calls/s (10+24+30)/2 = 32, rows/s (55+220+465)/2 = 370,
	// MB/s 740 rows * 2e5 B / 2 s = 74.0e6 B/s.
	if !strings.Contains(v, "3 ranks: 3 live") {
		t.Fatalf("title: %s", lineWith(t, v, "ddtop"))
	}
	if want := "calls/s 32  rows/s 370  MB/s 74.0  µs/row 0.40"; !strings.Contains(v, want) {
		t.Fatalf("summary lacks %q: %s", want, lineWith(t, v, "calls/s"))
	}
	// Phase bar: lock_wait 1/4, cq_wait 3/4 of every call.
	bar := fields(lineWith(t, v, "alpha"))
	glyphs := bar[len(bar)-1]
	if strings.Count(glyphs, "l")*3 != strings.Count(glyphs, "q") || strings.Trim(glyphs, "lq") != "" {
		t.Fatalf("phase bar %q, want l:q = 1:3", glyphs)
	}
}

func TestSortAndFilter(t *testing.T) {
	_, m := threeRanks(t)
	if got := fmt.Sprint(shownRanks(m)); got != "[0 1 2]" {
		t.Fatalf("natural order %s", got)
	}
	// s cycles the sort column: RANK, HOST, PID, STATE, CALL/S.
	press(m, "s")
	if m.ranks.sortTitle() != "RANK" || m.ranks.desc {
		t.Fatalf("first s: %q desc %v", m.ranks.sortTitle(), m.ranks.desc)
	}
	press(m, "s", "s", "s", "s")
	if m.ranks.sortTitle() != "CALL/S" || !m.ranks.desc {
		t.Fatalf("fifth s: %q desc %v", m.ranks.sortTitle(), m.ranks.desc)
	}
	if got := fmt.Sprint(shownRanks(m)); got != "[2 1 0]" {
		t.Fatalf("by calls/s desc: %s", got)
	}
	v := m.View()
	if !strings.Contains(v, "CALL/S▼") || !strings.Contains(lineWith(t, v, "ddtop"), "sort CALL/S▼") {
		t.Fatalf("no sort indicator:\n%s", v)
	}
	press(m, "S")
	if got := fmt.Sprint(shownRanks(m)); got != "[0 1 2]" || !strings.Contains(m.View(), "CALL/S▲") {
		t.Fatalf("reversed: %s", got)
	}
	// The cursor follows its row across a re-sort.
	press(m, "down", "down") // rank 2
	press(m, "S")
	if sel := m.ranks.selected(); sel == nil || sel.rank != 2 || m.ranks.tbl.Cursor() != 0 {
		t.Fatalf("cursor after re-sort: %+v at %d", sel, m.ranks.tbl.Cursor())
	}

	// Filter by host, typed.
	press(m, "/", "b", "e", "t")
	if got := fmt.Sprint(shownRanks(m)); got != "[1]" {
		t.Fatalf("filter bet: %s", got)
	}
	press(m, "enter")
	v = m.View()
	if !strings.Contains(v, "beta") || strings.Contains(v, "alpha") || !strings.Contains(v, "/bet") {
		t.Fatalf("filtered view:\n%s", v)
	}
	// Keys work again after enter; esc clears the filter.
	press(m, "esc")
	if got := fmt.Sprint(shownRanks(m)); got != "[2 1 0]" {
		t.Fatalf("after esc: %s", got)
	}
	// Filter by rank and by variable name (only rank 1 has calls on y,
	// but every rank has y: the ranks view matches all).
	press(m, "/", "r", "2", "enter")
	if got := fmt.Sprint(shownRanks(m)); got != "[2]" {
		t.Fatalf("filter r2: %s", got)
	}
	press(m, "esc", "/", "z", "z")
	if len(m.ranks.shown) != 0 || !strings.Contains(m.View(), `no rows match the filter "zz"`) {
		t.Fatalf("filter zz:\n%s", m.View())
	}
	press(m, "backspace", "backspace", "enter")
	if len(m.ranks.shown) != 3 {
		t.Fatalf("cleared by backspace: %d", len(m.ranks.shown))
	}
}

func TestVariablesView(t *testing.T) {
	_, m := threeRanks(t)
	press(m, "tab")
	if m.view != viewVars {
		t.Fatalf("tab: view %d", m.view)
	}
	v := m.View()
	// x: 10+20+30 calls over 2 s, rows sum over ranks.
	rowsX := 55 + 210 + 465
	fx := rowFields(t, v, "x")
	// VARIABLE DTYPE ROWS RANKS CALL/S ROW/S MB/S
	want := []string{"x", "float32", si(1000), "3", si(30), si(float64(rowsX) / 2), mbps(float64(16*rowsX) / 2)}
	for i, w := range want {
		if fx[i] != w {
			t.Fatalf("x row %q: field %d = %q, want %q", fx, i, fx[i], w)
		}
	}
	fy := rowFields(t, v, "y")
	if fy[4] != si(2) || fy[5] != si(5) {
		t.Fatalf("y row %q: want calls/s 2 rows/s 5", fy)
	}
	// enter: x by rank.
	press(m, "enter")
	v = m.View()
	if m.varSel != "x" || !strings.Contains(v, "variable x by rank") {
		t.Fatalf("enter on x:\n%s", v)
	}
	if f := fields(lineWith(t, v, "gamma")); f[0] != "2" || f[3] != si(15) {
		t.Fatalf("x on rank 2: %q", f)
	}
	// enter on a rank row drills into that rank; esc comes back here.
	press(m, "down", "enter")
	if m.view != viewDetail || m.detail.rank == nil || m.detail.rank.Rank != 1 {
		t.Fatalf("drill from variable: view %d rank %+v", m.view, m.detail.rank)
	}
	press(m, "esc")
	if m.view != viewVars || m.varSel != "x" {
		t.Fatalf("esc from detail: view %d var %q", m.view, m.varSel)
	}
	press(m, "esc")
	if m.varSel != "" || !strings.Contains(m.View(), "VARIABLE") {
		t.Fatal("esc from by-rank")
	}
	// 1 and 2 switch views directly.
	press(m, "1")
	if m.view != viewRanks {
		t.Fatal("1")
	}
}

func TestDetail(t *testing.T) {
	fx, m := threeRanks(t)
	press(m, "down", "enter") // rank 1: 20 calls of x on reader 0, 4 of y on reader 2
	if m.view != viewDetail || m.detail.rank.Rank != 1 {
		t.Fatalf("enter: view %d", m.view)
	}
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 200}) // all of it on screen
	v := m.View()
	for _, s := range []string{"rank 1/3", "beta", "job job1", "provider tcp;ofi_rxm", "readers thread",
		"PHASES", "CALL LATENCY (24 calls", "THROUGHPUT", "READERS (2 stripes)", "RECENT CALLS", "0 dropped"} {
		if !strings.Contains(v, s) {
			t.Fatalf("detail lacks %q:\n%s", s, v)
		}
	}
	// Phases table: lock_wait 25%, cq_wait 75%, total ns = 400 * rows.
	rows := 210 + 10
	if f := rowFields(t, v, "lock_wait"); f[1] != dur(float64(100*rows)) || f[2] != "25%" {
		t.Fatalf("lock_wait row %q", f)
	}
	if f := rowFields(t, v, "cq_wait"); f[1] != dur(float64(300*rows)) || f[2] != "75%" {
		t.Fatalf("cq_wait row %q", f)
	}
	// Readers: one row per stripe.
	if f := rowFields(t, v, "y"); f[1] != "2" || f[2] != "4" || f[3] != "10" {
		t.Fatalf("reader y/2 row %q", f)
	}
	// Call latency histogram. A call of n rows takes 400n ns (lock_wait
	// 100n + cq_wait 300n): x's 20 calls take 400, 800, ..., 8000 ns and
	// y's 4 calls 400, 800, 1200, 1600 ns. Bucket i holds [2^(i-1), 2^i) ns:
	//   [256, 512):   400 (x1, y1)                      = 2
	//   [512, 1024):  800 (x2, y2)                      = 2
	//   [1024, 2048): 1200, 1600 (x3, x4, y3, y4), 2000 = 5
	//   [2048, 4096): 2400 ... 4000 (x6..x10)           = 5
	//   [4096, 8192): 4400 ... 8000 (x11..x20)          = 10
	// Rows are labelled by upper bound: 1024 ns = 1.0µs, 2048 = 2.0µs, ...
	var hist []string
	for _, l := range strings.Split(v, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "<" {
			hist = append(hist, strings.Join(f[:3], " "))
		}
	}
	want := []string{"< 512ns 2", "< 1.0µs 2", "< 2.0µs 5", "< 4.1µs 5", "< 8.2µs 10"}
	if strings.Join(hist, "|") != strings.Join(want, "|") {
		t.Fatalf("histogram rows %q, want %q:\n%s", hist, want, v)
	}
	// Quantiles interpolate linearly inside the bucket that holds them:
	// p50 is the 12th of 24 calls: 9 are below 2048, so 3/5 of the way
	// through [2048, 4096): 2048 + 0.6*2048 = 3276.8 ns = 3.3µs.
	// p99 is call 23.76: 14 are below 4096, so (23.76-14)/10 = 0.976 of the
	// way through [4096, 8192): 4096 + 0.976*4096 = 8093.696 ns = 8.1µs.
	for _, s := range []string{"CALL LATENCY (24 calls, p50 3.3µs, p99 8.1µs)", "call p50 3.3µs  p99 8.1µs"} {
		if !strings.Contains(v, s) {
			t.Fatalf("detail lacks %q:\n%s", s, v)
		}
	}
	// Recent calls: newest first: y's 4th call (4 rows) on reader 2.
	after := v[strings.Index(v, "RECENT CALLS"):]
	lines := strings.Split(after, "\n")
	if f := fields(lines[2]); f[1] != "y" || f[2] != "2" || f[3] != "4" || f[4] != "64" {
		t.Fatalf("newest call %q", f)
	}
	// Sparkline has one point per interval after the first snapshot.
	if !strings.Contains(v, "over the last 1 intervals") {
		t.Fatal("history length")
	}
	// A rank that goes away stays on the page, marked gone.
	fx.ws[1].Close()
	fx.clk.advance(time.Second)
	refresh(t, m)
	if m.detail.rank == nil || m.detail.rank.State != "gone" || !strings.Contains(m.View(), "gone") {
		t.Fatalf("vanished rank: %+v", m.detail.rank)
	}
}

// hang makes writer i look hung (stale): its heartbeat a minute old.
func (fx *fixture) hang(i int) {
	fx.t.Helper()
	segtest.SetHeartbeat(fx.t, fx.ws[i].Path(), time.Now().Add(-time.Minute))
}

func TestStates(t *testing.T) {
	fx := newFixture(t)
	fx.rank(0, 3, "", 0, "x")
	fx.rank(1, 3, "", segtest.ExitedPid(t), "x")
	fx.hang(fx.rank(2, 3, "", 0, "x"))
	m := fx.model()
	refresh(t, m)
	v := m.View()
	for r, st := range []string{"live", "exited", "stale"} {
		var line string
		for _, l := range strings.Split(v, "\n") {
			if f := fields(l); len(f) > 3 && f[0] == fmt.Sprint(r) {
				line = l
			}
		}
		if f := fields(line); len(f) < 4 || f[3] != st {
			t.Fatalf("rank %d: %q, want state %s\n%s", r, line, st, v)
		}
	}
	if !strings.Contains(v, "3 ranks: 1 live, 1 stale, 1 exited") {
		t.Fatalf("title: %s", lineWith(t, v, "ddtop"))
	}
}

func TestPause(t *testing.T) {
	fx, m := threeRanks(t)
	press(m, "p")
	if !m.paused || !strings.Contains(lineWith(t, m.View(), "ddtop"), "PAUSED") {
		t.Fatal("p: not paused")
	}
	before := m.Frame()
	// A refresh that lands while paused is dropped and stops the chain.
	fx.record(0, "x", 0, 5)
	fx.clk.advance(time.Second)
	f, err := m.src.poll()
	if err != nil {
		t.Fatal(err)
	}
	if _, cmd := m.Update(frameMsg{f: f, gen: m.gen}); m.Frame() != before || cmd == nil {
		t.Fatal("frame applied while paused")
	}
	if _, cmd := m.Update(tickMsg{gen: m.gen}); cmd != nil {
		t.Fatal("tick while paused polls")
	}
	// Resume: a poll command comes back, and its frame is shown.
	_, cmd := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("p")})
	if m.paused || cmd == nil {
		t.Fatal("p again: not resumed")
	}
	m.Update(cmd())
	if m.Frame() == before || strings.Contains(m.View(), "PAUSED") {
		t.Fatal("resume did not refresh")
	}
	// A frame from the old chain is ignored.
	if _, cmd := m.Update(frameMsg{f: before, gen: m.gen - 1}); cmd != nil || m.Frame() == before {
		t.Fatal("stale chain frame applied")
	}
}

// Every view, at every size, fits: no line wider than the terminal and no
// more lines than its height.
func TestFitsTerminal(t *testing.T) {
	_, m := threeRanks(t)
	check := func(name string, w, h int) {
		t.Helper()
		m.Update(tea.WindowSizeMsg{Width: w, Height: h})
		v := m.View()
		lines := strings.Split(v, "\n")
		if len(lines) > h {
			t.Fatalf("%s at %dx%d: %d lines", name, w, h, len(lines))
		}
		for i, l := range lines {
			if n := ansi.StringWidth(l); n > w {
				t.Fatalf("%s at %dx%d: line %d is %d wide: %q", name, w, h, i, n, l)
			}
		}
	}
	for _, sz := range [][2]int{{80, 24}, {100, 30}, {60, 15}, {200, 60}, {40, 10}} {
		// Each view is reached by pressing keys after the view before.
		for _, step := range []struct{ keys, view string }{
			{"1", "ranks"}, {"?", "ranks+help"}, {"? / a", "ranks+filter"}, {"esc esc 2", "variables"},
			{"enter", "variable by rank"}, {"enter", "detail"}, {"j j j", "detail scrolled"},
		} {
			press(m, strings.Fields(step.keys)...)
			check(step.view, sz[0], sz[1])
		}
		press(m, "esc", "esc")
	}
	// At 80x24 the ranks view keeps rank, host, state, rates and the bar.
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	press(m, "1")
	hdr := lineWith(t, m.View(), "RANK")
	for _, c := range []string{"RANK", "HOST", "STATE", "CALL/S", "ROW/S", "MB/S", "µS/ROW", "P99", "ERR", "PHASES"} {
		if !strings.Contains(hdr, c) {
			t.Fatalf("80 wide header lacks %s: %q", c, hdr)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string // "" when valid
	}{
		{Options{Interval: time.Millisecond}, "interval 1ms is below 50ms"},
		{Options{History: -1}, "History -1 < 0"},
		{Options{Interval: 50 * time.Millisecond}, ""},
		{Options{}, ""},
	} {
		err := c.o.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v refused: %v", c.o, err)
			}
			continue
		}
		if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want ErrOptions saying %q", c.o, err, c.want)
		}
		if _, err := New(c.o); !errors.Is(err, ErrOptions) {
			t.Errorf("New(%+v): error %v, want ErrOptions", c.o, err)
		}
	}
}

// The filter is a bubbles textinput: typing, backspace, ctrl+u, alt+key
// ignored, and a long text scrolled to fit the width.
func TestFilterInput(t *testing.T) {
	_, m := threeRanks(t)
	press(m, "/", "h", "o", "s", "t", "backspace")
	m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("x"), Alt: true})
	if m.filter.Value() != "hos" || !strings.Contains(m.View(), "/hos") {
		t.Fatalf("value %q view:\n%s", m.filter.Value(), m.View())
	}
	m.Update(tea.KeyMsg{Type: tea.KeyCtrlU})
	if m.filter.Value() != "" || len(m.ranks.shown) != 3 {
		t.Fatalf("ctrl+u: %q, %d rows", m.filter.Value(), len(m.ranks.shown))
	}
	m.Update(tea.WindowSizeMsg{Width: 20, Height: 10})
	long := "abcdefghijklmnopqrstuvwxyz0123"
	for _, r := range long {
		m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
	var line string
	for _, l := range strings.Split(m.View(), "\n") {
		if strings.HasPrefix(l, "/") {
			line = l
		}
	}
	if ansi.StringWidth(line) > 20 || !strings.Contains(line, "0123") || m.filter.Value() != long {
		t.Fatalf("narrow filter line %q (value %q)", line, m.filter.Value())
	}
	press(m, "enter")
	if m.filter.Focused() || m.filter.Value() != long {
		t.Fatal("enter: still focused or text lost")
	}
}

// The detail draws recent calls only where the viewport shows them: in a
// short terminal, scrolling down shows every call once, in newest-first
// order, exactly as the full page does.
func TestDetailScrollRecent(t *testing.T) {
	_, m := threeRanks(t)
	press(m, "down", "enter")
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 200})
	v := m.View()
	var want []string
	for _, l := range strings.Split(v[strings.Index(v, "RECENT CALLS"):], "\n")[2:] {
		if f := fields(l); len(f) > 0 && len(f[0]) == 12 && f[0][2] == ':' {
			want = append(want, strings.Join(f, " "))
		}
	}
	if len(want) != 24 {
		t.Fatalf("full page shows %d recent calls, want 24", len(want))
	}
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 16})
	var got []string
	seen := map[string]bool{}
	for range 200 {
		for _, l := range strings.Split(m.View(), "\n") {
			if f := fields(l); len(f) > 0 && len(f[0]) == 12 && f[0][2] == ':' {
				if s := strings.Join(f, " "); !seen[s] {
					seen[s] = true
					got = append(got, s)
				}
			}
		}
		press(m, "down")
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("scrolling shows recent calls\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDetailPeers: the drill-down's peer table, loader config and process
// counters come from the segment's v2 blocks.
func TestDetailPeers(t *testing.T) {
	m := oneRankDetail(t, func(w *telemetry.Writer, x int32) {
		// 10 calls of 2 rows (1 MB each) from rank 1 (1000 ns a row), 5 of
		// 1 row (0.5 MB) from rank 3 (4000 ns).
		for k := 0; k < 10; k++ {
			c := telemetry.Call{Var: x, Reader: 1, Rows: 2, Bytes: 2_000_000, RemoteRows: 2}
			c.Targets.Add(1, 2)
			c.Phases[telemetry.PhaseCQWait] = 2000
			w.Record(&c)
		}
		for k := 0; k < 5; k++ {
			c := telemetry.Call{Var: x, Reader: 1, Rows: 1, Bytes: 500_000, RemoteRows: 1, Err: k == 0, ErrPeer: 4}
			c.Targets.Add(3, 1)
			c.Phases[telemetry.PhaseCQWait] = 4000
			w.Record(&c)
		}
		w.SetLoaderConfig(telemetry.LoaderConfig{Workers: 4, Prefetch: 2, Readers: telemetry.LoaderReadersShared, BatchRows: 32})
		w.AddProc(telemetry.ProcLeakedBuffers, 3)
	})
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 200})
	v := m.View()
	for _, s := range []string{"PEERS (reads by target rank; 2 ranks)", "loader config: workers 4  prefetch 2  readers shared  batch 32 rows",
		"process: leaked_buffers 3"} {
		if !strings.Contains(v, s) {
			t.Fatalf("detail lacks %q:\n%s", s, v)
		}
	}
	after := v[strings.Index(v, "PEERS"):]
	// MB is the total read from the target: 10 * 2 MB = 20 MB ("20.0"),
	// 5 * 0.5 MB = 2.5 MB ("2.50"). P50/P99 interpolate in the peer
	// histogram of per-row times, bucket i = [4^(i-1), 4^i) ns:
	// rank 1: all 10 calls at 1000 ns/row, in [256, 1024):
	//   p50 = 256 + 0.50*768 = 640 ns; p99 = 256 + 0.99*768 = 1016.32 ns = 1.0µs;
	// rank 3: all 5 at 4000 ns/row, in [1024, 4096):
	//   p50 = 1024 + 0.50*3072 = 2560 ns = 2.6µs; p99 = 1024 + 0.99*3072 = 4065.28 ns = 4.1µs.
	for _, want := range [][]string{
		// TARGET CALLS ROWS ROW/S MB µS/ROW P50 P99 ERR MOVED SERVED
		{"1", "10", "20", "20", "20.0", "1.00", "640ns", "1.0µs", "0", "0", "0"},
		{"3", "5", "5", "5", "2.50", "4.00", "2.6µs", "4.1µs", "1", "0", "0"},
	} {
		if f := rowFields(t, after, want[0]); strings.Join(f, " ") != strings.Join(want, " ") {
			t.Fatalf("peer %s row %q, want %q", want[0], f, want)
		}
	}
}

// TestFindingsPanel: the ranks view lists the diagnoses under the table,
// worst first, and the drill-down lists the rank's own.
func TestFindingsPanel(t *testing.T) {
	_, m := threeRanks(t)
	// Ranks 1 and 2 made 20 and 30 calls on the shared reader (0) with
	// lock_wait a quarter of each call: over the 20% threshold.
	v := m.View()
	lineWith(t, v, "FINDINGS 2, worst first")
	l1 := lineWith(t, v, "lock_wait rank 1 (beta) var x reader 0: lock_wait is 25% of the shared reader's time (threshold 20%)")
	l2 := lineWith(t, v, "lock_wait rank 2 (gamma) var x reader 0")
	if strings.Index(v, l1) > strings.Index(v, l2) {
		t.Fatalf("same severity: rank order expected:\n%s", v)
	}
	// The panel sits below the ranks table, which keeps its rows.
	if strings.Index(v, "FINDINGS") < strings.Index(v, "gamma") {
		t.Fatalf("panel above the table:\n%s", v)
	}
	if got := shownRanks(m); len(got) != 3 {
		t.Fatalf("ranks %v", got)
	}
	// A small terminal still fits, panel and all.
	m.Update(tea.WindowSizeMsg{Width: 60, Height: 14})
	v = m.View()
	if n := strings.Count(v, "\n") + 1; n > 14 {
		t.Fatalf("%d lines in a 14-line terminal:\n%s", n, v)
	}
	for _, l := range strings.Split(v, "\n") {
		if ansi.StringWidth(l) > 60 {
			t.Fatalf("line wider than 60: %q", l)
		}
	}
	lineWith(t, v, "FINDINGS")
	// Drill-down on rank 2: its own finding only.
	m.Update(tea.WindowSizeMsg{Width: 200, Height: 200})
	press(m, "down", "down", "enter")
	v = m.View()
	lineWith(t, v, "FINDINGS (1, worst first)")
	lineWith(t, v, "lock_wait rank 2 (gamma) var x reader 0")
	if strings.Contains(v, "rank 1 (beta)") {
		t.Fatalf("rank 1's finding on rank 2's page:\n%s", v)
	}
}

// TestReplayKeys: a replay shows recorded frames in turn; step, seek,
// start and end move through them and pause the play.
func TestReplayKeys(t *testing.T) {
	fx := newFixture(t)
	fx.rank(0, 1, "alpha", 0, "x")
	p, err := data.NewPoller(data.Options{Dir: fx.dir, Now: fx.clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var frames []*data.Frame
	for i := range 5 {
		fx.record(0, "x", 1, i+1)
		fx.clk.advance(time.Second)
		f, err := p.Poll()
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	m, err := NewReplay(Options{Dir: fx.dir, Interval: time.Second}, frames)
	if err != nil {
		t.Fatal(err)
	}
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 30})
	at := func(want string, calls int64) {
		t.Helper()
		v := m.View()
		lineWith(t, v, "REPLAY "+want)
		if got := m.Frame().Ranks[0].Stat.Total.Calls; got != calls {
			t.Fatalf("at %s: %d calls, want %d", want, got, calls)
		}
	}
	refresh(t, m) // plays frame 1
	at("1/5", 1)
	refresh(t, m)
	at("2/5", 3)
	press(m, ".")
	at("3/5", 6)
	if !m.paused {
		t.Fatal("step did not pause the play")
	}
	press(m, "G")
	at("5/5", 15)
	refresh(t, m) // the last frame stays
	at("5/5", 15)
	press(m, "g", ",")
	at("1/5", 1)
	press(m, ">", ">")
	at("3/5", 6)
	press(m, "<")
	at("2/5", 3)
	lineWith(t, m.View(), "step")
	if _, err := NewReplay(Options{}, nil); err == nil {
		t.Fatal("replay of nothing")
	}
}

// TestColouredRows: with colour, the list's PHASES bars, STATE words and
// non-zero ERR counts are coloured (the selected row is in reverse video
// instead), every other character stays where it
// was (the plain view is the coloured one with its colour stripped), and
// the lines keep their widths.
func TestColouredRows(t *testing.T) {
	fx, m := threeRanks(t)
	c := telemetry.Call{Var: int32(fx.ids[2]["x"]), Reader: 0, Rows: 1, Bytes: 16, Err: true}
	c.Phases[telemetry.PhaseCQWait] = 100
	fx.ws[2].Record(&c)
	fx.clk.advance(time.Second)
	refresh(t, m)
	plain := m.View()
	lipgloss.SetColorProfile(termenv.TrueColor)
	defer lipgloss.SetColorProfile(termenv.Ascii)
	m.drawnOK = false
	col := m.View()
	if ansi.Strip(col) == col {
		t.Fatal("no colour at all")
	}
	pl, cl := strings.Split(plain, "\n"), strings.Split(col, "\n")
	if len(pl) != len(cl) {
		t.Fatalf("%d lines plain, %d coloured", len(pl), len(cl))
	}
	coloured, selected := 0, 0
	for i := range pl {
		if ansi.StringWidth(cl[i]) != ansi.StringWidth(pl[i]) {
			t.Fatalf("line %d: width %d coloured, %d plain", i, ansi.StringWidth(cl[i]), ansi.StringWidth(pl[i]))
		}
		s := ansi.Strip(cl[i])
		if f := fields(s); len(f) < 2 || f[1] != "alpha" && f[1] != "beta" && f[1] != "gamma" {
			continue
		}
		// the selected rank row: reverse video, the Mark in its gutter
		if strings.HasPrefix(s, "▸") {
			if !strings.HasPrefix(cl[i], "\x1b[7m▸") {
				t.Fatalf("selected row not reversed: %q", cl[i])
			}
			selected++
			continue
		}
		// another rank row: its bar in coloured blocks, its state coloured
		if !strings.Contains(cl[i], "█") || strings.ContainsAny(s, "lq") && strings.Contains(s, "qqq") ||
			!strings.Contains(cl[i], "mlive\x1b[") {
			t.Fatalf("row not coloured: %q", cl[i])
		}
		coloured++
	}
	if coloured != 2 || selected != 1 {
		t.Fatalf("%d coloured and %d selected rank rows, want 2 and 1:\n%s", coloured, selected, col)
	}
	// Rank 2's error count is red: an escape sequence right before "1".
	for _, l := range cl {
		if f := fields(ansi.Strip(l)); len(f) > 1 && f[1] == "gamma" && !strings.Contains(l, "m1\x1b[") {
			t.Fatalf("error count not coloured: %q", l)
		}
	}
}

// TestSkipRingsOffDetail: a running ddtop (skipRings, set by run) has the
// poller skip the rings on the ranks and variables pages and read them on
// the detail page; a model that is not running (tests, --once) always
// reads them.
func TestSkipRingsOffDetail(t *testing.T) {
	_, m := threeRanks(t)
	p := m.src.(*source).p
	if !p.CallsShown() {
		t.Fatal("a model that is not running skips the rings")
	}
	m.skipRings = true
	m.setView(viewRanks)
	if p.CallsShown() {
		t.Fatal("ranks page: rings read")
	}
	press(m, "enter")
	if m.view != viewDetail || !p.CallsShown() {
		t.Fatalf("detail page (view %d): rings skipped", m.view)
	}
	press(m, "2")
	if m.view != viewVars || p.CallsShown() {
		t.Fatalf("variables page (view %d): rings read", m.view)
	}
}
