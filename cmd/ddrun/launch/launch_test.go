package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ddstore/ddstore/engine/bootstrap"
	"github.com/ddstore/ddstore/internal/testkit"
)

// With LAUNCHTEST_ROLE set the test binary is one rank started by Run.
func TestMain(m *testing.M) { testkit.Main(m, "LAUNCHTEST_ROLE", rank) }

func rank(role string) int {
	r, _ := strconv.Atoi(os.Getenv("RANK"))
	switch role {
	case "gather":
		if err := gatherCheck(); err != nil {
			fmt.Fprintf(os.Stderr, "rank %d: %v\n", r, err)
			return 1
		}
		fmt.Printf("rank %d ok\n", r)
		return 0
	case "fail":
		if r == 1 {
			fmt.Fprintln(os.Stderr, "rank 1 fails on purpose")
			return 3
		}
		time.Sleep(2 * time.Minute) // the launcher must stop it long before
		return 0
	case "hang":
		time.Sleep(2 * time.Minute) // the launcher must stop it long before
		return 0
	case "lines":
		for i := range 3 {
			fmt.Printf("line %d of rank %d\n", i, r)
		}
		fmt.Print("no newline")
		return 0
	case "sigwait":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		dir := os.Getenv("LAUNCHTEST_DIR")
		os.WriteFile(filepath.Join(dir, "ready-"+strconv.Itoa(r)), nil, 0o600)
		select {
		case <-ch:
			os.WriteFile(filepath.Join(dir, "got-"+strconv.Itoa(r)), nil, 0o600)
			return 0
		case <-time.After(20 * time.Second):
			return 9
		}
	}
	return 2
}

// gatherCheck joins the job through engine/bootstrap (tcp, from the
// variables Run set), gathers a rank-derived blob and checks every blob and
// that all ranks got the same job id.
func gatherCheck() error {
	env, err := bootstrap.DetectEnv()
	if err != nil {
		return err
	}
	if env.Launcher != "torchrun" || env.LocalRank != env.Rank || env.LocalWorld != env.World ||
		!strings.HasPrefix(env.Job, "local-") || os.Getenv("PMI_FD") != "" {
		return fmt.Errorf("environment %+v PMI_FD=%q", env, os.Getenv("PMI_FD"))
	}
	x, err := bootstrap.Connect(bootstrap.Options{Timeout: 10 * time.Second, Env: env})
	if err != nil {
		return err
	}
	defer x.Close()
	mine := blob(env.Rank, env.Job)
	all, err := x.AllGather("check", mine, 0)
	if err != nil {
		return err
	}
	for r, b := range all {
		if !bytes.Equal(b, blob(r, env.Job)) {
			return fmt.Errorf("blob of rank %d: %q", r, b)
		}
	}
	return x.Close()
}

func blob(r int, job string) []byte {
	return []byte(strings.Repeat(fmt.Sprintf("%s/%d;", job, r), r+1))
}

func selfSpec(n int, role string) Spec {
	return Spec{N: n, Prog: os.Args[0], Args: []string{"-test.run=^$"}, Env: []string{"LAUNCHTEST_ROLE=" + role}}
}

func TestRunGather(t *testing.T) {
	var out bytes.Buffer
	s := selfSpec(3, "gather")
	s.Stdout, s.Stderr = &out, &out
	s.Timeout = 20 * time.Second
	// An outer launcher's PMI_FD must not leak into the ranks.
	t.Setenv("PMI_FD", "99")
	if err := Run(context.Background(), s); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for r := range 3 {
		if !strings.Contains(out.String(), fmt.Sprintf("rank %d ok\n", r)) {
			t.Errorf("rank %d did not report ok:\n%s", r, out.String())
		}
	}
}

func TestRunRankFails(t *testing.T) {
	var out bytes.Buffer
	s := selfSpec(3, "fail")
	s.Stdout, s.Stderr = &out, &out
	s.Grace = 300 * time.Millisecond
	start := time.Now()
	err := Run(context.Background(), s)
	var re *RankError
	if !errors.As(err, &re) || !errors.Is(err, ErrRankFailed) || re.Rank != 1 || re.Code != 3 || ExitCode(err) != 3 {
		t.Fatalf("err = %v, want rank 1 exited with status 3", err)
	}
	if !strings.Contains(err.Error(), "rank 1 exited with status 3") || !strings.Contains(out.String(), "rank 1 fails on purpose") {
		t.Errorf("err %q output %q", err, out.String())
	}
	if d := time.Since(start); d > 20*time.Second { // far below the sleeping ranks' 2 minutes, far above a loaded run
		t.Errorf("the sleeping ranks were not stopped: %v", d)
	}
}

