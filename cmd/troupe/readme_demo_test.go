package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadmeShowsTheDemoCurls: the README's "Try it" block shows exactly
// the curl commands troupe demo prints (demoCurls), in its order; a
// command split over lines with a trailing backslash counts as one. The
// README showed three while the demo printed five.
func TestReadmeShowsTheDemoCurls(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\nTry it ")
	if !ok {
		t.Fatal(`README: no "Try it" paragraph`)
	}
	_, block, ok := strings.Cut(after, "```sh\n")
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatal(`README: no sh block after "Try it"`)
	}
	block = regexp.MustCompile(`\\\n\s*`).ReplaceAllString(block, "")
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	var want []string
	for _, c := range demoCurls() {
		want = append(want, strings.Join(strings.Fields(c), " "))
	}
	if !slices.Equal(got, want) {
		t.Errorf("README's Try it block:\n%s\nthe demo prints:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
