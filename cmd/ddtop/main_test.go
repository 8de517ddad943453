package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/ddstore/ddstore/telemetry"
)

type jsonCounters struct {
	Calls, Rows, Bytes, Errors int64
	PhasesNs                   map[string]int64 `json:"phases_ns"`
	CallsPerS                  float64          `json:"calls_per_s"`
}

type report struct {
	Dir       string  `json:"dir"`
	IntervalS float64 `json:"interval_s"`
	Ranks     []struct {
		Rank  int
		Host  string
		Pid   int
		State string
		Job   string
		jsonCounters
	}
	Variables []struct {
		Name string
		jsonCounters
		Ranks []struct {
			Rank int
			jsonCounters
		}
	}
	Findings []struct {
		Rule, Var, Evidence, Fix, Env string
		Rank                          int
	} `json:"findings"`
}

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newCommand(&out, &errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func runJSON(t *testing.T, args ...string) report {
	t.Helper()
	out, err := run(t, append(args, "--json")...)
	if err != nil {
		t.Fatalf("ddtop %v: %v", args, err)
	}
	var r report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("bad JSON (%v):\n%s", err, out)
	}
	return r
}

func create(t *testing.T, dir, job string, rank, world int, host string, vars ...string) (*telemetry.Writer, []int) {
	t.Helper()
	w, err := telemetry.Create(telemetry.WriterOptions{Dir: dir, Job: job, Rank: rank, World: world, Host: host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	var ids []int
	for _, v := range vars {
		id, err := w.AddVar(v, "int64", 8, 100, 50)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return w, ids
}

// call k on (rank r, var v): rows k+1+r, 8 bytes a row, post 10 ns and
// copy 20 ns a row; every 4th call fails.
func call(r, v, k int) telemetry.Call {
	rows := int64(k + 1 + r)
	c := telemetry.Call{Var: int32(v), Rows: rows, Bytes: 8 * rows, Err: k%4 == 3}
	c.Phases[telemetry.PhasePost] = 10 * rows
	c.Phases[telemetry.PhaseCopy] = 20 * rows
	return c
}

type want struct{ calls, rows, bytes, errors, post, copy int64 }

func (w *want) add(c telemetry.Call) {
	w.calls++
	w.rows += c.Rows
	w.bytes += c.Bytes
	if c.Err {
		w.errors++
	}
	w.post += c.Phases[telemetry.PhasePost]
	w.copy += c.Phases[telemetry.PhaseCopy]
}

func (w want) check(t *testing.T, what string, got jsonCounters) {
	t.Helper()
	if got.Calls != w.calls || got.Rows != w.rows || got.Bytes != w.bytes || got.Errors != w.errors ||
		got.PhasesNs["post"] != w.post || got.PhasesNs["copy"] != w.copy || got.PhasesNs["cq_wait"] != 0 ||
		len(got.PhasesNs) != telemetry.NumPhases {
		t.Fatalf("%s: got %+v, want %+v", what, got, w)
	}
}

func TestJSON(t *testing.T) {
	dir := t.TempDir()
	names := []string{"a", "b"}
	perRank := map[int]*want{0: {}, 1: {}}
	perVar := map[string]*want{"a": {}, "b": {}}
	perVarRank := map[string]*want{}
	for r := range 2 {
		w, ids := create(t, dir, "j", r, 2, "", names[:2-r]...) // rank 0: a, b; rank 1: a
		for vi, id := range ids {
			for k := range 5 + 3*vi + r {
				c := call(r, id, k)
				w.Record(&c)
				perRank[r].add(c)
				perVar[names[vi]].add(c)
				key := names[vi] + string(rune('0'+r))
				if perVarRank[key] == nil {
					perVarRank[key] = &want{}
				}
				perVarRank[key].add(c)
			}
		}
	}
	rep := runJSON(t, "--dir", dir, "--window", "0")
	if rep.Dir != dir || len(rep.Ranks) != 2 || len(rep.Variables) != 2 {
		t.Fatalf("report: %+v", rep)
	}
	host, _ := os.Hostname()
	for i, r := range rep.Ranks {
		if r.Rank != i || r.Pid != os.Getpid() || r.State != "live" || r.Job != "j" || r.Host != host {
			t.Fatalf("rank %d identity: %+v", i, r)
		}
		perRank[i].check(t, "rank", r.jsonCounters)
	}
	for _, v := range rep.Variables {
		perVar[v.Name].check(t, "variable "+v.Name, v.jsonCounters)
		for _, vr := range v.Ranks {
			perVarRank[v.Name+string(rune('0'+vr.Rank))].check(t, "variable on rank", vr.jsonCounters)
		}
	}
	if rep.Variables[0].Name != "a" || len(rep.Variables[0].Ranks) != 2 || len(rep.Variables[1].Ranks) != 1 {
		t.Fatalf("variables: %+v", rep.Variables)
	}
}

// With a window, rates come from the calls recorded inside it. The calls
// are recorded a while after ddtop starts; on a loaded machine its first
// snapshot may come later than that (then it sees some or all of the
// calls before the window), so the test tries again with a longer delay.
func TestJSONRates(t *testing.T) {
	const n = 40
	delays := []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second, 5 * time.Second}
	for _, delay := range delays {
		last := delay == delays[len(delays)-1]
		dir := t.TempDir()
		w, ids := create(t, dir, "j", 0, 1, "", "a")
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(delay)
			for k := range n {
				c := call(0, ids[0], k)
				w.Record(&c)
			}
		}()
		window := 4 * delay
		rep := runJSON(t, "--dir", dir, "--window", window.String())
		<-done
		r := rep.Ranks[0]
		if r.Calls != n && !last {
			// A loaded machine ran the recording goroutine after the second
			// snapshot: try again with more room.
			t.Logf("delay %v: %d of %d calls before the second snapshot; trying a longer delay", delay, r.Calls, n)
			continue
		}
		if r.Calls != n || rep.IntervalS < window.Seconds() {
			t.Fatalf("calls %d interval %v", r.Calls, rep.IntervalS)
		}
		got := r.CallsPerS * rep.IntervalS
		if math.Abs(got-n) > 1e-6 && !last {
			t.Logf("delay %v: %.0f of the calls came after the first snapshot; trying a longer delay", delay, got)
			continue
		}
		if math.Abs(got-n) > 1e-6 {
			t.Fatalf("calls/s %v over %vs = %v calls, want %d", r.CallsPerS, rep.IntervalS, got, n)
		}
		return
	}
}

// --json and --once carry the diagnoses: here every rank made 40 calls of
// one row, 1 in 4 failing, and rank 1 of a world of 3 never appeared.
func TestFindingsInOnce(t *testing.T) {
	dir := t.TempDir()
	for r := range 2 {
		w, ids := create(t, dir, "j", r*2, 3, "", "a")
		for k := range 40 {
			c := call(0, ids[0], 0)
			c.Err = k%4 == 3
			w.Record(&c)
		}
	}
	rep := runJSON(t, "--dir", dir, "--window", "0")
	got := map[string]int{}
	for _, f := range rep.Findings {
		got[f.Rule]++
		if f.Evidence == "" || f.Fix == "" {
			t.Errorf("finding without evidence or fix: %+v", f)
		}
		if f.Rule == "unbatched" && (f.Var != "a" || f.Env != "DDSTORE_BATCH_GET=1" || !strings.Contains(f.Evidence, "1.00 rows per call")) {
			t.Errorf("unbatched: %+v", f)
		}
		if f.Rule == "missing_ranks" && (f.Rank != -1 || !strings.Contains(f.Evidence, "missing ranks: 1")) {
			t.Errorf("missing: %+v", f)
		}
	}
	if got["unbatched"] != 2 || got["errors"] != 2 || got["missing_ranks"] != 1 || len(rep.Findings) != 5 {
		t.Fatalf("findings %+v", rep.Findings)
	}
	out, err := run(t, "--dir", dir, "--once", "--window", "0", "--width", "200")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"FINDINGS 5, worst first", "missing_ranks job j: world size 3 but 2 ranks have segments",
		"unbatched rank 2", "(DDSTORE_BATCH_GET=1)"} {
		if !strings.Contains(out, s) {
			t.Fatalf("--once lacks %q:\n%s", s, out)
		}
	}
}

