package ui

import (
	"syscall"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/ddstore/ddstore/telemetry"
	"github.com/ddstore/ddstore/telemetry/synthetic"
)

// BenchmarkRefresh measures one 10 Hz refresh cycle as ddtop runs it: the
// tick, the poll of the segments, the frame's Update and the View.
//
//   - ranks, detail: 4 real segments (2 variables, 4 readers each, 64
//     calls recorded per rank between refreshes), in the ranks view and in
//     the rank detail view; ranks64: the same over 64 segments.
//   - cost64: examples/ddtopcost's job (make ddtop-cost), synthetic.Job
//     of 64 ranks with 20 calls per rank between refreshes (200 calls/s at
//     10 Hz), ranks view. Its writers are on this host, so their liveness
//     is checked as in ddtopcost.
//
// Besides ns/op it reports cpu-ms/refresh, the process's CPU time (user +
// system, every thread: GC workers too) over the refresh cycles alone, and
// core-%@10Hz, that time as a share of one core at ten refreshes a second
// (issue 11's goal for the ranks view is 2%).
func BenchmarkRefresh(b *testing.B) {
	for _, view := range []string{"ranks", "detail", "ranks64", "cost64"} {
		b.Run(view, func(b *testing.B) {
			nseg := 4
			if view == "ranks64" {
				nseg = 64
			}
			dir := b.TempDir()
			var record func(k int)
			if view == "cost64" {
				// this host, as ddtopcost: the writers' pid is watched
				job, err := synthetic.New(synthetic.Options{Dir: dir, Job: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				defer job.Close()
				record = func(int) { job.Record(20) }
			} else {
				ws := make([]*telemetry.Writer, nseg)
				for r := range nseg {
					w, err := telemetry.Create(telemetry.WriterOptions{Dir: dir, Job: "bench", Rank: r, World: nseg,
						Host: "node1", Provider: "tcp;ofi_rxm", ReaderMode: "thread", Method: "tcp"}) // another host: no liveness checks
					if err != nil {
						b.Fatal(err)
					}
					defer w.Close()
					for _, v := range []string{"x", "y"} {
						if _, err := w.AddVar(v, "float32", 64, 1<<20, 1<<18); err != nil {
							b.Fatal(err)
						}
					}
					ws[r] = w
				}
				record = func(k int) {
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
			}
			clk := &clock{t: time.Unix(1_700_000_000, 0)}
			m, err := New(Options{Dir: dir, Now: clk.now, Interval: 100 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			m.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
			if view == "cost64" {
				m.Update(tea.WindowSizeMsg{Width: 160, Height: 50}) // ddtopcost's terminal
				m.skipRings = skipRingsLive                         // as run sets it: the ranks page skips the rings
				m.showCalls()
			}
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
			var cpu time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for k := range b.N {
				b.StopTimer()
				clk.advance(100 * time.Millisecond)
				record(k)
				b.StartTimer()
				t0 := cpuTime()
				cycle()
				cpu += cpuTime() - t0
			}
			b.StopTimer()
			ms := cpu.Seconds() * 1e3 / float64(b.N)
			b.ReportMetric(ms, "cpu-ms/refresh")
			b.ReportMetric(ms*10/1e3*100, "core-%@10Hz")
		})
	}
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
