package fabric

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ddstore/ddstore/internal/testkit"
)

// The test binary re-executes itself as a target process: it exports a
// region filled with pattern(offset) salted with its rank where the test
// gives one (saltedWord), prints where it is, and serves reads until its
// stdin closes.

const (
	envTarget = "DDSTORE_FABRIC_TEST_TARGET" // "provider|domain|size|busy[|progress[|gather key[|salt]]]"
	targetMiB = 256
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(envTarget); spec != "" {
		os.Exit(runTarget(spec))
	}
	if spec := os.Getenv(envStranger); spec != "" {
		os.Exit(runStranger(spec))
	}
	os.Exit(m.Run())
}

func patternWord(w uint64) uint64               { return PatternWord(w) }
func fillPattern(b []byte)                      { FillPattern(b) }
func checkPattern(dst []byte, off uint64) error { return CheckPattern(dst, off) }

func runTarget(spec string) int {
	parts := strings.Split(spec, "|")
	if len(parts) < 4 || len(parts) > 7 {
		fmt.Fprintf(os.Stderr, "bad target spec %q\n", spec)
		return 2
	}
	size, _ := strconv.Atoi(parts[2])
	o := Options{Provider: parts[0], Domain: parts[1]}
	if len(parts) >= 5 {
		o.Progress = parts[4]
	}
	if len(parts) >= 6 {
		o.GatherKey, _ = strconv.ParseUint(parts[5], 10, 64)
	}
	var salt uint64
	if len(parts) == 7 {
		salt, _ = strconv.ParseUint(parts[6], 10, 64)
	}
	if err := serveTarget(o, size, salt, parts[3] == "busy", os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "target:", err)
		return 1
	}
	return 0
}

// target is a target process (StartTarget) as the tests use it.
type target struct {
	*TargetProcess
	cmd  *exec.Cmd
	addr []byte
	key  uint64
	base uint64
	size int
	salt uint64 // its region holds saltedWord(w, salt)
}

func (tg *target) stop() { tg.Stop() }
func (tg *target) kill() { tg.Kill() }

// check reports the first byte of dst, read from remote address addr of
// tg, that differs from tg's own (salted) region.
func (tg *target) check(dst []byte, addr uint64) error {
	return checkSalted(dst, addr-tg.base, tg.salt)
}

// startTarget starts a target whose region holds the plain pattern.
func startTarget(tb testing.TB, o Options, size int, busy bool) *target {
	tb.Helper()
	return startSaltedTarget(tb, o, size, busy, 0)
}

// startSaltedTarget starts a target whose region is salted with salt (the
// tests give it the rank they add it as).
func startSaltedTarget(tb testing.TB, o Options, size int, busy bool, salt uint64) *target {
	tb.Helper()
	mode := "idle"
	if busy {
		mode = "busy"
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d|%s|%s|%d|%d", envTarget, o.Provider, o.Domain, size, mode, o.Progress, o.GatherKey, salt))
	cmd.Stderr = os.Stderr
	wait := 20 * time.Second * testkit.RaceScale
	ctx, cancel := context.WithTimeoutCause(context.Background(), wait, fmt.Errorf("no READY line within %v", wait))
	defer cancel()
	tp, err := StartTarget(ctx, cmd)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(tp.Stop)
	return &target{TargetProcess: tp, cmd: cmd, addr: tp.Addr, key: tp.Key, base: tp.Base, size: size, salt: salt}
}

// readerOf is a new Reader of f (closed at the end of the test; Close may
// come earlier) with tg as its peer rank 1.
func readerOf(tb testing.TB, f *Fabric, tg *target) (*Reader, Peer) {
	tb.Helper()
	r, err := f.NewReader()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	p, err := r.AddPeer(1, tg.addr)
	if err != nil {
		tb.Fatal(err)
	}
	return r, p
}

type provCase struct {
	name string
	opts Options
}

var provCases = []provCase{
	{"tcp", Options{Provider: "tcp;ofi_rxm", Domain: "lo"}},
	{"shm", Options{Provider: "shm"}},
}

// requireFabricEnv set to 1 (the Makefile's test target sets it) turns the
// skips for a missing provider (tcp;ofi_rxm on lo, shm) into failures, so CI
// cannot pass without exercising the fabric.
const requireFabricEnv = "DDSTORE_REQUIRE_FABRIC"

// skipOrRequire skips the test, or fails it when requireFabricEnv=1.
func skipOrRequire(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if os.Getenv(requireFabricEnv) == "1" {
		tb.Fatalf(requireFabricEnv+"=1: "+format, args...)
	}
	tb.Skipf(format, args...)
}

// requireRootEnv set to 1 (make test) says the tests run as root where
// namespaces and mounts work: a test that needs them fails instead of
// skipping.
const requireRootEnv = "DDSTORE_REQUIRE_ROOT"

// skipOrRequireRoot skips the test, or fails it when requireRootEnv=1.
func skipOrRequireRoot(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if os.Getenv(requireRootEnv) == "1" {
		tb.Fatalf(requireRootEnv+"=1: "+format, args...)
	}
	tb.Skipf(format, args...)
}

func openOrSkip(tb testing.TB, o Options) *Fabric {
	tb.Helper()
	f, err := Open(o)
	if err != nil {
		if isNoProvider(err) {
			skipOrRequire(tb, "provider not here: %v", err)
		}
		tb.Fatalf("Open(%+v): %v", o, err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}
