package bootstrap

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ddstore/ddstore/engine/auth"
	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/internal/testkit"
)

func TestTokenFileCreatedPrivateAndReused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "home", ".ddstore", "token")
	// Several processes' first use at once agree on one token.
	const n = 8
	got := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], errs[i] = TokenFile(path) }()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if string(got[i]) != string(got[0]) {
			t.Fatalf("creators disagree: %q vs %q", got[i], got[0])
		}
	}
	if len(got[0]) < 32 {
		t.Fatalf("token of %d bytes", len(got[0]))
	}
	fi, _ := os.Stat(path)
	di, _ := os.Stat(filepath.Dir(path))
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Fatalf("file %v dir %v, want 0600 and 0700", fi.Mode(), di.Mode())
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("leftovers beside the token: %v", ents)
	}
	again, err := TokenFile(path)
	if err != nil || string(again) != string(got[0]) {
		t.Fatalf("second read: %q %v", again, err)
	}
}

func TestTokenFileRefusals(t *testing.T) {
	dir := t.TempDir()
	priv := filepath.Join(dir, "priv")
	os.Mkdir(priv, 0o700)
	good := filepath.Join(priv, "good")
	os.WriteFile(good, []byte("0123456789abcdef0123\n"), 0o600)
	readable := filepath.Join(priv, "readable")
	os.WriteFile(readable, []byte("0123456789abcdef0123\n"), 0o640)
	short := filepath.Join(priv, "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	link := filepath.Join(priv, "link")
	os.Symlink(good, link)
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	inOpen := filepath.Join(open, "token")
	os.WriteFile(inOpen, []byte("0123456789abcdef0123\n"), 0o600)
	if s, err := TokenFile(good); err != nil || string(s) != "0123456789abcdef0123" {
		t.Fatalf("good file: %q %v", s, err)
	}
	for _, c := range []struct{ path, want string }{
		{readable, "chmod 600"},
		{short, "at least 16"},
		{link, "symbolic link"},
		{inOpen, "chmod 700"},
	} {
		_, err := TokenFile(c.path)
		if !errors.Is(err, fault.ErrEnv) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want fault.ErrEnv containing %q", filepath.Base(c.path), err, c.want)
		}
	}
}

func secretEnv(port string, extra func(r int) []string) func(int) []string {
	return func(r int) []string {
		e := []string{"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "DDSTORE_JOB=sectest-" + port}
		if extra != nil {
			e = append(e, extra(r)...)
		}
		return e
	}
}

// wantSecret: every rank holds the same secret of at least 16 bytes, from src.
func wantSecret(t *testing.T, res map[int]rankResult, src string) {
	t.Helper()
	wantAllOK(t, res)
	for r, rr := range res {
		if rr.SecretSrc != src || rr.SecretLen < auth.MinSecret || rr.SecretSum != res[0].SecretSum {
			t.Errorf("rank %d: secret from %q (%d bytes, sum %.8s); want %q, ≥ %d bytes, rank 0's sum %.8s",
				r, rr.SecretSrc, rr.SecretLen, rr.SecretSum, src, auth.MinSecret, res[0].SecretSum)
		}
	}
}

// torchrun-style: no DDSTORE_TOKEN, the token file is made on first use
// and read by every rank.
func TestTCPSecretFromTokenFile(t *testing.T) {
	tf := filepath.Join(t.TempDir(), "dot", "token")
	res := spawn(t, spawnSpec{role: "gather", method: "auto", world: 3, timeout: 10 * time.Second,
		env: secretEnv(freePort(t), func(int) []string { return []string{"DDSTORE_TOKEN_FILE=" + tf} })})
	wantSecret(t, res, SecretFile)
	if fi, err := os.Stat(tf); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi, err)
	}
}

func TestTCPSecretFromEnv(t *testing.T) {
	res := spawn(t, spawnSpec{role: "gather", method: "auto", world: 3, timeout: 10 * time.Second,
		env: secretEnv(freePort(t), func(int) []string { return []string{"DDSTORE_TOKEN=an-env-secret-0123456789"} })})
	wantSecret(t, res, SecretEnv)
}

// A rank with another secret is refused by rank 0's handshake: it learns
// that at once (fault.ErrToken), and rank 0 times out naming it.
func TestTCPWrongSecretRefused(t *testing.T) {
	res := spawn(t, spawnSpec{role: "gather", method: "tcp", world: 2, timeout: 3 * time.Second,
		env: secretEnv(freePort(t), func(r int) []string {
			return []string{"DDSTORE_TOKEN=secret-of-rank-" + map[int]string{0: "zero-000000", 1: "one-1111111"}[r]}
		})})
	wantKind(t, res, 1, "job token mismatch", []int{0}, "do not share the job secret")
	wantKind(t, res, 0, "timeout", []int{1}, "rank 1 did not connect")
	// Rank 0's error says whom it refused, and why.
	if !strings.Contains(res[0].Err, "peer does not know this job's secret") || !res[0].Token {
		t.Errorf("rank 0's timeout does not report the refusal: %s", res[0].Err)
	}
}

