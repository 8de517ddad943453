// Package ui is ddtop: bubbletea models and lipgloss styles that show, per
// rank and per variable, where a ddstore job's data-loading time goes. It
// reads telemetry snapshots (through ui/data) and nothing else: it never
// imports the engine or the fabric, so ddtop builds without libfabric.
//
// Pages: ranks (one row per rank), variables (summed over ranks; enter
// shows one variable's per-rank rows) and the rank drill-down (phases,
// latency histogram, throughput sparkline, readers, recent calls).
// Tables are bubbles' table, fitted to the pages by ui/components/columns
// (priority dropping, flex width, sort indicator, cursor kept on its row);
// the filter is bubbles' textinput; the text graphics (phase bar,
// sparkline) live in ui/components/bar, key bindings in ui/keys, styles in
// ui/styles and the snapshot-diff and rate math in ui/data.
package ui

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/ddstore/ddstore/telemetry"
	"github.com/ddstore/ddstore/ui/components/bar"
	"github.com/ddstore/ddstore/ui/components/columns"
	"github.com/ddstore/ddstore/ui/data"
	"github.com/ddstore/ddstore/ui/diagnose"
	"github.com/ddstore/ddstore/ui/keys"
	"github.com/ddstore/ddstore/ui/styles"
)

// Options configure ddtop. Zero fields take the documented defaults.
type Options struct {
	Dir string // segment directory; default "/dev/shm"
	// Job shows only this job: its id or a unique prefix of one (see
	// data.Options.Job); "" = every job.
	Job      string
	Interval time.Duration // refresh interval; default 1s, at least 50ms
	History  int           // throughput points kept per rank; default 300
	Recent   int           // recent calls kept per rank; default 256
	// Now is the clock that measures refresh intervals (rates divide by
	// them) and how long ranks have been exited; default time.Now. Tests
	// inject a fake one.
	Now func() time.Time
	// ExitedGrace is how long after ddtop first saw a rank exited the
	// pages still show it; then it is hidden until key X shows it (the
	// title still counts it). Default DefaultExitedGrace; < 0: never hide.
	ExitedGrace time.Duration

	noCalls bool // set by Once: its report shows no recent calls
}

// ErrOptions reports invalid Options.
var ErrOptions = data.ErrOptions

// Validate checks the options.
func (o Options) Validate() error {
	if o.Interval != 0 && o.Interval < 50*time.Millisecond {
		return fmt.Errorf("%w: interval %v is below 50ms", ErrOptions, o.Interval)
	}
	return o.dataOptions().Validate()
}

func (o Options) withDefaults() Options {
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.Dir == "" {
		o.Dir = data.DefaultDir
	}
	if o.ExitedGrace == 0 {
		o.ExitedGrace = DefaultExitedGrace
	}
	return o
}

func (o Options) dataOptions() data.Options {
	return data.Options{Dir: o.Dir, Job: o.Job, History: o.History, Recent: o.Recent, Now: o.Now, NoCalls: o.noCalls}
}

// Views.
const (
	viewRanks = iota
	viewVars
	viewDetail
	numViews
)

var viewNames = [numViews]string{"ranks", "variables", "detail"}

// Messages.
type (
	frameMsg struct {
		f   *data.Frame
		err error
		gen int
	}
	tickMsg struct{ gen int }
)

// frameSource gives the model its frames: live polls, or a recording.
type frameSource interface {
	poll() (*data.Frame, error)
	// recycle gives back a frame the model no longer shows (its ranks'
	// memory may be reused by a later poll).
	recycle(f *data.Frame)
	close() error
}

// source serialises polls: a refresh may still be running when a key asks
// for another. A frame the model gives back is recycled by the next poll,
// in the poll's goroutine: the model never waits for a running poll.
type source struct {
	mu sync.Mutex
	p  *data.Poller

	backMu sync.Mutex
	back   *data.Frame // given back, not yet recycled
}

