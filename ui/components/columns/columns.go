// Package columns fits a bubbles table (github.com/charmbracelet/bubbles/table)
// to ddtop's pages: column definitions that drop by priority when the
// terminal is narrow, a flex column that takes the spare width, right
// alignment, a sort indicator in the header, and a cursor that stays on the
// same row key across refreshes. Drawing, scrolling and cursor movement are
// the bubbles table's (MoveUp works around one of its scrolling bugs);
// sorting belongs to the page, which knows the typed values behind the cells.
//
// Cells are plain text: the bubbles table measures and cuts cells by runes,
// so ANSI sequences would be cut in the middle. SetRows strips them.
package columns

import (
	"slices"
	"strings"

	"github.com/charmbracelet/bubbles/table"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/mattn/go-runewidth"

	"github.com/ddstore/ddstore/ui/styles"
)

// Column describes one column.
type Column struct {
	Title string
	Width int  // cell width; for a Flex column, its minimum
	Right bool // right-align the cell
	Flex  bool // takes the width left over by the others
	Drop  int  // when too narrow, visible columns with the highest Drop go first; 0 never drops
}

// Mark is drawn in the gutter of the selected row.
const Mark = "▸"

// Table is a bubbles table plus the column rules above.
type Table struct {
	t       table.Model
	cols    []Column
	cells   [][]string // rows as given, ANSI stripped
	keys    []string
	width   int
	height  int // lines, header included
	sortCol int // -1: none
	desc    bool
	static  bool // SetStatic: rows drawn directly, from the first, no cursor
}

// New returns a table with the given columns, unsorted, focused, 80×10.
// The page moves the cursor (MoveUp, MoveDown) on its own key map; the
// bubbles table gets an empty one.
func New(cols []Column) Table {
	t := Table{cols: cols, sortCol: -1, width: 80, height: 10}
	t.t = table.New(table.WithKeyMap(table.KeyMap{}))
	t.SetFocused(true)
	t.SetSize(80, 10)
	return t
}

// Styles are the bubbles table styles ddtop uses: one cell of left padding
// per column (the first one is the cursor's gutter), a bold header and, when
// focused, a reversed selected row with the Mark in its gutter.
func Styles(focused bool) table.Styles {
	s := table.Styles{
		Header:   styles.Header.PaddingLeft(1),
		Cell:     lipgloss.NewStyle().PaddingLeft(1),
		Selected: lipgloss.NewStyle(),
	}
	if focused {
		s.Selected = styles.Selected.Transform(func(row string) string {
			if strings.HasPrefix(row, " ") {
				return Mark + row[1:]
			}
			return row
		})
	}
	return s
}

// SetSize sets the width and the height (header included) in cells; the
// columns are laid out again.
func (t *Table) SetSize(w, h int) {
	t.width, t.height = max(w, 1), max(h, 2)
	t.t.SetWidth(t.width)
	t.t.SetHeight(t.height)
	t.apply()
	t.reveal(t.Cursor())
}

// Width is the table's width in cells.
func (t Table) Width() int { return t.width }

// Height is the table's height in lines, header included.
func (t Table) Height() int { return t.height }

// SetFocused controls whether the cursor row is highlighted.
func (t *Table) SetFocused(f bool) {
	t.t.SetStyles(Styles(f))
	if f {
		t.t.Focus()
	} else {
		t.t.Blur()
	}
}

// SetStatic makes the table a static one (unfocused, no cursor, rows shown
// from the first): SetRows keeps the rows and View formats them directly,
// to the same text the bubbles table draws unfocused, without its
// per-cell styling cost. For read-only tables rebuilt every refresh.
func (t *Table) SetStatic(on bool) {
	t.static = on
	if on {
		t.SetFocused(false)
	}
	t.apply()
}

// SetSort sets the sort indicator: column col (-1 for none), descending or not.
func (t *Table) SetSort(col int, desc bool) {
	if col == t.sortCol && desc == t.desc {
		return
	}
	t.sortCol, t.desc = col, desc
	t.apply()
}

// Columns returns the column definitions.
func (t Table) Columns() []Column { return t.cols }

