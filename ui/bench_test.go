package ui

import (
	"os"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/ddstore/ddstore/telemetry"
)

// BenchmarkRefresh measures one 10 Hz refresh cycle as ddtop runs it: the
// tick, the poll of 4 real segments (2 variables, 4 readers each, 64 calls
// recorded per rank between refreshes), the frame's Update and the View, in
// the ranks view and in the rank detail view.
func BenchmarkRefresh(b *testing.B) {
	for _, view := range []string{"ranks", "detail", "ranks64"} {
		b.Run(view, func(b *testing.B) {
			nseg := 4
			if view == "ranks64" {
				nseg = 64
			}
			dir := b.TempDir()
			clk := &clock{t: time.Unix(1_700_000_000, 0)}
			var ws []*telemetry.Writer
			for r := range nseg {
				w, err := telemetry.Create(telemetry.WriterOptions{Dir: dir, Job: "bench", Rank: r, World: nseg,
					Host: "node1", Pid: os.Getpid(), Provider: "tcp;ofi_rxm", ReaderMode: "thread", Method: "tcp"})
				if err != nil {
					b.Fatal(err)
				}
				defer w.Close()
				for _, v := range []string{"x", "y"} {
					if _, err := w.AddVar(v, "float32", 64, 1<<20, 1<<18); err != nil {
						b.Fatal(err)
					}
				}
				ws = append(ws, w)
			}
			record := func(k int) {
				for _, w := range ws {
					for i := range 64 {
						rows := int64(32 + (k+i)%32)
						c := telemetry.Call{Var: int32(i % 2), Reader: int32(i % 4), Rows: rows, Bytes: 64 * rows, RemoteRows: rows}
						c.Phases[telemetry.PhaseLockWait] = 100 * rows
						c.Phases[telemetry.PhaseCQWait] = 300 * rows
						w.Record(&c)
					}
				}
			}
			m, err := New(Options{Dir: dir, Now: clk.now, Interval: 100 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			m.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
			cycle := func() {
				_, cmd := m.Update(tickMsg{gen: m.gen})
				m.Update(cmd())
				_ = m.View()
			}
			record(0)
			m.Update(m.Init()())
			clk.advance(100 * time.Millisecond)
			record(1)
			cycle()
			if view == "detail" {
				m.Update(tea.KeyMsg{Type: tea.KeyEnter})
				if m.view != viewDetail {
					b.Fatal("enter did not open the detail view")
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for k := range b.N {
				b.StopTimer()
				clk.advance(100 * time.Millisecond)
				record(k)
				b.StartTimer()
				cycle()
			}
		})
	}
}