func (s *source) poll() (*data.Frame, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.backMu.Lock()
	back := s.back
	s.back = nil
	s.backMu.Unlock()
	s.p.Recycle(back)
	return s.p.Poll()
}

func (s *source) recycle(f *data.Frame) {
	s.backMu.Lock()
	defer s.backMu.Unlock()
	s.back = f // a newer frame given back covers the blocks of older ones
}

func (s *source) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.Close()
}

// replay plays recorded frames: each poll shows the frame at pos and
// moves on (the last one stays); keys step and seek.
type replay struct {
	mu     sync.Mutex
	frames []*data.Frame
	pos    int
}

func (r *replay) poll() (*data.Frame, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.frames[r.pos]
	if r.pos < len(r.frames)-1 {
		r.pos++
	}
	return f, nil
}

func (r *replay) close() error { return nil }

func (r *replay) recycle(*data.Frame) {} // recorded frames are shown again

// seek moves to frame pos (clamped) and returns it; the next poll shows
// the one after.
func (r *replay) seek(pos int) (*data.Frame, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pos = min(max(pos, 0), len(r.frames)-1)
	r.pos = min(pos+1, len(r.frames)-1)
	return r.frames[pos], pos
}

// shown is the index of the frame on screen.
func (r *replay) shown(f *data.Frame) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := max(r.pos-1, 0); i < len(r.frames); i++ {
		if r.frames[i] == f {
			return i
		}
	}
	for i, g := range r.frames {
		if g == f {
			return i
		}
	}
	return 0
}

// Model is ddtop's root model.
type Model struct {
	o           Options
	src         frameSource
	rep         *replay // non-nil in ddtop replay
	frame       *data.Frame
	skipRings   bool               // pages without recent calls skip the rings (run sets it)
	allFindings []diagnose.Finding // of frame, worst first
	findings    []diagnose.Finding // the ranks page's: allFindings less those about hidden ranks
	err         error
	gen         int // refresh chain generation: pause/resume starts a new chain
	paused      bool
	// Pacing (pace.go): refreshes fall on the renderer's ticks, which
	// started at anchor (just before Init) every tick; due is when the
	// refresh in progress was due. tick 0: unpaced (tests, --once).
	anchor, due time.Time
	tick        time.Duration

	view      int
	ranks     list
	vars      list
	varRanks  list
	varSel    string // variable whose per-rank rows the variables view shows; "" = all variables
	detail    detail
	detailRet int // view esc returns to from the detail
	exited    exitedFilter
	picked    string // key of the rank not live that the user moved the ranks page's cursor to

	keys      keys.KeyMap
	help      help.Model
	filter    textinput.Model
	width     int
	height    int
	quitting  bool
	bodyLines int

	// The screen drawn last, valid until a message other than a refresh
	// tick, a frame or a layout change: bubbletea asks for the view after
	// every message, and a tick changes nothing on screen.
	drawn   string
	drawnOK bool
	// searches keeps the ranks' filter texts between refreshes.
	searches searchCache
	legend   string // the phase legend line, drawn once
}

// New builds the model; it reads nothing until Init's first refresh.
func New(o Options) (*Model, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	p, err := data.NewPoller(o.dataOptions())
	if err != nil {
		return nil, err
	}
	m := &Model{
		o: o, src: &source{p: p}, exited: exitedFilter{grace: o.ExitedGrace},
		ranks: newList(rankCols), vars: newList(varCols), varRanks: newList(varRankCols),
		detail: newDetail(), keys: keys.Default(), help: help.New(), filter: newFilter(),
		width: 100, height: 30,
	}
	m.layout()
	return m, nil
}

// newFilter is the filter's one-line input: "/" prompt, a steady cursor
// (no blink ticks between refreshes).
func newFilter() textinput.Model {
	f := textinput.New()
	f.Prompt = "/"
	f.Cursor.SetMode(cursor.CursorStatic)
	return f
}

