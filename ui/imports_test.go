package ui

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// ui imports only telemetry/... and ui/... of ours, cmd/ddtop those and
// configs (which imports nothing of ours), so ddtop builds without
// libfabric (never engine, fabric or gpu). Their tests may also use
// internal/segtest, which imports nothing of ours.
func TestImportDirection(t *testing.T) {
	const mod = "github.com/ddstore/ddstore/"
	for _, root := range []string{".", "../cmd/ddtop"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				ok := p == mod+"telemetry" || strings.HasPrefix(p, mod+"telemetry/") || strings.HasPrefix(p, mod+"ui") || root != "." && p == mod+"configs" ||
					strings.HasSuffix(path, "_test.go") && p == mod+"internal/segtest"
				if strings.HasPrefix(p, mod) && !ok {
					t.Errorf("%s imports %s", path, p)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
