package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/troupe-gw/troupe/bench/report"
	"github.com/troupe-gw/troupe/bench/scenario"
)

// bench compare reads report.json files (or their directories), prints the
// table with a column per run and writes the page with --html.
func TestBenchCompare(t *testing.T) {
	clearTroupeEnv(t)
	dir := t.TempDir()
	for _, name := range []string{"before", "after"} {
		r := &report.Report{Scenario: &scenario.Scenario{Name: "steady"}, StartedAt: name,
			Memory: &report.Memory{RSSAfterLoad: 50 << 20}}
		if err := r.Write(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	page := filepath.Join(dir, "compare.html")
	out := mustCLI(t, "bench", "compare", filepath.Join(dir, "before"), filepath.Join(dir, "after", "report.json"), "--html", page)
	for _, want := range []string{"before", "after", "vs before", "gateway RSS after load, MiB", "50.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench compare output lacks %q:\n%s", want, out)
		}
	}
	if b, err := os.ReadFile(page); err != nil || !strings.Contains(string(b), "gateway RSS after load") {
		t.Errorf("--html page: %v\n%s", err, b)
	}
	if _, _, err := runCLI(t, "bench", "compare", filepath.Join(dir, "before")); err == nil {
		t.Errorf("bench compare with one report succeeded")
	}
	if _, _, err := runCLI(t, "bench", "compare", filepath.Join(dir, "before"), dir); err == nil {
		t.Errorf("bench compare of a directory without report.json succeeded")
	}
}

func TestRunNames(t *testing.T) {
	got := runNames([]string{"out/steady-1/report.json", "out/steady-2/", "x/steady-1"})
	want := []string{"1:steady-1", "steady-2", "3:steady-1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("runNames: %q, want %q", got, want)
	}
}
