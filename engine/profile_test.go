package engine

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/ddstore/ddstore/telemetry"
)

// openProfiled opens a single-rank store whose profile goes to out.
func openProfiled(t *testing.T, profile, tel bool, out io.Writer) (*Store, string) {
	t.Helper()
	return openSingleJob(t, "prof", func(o *Options) {
		o.DisableTelemetry = !tel
		o.Profile = profile
		o.ProfileOutput = out
	})
}

// profileRow returns the fields of the table line of variable name.
func profileRow(t *testing.T, out, name string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return f
		}
	}
	t.Fatalf("profile has no line for %q:\n%s", name, out)
	return nil
}

// TestProfileAtClose: Close prints the rank's table with the exact calls
// and rows of each variable and the loader's batches.
func TestProfileAtClose(t *testing.T) {
	t.Setenv("DDSTORE_PROFILE", "")
	t.Setenv("DDSTORE_TELEMETRY", "")
	var out bytes.Buffer
	s, job := openProfiled(t, true, true, &out)
	defer checkNoShardFiles(t, job)
	x := varSpec{name: "x", dt: Int64, rowBytes: 24, base: 100, emptyMember: -1}
	y := varSpec{name: "y", dt: Uint8, rowBytes: 5, base: 40, emptyMember: -1}
	for _, v := range []varSpec{x, y} {
		if err := addPattern(s, v); err != nil {
			t.Fatal(err)
		}
	}
	// x: 7 Gets of 3 rows, 2 GetBatches of 5 rows: 9 calls, 31 rows.
	dst := make([]byte, 5*x.rowBytes)
	for i := range int64(7) {
		if err := s.Get("x", 10*i, 3, dst); err != nil {
			t.Fatal(err)
		}
		if err := checkRows(dst, x.rowBytes, x.salt(0), seqIdx(10*i, 3)); err != nil {
			t.Fatal(err)
		}
	}
	for _, idx := range [][]int64{{0, 99, 50, 7, 3}, {98, 1, 2, 60, 61}} {
		if err := s.GetBatch("x", idx, dst); err != nil {
			t.Fatal(err)
		}
		if err := checkRows(dst, x.rowBytes, x.salt(0), idx); err != nil {
			t.Fatal(err)
		}
	}
	// y through the loader: 40 rows in batches of 10 = 4 batches.
	ld, err := s.NewLoader(LoaderOptions{Vars: []string{"y"}, BatchSize: 10, Shuffle: true, Seed: 3, BatchGet: true})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := ld.Epoch(0)
	if err != nil {
		t.Fatal(err)
	}
	for {
		b, err := ep.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := checkRows(b.Data[0], y.rowBytes, y.salt(0), b.Indices); err != nil {
			t.Fatal(err)
		}
		b.Release()
	}
	if err := ld.Close(); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Fatalf("profile printed before Close:\n%s", out.String())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	t.Logf("profile:\n%s", got)
	if !strings.Contains(got, "ddstore profile, rank 0 of 1") {
		t.Fatalf("profile has no header naming the rank:\n%s", got)
	}
	for _, ph := range telemetry.PhaseNames {
		if !strings.Contains(got, ph) {
			t.Fatalf("profile has no column %s:\n%s", ph, got)
		}
	}
	row := profileRow(t, got, "x")
	// name, calls, rows, µs/call, one column per phase
	if len(row) != 4+len(telemetry.PhaseNames) {
		t.Fatalf("line of x has %d fields, want %d: %q", len(row), 4+len(telemetry.PhaseNames), row)
	}
	if row[1] != "9" || row[2] != "31" {
		t.Fatalf("x: calls %s rows %s, want 9 and 31: %q", row[1], row[2], row)
	}
	var phaseSum float64
	for _, f := range row[3:] {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v < 0 {
			t.Fatalf("x: field %q is not a µs figure: %q", f, row)
		}
		phaseSum += v
	}
	total, _ := strconv.ParseFloat(row[3], 64)
	phaseSum -= total
	if total <= 0 || phaseSum < total-0.05*8 || phaseSum > total+0.05*8 {
		t.Fatalf("x: µs/call %v, phases sum to %v: want > 0 and equal up to rounding: %q", total, phaseSum, row)
	}
	yrow := profileRow(t, got, "y")
	if yrow[2] != "40" {
		t.Fatalf("y: rows %s, want 40 (one epoch through the loader): %q", yrow[2], yrow)
	}
	if !strings.Contains(got, "loader: 4 batches, fetch wait ") {
		t.Fatalf("profile has no loader line with 4 batches:\n%s", got)
	}
}

// TestProfileOffAndTelemetryOff: no output without Profile; one line
// without telemetry; DDSTORE_PROFILE=1 turns it on.
func TestProfileOffAndTelemetryOff(t *testing.T) {
	t.Setenv("DDSTORE_TELEMETRY", "")
	t.Setenv("DDSTORE_PROFILE", "")
	var out bytes.Buffer
	s, _ := openProfiled(t, false, true, &out)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Fatalf("Profile off printed:\n%s", out.String())
	}

	s, _ = openProfiled(t, true, false, &out)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "telemetry is off") {
		t.Fatalf("telemetry off: got %q, want one line saying telemetry is off", got)
	}

	out.Reset()
	t.Setenv("DDSTORE_PROFILE", "1")
	s, _ = openProfiled(t, false, true, &out)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "ddstore profile, rank 0 of 1") {
		t.Fatalf("DDSTORE_PROFILE=1 printed %q, want the table", out.String())
	}
}

// TestProfileConfig: the config's profile key reaches Options.
func TestProfileConfig(t *testing.T) {
	for _, v := range []string{"1", "0"} {
		t.Setenv("DDSTORE_PROFILE", v)
		c, err := LoadConfig("")
		if err != nil {
			t.Fatal(err)
		}
		if got := c.StoreOptions().Profile; got != (v == "1") {
			t.Fatalf("DDSTORE_PROFILE=%s: StoreOptions().Profile = %v", v, got)
		}
	}
}
