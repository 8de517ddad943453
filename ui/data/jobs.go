package data

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ddstore/ddstore/telemetry"
)

// JobSummary is one job of a telemetry directory: its id, how many ranks
// have a segment there and how many of those are live.
type JobSummary struct {
	Job   string `json:"job"`
	Ranks int    `json:"ranks"`
	Live  int    `json:"live"`
}

// JobError says that a job selection (--job, ddtop.job) names no job of
// the directory, or several; Jobs lists the jobs there.
type JobError struct {
	Want    string       // the id or prefix asked for
	Dir     string       // the telemetry directory
	Matches []string     // the jobs whose id starts with Want (none, or several)
	Jobs    []JobSummary // every job in Dir, by id
}

func (e *JobError) Error() string {
	var b strings.Builder
	if len(e.Matches) > 1 {
		fmt.Fprintf(&b, "job %q matches %d jobs in %s: give more of the job id", e.Want, len(e.Matches), e.Dir)
	} else {
		fmt.Fprintf(&b, "no job in %s matches %q (a job id or a unique prefix of one)", e.Dir, e.Want)
	}
	if len(e.Jobs) == 0 {
		b.WriteString("; there are no ddstore segments there")
		return b.String()
	}
	b.WriteString("; jobs there:")
	for _, l := range e.JobLines() {
		b.WriteString("\n  " + l)
	}
	return b.String()
}

// JobLines are the jobs of the directory, one line each: a header, then
// job id, ranks and live ranks in columns.
func (e *JobError) JobLines() []string {
	w := len("JOB")
	for _, j := range e.Jobs {
		w = max(w, len(j.Job))
	}
	lines := []string{fmt.Sprintf("%-*s  %5s  %4s", w, "JOB", "RANKS", "LIVE")}
	for _, j := range e.Jobs {
		lines = append(lines, fmt.Sprintf("%-*s  %5d  %4d", w, j.Job, j.Ranks, j.Live))
	}
	return lines
}

// SummarizeJobs counts the ranks and live ranks of each job among infos,
// which are sorted by job (as telemetry.Discover returns them); unreadable
// segments are left out.
func SummarizeJobs(infos []telemetry.SegmentInfo) []JobSummary {
	var out []JobSummary
	for _, in := range infos {
		if in.State == telemetry.StateInvalid {
			continue
		}
		if len(out) == 0 || out[len(out)-1].Job != in.Job {
			out = append(out, JobSummary{Job: in.Job})
		}
		j := &out[len(out)-1]
		j.Ranks++
		if in.State == telemetry.StateLive {
			j.Live++
		}
	}
	return out
}

// MatchJob is the job of jobs (a listing of dir) that want names: the job
// whose id is want, else the only job whose id starts with want. When no
// job or several match, the error is a *JobError.
func MatchJob(dir, want string, jobs []JobSummary) (string, error) {
	var matches []string
	for _, j := range jobs {
		if j.Job == want {
			return want, nil
		}
		if strings.HasPrefix(j.Job, want) {
			matches = append(matches, j.Job)
		}
	}
	if len(matches) == 1 {
		return matches[0], nil
	}
	return "", &JobError{Want: want, Dir: dir, Matches: matches, Jobs: jobs}
}

// ResolveJob lists dir and returns the job that want (an id or a unique
// prefix of one) names; "" stays "" (every job). ddtop's one-shot modes
// resolve --job with it before they start.
func ResolveJob(dir, want string) (string, error) {
	if want == "" {
		return "", nil
	}
	infos, err := telemetry.Discover(dir)
	if err != nil {
		return "", err
	}
	return MatchJob(dir, want, SummarizeJobs(infos))
}

// matchJob resolves Options.Job against this poll's segments: "" and nil
// without a selection. A prefix that matched one job keeps meaning that
// job while it has segments, even when a later job matches it too.
func (p *Poller) matchJob(infos []telemetry.SegmentInfo) (string, *JobError) {
	if p.o.Job == "" {
		return "", nil
	}
	job, err := MatchJob(p.o.Dir, p.o.Job, SummarizeJobs(infos))
	var je *JobError
	if errors.As(err, &je) {
		if p.job == "" || !slices.Contains(je.Matches, p.job) {
			return "", je
		}
		job = p.job
	}
	p.job = job
	return job, nil
}