// Close releases the segments.
func (m *Model) Close() error { return m.src.close() }

// NewReplay builds a model that shows recorded frames (ddtop replay),
// one per o.Interval, with pause, step and seek keys.
func NewReplay(o Options, frames []*data.Frame) (*Model, error) {
	if len(frames) == 0 {
		return nil, fmt.Errorf("%w: a replay needs at least one frame", ErrOptions)
	}
	m, err := New(o)
	if err != nil {
		return nil, err
	}
	m.src.close()
	m.rep = &replay{frames: frames}
	m.src = m.rep
	m.keys = keys.Replay()
	m.layout()
	return m, nil
}

// RunReplay is Run over recorded frames.
func RunReplay(o Options, frames []*data.Frame) error {
	m, err := NewReplay(o, frames)
	if err != nil {
		return err
	}
	defer m.Close()
	return m.run()
}

// seekTo moves a replay to frame pos and shows it (pausing the play).
func (m *Model) seekTo(pos int) {
	f, _ := m.rep.seek(pos)
	m.paused = true
	m.gen++
	m.apply(f, nil)
}

// Run starts the interactive monitor and returns when the user quits.
func Run(o Options) error {
	m, err := New(o)
	if err != nil {
		return err
	}
	defer m.Close()
	return m.run()
}

// run runs the program with the renderer's frame rate paced to the
// refresh interval (pace.go): one wakeup a frame serves both.
func (m *Model) run() error {
	fps, paced := framesFor(m.o.Interval)
	if paced {
		m.tick = time.Second / time.Duration(fps)
	}
	m.skipRings = skipRingsLive
	m.showCalls()
	_, err := tea.NewProgram(m, tea.WithAltScreen(), tea.WithFPS(fps)).Run()
	return err
}

func (m *Model) pollCmd() tea.Cmd {
	gen, src := m.gen, m.src
	return func() tea.Msg {
		f, err := src.poll()
		return frameMsg{f: f, err: err, gen: gen}
	}
}

func (m *Model) tickCmd() tea.Cmd {
	gen, now := m.gen, time.Now()
	m.due = nextRefresh(m.anchor, m.due, now, m.o.Interval, m.tick)
	return tea.Tick(m.due.Sub(now), func(time.Time) tea.Msg { return tickMsg{gen: gen} })
}

// Init starts the first refresh. bubbletea starts its renderer's ticker
// just before Init: now is the pacing's anchor.
func (m *Model) Init() tea.Cmd {
	m.anchor = time.Now()
	m.due = m.anchor
	return m.pollCmd()
}

// Refresh polls synchronously and applies the frame (tests and --once).
func (m *Model) Refresh() error {
	f, err := m.src.poll()
	m.apply(f, err)
	return err
}

// Frame is the last frame shown.
func (m *Model) Frame() *data.Frame { return m.frame }

func (m *Model) apply(f *data.Frame, err error) {
	m.drawnOK = false
	m.err = err
	if err != nil {
		return
	}
	prev := m.frame
	m.frame = f
	m.allFindings = diagnose.Diagnose(f, diagnose.Thresholds{})
	m.detail.findings = m.allFindings
	m.showRows()
	// Every list's rows and the detail page now point into f alone, so
	// the previous frame's memory can serve a later poll.
	m.detail.setFrame(f, m.view == viewDetail)
	if prev != nil && prev != f {
		m.src.recycle(prev)
	}
}

// showRows fills the lists and the findings panel from the frame, less
// the exited ranks the pages hide, and keeps the cursor on a live rank.
func (m *Model) showRows() {
	f := m.frame
	hide := m.exited.hider(f)
	old := panelLines(len(m.findings), m.bodyLines)
	m.findings = panelFindings(m.allFindings, f, hide, m.keys.Exited.Help().Key)
	if panelLines(len(m.findings), m.bodyLines) != old {
		m.layout()
	}
	m.ranks.setRows(rankRows(f, &m.searches, hide))
	m.vars.setRows(varRows(f))
	m.varRanks.setRows(varRankRows(f, m.varSel, hide))
	m.cursorToLive()
}

