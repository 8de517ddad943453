package ui

import (
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/ddstore/ddstore/telemetry"
)

// TestDetailNamesFailedOwner: reads moved from a failed owner to a replica
// (telemetry.Writer.Failover) show in the drill-down as MOVED/SERVED and a
// line naming the failed owner, and in --json as failed_owners.
func TestDetailNamesFailedOwner(t *testing.T) {
	m := oneRankDetail(t, func(w *telemetry.Writer, x int32) {
		c := telemetry.Call{Var: x, Reader: 1, Rows: 7, Bytes: 112, RemoteRows: 7, Failovers: 7}
		c.Targets.Add(3, 7)
		w.Record(&c)
		w.Failover(1, 3, 7)
	})
	m.Update(tea.WindowSizeMsg{Width: 140, Height: 200})
	v := m.View()
	if !strings.Contains(v, "failed owner: rank 1 (7 row reads moved to a replica)") {
		t.Fatalf("detail does not name the failed owner:\n%s", v)
	}
	r := Report(m.Frame())
	if len(r.Ranks) != 1 || r.Ranks[0].FailedOwners[1] != 7 || r.Ranks[0].Failovers != 7 {
		t.Fatalf("--json report: %+v", r.Ranks)
	}
}
