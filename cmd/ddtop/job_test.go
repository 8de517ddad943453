package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain runs ddtop's main instead of the tests when DDTOP_TEST_MAIN is
// set: a test runs ddtop as a process to see its stderr and exit status.
func TestMain(m *testing.M) {
	if os.Getenv("DDTOP_TEST_MAIN") != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const liveJob = "pmi-kvs_26094_0_487958802_vm"

// twoJobs is a directory with liveJob (2 ranks) and pmi-kvs_27000_0_5_vm
// (1 rank).
func twoJobs(t *testing.T) string {
	dir := t.TempDir()
	create(t, dir, liveJob, 0, 2, "")
	create(t, dir, liveJob, 1, 2, "")
	create(t, dir, "pmi-kvs_27000_0_5_vm", 0, 1, "")
	return dir
}

// checkJobList fails unless msg lists twoJobs' jobs with ranks and live.
func checkJobList(t *testing.T, msg string) {
	t.Helper()
	for _, s := range []string{"JOB                           RANKS  LIVE",
		liveJob + "      2     2", "pmi-kvs_27000_0_5_vm              1     1"} {
		if !strings.Contains(msg, s) {
			t.Fatalf("%q does not list %q", msg, s)
		}
	}
}

// --job takes a unique prefix of a job id; the config's ddtop.job too.
func TestJobPrefix(t *testing.T) {
	dir := twoJobs(t)
	rep := runJSON(t, "--dir", dir, "--job", "pmi-kvs_26", "--window", "0")
	if len(rep.Ranks) != 2 || rep.Ranks[0].Job != liveJob || rep.Ranks[1].Job != liveJob {
		t.Fatalf("--job pmi-kvs_26: ranks %+v", rep.Ranks)
	}
	cfg := filepath.Join(t.TempDir(), "m.yaml")
	os.WriteFile(cfg, []byte("telemetry:\n  dir: "+dir+"\nddtop:\n  job: pmi-kvs_27\n"), 0o600)
	if rep := runJSON(t, "--config", cfg, "--window", "0", "--nice", "0"); len(rep.Ranks) != 1 || rep.Ranks[0].Job != "pmi-kvs_27000_0_5_vm" {
		t.Fatalf("ddtop.job pmi-kvs_27: ranks %+v", rep.Ranks)
	}
}

// A --job that matches several jobs, or none, is an error that lists the
// jobs, in --once, --json, record and serve, before anything is written.
func TestJobNoMatch(t *testing.T) {
	dir := twoJobs(t)
	rec := filepath.Join(t.TempDir(), "run.ddrec")
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--once", "--window", "0", "--job", "pmi-kvs"}, `job "pmi-kvs" matches 2 jobs in ` + dir + `: give more of the job id; jobs there:`},
		{[]string{"--json", "--window", "0", "--job", "nope"}, `no job in ` + dir + ` matches "nope" (a job id or a unique prefix of one); jobs there:`},
		{[]string{"record", "--job", "pmi", "-o", rec}, `job "pmi" matches 2 jobs`},
		{[]string{"serve", "--job", "nope", "--listen", "127.0.0.1:0"}, `no job in ` + dir + ` matches "nope"`},
	} {
		out, err := run(t, append(c.args, "--dir", dir, "--nice", "0")...)
		if err == nil || !strings.Contains(err.Error(), c.msg) || out != "" {
			t.Fatalf("ddtop %v: err %v, output %q; want an error with %q", c.args, err, out, c.msg)
		}
		checkJobList(t, err.Error())
	}
	if _, err := os.Stat(rec); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("record made its file: %v", err)
	}
}

// ddtop itself prints the error on stderr, nothing on stdout, and exits 1.
func TestJobNoMatchExit(t *testing.T) {
	dir := twoJobs(t)
	cmd := exec.Command(os.Args[0], "--json", "--dir", dir, "--job", "pmi-kvs_2", "--window", "0", "--nice", "0")
	cmd.Env = append(os.Environ(), "DDTOP_TEST_MAIN=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || out.Len() != 0 {
		t.Fatalf("exit %v, stdout %q", err, out.String())
	}
	if !strings.HasPrefix(errOut.String(), `ddtop: job "pmi-kvs_2" matches 2 jobs in `+dir) {
		t.Fatalf("stderr %q", errOut.String())
	}
	checkJobList(t, errOut.String())
}
