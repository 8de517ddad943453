package ui

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ddstore/ddstore/telemetry"
	"github.com/ddstore/ddstore/ui/components/bar"
	"github.com/ddstore/ddstore/ui/components/columns"
	"github.com/ddstore/ddstore/ui/data"
	"github.com/ddstore/ddstore/ui/styles"
)

// row is one line of a list page: a rank, a variable, or a variable on a
// rank. Column definitions read the fields they need.
type row struct {
	key        string // identity across refreshes
	rank       int
	host       string
	pid        int
	state      string
	name       string // variable name
	dtype      string
	globalRows int64
	nranks     int
	stat       *data.Stat
	loader     *data.LoaderStat
	search     string // lower-case text the filter matches against
}

// sortKey orders rows on a column: by s, then by f.
type sortKey struct {
	s string
	f float64
}

// colDef is a column: its columns.Column (with Paint, the cell's colour),
// how to draw a cell (plain text, measured and cut by the table), and how
// to sort.
type colDef struct {
	columns.Column
	cell     func(r *row, width int) string
	key      func(r *row) sortKey // nil: not sortable
	descByDf bool                 // first sort is descending (numbers)
}

func num(f func(r *row) float64) func(r *row) sortKey {
	return func(r *row) sortKey { return sortKey{f: f(r)} }
}

// numCol is a column of numbers: it shows value(r) through format and
// sorts by it, largest first.
func numCol(c columns.Column, format func(float64) string, value func(r *row) float64) colDef {
	return colDef{Column: c, cell: func(r *row, _ int) string { return format(value(r)) }, key: num(value), descByDf: true}
}

var (
	colRank = colDef{Column: columns.Column{Title: "RANK", Width: 4, Right: true},
		cell: func(r *row, _ int) string { return fmt.Sprint(r.rank) },
		key:  num(func(r *row) float64 { return float64(r.rank) })}
	colHost = colDef{Column: columns.Column{Title: "HOST", Width: 9, Drop: 2},
		cell: func(r *row, _ int) string { return r.host },
		key:  func(r *row) sortKey { return sortKey{s: r.host, f: float64(r.rank)} }}
	colPid = colDef{Column: columns.Column{Title: "PID", Width: 7, Right: true, Drop: 5},
		cell: func(r *row, _ int) string { return fmt.Sprint(r.pid) },
		key:  num(func(r *row) float64 { return float64(r.pid) })}
	colState = colDef{Column: columns.Column{Title: "STATE", Width: 6, Paint: paintState},
		cell: func(r *row, _ int) string { return r.state },
		key:  func(r *row) sortKey { return sortKey{s: r.state, f: float64(r.rank)} }}
	colVar = colDef{Column: columns.Column{Title: "VARIABLE", Width: 14},
		cell: func(r *row, _ int) string { return r.name },
		key:  func(r *row) sortKey { return sortKey{s: r.name} }}
	colDType = colDef{Column: columns.Column{Title: "DTYPE", Width: 7, Drop: 3},
		cell: func(r *row, _ int) string { return r.dtype },
		key:  func(r *row) sortKey { return sortKey{s: r.dtype} }}
	colGlobal = numCol(columns.Column{Title: "ROWS", Width: 7, Right: true, Drop: 4}, si,
		func(r *row) float64 { return float64(r.globalRows) })
	colNRanks = colDef{Column: columns.Column{Title: "RANKS", Width: 5, Right: true, Drop: 5},
		cell: func(r *row, _ int) string { return fmt.Sprint(r.nranks) },
		key:  num(func(r *row) float64 { return float64(r.nranks) }), descByDf: true}
	colCalls = numCol(columns.Column{Title: "CALL/S", Width: 7, Right: true}, si,
		func(r *row) float64 { return r.stat.CallsPerSec() })
	colRows = numCol(columns.Column{Title: "ROW/S", Width: 7, Right: true}, si,
		func(r *row) float64 { return r.stat.RowsPerSec() })
	colMB = numCol(columns.Column{Title: "MB/S", Width: 7, Right: true}, mbps,
		func(r *row) float64 { return r.stat.BytesPerSec() })
	colUsRow = numCol(columns.Column{Title: "µS/ROW", Width: 7, Right: true}, us,
		func(r *row) float64 { return r.stat.NsPerRow() })
	colP50 = numCol(columns.Column{Title: "P50", Width: 6, Right: true, Drop: 4}, us,
		func(r *row) float64 { return r.stat.RowQuantile(0.5) })
	colP99 = numCol(columns.Column{Title: "P99", Width: 6, Right: true, Drop: 3}, us,
		func(r *row) float64 { return r.stat.RowQuantile(0.99) })
	colErr = numCol(columns.Column{Title: "ERR", Width: 4, Right: true, Paint: paintErr}, si,
		func(r *row) float64 { return float64(r.stat.Total.Errors) })
	colWait = colDef{Column: columns.Column{Title: "WAIT%", Width: 5, Right: true, Drop: 6},
		cell: func(r *row, _ int) string {
			if r.loader == nil || !r.loader.Present() {
				return "-"
			}
			return pct(r.loader.WaitShare())
		},
		key: num(func(r *row) float64 {
			if r.loader == nil {
				return -1
			}
			return r.loader.WaitShare()
		}), descByDf: true}
	colPhases = colDef{Column: columns.Column{Title: "PHASES", Width: 11, Flex: true, Paint: bar.Colorize},
		cell: func(r *row, w int) string { s := r.stat.PhaseShare(); return bar.Glyphs(s[:], w) }}
)

