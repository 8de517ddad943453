package data

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ddstore/ddstore/internal/segtest"
	"github.com/ddstore/ddstore/telemetry"
)

func TestMatchJob(t *testing.T) {
	jobs := []JobSummary{{"abc", 1, 1}, {"abcd", 2, 0}, {"pmi-kvs_26094_0_487958802_vm", 4, 4}}
	for want, job := range map[string]string{"abc": "abc", "abcd": "abcd", "abcd_": "", "pmi": "pmi-kvs_26094_0_487958802_vm", "ab": "", "x": ""} {
		got, err := MatchJob("/d", want, jobs)
		var je *JobError
		if got != job || (job == "") != errors.As(err, &je) {
			t.Fatalf("MatchJob(%q) = %q, %v; want %q", want, got, err, job)
		}
	}
	_, err := MatchJob("/d", "ab", jobs)
	msg := err.Error()
	for _, s := range []string{`job "ab" matches 2 jobs in /d: give more of the job id; jobs there:`,
		"JOB                           RANKS  LIVE",
		"abcd                              2     0",
		"pmi-kvs_26094_0_487958802_vm      4     4"} {
		if !strings.Contains(msg, s) {
			t.Fatalf("ambiguous: %q lacks %q", msg, s)
		}
	}
	if _, err := MatchJob("/d", "x", jobs); !strings.HasPrefix(err.Error(), `no job in /d matches "x" (a job id or a unique prefix of one); jobs there:`) {
		t.Fatalf("no match: %v", err)
	}
	if _, err := MatchJob("/d", "x", nil); err.Error() != `no job in /d matches "x" (a job id or a unique prefix of one); there are no ddstore segments there` {
		t.Fatalf("empty directory: %v", err)
	}
}

// A prefix that names several jobs gives a frame with no rank and a
// JobError (each job's ranks and live ranks); ResolveJob refuses it too. A
// unique prefix selects its job; an exact id wins over a longer id.
func TestPollJobPrefix(t *testing.T) {
	dir := t.TempDir()
	writer(t, telemetry.WriterOptions{Dir: dir, Job: "pmi-kvs_1", Rank: 0, World: 2})
	writer(t, telemetry.WriterOptions{Dir: dir, Job: "pmi-kvs_1", Rank: 1, World: 2, Pid: segtest.ExitedPid(t)})
	writer(t, telemetry.WriterOptions{Dir: dir, Job: "pmi-kvs_2", World: 1})
	p, _ := NewPoller(Options{Dir: dir, Job: "pmi"})
	defer p.Close()
	f, err := p.Poll()
	if err != nil || len(f.Ranks) != 0 || f.JobErr == nil {
		t.Fatalf("ambiguous: err %v, %d ranks, job error %v", err, len(f.Ranks), f.JobErr)
	}
	want := []JobSummary{{"pmi-kvs_1", 2, 1}, {"pmi-kvs_2", 1, 1}}
	if !slices.Equal(f.JobErr.Jobs, want) || !slices.Equal(f.JobErr.Matches, []string{"pmi-kvs_1", "pmi-kvs_2"}) {
		t.Fatalf("jobs %+v matches %v", f.JobErr.Jobs, f.JobErr.Matches)
	}
	if job, err := ResolveJob(dir, "pmi"); err == nil {
		t.Fatalf("ResolveJob of an ambiguous prefix: %q", job)
	}
	p2, _ := NewPoller(Options{Dir: dir, Job: "pmi-kvs_2"})
	defer p2.Close()
	if f, _ := p2.Poll(); f.Job != "pmi-kvs_2" || len(f.Ranks) != 1 {
		t.Fatalf("unique prefix: job %q, %d ranks", f.Job, len(f.Ranks))
	}
	writer(t, telemetry.WriterOptions{Dir: dir, Job: "pmi-kvs_22", World: 1})
	if f, _ := p2.Poll(); f.Job != "pmi-kvs_2" || len(f.Ranks) != 1 || f.JobErr != nil {
		t.Fatalf("exact id beside a longer one: job %q, %d ranks, %v", f.Job, len(f.Ranks), f.JobErr)
	}
}

// A prefix that resolved keeps its job when a later job matches it too.
func TestPollJobPrefixSticks(t *testing.T) {
	dir := t.TempDir()
	writer(t, telemetry.WriterOptions{Dir: dir, Job: "run_1", World: 1})
	p, _ := NewPoller(Options{Dir: dir, Job: "run"})
	defer p.Close()
	if f, _ := p.Poll(); f.Job != "run_1" {
		t.Fatalf("unique prefix: job %q (%v)", f.Job, f.JobErr)
	}
	writer(t, telemetry.WriterOptions{Dir: dir, Job: "run_2", World: 1})
	if f, _ := p.Poll(); f.Job != "run_1" || len(f.Ranks) != 1 {
		t.Fatalf("after run_2 started: job %q, %d ranks (%v)", f.Job, len(f.Ranks), f.JobErr)
	}
	if job, err := ResolveJob(dir, "run_2"); job != "run_2" || err != nil {
		t.Fatalf("ResolveJob(run_2) = %q, %v", job, err)
	}
	if job, err := ResolveJob(dir, ""); job != "" || err != nil {
		t.Fatalf("ResolveJob of no selection = %q, %v", job, err)
	}
}

// Rank.ExitedAt is the poller's time of the first poll that saw the
// writer exited, and stays so; zero for a live rank.
func TestExitedAt(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	writer(t, telemetry.WriterOptions{Dir: dir, Job: "j", Rank: 0, World: 2})
	writer(t, telemetry.WriterOptions{Dir: dir, Job: "j", Rank: 1, World: 2, Pid: segtest.ExitedPid(t)})
	p, _ := NewPoller(Options{Dir: dir, Now: clk.now})
	defer p.Close()
	first := clk.now()
	for range 3 {
		f, _ := p.Poll()
		if len(f.Ranks) != 2 || !f.Ranks[0].ExitedAt.IsZero() || !f.Ranks[1].ExitedAt.Equal(first) {
			t.Fatalf("at %v: live exited at %v, exited at %v; want zero and %v", clk.now(), f.Ranks[0].ExitedAt, f.Ranks[1].ExitedAt, first)
		}
		clk.advance(10 * time.Second)
	}
}