// SetRows replaces the rows. keys identify rows across refreshes: the cursor
// stays on the row with the same key when it is still there (nil keys: the
// cursor stays on its index).
func (t *Table) SetRows(rows [][]string, keys []string) {
	prev, at := t.SelectedKey(), t.Cursor()
	t.cells = make([][]string, len(rows))
	for i, r := range rows {
		t.cells[i] = make([]string, len(t.cols))
		for j := range min(len(r), len(t.cols)) {
			t.cells[i][j] = strip(r[j])
		}
	}
	t.keys = keys
	t.apply()
	if t.static {
		return
	}
	to := at
	if prev != "" {
		for i, k := range keys {
			if k == prev {
				to = i
				break
			}
		}
	}
	if to != t.t.Cursor() {
		t.reveal(to)
	}
}

// Len is the number of rows.
func (t Table) Len() int { return len(t.cells) }

// Cursor is the selected row's index, 0 when empty.
func (t Table) Cursor() int { return max(t.t.Cursor(), 0) }

// SelectedKey is the key of the selected row, "" when there is none.
func (t Table) SelectedKey() string {
	c := t.t.Cursor()
	if c < 0 || c >= len(t.keys) || c >= len(t.cells) {
		return ""
	}
	return t.keys[c]
}

// SetCursor selects row i (clamped) and scrolls it into view.
func (t *Table) SetCursor(i int) { t.reveal(i) }

// MoveUp moves the cursor n rows up. The bubbles table (v1.0.0) scrolls
// wrongly on a move that starts below its second page and ends on its
// first (the row ends up off screen), so such a move goes in two steps,
// each of which it scrolls right.
func (t *Table) MoveUp(n int) {
	c, h := t.t.Cursor(), t.t.Height()
	if to := max(c-n, 0); c > h && to < h {
		t.t.MoveUp(c - h)
		n = h - to
	}
	t.t.MoveUp(n)
}

// MoveDown moves the cursor n rows down.
func (t *Table) MoveDown(n int) { t.t.MoveDown(n) }

// PageSize is the number of rows visible at once.
func (t Table) PageSize() int { return max(t.t.Height(), 1) }

// Model is the bubbles table underneath.
func (t Table) Model() table.Model { return t.t }

// reveal selects row i (clamped) with the bubbles table's own moves: from
// the top, then down, which leaves the row on screen (at the bottom of the
// page when it is below the first page).
func (t *Table) reveal(i int) {
	if len(t.cells) == 0 {
		return
	}
	t.t.SetCursor(0)
	t.t.MoveUp(0) // scroll offset back to 0
	t.t.MoveDown(min(max(i, 0), len(t.cells)-1))
}

// Layout returns, for each column, its width in this table's width, 0 for a
// dropped column. A gutter of 1 cell (the cursor mark) precedes the columns
// and one space separates them.
func (t Table) Layout() []int {
	w := make([]int, len(t.cols))
	visible := make([]bool, len(t.cols))
	for i := range t.cols {
		visible[i] = true
	}
	total := func() int {
		n, sum := 0, 1
		for i, c := range t.cols {
			if visible[i] {
				sum += c.Width
				n++
			}
		}
		return sum + max(n-1, 0)
	}
	for total() > t.width {
		drop, best := -1, 0
		for i, c := range t.cols {
			if visible[i] && c.Drop > best {
				drop, best = i, c.Drop
			}
		}
		if drop < 0 {
			break
		}
		visible[drop] = false
	}
	spare := max(t.width-total(), 0)
	for i, c := range t.cols {
		if !visible[i] {
			continue
		}
		w[i] = c.Width
		if c.Flex {
			w[i] += spare
			spare = 0
		}
	}
	return w
}

// apply hands the bubbles table its columns (titles with the sort
// indicator, widths from Layout) and its rows (aligned to those widths).
func (t *Table) apply() {
	widths := t.Layout()
	tc := make([]table.Column, len(t.cols))
	for i, c := range t.cols {
		title := c.Title
		if i == t.sortCol {
			arrow := "▲"
			if t.desc {
				arrow = "▼"
			}
			// Keep the indicator visible in a narrow column.
			if w := widths[i]; w > 1 && ansi.StringWidth(title)+1 > w {
				title = ansi.Truncate(title, w-1, "")
			}
			title += arrow
		}
		tc[i] = table.Column{Title: align(title, widths[i], c.Right), Width: widths[i]}
	}
	if t.static {
		if !slices.Equal(tc, t.t.Columns()) {
			t.t.SetColumns(tc)
		}
		return
	}
	rows := make([]table.Row, len(t.cells))
	for i, r := range t.cells {
		row := make(table.Row, len(t.cols))
		for j, cell := range r {
			if widths[j] > 0 {
				row[j] = align(cell, widths[j], t.cols[j].Right)
			}
		}
		rows[i] = row
	}
	// Every row has one cell per column, so either order is safe; SetRows
	// keeps the cursor's index (clamped). Each call renders the visible
	// rows: skip SetColumns when nothing changed (a refresh).
	if !slices.Equal(tc, t.t.Columns()) {
		t.t.SetColumns(tc)
	}
	// When every row fits, the bubbles table gets just their height: it
	// draws the same rows (all of them, from the first) without padding
	// the empty rest of the page, which View would cut off again. Paging
	// clamps to the first and last row either way.
	if h := min(t.height, max(len(rows)+1, 2)); h != t.t.Height()+1 {
		t.t.SetHeight(h)
	}
	t.t.SetRows(rows)
}

