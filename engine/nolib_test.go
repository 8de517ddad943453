package engine

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/fault"
)

// TestSingleRankWithoutLibfabric runs TestSingleRank (the whole API on the
// mapped path) in this test binary again with libfabric hidden: a private
// mount namespace with /dev/null bound over the library file. A program
// that embeds the engine runs single-node on a machine without libfabric.
func TestSingleRankWithoutLibfabric(t *testing.T) {
	if os.Getenv("DDSTORE_TEST_NOLIB") == "1" {
		if _, err := fabric.LibraryVersion(); !errors.Is(err, fault.ErrNoLibrary) {
			t.Fatalf("libfabric is not hidden: %v", err)
		}
		TestSingleRank(t)
		t.Log("single rank without libfabric: ok")
		return
	}
	lib, err := fabric.LibraryPath()
	if err != nil {
		skipOrRequire(t, "DDSTORE_REQUIRE_FABRIC", "libfabric not loadable here: %v", err)
	}
	if out, err := exec.Command("unshare", "-m", "true").CombinedOutput(); err != nil {
		skipOrRequire(t, "DDSTORE_REQUIRE_ROOT", "cannot create a mount namespace here (%v: %s)", err, out)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "-m", "sh", "-c", `mount --bind /dev/null "$1" && exec "$2" -test.run '^TestSingleRankWithoutLibfabric$' -test.v`, "sh", lib, exe)
	cmd.Env = append(os.Environ(), "DDSTORE_TEST_NOLIB=1")
	out, err := cmd.CombinedOutput()
	t.Logf("child (libfabric %s hidden):\n%s", lib, out)
	if err != nil || !strings.Contains(string(out), "single rank without libfabric: ok") {
		t.Fatalf("child failed: %v", err)
	}
}