func TestOnceTables(t *testing.T) {
	dir := t.TempDir()
	w, ids := create(t, dir, "j", 0, 2, "hostzero", "images", "labels")
	w1, ids1 := create(t, dir, "j", 1, 2, "hostone", "images")
	// Rank 0: calls 0..3 of labels: 1+2+3+4 = 10 rows, the 4th fails; each
	// takes 30 ns a row (post 10 + copy 20).
	for k := range 4 {
		c := call(0, ids[1], k)
		w.Record(&c)
	}
	// Rank 1: one call of images, 5 rows, post 500 ns: 100 ns a row.
	c := telemetry.Call{Var: int32(ids1[0]), Rows: 5, Bytes: 40}
	c.Phases[telemetry.PhasePost] = 500
	w1.Record(&c)
	out, err := run(t, "--dir", dir, "--once", "--window", "0", "--width", "100")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"RANKS 2 ranks", "VARIABLES 2 variables", "RANK", "PHASES", "hostzero", "hostone", "images", "labels", "int64"} {
		if !strings.Contains(out, s) {
			t.Fatalf("--once output lacks %q:\n%s", s, out)
		}
	}
	// With --window 0 there is one snapshot: every rate is 0 and the
	// per-row figures are cumulative. µS/ROW is the mean: 30 ns = 0.03,
	// 100 ns = 0.10. P50/P99 interpolate in the row-time histogram,
	// bucket [2^(i-1), 2^i) ns: 30 ns is in [16, 32), p50 = 16 + 0.5*16 =
	// 24 ns ("0.02"), p99 = 16 + 0.99*16 = 31.84 ns ("0.03"); 100 ns is in
	// [64, 128), p50 = 64 + 0.5*64 = 96 ns ("0.10"), p99 = 64 + 0.99*64 =
	// 127.36 ns ("0.13"). ROWS of a variable is its global row count (100).
	pid := fmt.Sprint(os.Getpid())
	for _, want := range [][]string{
		// RANK HOST PID STATE CALL/S ROW/S MB/S µS/ROW P50 P99 ERR WAIT%
		{"0", "hostzero", pid, "live", "0", "0", "0", "0.03", "0.02", "0.03", "1", "-"},
		{"1", "hostone", pid, "live", "0", "0", "0", "0.10", "0.10", "0.13", "0", "-"},
		// VARIABLE DTYPE ROWS RANKS CALL/S ROW/S MB/S µS/ROW P50 P99 ERR
		{"images", "int64", "100", "2", "0", "0", "0", "0.10", "0.10", "0.13", "0"},
		{"labels", "int64", "100", "1", "0", "0", "0", "0.03", "0.02", "0.03", "1"},
	} {
		var got []string
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == want[0] {
				got = f
				break
			}
		}
		if len(got) < len(want) || strings.Join(got[:len(want)], " ") != strings.Join(want, " ") {
			t.Fatalf("row %q, want it to start %q:\n%s", got, want, out)
		}
	}
	// The tables fill the 100 columns asked for, and no line is wider.
	headers := 0
	for i, l := range strings.Split(out, "\n") {
		n := ansi.StringWidth(l)
		if n > 100 {
			t.Fatalf("line %d is %d wide, over 100: %q", i, n, l)
		}
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "RANK" || f[0] == "VARIABLE") {
			headers++
			if n != 100 {
				t.Fatalf("table header is %d wide, want 100: %q", n, l)
			}
		}
	}
	if headers != 2 {
		t.Fatalf("%d table headers, want 2:\n%s", headers, out)
	}
}

