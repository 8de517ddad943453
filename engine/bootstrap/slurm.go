package bootstrap

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// maxHostlist bounds the hosts one hostlist expression may expand to.
const maxHostlist = 1 << 20

// ExpandHostlist expands Slurm's hostlist syntax: a comma-separated list of
// host expressions, each of which may hold bracketed ranges, as in
// "nid[001-004,007],login1" or "rack[1-2]-node[01-02]" (several brackets
// expand as a cartesian product, leftmost slowest). A range keeps the
// zero-padding of its lower bound ("nid[008-010]" → nid008 nid009 nid010).
// The order is that of the expression; duplicates are kept. Malformed input
// (unbalanced brackets, a range whose end is below its start, letters in a
// range, more than 2^20 hosts) is an error that quotes the offending part.
func ExpandHostlist(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("hostlist: empty")
	}
	var out []string
	for _, expr := range splitTop(s) {
		expr = strings.TrimSpace(expr)
		if expr == "" {
			return nil, fmt.Errorf("hostlist %q: empty host between commas", s)
		}
		hosts, err := expandOne(expr)
		if err != nil {
			return nil, fmt.Errorf("hostlist %q: %w", s, err)
		}
		if len(out)+len(hosts) > maxHostlist {
			return nil, fmt.Errorf("hostlist %q: more than %d hosts", s, maxHostlist)
		}
		out = append(out, hosts...)
	}
	return out, nil
}