// Update handles refreshes, resizes and keys.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	if _, tick := msg.(tickMsg); !tick {
		m.drawnOK = false
	}
	switch msg := msg.(type) {
	case frameMsg:
		if msg.gen != m.gen {
			return m, nil // from a chain that pause/resume replaced
		}
		if !m.paused {
			m.apply(msg.f, msg.err)
		}
		return m, m.tickCmd()
	case tickMsg:
		if msg.gen != m.gen || m.paused {
			return m, nil
		}
		return m, m.pollCmd()
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.layout()
		return m, nil
	case tea.KeyMsg:
		return m.key(msg)
	}
	if m.filter.Focused() {
		return m, m.updateFilter(msg) // e.g. a clipboard paste (ctrl+v)
	}
	return m, nil
}

// updateFilter passes msg to the filter input and filters the lists again
// when its text changed.
func (m *Model) updateFilter(msg tea.Msg) tea.Cmd {
	before := m.filter.Value()
	var cmd tea.Cmd
	m.filter, cmd = m.filter.Update(msg)
	if m.filter.Value() != before {
		m.applyFilter()
	}
	return cmd
}

func (m *Model) key(msg tea.KeyMsg) (tea.Model, tea.Cmd) {
	if m.filter.Focused() {
		var cmd tea.Cmd
		fk := m.filter.KeyMap
		switch {
		case msg.Type == tea.KeyEnter:
			m.filter.Blur()
		case msg.Type == tea.KeyEsc:
			m.filter.Blur()
			m.filter.SetValue("")
			m.applyFilter()
		case msg.Type == tea.KeyCtrlC:
			m.quitting = true
			return m, tea.Quit
		case msg.Alt && msg.Type == tea.KeyRunes &&
			!key.Matches(msg, fk.WordForward, fk.WordBackward, fk.DeleteWordForward, fk.DeleteWordBackward):
			// alt+key (or esc typed fast before a key) is not text
		default:
			cmd = m.updateFilter(msg)
		}
		m.layout()
		return m, cmd
	}
	if msg.Type == tea.KeyRunes && len(msg.Runes) > 1 && !msg.Paste {
		// Keys typed faster than a read arrive together: one at a time.
		var cmds []tea.Cmd
		for _, r := range msg.Runes {
			_, c := m.key(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}, Alt: msg.Alt})
			cmds = append(cmds, c)
		}
		return m, tea.Batch(cmds...)
	}
	k := m.keys
	switch {
	case key.Matches(msg, k.Quit):
		m.quitting = true
		return m, tea.Quit
	case key.Matches(msg, k.Help):
		m.help.ShowAll = !m.help.ShowAll
		m.layout()
	case m.rep != nil && key.Matches(msg, k.StepFwd, k.StepBack, k.SeekFwd, k.SeekBack, k.Start, k.End):
		cur := m.rep.shown(m.frame)
		n := len(m.rep.frames)
		jump := max(n/10, 1)
		switch {
		case key.Matches(msg, k.StepFwd):
			cur++
		case key.Matches(msg, k.StepBack):
			cur--
		case key.Matches(msg, k.SeekFwd):
			cur += jump
		case key.Matches(msg, k.SeekBack):
			cur -= jump
		case key.Matches(msg, k.Start):
			cur = 0
		default:
			cur = n - 1
		}
		m.seekTo(cur)
	case key.Matches(msg, k.Exited):
		m.toggleExited()
	case key.Matches(msg, k.Pause):
		m.paused = !m.paused
		m.gen++
		if !m.paused {
			m.due = time.Now()
			return m, m.pollCmd()
		}
	case key.Matches(msg, k.NextView):
		step := 1
		if msg.String() == "shift+tab" {
			step = numViews - 1
		}
		m.setView((m.view + step) % numViews)
	case key.Matches(msg, k.Ranks):
		m.setView(viewRanks)
	case key.Matches(msg, k.Vars):
		m.setView(viewVars)
	case key.Matches(msg, k.Detail):
		if m.detail.path == "" {
			if r := m.ranks.selected(); r != nil {
				m.detail.follow(r.key, m.frame)
			}
		}
		m.setView(viewDetail)
	case key.Matches(msg, k.Filter):
		cmd := m.filter.Focus()
		m.layout()
		return m, cmd
	case key.Matches(msg, k.Sort):
		if l := m.activeList(); l != nil {
			l.cycleSort()
		}
	case key.Matches(msg, k.Reverse):
		if l := m.activeList(); l != nil {
			l.reverse()
		}
	case key.Matches(msg, k.Enter):
		m.enter()
	case key.Matches(msg, k.Back):
		m.back()
	case key.Matches(msg, k.Up), key.Matches(msg, k.Down), key.Matches(msg, k.PageUp), key.Matches(msg, k.PageDown):
		m.move(msg)
	}
	return m, nil
}

