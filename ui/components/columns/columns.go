// Package columns draws ddtop's tables: column definitions that drop by
// priority when the terminal is narrow, a flex column that takes the spare
// width, right alignment, a sort indicator in the header, a cursor that
// stays on the same row key across refreshes, and scrolling. Only the
// visible rows are drawn, when View is called: a refresh that replaces
// every row costs no rendering. The text is what a bubbles table
// (github.com/charmbracelet/bubbles/table) draws for the same columns
// (the tests compare the two); sorting belongs to the page, which knows
// the typed values behind the cells.
//
// Cells are plain text (SetRows strips ANSI sequences, so widths are
// measured right); a column's Paint colours its cells after they are cut
// to width.
package columns

import (
	"strings"
	"unicode/utf8"

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
	// Paint, when set, colours a cell already cut and padded to its
	// width; it must not change the cell's width. Not applied to the
	// selected row, which is drawn in reverse video.
	Paint func(cell string) string
}

// Mark is drawn in the gutter of the selected row.
const Mark = "▸"

// Table is a list of rows drawn in columns, with a cursor.
type Table struct {
	cols    []Column
	cells   [][]string // rows as given, ANSI stripped
	keys    []string
	width   int
	height  int // lines, header included
	sortCol int // -1: none
	desc    bool
	focused bool
	static  bool   // SetStatic: rows drawn from the first, no cursor
	cur     int    // selected row
	off     int    // first row on screen
	widths  []int  // Layout, kept by apply
	header  string // the header line, kept by apply
}

// New returns a table with the given columns, unsorted, focused, 80×10.
// The page moves the cursor (MoveUp, MoveDown) on its own key map.
func New(cols []Column) Table {
	t := Table{cols: cols, sortCol: -1, width: 80, height: 10, focused: true}
	t.apply()
	return t
}

// SetSize sets the width and the height (header included) in cells; the
// columns are laid out again.
func (t *Table) SetSize(w, h int) {
	t.width, t.height = max(w, 1), max(h, 2)
	t.apply()
	t.scroll()
}

// Width is the table's width in cells.
func (t Table) Width() int { return t.width }

// Height is the table's height in lines, header included.
func (t Table) Height() int { return t.height }

// SetFocused controls whether the cursor row is highlighted.
func (t *Table) SetFocused(f bool) { t.focused = f }

