package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ddstore/ddstore/engine/doctor"
	"github.com/ddstore/ddstore/telemetry"
)

// With envMain set the test binary is the doctor command (and its read
// target), so that tests run it under prlimit and in a mount namespace.
const envMain = "DOCTOR_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envMain) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// doctorJSON runs the command under wrap (a command line that ends with
// the binary's path and its arguments) and decodes its --json report.
func doctorJSON(t *testing.T, wrap ...string) (rep struct {
	Limits   doctor.Limits       `json:"limits"`
	Findings []telemetry.Finding `json:"findings"`
}) {
	t.Helper()
	cmd := exec.Command(wrap[0], wrap[1:]...)
	cmd.Env = append(os.Environ(), envMain+"=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\n%s", wrap, err, errb.String())
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %v\n%s", wrap, err, out.String())
	}
	if !strings.Contains(errb.String(), "doctor: limits") {
		t.Errorf("no progress lines: %s", errb.String())
	}
	return rep
}

func finding(fs []telemetry.Finding, rule string) *telemetry.Finding {
	for i := range fs {
		if fs[i].Rule == rule {
			return &fs[i]
		}
	}
	return nil
}

func need(t *testing.T, tools ...string) {
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (util-linux): %v", tool, err)
		}
	}
}

// A low memlock (prlimit on the doctor process) is a finding with its
// fix; the same limit is not when the threshold is no higher (raising the
// limit above the hard one is not allowed in this container).
func TestLowMemlockIsAFinding(t *testing.T) {
	need(t, "prlimit")
	low := doctorJSON(t, "prlimit", "--memlock=65536:65536", os.Args[0], "--json", "--reads=false")
	f := finding(low.Findings, doctor.RuleMemlock)
	if low.Limits.MemlockSoft != 65536 || f == nil || !strings.Contains(f.Evidence, "64 KiB") || !strings.Contains(f.Fix, "ulimit -l unlimited") {
		t.Fatalf("memlock 64 KiB: limits %+v, finding %+v", low.Limits, f)
	}
	enough := doctorJSON(t, "prlimit", "--memlock=65536:65536", os.Args[0], "--json", "--reads=false", "--memlock-min", "65536")
	if enough.Limits.MemlockSoft != 65536 || finding(enough.Findings, doctor.RuleMemlock) != nil {
		t.Fatalf("memlock 64 KiB, 64 KiB needed: limits %+v, findings %+v", enough.Limits, enough.Findings)
	}
}

// A small /dev/shm (a 16 MiB tmpfs over it in a private mount namespace)
// is a finding naming telemetry.dir and its env; the machine's is not.
func TestSmallShmIsAFinding(t *testing.T) {
	need(t, "unshare", "mount")
	small := doctorJSON(t, "unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs -o size=16m tmpfs /dev/shm && exec "$0" "$@"`, os.Args[0], "--json", "--reads=false")
	f := finding(small.Findings, doctor.RuleShm)
	if small.Limits.ShmSize != 16<<20 || f == nil || f.Key != "telemetry.dir" || f.Env != "DDSTORE_TELEMETRY_DIR" ||
		!strings.Contains(f.Evidence, "of 16 MiB") || !strings.Contains(f.Fix, "remount") {
		t.Fatalf("16 MiB /dev/shm: limits %+v, finding %+v", small.Limits, f)
	}
	normal := doctorJSON(t, os.Args[0], "--json", "--reads=false", "--shm-min", "1024")
	if finding(normal.Findings, doctor.RuleShm) != nil {
		t.Fatalf("/dev/shm with 1 KiB needed: %+v", normal.Findings)
	}
}

// doctor --job under ddrun, 4 ranks on this host: every rank reads its
// ring neighbours (every row checked), the view is gathered and printed
// by rank 0 alone, and the ranks agree on their choices.
func TestJobUnderDdrun(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "../ddrun")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ddrun: %v\n%s", err, out)
	}
	cmd := exec.Command(dir+"/ddrun", "-n", "4", "--timeout", "150s", "--env", envMain+"=1", "--",
		os.Args[0], "--job", "--json", "--per-link", "100ms")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	var rep doctor.JobReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("one JSON report from rank 0 alone: %v\n%s", err, out.String())
	}
	if rep.World != 4 || len(rep.Ranks) != 4 || len(rep.Disagreement) != 0 || rep.MedianGBps <= 0 {
		t.Fatalf("%+v", rep)
	}
	for r, rr := range rep.Ranks {
		got := map[int]bool{}
		for _, l := range rr.Links {
			if l.Error != "" || l.GBps <= 0 || l.LatencyUs <= 0 || l.From != r {
				t.Errorf("rank %d: link %+v", r, l)
			}
			got[l.To] = true
		}
		if rr.Rank != r || !got[(r+1)%4] || !got[(r+3)%4] || rr.Choices.Provider == "" {
			t.Errorf("rank %d: %+v", r, rr)
		}
	}
	if n := strings.Count(errb.String(), "connected to ranks"); n != 4 {
		t.Errorf("%d ranks say they connected:\n%s", n, errb.String())
	}
}
