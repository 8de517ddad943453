package columns

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/charmbracelet/bubbles/table"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"

	"github.com/ddstore/ddstore/ui/styles"
)

func TestMain(m *testing.M) {
	lipgloss.SetColorProfile(termenv.Ascii)
	os.Exit(m.Run())
}

func cols() []Column {
	return []Column{
		{Title: "ID", Width: 4, Right: true},
		{Title: "NAME", Width: 8, Drop: 1},
		{Title: "EXTRA", Width: 10, Drop: 2},
		{Title: "BAR", Width: 5, Flex: true},
	}
}

// rows: row i shows i in ID and has key "key<i>".
func rows(n int) ([][]string, []string) {
	r := make([][]string, n)
	k := make([]string, n)
	for i := range n {
		r[i] = []string{fmt.Sprint(i), fmt.Sprintf("name-%d", i), "\x1b[31mred\x1b[0m", strings.Repeat("#", 50)}
		k[i] = fmt.Sprint("key", i)
	}
	return r, k
}

func TestLayoutDropsAndFlex(t *testing.T) {
	m := New(cols())
	for _, tc := range []struct {
		w    int
		want []int
	}{
		{40, []int{4, 8, 10, 14}}, // 1 + 4+8+10+5 + 3 = 31: flex gets 9 more
		{30, []int{4, 8, 0, 15}},  // EXTRA (Drop 2) goes first
		{15, []int{4, 0, 0, 9}},
		{5, []int{4, 0, 0, 5}}, // columns that never drop stay; View cuts the line
	} {
		m.SetSize(tc.w, 5)
		if got := m.Layout(); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("width %d: layout %v, want %v", tc.w, got, tc.want)
		}
		// The header shows the visible columns' titles, padded to their
		// widths; a dropped column (width 0) is not drawn.
		hdr := strings.Split(m.View(), "\n")[0]
		for i, w := range tc.want {
			if in := strings.Contains(hdr, cols()[i].Title); in != (w > 0) && tc.w > 15 {
				t.Errorf("width %d: header %q: column %s shown %v, width %d", tc.w, hdr, cols()[i].Title, in, w)
			}
		}
		if ansi.StringWidth(hdr) > tc.w {
			t.Errorf("width %d: header %q too wide", tc.w, hdr)
		}
	}
}

func TestViewFitsAndScrolls(t *testing.T) {
	m := New(cols())
	r, k := rows(20)
	m.SetRows(r, k)
	for _, w := range []int{5, 20, 33, 80} {
		m.SetSize(w, 6)
		v := m.View()
		lines := strings.Split(v, "\n")
		if len(lines) != 6 {
			t.Fatalf("width %d: %d lines, want 6:\n%s", w, len(lines), v)
		}
		for i, l := range lines {
			if ansi.StringWidth(l) > w {
				t.Fatalf("width %d: line %d is %d wide", w, i, ansi.StringWidth(l))
			}
		}
	}
	m.SetSize(40, 6) // 5 rows visible
	if m.PageSize() != 5 {
		t.Fatalf("page size %d, want 5", m.PageSize())
	}
	m.MoveDown(7)
	v := m.View()
	if !strings.Contains(v, "▸   7") || strings.Contains(v, "name-2") || !strings.Contains(v, "name-3") {
		t.Fatalf("scrolled to 7:\n%s", v)
	}
	// Cells are plain: colour codes are stripped, not cut.
	if strings.Contains(v, "\x1b") || !strings.Contains(v, "red") {
		t.Fatalf("ANSI cell:\n%q", v)
	}
	// Right-aligned column, left-aligned title padding, flex bar cut with "…".
	hdr := strings.Split(v, "\n")[0]
	if !strings.HasPrefix(hdr, "   ID NAME     EXTRA      BAR") {
		t.Fatalf("header %q", hdr)
	}
	if !strings.Contains(v, strings.Repeat("#", 13)+"…") {
		t.Fatalf("flex cell not cut to 14:\n%s", v)
	}
	m.SetSort(1, true)
	if !strings.Contains(m.View(), "NAME▼") {
		t.Fatal("sort indicator")
	}
	m.SetSort(0, false) // ID is 4 wide: "ID▲" right-aligned
	if !strings.Contains(m.View(), "  ID▲ NAME") {
		t.Fatalf("sort indicator on a right column:\n%s", m.View())
	}
	// The cursor stays on its key when rows are reordered.
	r2, k2 := rows(20)
	for i, j := 0, len(r2)-1; i < j; i, j = i+1, j-1 {
		r2[i], r2[j] = r2[j], r2[i]
		k2[i], k2[j] = k2[j], k2[i]
	}
	m.SetRows(r2, k2)
	if m.SelectedKey() != "key7" || m.Cursor() != 12 || !strings.Contains(m.View(), "▸   7") {
		t.Fatalf("after reorder: %s at %d\n%s", m.SelectedKey(), m.Cursor(), m.View())
	}
	// Fewer rows: the cursor clamps.
	m.SetRows(r[:3], k[:3])
	if m.Cursor() != 2 || m.SelectedKey() != "key2" {
		t.Fatalf("clamped cursor %d", m.Cursor())
	}
	m.SetRows(nil, nil)
	if m.SelectedKey() != "" || m.Cursor() != 0 || strings.Count(m.View(), "\n") != 0 {
		t.Fatalf("empty table: %q", m.View())
	}
	// Rows again after empty: the cursor is on the first.
	m.SetRows(r[:4], k[:4])
	if m.SelectedKey() != "key0" || !strings.Contains(m.View(), "▸   0") {
		t.Fatalf("after empty: %q\n%s", m.SelectedKey(), m.View())
	}
}