func TestConfigPrecedence(t *testing.T) {
	cfgDir, envDir, flagDir := t.TempDir(), t.TempDir(), t.TempDir()
	create(t, cfgDir, "keep", 0, 1, "")
	create(t, cfgDir, "other", 0, 1, "")
	create(t, envDir, "keep", 0, 1, "") // the config's ddtop.job names a job in every directory
	create(t, flagDir, "keep", 0, 1, "")
	cfg := filepath.Join(t.TempDir(), "m.yaml")
	os.WriteFile(cfg, []byte("telemetry:\n  dir: "+cfgDir+"\nddtop:\n  job: keep\n"), 0o600)

	rep := runJSON(t, "--config", cfg, "--window", "0")
	if rep.Dir != cfgDir || len(rep.Ranks) != 1 || rep.Ranks[0].Job != "keep" {
		t.Fatalf("config: dir %s ranks %+v", rep.Dir, rep.Ranks)
	}
	t.Setenv("DDSTORE_CONFIG", cfg)
	t.Setenv("DDSTORE_TELEMETRY_DIR", envDir)
	if rep := runJSON(t, "--window", "0"); rep.Dir != envDir {
		t.Fatalf("env over config: %s", rep.Dir)
	}
	if rep := runJSON(t, "--window", "0", "--dir", flagDir); rep.Dir != flagDir {
		t.Fatalf("flag over env: %s", rep.Dir)
	}
	if _, err := run(t, "--json", "--config", filepath.Join(cfgDir, "nope.yaml")); err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("missing config: %v", err)
	}
}