// align right-aligns s in w cells when right is set; the bubbles table pads
// (left-aligned) and cuts longer cells with "…".
func align(s string, w int, right bool) string {
	if !right {
		return s
	}
	n, ascii := plainWidth(s)
	if !ascii {
		n = ansi.StringWidth(s)
	}
	if n < w {
		return strings.Repeat(" ", w-n) + s
	}
	return s
}

// View renders the header and the visible rows: never wider than the width,
// never taller than the height, without blank lines below the last row.
func (t Table) View() string {
	var lines []string
	if t.static {
		lines = t.staticLines()
	} else {
		lines = strings.Split(t.t.View(), "\n")
	}
	last := 0
	for i, l := range lines {
		if i == 0 || strings.TrimSpace(strip(l)) != "" {
			last = i
		}
	}
	lines = lines[:last+1]
	for i, l := range lines {
		if t.static && i > 0 {
			break // rows are drawn to the width exactly
		}
		if ansi.StringWidth(l) > t.width {
			lines[i] = ansi.Truncate(l, t.width, "")
		}
	}
	return strings.Join(lines, "\n")
}

// staticLines draws a static table as the bubbles table draws it unfocused
// with its cursor on the first row: the header, then each visible row as
// its cells (each cut to its width with "…", padded, after one space of
// left padding), the row padded to the table's width.
func (t Table) staticLines() []string {
	widths := t.Layout()
	h := t.t.Height()
	lines := make([]string, 0, 1+h)
	lines = append(lines, headerLine(t.t.Columns()))
	var b strings.Builder
	for i := 0; i < h; i++ {
		b.Reset()
		if i < len(t.cells) {
			for j, cell := range t.cells[i] {
				w := widths[j]
				if w <= 0 {
					continue
				}
				s := align(cell, w, t.cols[j].Right)
				n, ascii := plainWidth(s)
				if !ascii || n > w {
					s = runewidth.Truncate(s, w, "…")
					n = ansi.StringWidth(s)
				}
				if n > w {
					s = ansi.Truncate(s, w, "")
				} else {
					s += spaces(w - n)
				}
				b.WriteByte(' ')
				b.WriteString(s)
			}
		}
		l := b.String()
		n, ascii := plainWidth(l)
		if !ascii {
			n = ansi.StringWidth(l)
		}
		if n < t.width {
			l += spaces(t.width - n)
		} else if n > t.width {
			l = ansi.Truncate(l, t.width, "")
		}
		lines = append(lines, l)
	}
	return lines
}

const blanks = "                                                                                                                                "

func spaces(n int) string {
	if n <= len(blanks) {
		return blanks[:n]
	}
	return strings.Repeat(" ", n)
}

// plainWidth is len(s), and true, when s is printable ASCII only (one cell
// a byte, nothing to strip); otherwise false and the caller measures.
func plainWidth(s string) (int, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return 0, false
		}
	}
	return len(s), true
}

// strip is ansi.Strip, skipped for printable ASCII (the common cell).
func strip(s string) string {
	if _, ascii := plainWidth(s); ascii {
		return s
	}
	return ansi.Strip(s)
}

// headerLine draws the header as the bubbles table does (its headersView).
func headerLine(cols []table.Column) string {
	h := Styles(false).Header
	s := make([]string, 0, len(cols))
	for _, c := range cols {
		if c.Width <= 0 {
			continue
		}
		cell := lipgloss.NewStyle().Width(c.Width).MaxWidth(c.Width).Inline(true).Render(runewidth.Truncate(c.Title, c.Width, "…"))
		s = append(s, h.Render(cell))
	}
	return lipgloss.JoinHorizontal(lipgloss.Top, s...)
}
