package report

import (
	"bytes"
	"context"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ddstore/ddstore/telemetry"
	"github.com/ddstore/ddstore/ui/data"
	"github.com/ddstore/ddstore/ui/record"
)

// synthetic records a job of three ranks for 20 ticks: rank r makes
// 10*(r+1) calls a tick of 16 rows on the shared reader (a quarter of each
// call waiting for its lock: a lock_wait finding), reading from the next rank.
func synthetic(t *testing.T) *record.Recording {
	t.Helper()
	dir := t.TempDir()
	var ws [3]*telemetry.Writer
	var ids [3]int
	for r := range 3 {
		w, err := telemetry.Create(telemetry.WriterOptions{Dir: dir, Job: "rep", Rank: r, World: 3, Host: "h" + string(rune('0'+r))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		ws[r] = w
		ids[r], _ = w.AddVar("x", "float32", 64, 3000, 1000)
	}
	now := time.Unix(1_700_000_000, 0)
	p, err := data.NewPoller(data.Options{Dir: dir, KeepRaw: true, Recent: 4096, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rec := &record.Recording{Header: record.Header{Format: record.Format, Version: record.Version, Dir: dir, IntervalNs: int64(time.Second)}}
	for tick := range 20 {
		for r := range 3 {
			for range 10 * (r + 1) {
				c := telemetry.Call{Var: int32(ids[r]), Reader: 0, Concurrent: true, Rows: 16, Bytes: 1024, RemoteRows: 16}
				c.Targets.Add((r+1)%3, 16)
				c.Phases[telemetry.PhaseLockWait] = 4000 + int64(tick)*100
				c.Phases[telemetry.PhaseCQWait] = 12000
				c.Phases[telemetry.PhaseCopy] = 500
				ws[r].Record(&c)
			}
		}
		f, err := p.Poll()
		if err != nil {
			t.Fatal(err)
		}
		rec.Ticks = append(rec.Ticks, record.Tick{TimeNs: f.At.UnixNano(), Segments: f.Raw})
		now = now.Add(time.Second)
	}
	return rec
}

func writeReport(t *testing.T) (string, string) {
	t.Helper()
	rec := synthetic(t)
	var b bytes.Buffer
	if err := Write(&b, rec, rec.Frames()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, b.String()
}

// The page holds three inline SVG plots, the summary and the findings,
// and loads nothing from anywhere.
func TestReportHTML(t *testing.T) {
	_, html := writeReport(t)
	if n := strings.Count(html, "<svg"); n != 3 {
		t.Fatalf("%d SVG plots, want 3", n)
	}
	for _, s := range []string{"Throughput per rank", "Phase breakdown over time", "Call latency (whole run)",
		`id="plot-throughput"`, `id="plot-phases"`, `id="plot-latency"`, "lock_wait", "rank 2 (h2) var x reader 0",
		"DDSTORE_THREAD_READERS=1", "20 snapshots", "<td>600</td><td>9600</td>", "<th>1200</th><th>19200</th>"} {
		if !strings.Contains(html, s) {
			t.Fatalf("report lacks %q", s)
		}
	}
	for _, s := range []string{"http://", "https://", "<script", "<link", "src="} {
		if strings.Contains(stripNS(html), s) {
			t.Fatalf("report is not self-contained: it has %q", s)
		}
	}
}

// stripNS drops the SVG namespace URIs (names, not fetched).
func stripNS(s string) string {
	for _, ns := range []string{"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"} {
		s = strings.ReplaceAll(s, ns, "")
	}
	return s
}

// TestReportInBrowser renders the page in headless Chromium, screenshots
// it, and finds each plot's colours on screen: the lock_wait band of the
// phase plot, the latency bars, and each rank's throughput line. It shows
// only that a browser draws the inline SVG; the numbers plotted are
// checked by TestReportData.
// DDTOP_REQUIRE_BROWSER=1 (make test, mk/ui.mk) makes a missing browser a
// failure instead of a skip.
func TestReportInBrowser(t *testing.T) {
	browser := ""
	for _, b := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(b); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		if os.Getenv("DDTOP_REQUIRE_BROWSER") == "1" {
			t.Fatal("no chromium to render the report (make deps installs it)")
		}
		t.Skip("no chromium")
	}
	path, _ := writeReport(t)
	shot := filepath.Join(t.TempDir(), "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--window-size=1200,3000", "--screenshot="+shot, "file://"+path)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	cmd.WaitDelay = 5 * time.Second // its helpers may hold the output open
	if out, err := cmd.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			t.Fatalf("%s did not finish the screenshot within 90 s: %v\n%s", browser, err, out)
		}
		t.Fatalf("%s: %v\n%s", browser, err, out)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	count := func(c color.RGBA) int {
		n := 0
		b := img.Bounds()
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				r, g, bl, _ := img.At(x, y).RGBA()
				if near(r, c.R) && near(g, c.G) && near(bl, c.B) {
					n++
				}
			}
		}
		return n
	}
	want := map[string]struct {
		c   color.RGBA
		min int
	}{
		"lock_wait band": {phaseColors[telemetry.PhaseLockWait], 2000},
		"cq_wait band":   {phaseColors[telemetry.PhaseCQWait], 2000},
		"latency bars":   {barColor, 500},
	}
	for r := range 3 {
		c := rankColor(r).(color.RGBA)
		want["rank line "+string(rune('0'+r))] = struct {
			c   color.RGBA
			min int
		}{c, 30}
	}
	for what, w := range want {
		if n := count(w.c); n < w.min {
			t.Errorf("%s: %d pixels of %v on screen, want at least %d", what, n, w.c, w.min)
		}
	}
	if t.Failed() {
		t.Logf("screenshot kept at %s", shot)
	}
}

func near(v uint32, c uint8) bool {
	d := int(v>>8) - int(c)
	return d >= -6 && d <= 6
}