// Column sets of the list pages.
var (
	rankCols    = []colDef{colRank, colHost, colPid, colState, colCalls, colRows, colMB, colUsRow, colP50, colP99, colErr, colWait, colPhases}
	varCols     = []colDef{colVar, colDType, colGlobal, colNRanks, colCalls, colRows, colMB, colUsRow, colP50, colP99, colErr, colPhases}
	varRankCols = []colDef{colRank, colHost, colState, colCalls, colRows, colMB, colUsRow, colP50, colP99, colErr, colPhases}
)

// list is a sortable, filterable table of rows.
type list struct {
	cols    []colDef
	tbl     columns.Table
	all     []*row
	shown   []*row
	sortCol int // index into cols, -1 = natural order
	desc    bool
	filter  string

	// hidden: the page is not on screen, so render keeps the table's new
	// cells in pending instead of laying the table out (the costly part
	// of a refresh); setHidden(false) hands them over.
	hidden       bool
	pending      bool
	pendingCells [][]string
	pendingKeys  []string
}

// setHidden marks the list off or on screen; coming on screen, the table
// gets the rows rendered while it was hidden.
func (l *list) setHidden(h bool) {
	l.hidden = h
	if !h && l.pending {
		l.pending = false
		l.tbl.SetSort(l.sortCol, l.desc)
		l.tbl.SetRows(l.pendingCells, l.pendingKeys)
		l.pendingCells, l.pendingKeys = nil, nil
	}
}

func newList(cols []colDef) list {
	tc := make([]columns.Column, len(cols))
	for i, c := range cols {
		tc[i] = c.Column
	}
	return list{cols: cols, tbl: columns.New(tc), sortCol: -1}
}

func (l *list) setSize(w, h int) {
	l.tbl.SetSize(w, h)
	l.render()
}

func (l *list) setRows(rows []*row) {
	l.all = rows
	l.render()
}

func (l *list) setFilter(f string) {
	l.filter = strings.ToLower(strings.TrimSpace(f))
	l.render()
}

// cycleSort moves the sort to the next visible, sortable column (after the
// natural order comes the first column).
func (l *list) cycleSort() {
	widths := l.tbl.Layout()
	n := len(l.cols)
	for step := 1; step <= n+1; step++ {
		i := l.sortCol + step
		if i >= n {
			i -= n + 1 // wrap through -1 (natural order)
		}
		if i == -1 {
			l.sortCol, l.desc = -1, false
			break
		}
		if l.cols[i].key != nil && widths[i] > 0 {
			l.sortCol, l.desc = i, l.cols[i].descByDf
			break
		}
	}
	l.render()
}

func (l *list) reverse() {
	if l.sortCol >= 0 {
		l.desc = !l.desc
		l.render()
	}
}

func (l *list) sortTitle() string {
	if l.sortCol < 0 {
		return ""
	}
	return l.cols[l.sortCol].Title
}

func (l *list) render() {
	l.shown = l.shown[:0]
	for _, r := range l.all {
		if l.filter == "" || strings.Contains(r.search, l.filter) {
			l.shown = append(l.shown, r)
		}
	}
	if l.sortCol >= 0 {
		k := l.cols[l.sortCol].key
		desc := l.desc
		sort.SliceStable(l.shown, func(i, j int) bool {
			a, b := k(l.shown[i]), k(l.shown[j])
			if a.s != b.s {
				return (a.s < b.s) != desc
			}
			if a.f != b.f {
				return (a.f < b.f) != desc
			}
			return false
		})
	}
	widths := l.tbl.Layout()
	cells := make([][]string, len(l.shown))
	keys := make([]string, len(l.shown))
	for i, r := range l.shown {
		cells[i] = make([]string, len(l.cols))
		for j, c := range l.cols {
			if widths[j] > 0 {
				cells[i][j] = c.cell(r, widths[j])
			}
		}
		keys[i] = r.key
	}
	if l.hidden {
		l.pending, l.pendingCells, l.pendingKeys = true, cells, keys
		return
	}
	l.pending = false
	l.tbl.SetSort(l.sortCol, l.desc)
	l.tbl.SetRows(cells, keys)
}