// No secret needs an explicit setting; a rank without one meets refusal
// from ranks with one.
func TestTCPInsecure(t *testing.T) {
	res := spawn(t, spawnSpec{role: "gather", method: "tcp", world: 2, timeout: 10 * time.Second,
		env: secretEnv(freePort(t), func(int) []string { return []string{"DDSTORE_INSECURE=1"} })})
	wantAllOK(t, res)
	for r, rr := range res {
		if rr.SecretSrc != SecretInsecure || rr.SecretLen != 0 {
			t.Errorf("rank %d: secret %q/%d, want none", r, rr.SecretSrc, rr.SecretLen)
		}
	}
	res = spawn(t, spawnSpec{role: "gather", method: "tcp", world: 2, timeout: 3 * time.Second,
		env: secretEnv(freePort(t), func(r int) []string {
			if r == 1 {
				return []string{"DDSTORE_INSECURE=1"}
			}
			return []string{"DDSTORE_TOKEN=0123456789abcdef0123"}
		})})
	wantKind(t, res, 1, "job token mismatch", []int{0}, "do not share the job secret")
}

func TestDirSecretFromRank0(t *testing.T) {
	dir := t.TempDir()
	res := spawn(t, spawnSpec{role: "gather", method: "dir", world: 3, timeout: 10 * time.Second, env: dirEnv(dir, "tok")})
	wantSecret(t, res, SecretLauncher)
}

func TestDirRefusesOpenDirectory(t *testing.T) {
	clearLauncherEnv(t)
	dir := t.TempDir()
	job := filepath.Join(dir, "inproc")
	os.Mkdir(job, 0o755)
	os.Chmod(job, 0o755)
	_, err := Connect(Options{Method: "dir", Dir: dir, Timeout: time.Second,
		Env: Env{Rank: 0, World: 2, Launcher: "test", Job: "inproc"}})
	if !errors.Is(err, fault.ErrEnv) || !strings.Contains(err.Error(), "0700") {
		t.Fatalf("got %v, want fault.ErrEnv naming 0700", err)
	}
}

func TestPMISecretFromRank0(t *testing.T) {
	res := runMPIExec(t, 4, "gather", 10*time.Second, 4)
	wantSecret(t, res, SecretLauncher)
}

func TestPMI2SecretFromRank0(t *testing.T) {
	res := runPMI2(t, newPMI2Server(3, "4242.0"), "gather")
	wantSecret(t, res, SecretLauncher)
}

// Strangers at rank 0's rendezvous: a wrong secret is refused at once
// (goal 1 s; the limit adds 3 s of slack for a loaded machine, times
// testkit.RaceScale), the job's ranks meet anyway and their collectives are
// intact. (A handshake that stalled would end at the gate's timeout with
// the connection closed, not fault.ErrToken.)
func TestTCPStrangerRefusedWithin1s(t *testing.T) {
	clearLauncherEnv(t)
	addr := "127.0.0.1:" + freePort(t)
	secret := []byte("the-job-secret-0123456789")
	limit := (1*time.Second + 3*time.Second) * testkit.RaceScale
	type try struct {
		took time.Duration
		err  error
	}
	tries := make(chan try, 3)
	go func() {
		for _, s := range [][]byte{[]byte("a-wrong-secret-0123456789"), nil, secret[:20]} {
			c, err := dialUntil(addr, 10*time.Second*testkit.RaceScale)
			if err != nil {
				tries <- try{err: err}
				continue
			}
			start := time.Now()
			err = auth.Handshake(c, s, true, time.Now().Add(2*limit))
			tries <- try{time.Since(start), err}
			c.Close()
		}
	}()
	xs := connectAll(t, Options{Method: "tcp", Addr: addr, Secret: secret, Timeout: 20 * time.Second}, 3)
	defer func() {
		for _, x := range xs {
			x.Close()
		}
	}()
	for range 3 {
		tr := <-tries
		if !errors.Is(tr.err, fault.ErrToken) || tr.took > limit {
			t.Errorf("stranger: %v after %v, want fault.ErrToken within %v", tr.err, tr.took, limit)
		}
	}
	gatherChecked(t, xs, "after", 20*time.Second, func(r int) []byte { return blobFor(r, 1) })
}
