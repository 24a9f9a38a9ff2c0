package report

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoTemplates keeps text/template and html/template out of the bench
// packages that the troupe binary links (troupe bench): executing a
// template makes the linker keep every exported method of every type,
// which made the production binary 40 % larger (docs/architecture.md).
func TestNoTemplates(t *testing.T) {
	for _, dir := range []string{"../harness", "../hist", "../load", "../mock", "../proc", ".", "../scenario", "../scenarios"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("%s: no Go files", dir)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, im := range af.Imports {
				if p, _ := strconv.Unquote(im.Path.Value); p == "text/template" || p == "html/template" {
					t.Errorf("%s imports %s", f, p)
				}
			}
		}
	}
}