// splitTop splits s at the commas outside brackets.
func splitTop(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

// expandOne expands one host expression (no top-level commas).
func expandOne(expr string) ([]string, error) {
	open := strings.IndexByte(expr, '[')
	if open < 0 {
		if strings.IndexByte(expr, ']') >= 0 {
			return nil, fmt.Errorf("%q: ']' without '['", expr)
		}
		return []string{expr}, nil
	}
	end := strings.IndexByte(expr[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("%q: '[' without ']'", expr)
	}
	end += open
	prefix, body, rest := expr[:open], expr[open+1:end], expr[end+1:]
	if strings.IndexByte(prefix, ']') >= 0 || strings.IndexByte(body, '[') >= 0 {
		return nil, fmt.Errorf("%q: nested or unbalanced brackets", expr)
	}
	suffixes, err := expandOne(rest)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range strings.Split(body, ",") {
		lo, hi, width, err := parseRange(r)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", expr, err)
		}
		if n := (hi - lo + 1) * len(suffixes); n > maxHostlist || len(out)+n > maxHostlist {
			return nil, fmt.Errorf("%q: more than %d hosts", expr, maxHostlist)
		}
		for v := lo; v <= hi; v++ {
			num := strconv.Itoa(v)
			if len(num) < width {
				num = strings.Repeat("0", width-len(num)) + num
			}
			for _, suf := range suffixes {
				out = append(out, prefix+num+suf)
			}
		}
	}
	return out, nil
}

// parseRange parses "7", "001-004" into bounds and the zero-padded width.
func parseRange(r string) (lo, hi, width int, err error) {
	r = strings.TrimSpace(r)
	a, b, isRange := strings.Cut(r, "-")
	if !isRange {
		b = a
	}
	if !digits(a) || !digits(b) {
		return 0, 0, 0, fmt.Errorf("range %q: want N or N-M with decimal digits", r)
	}
	if len(a) > 9 || len(b) > 9 {
		return 0, 0, 0, fmt.Errorf("range %q: numbers too long", r)
	}
	lo, _ = strconv.Atoi(a)
	hi, _ = strconv.Atoi(b)
	if hi < lo {
		return 0, 0, 0, fmt.Errorf("range %q: end below start", r)
	}
	width = 0
	if len(a) > 1 && a[0] == '0' {
		width = len(a)
	}
	return lo, hi, width, nil
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Port range of the rendezvous that Slurm steps derive: below Linux's
// default ephemeral ports (32768–60999), so that no outgoing connection
// holds it.
const (
	slurmPortBase  = 17000
	slurmPortRange = 15000
)

// SlurmRendezvous returns the tcp rendezvous address that every task of a
// Slurm step derives by itself: the first host of SLURM_STEP_NODELIST
// (else SLURM_JOB_NODELIST), and a port in [17000, 32000) computed from
// SLURM_JOB_ID and SLURM_STEP_ID, equal on every task of the step and
// distinct for the steps of one job (up to 15000 steps). ok is false when
// the variables are absent (not a Slurm step); err says which variable is
// malformed.
func SlurmRendezvous() (addr string, ok bool, err error) {
	return slurmRendezvous(lookupEnv)
}

func slurmRendezvous(look lookupFunc) (string, bool, error) {
	nodelist, name := nonEmpty(look, "SLURM_STEP_NODELIST"), "SLURM_STEP_NODELIST"
	if nodelist == "" {
		nodelist, name = nonEmpty(look, "SLURM_JOB_NODELIST"), "SLURM_JOB_NODELIST"
	}
	if nodelist == "" {
		nodelist, name = nonEmpty(look, "SLURM_NODELIST"), "SLURM_NODELIST"
	}
	job := nonEmpty(look, "SLURM_JOB_ID")
	if job == "" {
		job = nonEmpty(look, "SLURM_JOBID")
	}
	step := nonEmpty(look, "SLURM_STEP_ID")
	if step == "" {
		step = nonEmpty(look, "SLURM_STEPID")
	}
	if nodelist == "" || job == "" {
		return "", false, nil
	}
	hosts, err := ExpandHostlist(nodelist)
	if err != nil {
		return "", true, envErr("%s: %v", name, err)
	}
	return joinHostPort(hosts[0], strconv.Itoa(slurmPort(job, step))), true, nil
}

// slurmPort maps a job and step id to a port. Numeric ids (the usual case)
// give (job·97 + step) mod range, so steps of one job never collide; other
// ids are hashed.
func slurmPort(job, step string) int {
	j, jerr := strconv.ParseUint(job, 10, 64)
	s, serr := strconv.ParseUint(step, 10, 64)
	if step == "" {
		s, serr = 0, nil
	}
	if jerr == nil && serr == nil {
		return slurmPortBase + int((j%slurmPortRange*97+s)%slurmPortRange)
	}
	h := fnv.New32a()
	h.Write([]byte(job + "." + step))
	return slurmPortBase + int(h.Sum32()%slurmPortRange)
}

// inSlurmStep reports whether this process is a task of a Slurm step whose
// tasks are the ranks of env (SLURM_PROCID and SLURM_NTASKS agree with it):
// true under srun, also through a wrapper that exports RANK/WORLD_SIZE.
func inSlurmStep(look lookupFunc, env Env) bool {
	r, _, err1 := envInt(look, "SLURM_PROCID", true, 0)
	w, _, err2 := envInt(look, "SLURM_NTASKS", true, 1)
	return err1 == nil && err2 == nil && r == env.Rank && w == env.World
}

// KilledAfterInterrupt reports whether this process's launcher ends it by
// SIGKILL right after it forwards Ctrl-C (SIGINT) to it: srun does so on
// its second Ctrl-C (Slurm 22.05: SIGINT to every task, then SIGKILL about
// 10 ms later, too soon for Python to unwind a KeyboardInterrupt), so that
// a task must end at once on SIGINT to be reported as interrupted rather
// than killed. It holds for every process of a step that srun started
// (SLURM_STEP_ID set, inherited through ddrun, sh -c or numactl), except
// when srun forwards a single Ctrl-C on its own (SLURM_DISABLE_STATUS set in
// srun's environment, which its tasks inherit; srun -X does not export it)
// or when Ctrl-C reaches the task through a terminal of its own (srun
// --pty: SLURM_PTY_PORT). A batch script (sbatch) is no step.
func KilledAfterInterrupt() bool { return killedAfterInterrupt(lookupEnv) }

func killedAfterInterrupt(look lookupFunc) bool {
	if nonEmpty(look, "SLURM_STEP_ID") == "" && nonEmpty(look, "SLURM_STEPID") == "" {
		return false
	}
	if nonEmpty(look, "SLURM_DISABLE_STATUS") != "" { // srun takes any value for yes
		return false
	}
	return nonEmpty(look, "SLURM_PTY_PORT") == ""
}
