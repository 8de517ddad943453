package fabric

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ddstore/ddstore/fault"
)

// libfabricPath is the file the loaded libfabric.so.1 maps from.
func libfabricPath(t *testing.T) string {
	t.Helper()
	p, err := LibraryPath()
	if err != nil {
		skipOrRequire(t, "libfabric not loadable here: %v", err)
	}
	return p
}

// TestNoLibfabric runs this test binary again with libfabric hidden (a
// private mount namespace with /dev/null bound over the library file), and
// checks there that Open fails with fault.ErrNoLibrary saying what to install,
// while off-heap memory still works. The binary itself must not link
// libfabric (no DT_NEEDED entry): it is loaded with dlopen.
func TestNoLibfabric(t *testing.T) {
	if os.Getenv("DDSTORE_TEST_NOLIB") == "1" {
		noLibChild(t)
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	libs, _ := ef.ImportedLibraries()
	ef.Close()
	for _, l := range libs {
		if strings.Contains(l, "libfabric") {
			t.Fatalf("test binary links %s: libfabric must be loaded at run time", l)
		}
	}
	lib := libfabricPath(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		skipOrRequireRoot(t, "unshare not found: cannot hide libfabric in a mount namespace")
	}
	if out, err := exec.Command("unshare", "-m", "true").CombinedOutput(); err != nil {
		skipOrRequireRoot(t, "cannot create a mount namespace here (%v: %s)", err, out)
	}
	cmd := exec.Command("unshare", "-m", "sh", "-c", `mount --bind /dev/null "$1" && exec "$2" -test.run '^TestNoLibfabric$' -test.v`, "sh", lib, exe)
	cmd.Env = append(os.Environ(), "DDSTORE_TEST_NOLIB=1")
	out, err := cmd.CombinedOutput()
	t.Logf("child (libfabric %s hidden):\n%s", lib, out)
	if err != nil {
		t.Fatalf("child failed: %v", err)
	}
	if !strings.Contains(string(out), "no-libfabric checks passed") {
		t.Fatal("child did not run its checks")
	}
}

func noLibChild(t *testing.T) {
	_, err := Open(Options{Provider: "tcp;ofi_rxm", Domain: "lo"})
	if err == nil {
		t.Fatal("Open succeeded with libfabric hidden")
	}
	if !errors.Is(err, fault.ErrNoLibrary) || !fault.IsLocal(err) || !strings.Contains(err.Error(), "apt-get install libfabric1") ||
		!strings.Contains(err.Error(), "libfabric.so.1") {
		t.Fatalf("want fault.ErrNoLibrary naming the package to install, got %v", err)
	}
	if _, err := LibraryVersion(); !errors.Is(err, fault.ErrNoLibrary) {
		t.Fatalf("LibraryVersion: %v", err)
	}
	t.Logf("Open: %v", err)
	// Everything that does not need libfabric still works.
	m, err := Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	b := m.Bytes()
	for i := range b {
		b[i] = byte(i)
	}
	if b[4097] != byte(4097%256) {
		t.Fatal("off-heap memory broken")
	}
	m.Free()
	if s := Errno(111).Error(); !strings.Contains(s, "refused") {
		t.Fatalf("Errno text without libfabric: %q", s)
	}
	t.Log("no-libfabric checks passed")
}

// envStale, in a child of TestShmStaleRegionOfReusedPid, is "leave" (open
// shm, then exit without closing, as a killed rank does) or "open" (open
// shm and close).
const envStale = "DDSTORE_TEST_STALE"

// TestShmStaleRegionOfReusedPid: shm names a region after its process's
// pid, and a killed rank leaves its regions in /dev/shm. A later rank that
// is given the same pid must still open. Each child runs as pid 1 of its
// own pid namespace, so the second reuses the first one's pid for certain.
func TestShmStaleRegionOfReusedPid(t *testing.T) {
	if mode := os.Getenv(envStale); mode != "" {
		staleChild(t, mode)
		return
	}
	openOrSkip(t, Options{Provider: "shm"}).Close()
	if out, err := exec.Command("unshare", "--pid", "--fork", "true").CombinedOutput(); err != nil {
		skipOrRequireRoot(t, "cannot create a pid namespace here (%v: %s)", err, out)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Regions of pid 1 are this test's alone: the host's pid 1 never opens shm.
	regions := fmt.Sprintf("/dev/shm/1:%d:*", os.Getuid())
	removeAll := func() {
		left, _ := filepath.Glob(regions)
		for _, f := range left {
			os.Remove(f)
		}
	}
	removeAll()
	t.Cleanup(removeAll)
	child := func(mode string) (string, error) {
		cmd := exec.Command("unshare", "--pid", "--fork", exe, "-test.run", "^TestShmStaleRegionOfReusedPid$", "-test.v")
		cmd.Env = append(os.Environ(), envStale+"="+mode)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := child("leave"); err != nil {
		t.Fatalf("first child: %v\n%s", err, out)
	}
	left, _ := filepath.Glob(regions)
	if len(left) == 0 {
		t.Fatalf("the first child left no region matching %s: nothing to reuse", regions)
	}
	t.Logf("left by the first child: %v", left)
	out, err := child("open")
	if err != nil || !strings.Contains(out, "opened as pid 1") {
		t.Fatalf("a rank given a dead rank's pid cannot open shm: %v\n%s", err, out)
	}
}

func staleChild(t *testing.T, mode string) {
	if os.Getpid() != 1 {
		t.Fatalf("child runs as pid %d, want 1", os.Getpid())
	}
	f, err := Open(Options{Provider: "shm"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.NewReader()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("opened as pid 1")
	if mode == "leave" {
		os.Exit(0)
	}
	r.Close()
	f.Close()
}
