package bootstrap

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestExpandHostlist(t *testing.T) {
	cases := []struct {
		in   string
		want string // hosts joined by spaces
		err  string
	}{
		{in: "nid001", want: "nid001"},
		{in: "nid[001-004,007]", want: "nid001 nid002 nid003 nid004 nid007"},
		{in: "nid[008-011]", want: "nid008 nid009 nid010 nid011"},
		{in: "n[9-11]", want: "n9 n10 n11"},
		{in: "login1,nid[1-2],gpu[07,9]", want: "login1 nid1 nid2 gpu07 gpu9"},
		{in: "rack[1-2]-node[01-02]", want: "rack1-node01 rack1-node02 rack2-node01 rack2-node02"},
		{in: "a[1-2]b,c", want: "a1b a2b c"},
		{in: " x[3] ", want: "x3"},
		{in: "", err: "empty"},
		{in: "a,,b", err: "empty host"},
		{in: "nid[1-", err: "'[' without ']'"},
		{in: "nid1]", err: "']' without '['"},
		{in: "nid[4-2]", err: "end below start"},
		{in: "nid[a-b]", err: "decimal digits"},
		{in: "nid[1-2[3]]", err: "nested"},
		{in: "nid[0-9999999]", err: "more than"},
	}
	for _, c := range cases {
		got, err := ExpandHostlist(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err = %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != c.want {
			t.Errorf("%q: got %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// envOf is a lookupFunc over the given key, value pairs.
func envOf(kv ...string) lookupFunc {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestSlurmRendezvous(t *testing.T) {
	env := envOf
	addr, ok, err := slurmRendezvous(env("SLURM_JOB_ID", "4242", "SLURM_STEP_ID", "0",
		"SLURM_STEP_NODELIST", "nid[007-008]", "SLURM_JOB_NODELIST", "nid[001-008]"))
	if err != nil || !ok || !strings.HasPrefix(addr, "nid007:") {
		t.Fatalf("step list first: %q %v %v", addr, ok, err)
	}
	addr2, _, _ := slurmRendezvous(env("SLURM_JOB_ID", "4242", "SLURM_STEP_ID", "0", "SLURM_JOB_NODELIST", "nid[001-008]"))
	if !strings.HasPrefix(addr2, "nid001:") {
		t.Fatalf("job list fallback: %q", addr2)
	}
	// Same job and step: same port on every task; other steps: other ports.
	seen := map[int]string{}
	for _, job := range []string{"4242", "4243", "99999999"} {
		for step := range 50 {
			p := slurmPort(job, strconv.Itoa(step))
			if p < slurmPortBase || p >= slurmPortBase+slurmPortRange {
				t.Fatalf("port %d out of range", p)
			}
			if p != slurmPort(job, strconv.Itoa(step)) {
				t.Fatal("port not deterministic")
			}
			if prev, dup := seen[p]; dup && strings.HasPrefix(prev, job+".") {
				t.Errorf("job %s: steps %s and %d share port %d", job, prev, step, p)
			}
			seen[p] = fmt.Sprintf("%s.%d", job, step)
		}
	}
	if p := slurmPort("12.batch", "x"); p < slurmPortBase || p >= slurmPortBase+slurmPortRange {
		t.Errorf("hashed port %d out of range", p)
	}
	if _, ok, _ := slurmRendezvous(env("SLURM_JOB_ID", "1")); ok {
		t.Error("no node list: want ok=false")
	}
	if _, _, err := slurmRendezvous(env("SLURM_JOB_ID", "1", "SLURM_STEP_NODELIST", "n[2-1]")); err == nil ||
		!strings.Contains(err.Error(), "SLURM_STEP_NODELIST") {
		t.Errorf("bad list: %v", err)
	}
}

// TestResolveSlurm: under srun with nothing else set, auto picks tcp at the
// derived rendezvous; MASTER_ADDR/MASTER_PORT and a directory win.
func TestResolveSlurm(t *testing.T) {
	clearLauncherEnv(t)
	t.Setenv("SLURM_PROCID", "1")
	t.Setenv("SLURM_NTASKS", "4")
	t.Setenv("SLURM_JOB_ID", "777")
	t.Setenv("SLURM_STEP_ID", "2")
	t.Setenv("SLURM_STEP_NODELIST", "node[03-04]")
	env := Env{Rank: 1, World: 4, Launcher: "slurm", Job: "slurm-777.2"}
	r, err := Options{Env: env}.resolve()
	if err != nil || r.method != "tcp" || r.Addr != "node03:"+strconv.Itoa(slurmPort("777", "2")) {
		t.Fatalf("derived: %+v %v", r, err)
	}
	// A torchrun inside the allocation (other rank/world) derives nothing.
	if _, err := (Options{Env: Env{Rank: 0, World: 2, Launcher: "torchrun", Job: "t"}}).resolve(); err == nil {
		t.Fatal("torchrun inside the allocation: want the no-way-to-exchange error")
	}
	t.Setenv("MASTER_ADDR", "10.0.0.1")
	t.Setenv("MASTER_PORT", "29400")
	if r, err := (Options{Env: env}).resolve(); err != nil || r.Addr != "10.0.0.1:29400" {
		t.Fatalf("MASTER_* override: %+v %v", r.Addr, err)
	}
	clearLauncherEnv(t)
	t.Setenv("SLURM_PROCID", "1")
	t.Setenv("SLURM_NTASKS", "4")
	t.Setenv("SLURM_JOB_ID", "777")
	t.Setenv("SLURM_STEP_NODELIST", "node[03-04]")
	t.Setenv("DDSTORE_BOOTSTRAP_DIR", t.TempDir())
	if r, err := (Options{Env: env}).resolve(); err != nil || r.method != "dir" {
		t.Fatalf("dir wins: %+v %v", r.method, err)
	}
}

// slurmStepEnv returns a job and step id whose derived port is free on
// this machine, so that the spawned ranks can rendezvous there.
func slurmStepEnv(t *testing.T) (job, step int) {
	t.Helper()
	for try := range 200 {
		job = 100000 + int(time.Now().UnixNano()%100000) + try
		for s := range 20 {
			port := slurmPort(strconv.Itoa(job), strconv.Itoa(s))
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err == nil {
				l.Close()
				return job, s
			}
		}
	}
	t.Fatal("no free derived port")
	return
}

// TestSlurmStepConnects: four processes with only what srun sets (rank,
// size, job, step, node list) meet and all-gather; also through a
// wrapper that exports RANK/WORLD_SIZE as well (ddstore-env.sh).
func TestSlurmStepConnects(t *testing.T) {
	for _, wrapper := range []bool{false, true} {
		t.Run(fmt.Sprintf("wrapper=%v", wrapper), func(t *testing.T) {
			job, step := slurmStepEnv(t)
			res := spawn(t, spawnSpec{role: "gather", method: "auto", world: 4, timeout: 10 * time.Second, slurm: true,
				env: func(r int) []string {
					e := []string{"SLURM_JOB_ID=" + strconv.Itoa(job), "SLURM_STEP_ID=" + strconv.Itoa(step),
						"SLURM_STEP_NODELIST=localhost", "SLURM_JOB_NODELIST=localhost", "SLURM_LOCALID=" + strconv.Itoa(r)}
					if wrapper {
						e = append(e, "RANK="+strconv.Itoa(r), "WORLD_SIZE=4")
					}
					return e
				}})
			wantAllOK(t, res)
			for r, rr := range res {
				if want := fmt.Sprintf("slurm-%d.%d", job, step); rr.Job != want {
					t.Errorf("rank %d: job %q, want %q", r, rr.Job, want)
				}
			}
		})
	}
}

// TestKilledAfterInterrupt: every process of an srun step, whatever
// started it inside the step, is SIGKILLed right after srun forwards
// Ctrl-C, unless srun forwards a single Ctrl-C alone (SLURM_DISABLE_STATUS)
// or the task has a terminal of its own (--pty); a batch script is no step.
// The environments are those srun 22.05 gives its tasks here.
func TestKilledAfterInterrupt(t *testing.T) {
	step := []string{"SLURM_JOB_ID", "15", "SLURM_PROCID", "0", "SLURM_STEP_ID", "0", "SLURM_STEPID", "0"}
	for _, c := range []struct {
		name string
		env  []string
		want bool
	}{
		{"srun task", step, true},
		{"srun task, old name only", []string{"SLURM_JOB_ID", "15", "SLURM_STEPID", "3"}, true},
		{"ddrun inside srun", append([]string{"RANK", "2", "WORLD_SIZE", "4"}, step...), true},
		{"SLURM_DISABLE_STATUS=1", append([]string{"SLURM_DISABLE_STATUS", "1"}, step...), false},
		{"SLURM_DISABLE_STATUS=0", append([]string{"SLURM_DISABLE_STATUS", "0"}, step...), false},
		{"srun --pty", append([]string{"SLURM_PTY_PORT", "45473"}, step...), false},
		{"sbatch script", []string{"SLURM_JOB_ID", "19", "SLURM_PROCID", "0"}, false},
		{"no Slurm", []string{"PMI_RANK", "0", "PMI_SIZE", "4"}, false},
		{"empty step id", []string{"SLURM_STEP_ID", " "}, false},
	} {
		if got := killedAfterInterrupt(envOf(c.env...)); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