func (m *Model) setView(v int) {
	m.view = v
	m.showCalls()
	m.layout()
}

// showCalls tells a live source whether the page on screen shows recent
// calls (only the detail page does): the others' polls skip the rings.
// Only while the program runs (m.skipRings, set by run): on drilling in,
// the detail's recent calls come with the next refresh.
func (m *Model) showCalls() {
	if s, ok := m.src.(*source); ok && m.skipRings {
		s.p.ShowCalls(m.view == viewDetail)
	}
}

// activeList is the list the cursor keys move, nil on the detail view.
func (m *Model) activeList() *list {
	switch {
	case m.view == viewRanks:
		return &m.ranks
	case m.view == viewVars && m.varSel != "":
		return &m.varRanks
	case m.view == viewVars:
		return &m.vars
	}
	return nil
}

func (m *Model) move(msg tea.KeyMsg) {
	k := m.keys
	if l := m.activeList(); l != nil {
		switch {
		case key.Matches(msg, k.Up):
			l.tbl.MoveUp(1)
		case key.Matches(msg, k.Down):
			l.tbl.MoveDown(1)
		case key.Matches(msg, k.PageUp):
			l.tbl.MoveUp(l.tbl.PageSize())
		case key.Matches(msg, k.PageDown):
			l.tbl.MoveDown(l.tbl.PageSize())
		}
		if r := l.selected(); r != nil && l == &m.ranks {
			m.pick(r)
		}
		return
	}
	vp := &m.detail.vp
	switch {
	case key.Matches(msg, k.Up):
		vp.ScrollUp(1)
	case key.Matches(msg, k.Down):
		vp.ScrollDown(1)
	case key.Matches(msg, k.PageUp):
		vp.PageUp()
	case key.Matches(msg, k.PageDown):
		vp.PageDown()
	}
	m.detail.render() // the recent calls are drawn only where they show
}

func (m *Model) enter() {
	switch {
	case m.view == viewRanks:
		if r := m.ranks.selected(); r != nil {
			m.openDetail(r.key, viewRanks)
		}
	case m.view == viewVars && m.varSel == "":
		if r := m.vars.selected(); r != nil {
			m.varSel = r.key
			m.varRanks.setHidden(false) // on screen from here: the cursor goes to the top
			m.varRanks.setRows(varRankRows(m.frame, m.varSel, m.exited.hider(m.frame)))
			m.varRanks.tbl.SetCursor(0)
			m.layout()
		}
	case m.view == viewVars:
		if r := m.varRanks.selected(); r != nil {
			m.openDetail(r.key, viewVars)
		}
	}
}

func (m *Model) openDetail(path string, from int) {
	m.detail.follow(path, m.frame)
	m.detailRet = from
	m.setView(viewDetail)
}

