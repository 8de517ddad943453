package telemetry_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/telemetry"
)

// From outside the package: a foreign or truncated segment file is
// fault.ErrCorrupt (and still the package's own class), a closed writer
// fault.ErrClosed.
func TestErrorsHaveFaultClasses(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		"foreign.tel": []byte("this is not a telemetry segment, but long enough to have a header of its own................................................................................................................................................................................................................................................................."),
		"short.tel":   {1, 2, 3},
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		seg, err := telemetry.Open(path)
		if err == nil {
			seg.Close()
			t.Fatalf("%s opened", name)
		}
		if !errors.Is(err, fault.ErrCorrupt) || !(errors.Is(err, telemetry.ErrForeign) || errors.Is(err, telemetry.ErrTruncated)) {
			t.Fatalf("%s: %v, want fault.ErrCorrupt and the package's class", name, err)
		}
	}
	w, err := telemetry.Create(telemetry.WriterOptions{Dir: dir, Job: "faulttest", Rank: 0, World: 1})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if _, err := w.AddVar("x", "int32", 4, 1, 1); !errors.Is(err, fault.ErrClosed) || !errors.Is(err, telemetry.ErrClosed) {
		t.Fatalf("AddVar after Close: %v, want fault.ErrClosed", err)
	}
}

// A telemetry directory that does not exist yet is made (0700), and an
// unusable one is an error that says what it could not do, once.
func TestCreateMakesTheDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not", "yet")
	w, err := telemetry.Create(telemetry.WriterOptions{Dir: dir, Job: "mkdir", Rank: 0, World: 1})
	if err != nil {
		t.Fatalf("Create in a missing directory: %v", err)
	}
	defer w.Close()
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("directory %s: %v, mode %v, want 0700", dir, err, st.Mode().Perm())
	}
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = telemetry.Create(telemetry.WriterOptions{Dir: filepath.Join(file, "sub"), Job: "mkdir", Rank: 0, World: 1})
	if err == nil || strings.Contains(err.Error(), "telemetry: telemetry") || !strings.Contains(err.Error(), "create segment directory") {
		t.Fatalf("Create under a file: %v, want one error naming the directory", err)
	}
}
