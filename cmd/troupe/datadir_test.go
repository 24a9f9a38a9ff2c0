package main

import "testing"

// A busy data directory's stop hint names the binary as the user started
// it: make demo's ./bin/troupe is not on PATH, so "troupe stop" would not
// paste.
func TestCmdName(t *testing.T) {
	for arg0, want := range map[string]string{
		"./bin/troupe":                    "./bin/troupe",
		"/usr/local/bin/troupe":           "/usr/local/bin/troupe",
		"troupe":                          "troupe",
		"/tmp/go-build1/b001/troupe.test": "troupe",
		"./bin/other":                     "troupe",
	} {
		if got := cmdName(arg0); got != want {
			t.Errorf("cmdName(%q) = %q, want %q", arg0, got, want)
		}
	}
}