func (m *Model) back() {
	switch {
	case m.filter.Value() != "":
		m.filter.SetValue("")
		m.applyFilter()
	case m.view == viewDetail:
		m.setView(m.detailRet)
	case m.view == viewVars && m.varSel != "":
		m.varSel = ""
		m.layout()
	}
}

func (m *Model) applyFilter() {
	f := m.filter.Value()
	m.ranks.setFilter(f)
	m.vars.setFilter(f)
	m.varRanks.setFilter(f)
}

// Header, legend and footer take fixed lines; the page gets the rest.
func (m *Model) layout() {
	m.drawnOK = false
	w, h := max(m.width, 20), max(m.height, 6)
	m.help.Width = w
	foot := lineCount(m.help.View(m.keys))
	if m.filter.Focused() || m.filter.Value() != "" {
		foot++
	}
	// Prompt, text and the cursor's cell fill the width.
	m.filter.Width = max(w-lipgloss.Width(m.filter.Prompt)-1, 1)
	body := max(h-3-foot, 2)
	if m.view == viewVars && m.varSel != "" {
		body = max(body-1, 2) // the "variable X by rank" line
	}
	m.bodyLines = body
	// Only the page on screen lays its table out every refresh.
	m.ranks.setHidden(m.view != viewRanks)
	m.vars.setHidden(m.view != viewVars || m.varSel != "")
	m.varRanks.setHidden(m.view != viewVars || m.varSel == "")
	m.ranks.setSize(w, body-panelLines(len(m.findings), body))
	m.vars.setSize(w, body)
	m.varRanks.setSize(w, body)
	m.detail.setSize(w, body)
	m.cursorToLive() // the ranks page may have come on screen
}

func lineCount(s string) int {
	if s == "" {
		return 0
	}
	return strings.Count(s, "\n") + 1
}

// View draws the screen: tabs and status, totals, the phase legend, the
// page, then filter and help. It never exceeds the terminal's size.
func (m *Model) View() string {
	if m.quitting {
		return ""
	}
	if !m.drawnOK {
		m.drawn, m.drawnOK = m.draw(), true
	}
	return m.drawn
}

func (m *Model) draw() string {
	w, h := max(m.width, 20), max(m.height, 6)
	var lines []string
	lines = append(lines, m.titleLine())
	lines = append(lines, m.summaryLine())
	if m.legend == "" {
		m.legend = " " + bar.Legend(telemetry.PhaseNames[:])
	}
	lines = append(lines, m.legend)
	var body string
	switch m.view {
	case viewRanks:
		body = m.ranks.view()
		if len(m.ranks.shown) == 0 {
			body += "\n" + m.emptyText()
		}
		if pl := panelLines(len(m.findings), m.bodyLines); pl > 0 {
			bl := strings.Split(body, "\n")
			for len(bl) < m.bodyLines-pl {
				bl = append(bl, "")
			}
			body = strings.Join(bl[:min(len(bl), m.bodyLines-pl)], "\n") + "\n" + findingsPanel(m.findings, pl, w)
		}
	case viewVars:
		if m.varSel != "" {
			body = styles.Section.Render("variable "+m.varSel) + " by rank " + styles.Faint.Render("(esc: all variables)") + "\n" + m.varRanks.view()
		} else {
			body = m.vars.view()
			if len(m.vars.shown) == 0 {
				body += "\n" + m.emptyText()
			}
		}
	case viewDetail:
		body = m.detail.view()
	}
	bl := strings.Split(body, "\n")
	want := m.bodyLines
	if m.view == viewVars && m.varSel != "" {
		want++
	}
	for len(bl) < want {
		bl = append(bl, "")
	}
	lines = append(lines, bl[:min(len(bl), want)]...)
	if m.filter.Focused() || m.filter.Value() != "" {
		lines = append(lines, m.filter.View())
	}
	lines = append(lines, strings.Split(m.help.View(m.keys), "\n")...)
	if len(lines) > h {
		lines = lines[:h]
	}
	for i, l := range lines {
		if columns.Width(l) > w {
			lines[i] = ansi.Truncate(l, w, "")
		}
	}
	return strings.Join(lines, "\n")
}