// --config takes a machine name from any directory (the files are
// embedded), a trainer's file with a ddtop section is ddtop's config, and
// a bad ddtop key is refused naming it.
func TestConfigMachineAnyDirectory(t *testing.T) {
	dir := t.TempDir()
	create(t, dir, "j1", 0, 1, "")
	wd, _ := os.Getwd()
	t.Cleanup(func() { os.Chdir(wd) })
	if err := os.Chdir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if rep := runJSON(t, "--config", "frontier", "--dir", dir, "--window", "0"); rep.Dir != dir || len(rep.Ranks) != 1 {
		t.Fatalf("--config frontier: dir %s ranks %+v", rep.Dir, rep.Ranks)
	}
	cfg := filepath.Join(t.TempDir(), "m.yaml")
	os.WriteFile(cfg, []byte("fabric:\n  window: 64\ntelemetry:\n  dir: "+dir+"\nddtop:\n  job: nope\n  nice: 3\n"), 0o600)
	if _, err := run(t, "--json", "--config", cfg, "--window", "0"); err == nil || !strings.Contains(err.Error(), `matches "nope"`) {
		t.Fatalf("ddtop.job from a trainer's file: %v", err)
	}
	os.WriteFile(cfg, []byte("ddtop:\n  interval: 1ms\n"), 0o600)
	if _, err := run(t, "--json", "--config", cfg); err == nil || !strings.Contains(err.Error(), "ddtop.interval") {
		t.Fatalf("bad ddtop.interval: %v", err)
	}
}

func TestErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone")
	if _, err := run(t, "--json", "--dir", missing, "--window", "0"); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("missing dir: %v", err)
	}
	if _, err := run(t, "--json", "--interval", "1ms"); err == nil || !strings.Contains(err.Error(), "interval") {
		t.Fatalf("bad interval: %v", err)
	}
	if _, err := run(t, "extra"); err == nil {
		t.Fatal("positional argument accepted")
	}
}

// ddtop record follows a job until it ends; ddtop report turns the file
// into a page with its three plots.
func TestRecordAndReport(t *testing.T) {
	dir := t.TempDir()
	w, ids := create(t, dir, "j", 0, 1, "", "a")
	go func() {
		for k := range 30 {
			c := call(0, ids[0], k)
			w.Record(&c)
			time.Sleep(10 * time.Millisecond)
		}
		// Ticks (every 50 ms) see the last calls: 5 s because a loaded
		// machine once starved the recorder for 1.5 s (2 ticks in 1.8 s).
		time.Sleep(5 * time.Second)
		w.Close() // the job ends: record stops --until later
	}()
	out := t.TempDir()
	rec := out + "/run.ddrec"
	// record runs in-process and only stops on --until or a signal (its
	// context is not the command's): bound it here.
	type result struct {
		msg string
		err error
	}
	done := make(chan result, 1)
	go func() {
		msg, err := run(t, "record", "--dir", dir, "-o", rec, "--interval", "50ms", "--until", "200ms", "--nice", "0")
		done <- result{msg, err}
	}()
	var (
		msg string
		err error
	)
	select {
	case r := <-done:
		msg, err = r.msg, r.err
	case <-time.After(60 * time.Second):
		t.Fatal("record --until 200ms still running 60 s after the job ended")
	}
	if err != nil || !strings.Contains(msg, "snapshots in "+rec) {
		t.Fatalf("record: %v %q", err, msg)
	}
	page := out + "/report.html"
	if msg, err := run(t, "report", rec, "-o", page); err != nil || !strings.Contains(msg, page) {
		t.Fatalf("report: %v %q", err, msg)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "<svg"); n != 3 || !strings.Contains(string(b), "<td>30</td>") {
		t.Fatalf("report: %d plots:\n%.2000s", n, b)
	}
	if _, err := run(t, "report", page); err == nil || !strings.Contains(err.Error(), "not a ddtop recording") {
		t.Fatalf("report of an HTML file: %v", err)
	}
}