func TestUnfocused(t *testing.T) {
	m := New(cols())
	m.SetFocused(false)
	r, k := rows(3)
	m.SetRows(r, k)
	if strings.Contains(m.View(), Mark) {
		t.Fatalf("unfocused table marks a row:\n%s", m.View())
	}
}

// Whatever the moves, refreshes and resizes, the selected row is on screen,
// marked, and it is the row with the selected key.
func TestCursorAlwaysShown(t *testing.T) {
	for seed := range uint64(3) {
		cursorAlwaysShown(t, seed)
	}
}

func cursorAlwaysShown(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 2))
	m := New(cols())
	all, allKeys := rows(60)
	for step := range 1500 {
		op := rng.IntN(11)
		switch {
		case op < 2:
			m.MoveDown(1)
		case op < 4:
			m.MoveUp(1)
		case op == 4:
			m.MoveDown(rng.IntN(25))
		case op == 5:
			m.MoveUp(rng.IntN(25))
		case op == 6:
			m.MoveDown(m.PageSize())
		case op == 7:
			m.MoveUp(m.PageSize())
		case op == 8:
			// Refresh: a shuffled subset.
			n := rng.IntN(len(all))
			perm := rng.Perm(len(all))[:n]
			r, k := make([][]string, n), make([]string, n)
			for i, j := range perm {
				r[i], k[i] = all[j], allKeys[j]
			}
			prev := m.SelectedKey()
			m.SetRows(r, k)
			if prev != "" && contains(k, prev) && m.SelectedKey() != prev {
				t.Fatalf("seed %d step %d: refresh lost key %s (now %s)", seed, step, prev, m.SelectedKey())
			}
		case op >= 9:
			m.SetSize(10+rng.IntN(70), 2+rng.IntN(15))
		}
		v := m.View()
		lines := strings.Split(v, "\n")
		if len(lines) > m.Height() {
			t.Fatalf("seed %d step %d: %d lines, height %d", seed, step, len(lines), m.Height())
		}
		if m.Len() == 0 {
			continue
		}
		var marked []string
		for _, l := range lines {
			if strings.HasPrefix(l, Mark) {
				marked = append(marked, l)
			}
		}
		if len(marked) != 1 {
			t.Fatalf("seed %d step %d: %d marked rows (cursor %d of %d, height %d):\n%s", seed, step, len(marked), m.Cursor(), m.Len(), m.Height(), v)
		}
		if id := strings.Fields(strings.TrimPrefix(marked[0], Mark))[0]; "key"+id != m.SelectedKey() {
			t.Fatalf("seed %d step %d: marked row %s, selected key %s", seed, step, id, m.SelectedKey())
		}
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// Our rows draw exactly what a bubbles table draws for the same columns
// and rows: unfocused, static, and focused with the cursor on a row.
func TestMatchesBubbles(t *testing.T) {
	cols := []Column{{Title: "TIME", Width: 12}, {Title: "VARIABLE", Width: 8}, {Title: "RDR", Width: 3, Right: true},
		{Title: "µS/ROW", Width: 6, Right: true, Drop: 2}, {Title: "PHASES", Width: 5, Flex: true}}
	var rows [][]string
	for i := range 9 {
		rows = append(rows, []string{fmt.Sprintf("12:00:%02d.000", i), strings.Repeat("v", i+3), fmt.Sprint(i * 37),
			fmt.Sprintf("%.2fµ", float64(i)*1.37), strings.Repeat("█", i*3)})
	}
	// The titles and header are written out by hand. Each column is drawn
	// with one cell of left padding: 12+8+3+6+5 = 34 cells of minimum width
	// and 5 of padding. RDR is sorted descending: "RDR▼" is 4 cells, wider
	// than its 3, so the title is cut to "RD" to keep the arrow: "RD▼".
	titles := []string{"TIME", "VARIABLE", "RD▼", "µS/ROW", "PHASES"}
	const full = " TIME         VARIABLE RD▼ µS/ROW PHASES"
	for _, c := range []struct {
		size   [2]int
		header string // trailing blanks (the flex column's padding) trimmed
		widths []int  // each column's width, worked out by hand (0: dropped)
	}{
		{[2]int{80, 11}, full, []int{12, 8, 3, 6, 46}}, // PHASES gets the spare 80-39 = 41: 46 wide
		{[2]int{80, 5}, full, []int{12, 8, 3, 6, 46}},
		{[2]int{40, 11}, full, []int{12, 8, 3, 6, 6}}, // PHASES 6 wide: the title just fits
		// 39 > 30: µS/ROW (Drop 2) goes; 12+8+3+5 + 4 = 32 cells are cut
		// to 30, leaving 3 of PHASES.
		{[2]int{30, 4}, " TIME         VARIABLE RD▼ PHA", []int{12, 8, 3, 0, 5}},
		{[2]int{120, 3}, full, []int{12, 8, 3, 6, 86}}, // spare 81
	} {
		size := c.size
		for _, mode := range []string{"unfocused", "static", "focused"} {
			tb := New(cols)
			tb.SetSize(size[0], size[1])
			tb.SetSort(2, true)
			switch mode {
			case "unfocused":
				tb.SetFocused(false)
			case "static":
				tb.SetStatic(true)
			}
			tb.SetRows(rows, nil)
			cursor := 0
			if mode == "focused" {
				cursor = min(2, size[1]-2)
				tb.SetCursor(cursor)
			}
			got := tb.View()
			hdr := strings.Split(got, "\n")[0]
			if h := strings.TrimRight(ansi.Strip(hdr), " "); h != c.header || ansi.StringWidth(hdr) != size[0] {
				t.Errorf("size %v %s: header %q (%d wide), want %q padded to %d", size, mode, hdr, ansi.StringWidth(hdr), c.header, size[0])
			}
			want := bubblesView(tb, c.widths, titles, rows, mode == "focused", cursor)
			if got != want {
				t.Errorf("size %v %s: our view\n%q\nbubbles view\n%q", size, mode, got, want)
			}
		}
	}
	// Ascending, the arrow points up.
	tb := New(cols)
	tb.SetSize(80, 11)
	tb.SetSort(2, false)
	tb.SetRows(rows, nil)
	if h := strings.TrimRight(ansi.Strip(strings.Split(tb.View(), "\n")[0]), " "); h != " TIME         VARIABLE RD▲ µS/ROW PHASES" {
		t.Errorf("ascending header %q", h)
	}
}

// bubblesView is what a bubbles table draws for the given column widths,
// titles (sort arrow included) and rows (cells aligned, one cell of left
// padding, a bold header, the selected row reversed with the Mark in its
// gutter when focused), its blank lines below the last row dropped and
// lines cut to the width.
func bubblesView(tb Table, widths []int, titles []string, rows [][]string, focused bool, cursor int) string {
	// Right-aligned cells are padded on the left to the column's width in
	// display cells (µ and █ are one cell but several bytes).
	pad := func(s string, w int, right bool) string {
		if n := ansi.StringWidth(s); right && n < w {
			return fmt.Sprintf("%*s%s", w-n, "", s)
		}
		return s
	}
	st := table.Styles{Header: styles.Header.PaddingLeft(1), Cell: lipgloss.NewStyle().PaddingLeft(1), Selected: lipgloss.NewStyle()}
	if focused {
		st.Selected = styles.Selected.Transform(func(row string) string {
			if strings.HasPrefix(row, " ") {
				return Mark + row[1:]
			}
			return row
		})
	}
	tc := make([]table.Column, len(tb.cols))
	for i, c := range tb.cols {
		tc[i] = table.Column{Title: pad(titles[i], widths[i], c.Right), Width: widths[i]}
	}
	br := make([]table.Row, len(rows))
	for i, r := range rows {
		br[i] = make(table.Row, len(r))
		for j, cell := range r {
			if widths[j] > 0 {
				br[i][j] = pad(cell, widths[j], tb.cols[j].Right)
			}
		}
	}
	m := table.New(table.WithColumns(tc), table.WithRows(br), table.WithStyles(st), table.WithWidth(tb.width),
		table.WithHeight(min(tb.height, max(len(rows)+1, 2))), table.WithFocused(focused))
	m.SetCursor(cursor)
	lines := strings.Split(m.View(), "\n")
	last := 0
	for i, l := range lines {
		if i == 0 || strings.TrimSpace(ansi.Strip(l)) != "" {
			last = i
		}
	}
	lines = lines[:last+1]
	for i, l := range lines {
		if ansi.StringWidth(l) > tb.width {
			lines[i] = ansi.Truncate(l, tb.width, "")
		}
	}
	return strings.Join(lines, "\n")
}

// Paint wraps each visible, non-selected cell after it is cut and padded,
// and leaves the selected row alone.
func TestPaint(t *testing.T) {
	c := cols()
	c[1].Paint = func(s string) string { return "<" + s + ">" }
	m := New(c)
	m.SetSize(40, 4)
	r, k := rows(5)
	m.SetRows(r, k)
	m.SetCursor(1)
	lines := strings.Split(m.View(), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines:\n%s", len(lines), m.View())
	}
	for i, l := range lines[1:] {
		painted := strings.Contains(l, "<name-")
		if want := i != 1; painted != want || painted && !strings.Contains(l, fmt.Sprintf("<name-%d  >", i)) {
			t.Errorf("row %d painted %v, want %v: %q", i, painted, want, l)
		}
	}
}

// Width measures what ansi.StringWidth measures, on the fast path (colours
// and narrow runes) and off it.
func TestWidth(t *testing.T) {
	red := "\x1b[38;5;196m"
	for _, s := range []string{
		"", "plain ascii", red + "coloured" + "\x1b[0m", " 12.3k ██▓▒░·  ▸ … µs",
		red + "█████" + "\x1b[m" + "\x1b[1;7m sel \x1b[0m",
		"wide 日本語", "emoji 🙂 x", "e\u0301 combining", "soft\u00adhyphen", "nbsp\u00a0x",
		"\x1b]0;title\x07osc", "\x1b[", "\x1b[12", "\x1bMesc", "tab\tx", "bad \xff utf8", "▶\ufe0f vs",
	} {
		if got, want := Width(s), ansi.StringWidth(s); got != want {
			t.Errorf("Width(%q) = %d, ansi.StringWidth %d", s, got, want)
		}
	}
}