func (m *Model) emptyText() string {
	switch {
	case m.err != nil:
		return styles.Bad.Render(m.err.Error())
	case m.frame == nil:
		return styles.Faint.Render("reading " + m.o.Dir + " …")
	case m.frame.JobErr != nil:
		return jobErrorText(m.frame.JobErr)
	case m.filter.Value() != "":
		return styles.Faint.Render("no rows match the filter " + fmt.Sprintf("%q", m.filter.Value()))
	case m.view == viewRanks && len(m.frame.Ranks) > 0:
		return styles.Faint.Render(fmt.Sprintf("every rank exited a while ago and is hidden; press %s to show them", m.keys.Exited.Help().Key))
	case len(m.frame.Problems) > 0:
		return styles.Warn.Render(m.frame.Problems[0])
	default:
		job := ""
		if m.o.Job != "" {
			job = " for job " + m.o.Job
		}
		return styles.Faint.Render("no ddstore segments in " + m.o.Dir + job + " yet; waiting")
	}
}

func (m *Model) titleLine() string {
	var tabs []string
	for i, n := range viewNames {
		t := fmt.Sprintf("%d %s", i+1, n)
		if i == m.view {
			tabs = append(tabs, styles.TabOn.Render("["+t+"]"))
		} else {
			tabs = append(tabs, styles.TabOff.Render(" "+t+" "))
		}
	}
	s := styles.Title.Render("ddtop") + " "
	if m.rep != nil && m.frame != nil {
		s += styles.Paused.Render(fmt.Sprintf(" REPLAY %d/%d %s ", m.rep.shown(m.frame)+1, len(m.rep.frames),
			m.frame.At.Format("15:04:05"))) + " "
	}
	if m.paused {
		s += styles.Paused.Render(" PAUSED ") + " "
	}
	s += strings.Join(tabs, "")
	switch {
	case m.frame == nil:
	case m.frame.JobErr != nil:
		s += "  " + jobErrorTitle(m.frame.JobErr)
	default:
		s += "  " + rankSummary(countRanks(m.frame, m.exited), m.exited.show, m.keys.Exited.Help().Key)
	}
	if l := m.activeList(); l != nil && l.sortCol >= 0 {
		dir := "▲"
		if l.desc {
			dir = "▼"
		}
		s += "  sort " + l.sortTitle() + dir
	}
	return s
}

func (m *Model) summaryLine() string {
	if m.err != nil {
		return styles.Bad.Render(m.err.Error())
	}
	if m.frame == nil {
		return styles.Faint.Render(m.o.Dir)
	}
	var t data.Stat
	var lw, ls int64
	for _, r := range m.frame.Ranks {
		t.Total.Accumulate(&r.Stat.Total)
		t.Delta.Accumulate(&r.Stat.Delta)
		t.Interval = max(t.Interval, r.Stat.Interval)
		lwin := &r.Loader.Total // Window, without copying it
		if r.Loader.Delta.Batches > 0 {
			lwin = &r.Loader.Delta
		}
		lw += lwin.WaitNs
		ls += lwin.StepNs
	}
	s := fmt.Sprintf("calls/s %s  rows/s %s  MB/s %s  µs/row %s  errors %d",
		si(t.CallsPerSec()), si(t.RowsPerSec()), mbps(t.BytesPerSec()), us(t.NsPerRow()), t.Total.Errors)
	if lw+ls > 0 {
		s += fmt.Sprintf("  loader wait %s", pct(float64(lw)/float64(lw+ls)))
	}
	s += styles.Faint.Render(fmt.Sprintf("  every %v  %s", m.o.Interval, m.o.Dir))
	if n := len(m.frame.Problems); n > 0 {
		s += "  " + styles.Warn.Render(fmt.Sprintf("%d unreadable", n))
	}
	return s
}
