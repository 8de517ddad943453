package fabric

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
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