func TestRunTimeout(t *testing.T) {
	s := selfSpec(2, "hang")
	s.Timeout, s.Grace = 500*time.Millisecond, 300*time.Millisecond
	start := time.Now()
	err := Run(context.Background(), s)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 20*time.Second { // far below the sleeping ranks' 2 minutes, far above a loaded run
		t.Errorf("took %v", d)
	}
}

func TestRunPrefix(t *testing.T) {
	var out bytes.Buffer
	s := selfSpec(2, "lines")
	s.Stdout, s.Stderr, s.Prefix = &out, &out, true
	if err := Run(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		for i := range 3 {
			if want := fmt.Sprintf("[rank %d] line %d of rank %d\n", r, i, r); !strings.Contains(out.String(), want) {
				t.Errorf("missing %q in\n%s", want, out.String())
			}
		}
		if want := fmt.Sprintf("[rank %d] no newline\n", r); !strings.Contains(out.String(), want) {
			t.Errorf("missing %q", want)
		}
	}
	if lines := strings.Count(out.String(), "\n"); lines != 8 {
		t.Errorf("%d lines:\n%s", lines, out.String())
	}
}

func TestRunForwardsSignals(t *testing.T) {
	dir := t.TempDir()
	s := selfSpec(3, "sigwait")
	s.Env = append(s.Env, "LAUNCHTEST_DIR="+dir)
	sigs := make(chan os.Signal, 1)
	s.Signals = sigs
	go func() {
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			if m, _ := filepath.Glob(filepath.Join(dir, "ready-*")); len(m) == 3 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		sigs <- syscall.SIGTERM
	}()
	err := Run(context.Background(), s)
	if !errors.Is(err, ErrInterrupted) || ExitCode(err) != 143 {
		t.Fatalf("err = %v (exit code %d), want ErrInterrupted by SIGTERM (143)", err, ExitCode(err))
	}
	if want := "launch: interrupted: forwarded terminated to the ranks"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	for r := range 3 {
		if _, err := os.Stat(filepath.Join(dir, "got-"+strconv.Itoa(r))); err != nil {
			t.Errorf("rank %d did not get SIGTERM: %v", r, err)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, s := range []Spec{{N: 0, Prog: "x"}, {N: 1}, {N: 1, Prog: "x", Env: []string{"NOEQUALS"}}, {N: 1, Prog: "x", Timeout: -1}} {
		if err := s.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: err = %v, want ErrInvalid", s, err)
		}
	}
	err := Run(context.Background(), Spec{N: 1, Prog: "/nonexistent/prog"})
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 0 || !errors.Is(err, ErrRankFailed) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing program: err = %v (%T), want rank 0's RankError wrapping fs.ErrNotExist", err, err)
	}
}

func TestRunContextCanceled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	s := selfSpec(2, "hang")
	s.Grace = 300 * time.Millisecond
	start := time.Now()
	if err := Run(ctx, s); !errors.Is(err, ErrInterrupted) || ExitCode(err) != 130 {
		t.Fatalf("err = %v, want ErrInterrupted", err)
	}
	if d := time.Since(start); d > 20*time.Second { // far below the sleeping ranks' 2 minutes, far above a loaded run
		t.Errorf("took %v", d)
	}
}

// FreePort picks a bindable port below the kernel's ephemeral range, where
// no connect() or ":0" bind of another process can take it.
func TestFreePortBelowEphemeral(t *testing.T) {
	lo := ephemeralLow()
	if lo-minPickedPort < 1000 {
		t.Skipf("ephemeral range starts at %d: FreePort asks the kernel", lo)
	}
	for range 20 {
		p, err := FreePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if p < minPickedPort || p >= lo {
			t.Fatalf("port %d outside [%d, %d)", p, minPickedPort, lo)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d from FreePort: %v", p, err)
		}
		l.Close()
	}
}
