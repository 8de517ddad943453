package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ddstore/ddstore/engine/bootstrap"
	"github.com/ddstore/ddstore/internal/testkit"
)

// With DDRUNTEST_ROLE set the test binary is one rank started by ddrun.
func TestMain(m *testing.M) { testkit.Main(m, "DDRUNTEST_ROLE", rank) }

func rankBlob(r int) []byte {
	b := make([]byte, 10+r*1000)
	for i := range b {
		b[i] = byte(r*13 + i)
	}
	return b
}

func rank(role string) int {
	r, _ := strconv.Atoi(os.Getenv("RANK"))
	if role == "exit4" {
		if r == 2 {
			return 4
		}
		time.Sleep(2 * time.Minute) // ddrun must stop it long before
		return 0
	}
	x, err := bootstrap.Connect(bootstrap.Options{Timeout: 10 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer x.Close()
	all, err := x.AllGather("ddrun-test", rankBlob(r), 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for p, b := range all {
		if !bytes.Equal(b, rankBlob(p)) {
			fmt.Fprintf(os.Stderr, "blob of rank %d is wrong (%d bytes)\n", p, len(b))
			return 1
		}
	}
	fmt.Printf("verified %d blobs\n", len(all))
	return 0
}

func TestDdrunThreeRanksAllGather(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"-n", "3", "--prefix", "--timeout", "30s", "--env", "DDRUNTEST_ROLE=gather", "--", os.Args[0], "-test.run=^$"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for r := range 3 {
		if want := fmt.Sprintf("[rank %d] verified 3 blobs\n", r); !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in\n%s", want, out.String())
		}
	}
}

func TestDdrunFailingRank(t *testing.T) {
	var out, errb bytes.Buffer
	start := time.Now()
	code := run([]string{"-n", "3", "--grace", "200ms", "--env", "DDRUNTEST_ROLE=exit4", os.Args[0], "-test.run=^$"}, &out, &errb)
	if code != 4 || !strings.Contains(errb.String(), "rank 2 exited with status 4") {
		t.Fatalf("exit %d, stderr %q; want 4 naming rank 2", code, errb.String())
	}
	if d := time.Since(start); d > 20*time.Second { // far below the sleeping ranks' 2 minutes
		t.Errorf("took %v", d)
	}
}

func TestDdrunUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-n", "2"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "ddrun:") {
		t.Errorf("no program: exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"-n", "0", "true"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "N = 0") {
		t.Errorf("-n 0: exit %d, stderr %q", code, errb.String())
	}
}