func (l *list) selected() *row {
	l.setHidden(l.hidden) // a pending table first: its cursor picks the row
	if len(l.shown) == 0 {
		return nil
	}
	return l.shown[l.tbl.Cursor()]
}

func (l *list) view() string { return l.tbl.View() }

// paintState colours a STATE cell's word (live, stale, exited).
func paintState(c string) string {
	if styles.Plain() {
		return c
	}
	word := strings.TrimSpace(c)
	if word == "" {
		return c
	}
	return strings.Replace(c, word, styles.State(word), 1)
}

// paintErr colours a non-zero ERR count.
func paintErr(c string) string {
	if styles.Plain() {
		return c
	}
	n := strings.TrimSpace(c)
	if n == "" || n == "0" {
		return c
	}
	return strings.Replace(c, n, styles.BadP.Paint(n), 1)
}

// Row builders.

// rankRows are the ranks page's rows, the jobs with a live rank first,
// without the ranks hide names; sc, when not nil, keeps each rank's filter
// text between refreshes.
func rankRows(f *data.Frame, sc *searchCache, hide func(*data.Rank) bool) []*row {
	if f == nil {
		return nil
	}
	out := make([]*row, 0, len(f.Ranks))
	for _, r := range liveJobsFirst(f.Ranks) {
		if !hide(r) {
			out = append(out, &row{key: r.Path, rank: r.Rank, host: r.Host, pid: r.Pid, state: r.State,
				stat: &r.Stat, loader: &r.Loader, search: sc.rank(r)})
		}
	}
	sc.prune()
	return out
}

// searchCache keeps the filter text of each rank (by segment path) while
// what it is made of stays the same: a refresh does not format it again.
type searchCache struct {
	gen     int
	entries map[string]*searchEntry
}

type searchEntry struct {
	rank      int
	host, job string
	vars      []string
	search    string
	gen       int
}

// rank is r's filter text.
func (c *searchCache) rank(r *data.Rank) string {
	if c == nil {
		return rankSearch(r)
	}
	if c.entries == nil {
		c.entries = map[string]*searchEntry{}
	}
	e := c.entries[r.Path]
	if e == nil || e.rank != r.Rank || e.host != r.Host || e.job != r.Job || !sameVarNames(e.vars, r) {
		e = &searchEntry{rank: r.Rank, host: r.Host, job: r.Job, search: rankSearch(r)}
		for _, v := range r.Vars {
			e.vars = append(e.vars, v.Name)
		}
		c.entries[r.Path] = e
	}
	e.gen = c.gen
	return e.search
}

// prune forgets the ranks the last refresh did not show.
func (c *searchCache) prune() {
	if c == nil {
		return
	}
	for p, e := range c.entries {
		if e.gen != c.gen {
			delete(c.entries, p)
		}
	}
	c.gen++
}

func sameVarNames(names []string, r *data.Rank) bool {
	if len(names) != len(r.Vars) {
		return false
	}
	for i := range names {
		if names[i] != r.Vars[i].Name {
			return false
		}
	}
	return true
}

func rankSearch(r *data.Rank) string {
	return strings.ToLower(fmt.Sprintf("rank%d r%d %d %s %s %s", r.Rank, r.Rank, r.Rank, r.Host, r.Job, varNames(r)))
}

func varNames(r *data.Rank) string {
	names := make([]string, len(r.Vars))
	for i, v := range r.Vars {
		names[i] = v.Name
	}
	return strings.Join(names, " ")
}

func varRows(f *data.Frame) []*row {
	if f == nil {
		return nil
	}
	out := make([]*row, len(f.Vars))
	for i, v := range f.Vars {
		hosts := make([]string, len(v.ByRank))
		for j, vr := range v.ByRank {
			hosts[j] = vr.Host
		}
		out[i] = &row{key: v.Name, name: v.Name, dtype: v.DType, globalRows: v.GlobalRows, nranks: len(v.ByRank),
			stat: &v.Stat, search: strings.ToLower(v.Name + " " + strings.Join(hosts, " "))}
	}
	return out
}

// varRankRows are the rows of variable name by rank, without the ranks
// hide names.
func varRankRows(f *data.Frame, name string, hide func(*data.Rank) bool) []*row {
	if f == nil || name == "" {
		return nil
	}
	ranks := map[string]*data.Rank{}
	for _, r := range f.Ranks {
		ranks[r.Path] = r
	}
	var out []*row
	for _, v := range f.Vars {
		if v.Name != name {
			continue
		}
		for _, vr := range v.ByRank {
			r := ranks[vr.Path]
			if hide(r) {
				continue
			}
			out = append(out, &row{key: vr.Path, rank: vr.Rank, host: vr.Host, name: vr.Name,
				state: r.State, stat: &vr.Stat,
				search: strings.ToLower(fmt.Sprintf("rank%d r%d %d %s %s", vr.Rank, vr.Rank, vr.Rank, vr.Host, vr.Name))})
		}
	}
	return out
}

var _ = telemetry.NumPhases
