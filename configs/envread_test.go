package configs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// ourVar is the name of one of ddstore's environment variables.
var ourVar = regexp.MustCompile(`^(DDSTORE_[A-Z0-9_]+|FABRIC_IFACE)$`)

// envReads lists, in the Go files under root (tests and this package
// aside), every call that reads one of our variables: os.Getenv,
// os.LookupEnv or syscall.Getenv of anything but a plain string that is
// not ours (a name from configs, or a constant or variable of the same
// package whose value is ours), or any call whose argument is the bare
// name of one of ours (a lookup function of one's own, such as
// look("DDSTORE_JOB")).
func envReads(t *testing.T, root string) []string {
	t.Helper()
	type file struct {
		dir  string
		fset *token.FileSet
		ast  *ast.File
	}
	var files []file
	ourNames := map[string]map[string]string{} // directory → identifier → one of our variables
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == ".git" || n == "testdata" || (path != root && strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		if f.Name.Name == "configs" {
			return nil
		}
		dir := filepath.Dir(path)
		files = append(files, file{dir, fset, f})
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, v := range spec.Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING && i < len(spec.Names) {
					if s, _ := strconv.Unquote(lit.Value); ourVar.MatchString(s) {
						if ourNames[dir] == nil {
							ourNames[dir] = map[string]string{}
						}
						ourNames[dir][spec.Names[i].Name] = s
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, f := range files {
		ast.Inspect(f.ast, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			getenv := false
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				if pkg, ok := sel.X.(*ast.Ident); ok {
					switch pkg.Name + "." + sel.Sel.Name {
					case "os.Getenv", "os.LookupEnv", "syscall.Getenv":
						getenv = true
					}
				}
			}
			for _, a := range call.Args {
				at := f.fset.Position(a.Pos()).String() + ": "
				lit, isLit := a.(*ast.BasicLit)
				var s string
				if isLit && lit.Kind == token.STRING {
					s, _ = strconv.Unquote(lit.Value)
				}
				switch {
				case ourVar.MatchString(s):
					found = append(found, at+s)
				case getenv && !isLit: // a name computed elsewhere: maybe ours
					switch a := a.(type) {
					case *ast.SelectorExpr:
						if pkg, ok := a.X.(*ast.Ident); ok && pkg.Name == "configs" {
							found = append(found, at+"configs."+a.Sel.Name)
						}
					case *ast.Ident:
						if v, ok := ourNames[f.dir][a.Name]; ok {
							found = append(found, at+a.Name+"="+v)
						}
					}
				}
			}
			return true
		})
	}
	return found
}

// TestOnlyConfigsReadsTheEnvironment: configs alone knows which DDSTORE_*
// variables there are and reads them; every other package asks configs
// (Load, ReadOverrides, ReadLaunch, LookupJob).
func TestOnlyConfigsReadsTheEnvironment(t *testing.T) {
	for _, r := range envReads(t, "..") {
		t.Errorf("%s: read it through package configs", r)
	}
}

// TestEnvReadsFindsReads: the scan above finds each kind of read it is
// meant to find, and leaves alone what is not a read of ours.
func TestEnvReadsFindsReads(t *testing.T) {
	dir := t.TempDir()
	src := `package x

import (
	"os"
	"syscall"

	"github.com/ddstore/ddstore/configs"
)

func f(look func(string) (string, bool)) {
	_ = os.Getenv("DDSTORE_FABRIC")
	_, _ = os.LookupEnv("FABRIC_IFACE")
	_, _ = syscall.Getenv("DDSTORE_JOB_TOKEN")
	_, _ = look("DDSTORE_JOB")
	_ = os.Getenv(configs.EnvRole)
	_ = os.Getenv(envRanks)
	_ = os.Getenv(home)
	_ = os.Getenv("HOME")
	_ = os.Getenv("MASTER_ADDR")
	println("set DDSTORE_JOB_TOKEN to the same value on every rank")
	_ = []string{"DDSTORE_JOB=" + "x"}
}
`
	other := `package x

const (
	envRanks = "DDSTORE_RANKS"
	home     = "HOME"
)
`
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "y.go"), []byte(other), 0o600); err != nil {
		t.Fatal(err)
	}
	got := envReads(t, dir)
	want := []string{"DDSTORE_FABRIC", "FABRIC_IFACE", "DDSTORE_JOB_TOKEN", "DDSTORE_JOB", "configs.EnvRole", "envRanks=DDSTORE_RANKS"}
	if len(got) != len(want) {
		t.Fatalf("found %d reads, want %d: %q", len(got), len(want), got)
	}
	for i, w := range want {
		if !strings.HasSuffix(got[i], ": "+w) {
			t.Errorf("read %d: %s, want %s", i, got[i], w)
		}
	}
}

// TestReadOverridesAndLaunch: the typed environment, and errors that name
// the variable.
func TestReadOverridesAndLaunch(t *testing.T) {
	t.Setenv("DDSTORE_TELEMETRY", "off")
	t.Setenv("DDSTORE_PROFILE", "")
	t.Setenv("DDSTORE_FABRIC", "shm")
	t.Setenv("FABRIC_IFACE", " eth0 ")
	t.Setenv("DDSTORE_TELEMETRY_DIR", "/tmp/t")
	o, err := ReadOverrides()
	if err != nil || o.Telemetry == nil || *o.Telemetry || o.Profile != nil || o.Fabric != "shm" || o.Iface != "eth0" || o.TelemetryDir != "/tmp/t" {
		t.Fatalf("ReadOverrides = %+v, %v", o, err)
	}
	t.Setenv("DDSTORE_PROFILE", "maybe")
	if _, err := ReadOverrides(); err == nil || !strings.Contains(err.Error(), `DDSTORE_PROFILE="maybe"`) {
		t.Fatalf("a bad boolean: %v, want an error naming DDSTORE_PROFILE", err)
	}
	t.Setenv(EnvJob, "j1")
	t.Setenv(EnvJobToken, "tok")
	t.Setenv("DDSTORE_BOOTSTRAP_ADDR", "h:1")
	t.Setenv(EnvStorageRanks, "4")
	t.Setenv(EnvStorageWidth, "0")
	l, err := ReadLaunch()
	if err != nil || l.Job != "j1" || l.JobToken != "tok" || l.BootstrapAddr != "h:1" ||
		l.Storage.Ranks != 4 || !l.Storage.RanksSet || !l.Storage.WidthSet || l.Storage.TrainersSet {
		t.Fatalf("ReadLaunch = %+v, %v", l, err)
	}
	t.Setenv(EnvStorageTrains, "-2")
	if _, err := ReadLaunch(); err == nil || !strings.Contains(err.Error(), EnvStorageTrains) {
		t.Fatalf("a negative count: %v, want an error naming %s", err, EnvStorageTrains)
	}
}
