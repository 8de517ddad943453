package main

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestServeListensOnThisMachineByDefault(t *testing.T) {
	def := serveCommand(io.Discard).Flags().Lookup("listen").DefValue
	host, _, err := net.SplitHostPort(def)
	if err != nil || !net.ParseIP(host).IsLoopback() || def != DefaultListen {
		t.Fatalf("default --listen %q is not a loopback address", def)
	}
	for _, c := range []struct {
		ip   string
		wide bool
	}{{"127.0.0.1", false}, {"::1", false}, {"0.0.0.0", true}, {"::", true}, {"10.1.2.3", true}} {
		if got := wideListen(&net.TCPAddr{IP: net.ParseIP(c.ip), Port: 1}); got != c.wide {
			t.Errorf("%s: wide %v, want %v", c.ip, got, c.wide)
		}
	}
}

// serveFirstLines runs ddtop serve with args and returns what it printed
// before serving (its first two lines, or one when no warning follows).
func serveFirstLines(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--dir", t.TempDir(), "--nice", "0"}, args...)...)
	cmd.Env = append(os.Environ(), "DDTOP_TEST_MAIN=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lines := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var got []string
	timeout := time.After(30 * time.Second)
	for len(got) < 2 {
		select {
		case l, ok := <-lines:
			if !ok {
				return strings.Join(got, "\n")
			}
			got = append(got, l)
		case <-timeout:
			t.Fatalf("ddtop serve printed %q in 30s", got)
		case <-time.After(2 * time.Second):
			if len(got) == 1 {
				return got[0]
			}
		}
	}
	return strings.Join(got, "\n")
}

func TestServeWarnsWhenListeningWider(t *testing.T) {
	if out := serveFirstLines(t, "--listen", "127.0.0.1:0"); strings.Contains(out, "WARNING") || !strings.Contains(out, "http://127.0.0.1:") {
		t.Errorf("loopback: %q", out)
	}
	if out := serveFirstLines(t, "--listen", "0.0.0.0:0"); !strings.Contains(out, "WARNING: listening beyond this machine") {
		t.Errorf("0.0.0.0: no warning in %q", out)
	}
}