// SetStatic makes the table a static one (unfocused, no cursor, rows shown
// from the first). For read-only tables rebuilt every refresh.
func (t *Table) SetStatic(on bool) {
	t.static = on
	if on {
		t.focused = false
		t.cur, t.off = 0, 0
	}
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
// cursor stays on its index, clamped). Nothing is drawn until View.
func (t *Table) SetRows(rows [][]string, keys []string) {
	prev := t.SelectedKey()
	if cap(t.cells) < len(rows) {
		t.cells = make([][]string, len(rows))
	}
	t.cells = t.cells[:len(rows)]
	for i, r := range rows {
		c := t.cells[i]
		if cap(c) < len(t.cols) {
			c = make([]string, len(t.cols))
		}
		c = c[:len(t.cols)]
		for j := range c {
			c[j] = ""
			if j < len(r) {
				c[j] = strip(r[j])
			}
		}
		t.cells[i] = c
	}
	t.keys = keys
	if t.static {
		t.cur, t.off = 0, 0
		return
	}
	if prev != "" {
		for i, k := range keys {
			if k == prev {
				t.cur = i
				break
			}
		}
	}
	t.scroll()
}

// Len is the number of rows.
func (t Table) Len() int { return len(t.cells) }

// Cursor is the selected row's index, 0 when empty.
func (t Table) Cursor() int { return t.cur }

// SelectedKey is the key of the selected row, "" when there is none.
func (t Table) SelectedKey() string {
	if t.cur >= len(t.keys) || t.cur >= len(t.cells) {
		return ""
	}
	return t.keys[t.cur]
}

// SetCursor selects row i (clamped) and scrolls it into view.
func (t *Table) SetCursor(i int) {
	t.cur = i
	t.scroll()
}

// MoveUp moves the cursor n rows up.
func (t *Table) MoveUp(n int) { t.SetCursor(t.cur - n) }

// MoveDown moves the cursor n rows down.
func (t *Table) MoveDown(n int) { t.SetCursor(t.cur + n) }

// PageSize is the number of rows visible at once.
func (t Table) PageSize() int { return max(min(t.height-1, len(t.cells)), 1) }

// scroll clamps the cursor to the rows and the first row on screen so
// that the cursor is on screen and the page is as full as the rows allow.
func (t *Table) scroll() {
	t.cur = min(max(t.cur, 0), max(len(t.cells)-1, 0))
	page := max(t.height-1, 1)
	if t.cur < t.off {
		t.off = t.cur
	}
	if t.cur >= t.off+page {
		t.off = t.cur - page + 1
	}
	t.off = max(min(t.off, len(t.cells)-page), 0)
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

// apply lays the columns out (Layout) and draws the header: titles with
// the sort indicator, aligned to their widths.
func (t *Table) apply() {
	t.widths = t.Layout()
	var b strings.Builder
	h := styles.Header.PaddingLeft(1)
	for i, c := range t.cols {
		w := t.widths[i]
		if w <= 0 {
			continue
		}
		title := c.Title
		if i == t.sortCol {
			arrow := "▲"
			if t.desc {
				arrow = "▼"
			}
			// Keep the indicator visible in a narrow column.
			if w > 1 && ansi.StringWidth(title)+1 > w {
				title = ansi.Truncate(title, w-1, "")
			}
			title += arrow
		}
		b.WriteString(h.Render(fit(align(title, w, c.Right), w)))
	}
	t.header = b.String()
	if ansi.StringWidth(t.header) > t.width {
		t.header = ansi.Truncate(t.header, t.width, "")
	}
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
	page := max(t.height-1, 1)
	last := min(t.off+page, len(t.cells))
	rowWidth := 0
	for _, w := range t.widths {
		if w > 0 {
			rowWidth += 1 + w
		}
	}
	// One allocation for the page (cells and their colours' escapes,
	// about twice the text), none growing it row by row.
	var b strings.Builder
	b.Grow(len(t.header) + (last-t.off)*(2*max(t.width, rowWidth)+1))
	b.WriteString(t.header)
	var row []byte
	for i := t.off; i < last; i++ {
		selected := t.focused && !t.static && i == t.cur
		row = row[:0]
		for j, cell := range t.cells[i] {
			w := t.widths[j]
			if w <= 0 {
				continue
			}
			s := fit(align(cell, w, t.cols[j].Right), w)
			if p := t.cols[j].Paint; p != nil && !selected {
				s = p(s)
			}
			row = append(row, ' ')
			row = append(row, s...)
		}
		l := string(row)
		n := rowWidth // every cell is fit to its width exactly
		if n > t.width {
			l = ansi.Truncate(l, t.width, "")
			n = t.width
		}
		if selected && strings.HasPrefix(l, " ") {
			// As the bubbles table: the Mark in the gutter, the cells in
			// reverse video, the padding after them plain.
			l = styles.Selected.Render(Mark + l[1:])
		}
		b.WriteByte('\n')
		b.WriteString(l)
		b.WriteString(spaces(t.width - n))
	}
	return b.String()
}

// fit cuts s to w cells with "…" as the bubbles table does, and pads it
// to w cells.
func fit(s string, w int) string {
	n, narrow := narrowWidth(s)
	if !narrow || n > w {
		s = runewidth.Truncate(s, w, "…")
		n = ansi.StringWidth(s)
	}
	if n > w {
		return ansi.Truncate(s, w, "")
	}
	return s + spaces(w-n)
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

// narrowWidth is the number of runes in s, and true, when every rune is
// one cell wide for certain (printable Latin, box drawing and block
// elements such as the bars' '█' and '·', '…', '▸'); otherwise false and
// the caller measures.
func narrowWidth(s string) (int, bool) {
	n := 0
	for _, r := range s {
		if !narrow(r) {
			return 0, false
		}
		n++
	}
	return n, true
}

// narrow reports whether r is one cell wide for certain (see narrowWidth;
// the soft hyphen U+00AD is not: it takes no cell).
func narrow(r rune) bool {
	return r >= 0x20 && r < 0x7f || r >= 0xa0 && r < 0x300 && r != 0xad || r >= 0x2500 && r < 0x25a0 || r == '…' || r == '▸'
}

// Width is ansi.StringWidth(s), worked out without splitting s into
// grapheme clusters when it holds only CSI escape sequences (colours) and
// runes that are one cell wide for certain: a drawn line of a table.
func Width(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c >= 0x20 && c < 0x7f:
			n++
			i++
		case c == 0x1b && i+1 < len(s) && s[i+1] == '[':
			j := i + 2
			for j < len(s) && s[j] >= 0x20 && s[j] <= 0x3f { // parameters, intermediates
				j++
			}
			if j >= len(s) || s[j] < 0x40 || s[j] > 0x7e { // no final byte
				return ansi.StringWidth(s)
			}
			i = j + 1
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError || !narrow(r) {
				return ansi.StringWidth(s)
			}
			n++
			i += size
		}
	}
	return n
}

// strip is ansi.Strip, skipped for printable ASCII (the common cell).
func strip(s string) string {
	if _, ascii := plainWidth(s); ascii {
		return s
	}
	return ansi.Strip(s)
}
