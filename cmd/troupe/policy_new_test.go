package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyNew: policy new writes a copy of the chosen built-in that
// compiles and passes policy check, keeps an existing file unless --force,
// and refuses names --policy could not take and unknown built-ins.
func TestPolicyNew(t *testing.T) {
	clearTroupeEnv(t)
	t.Chdir(t.TempDir())
	out := mustCLI(t, "policy", "new", "my")
	if !strings.Contains(out, "wrote my.lua") {
		t.Errorf("policy new printed %q", out)
	}
	b, err := os.ReadFile("my.lua")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "-- my: ") || !strings.Contains(string(b), "function score(") {
		t.Errorf("my.lua is not a headed copy of smart:\n%.300s", b)
	}
	if out := mustCLI(t, "policy", "check", "my.lua"); !strings.HasPrefix(out, "policy my: ok") {
		t.Errorf("policy check my.lua: %q", out)
	}
	if _, _, err := runCLI(t, "policy", "new", "my"); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("a second policy new my: err %v, want a refusal naming --force", err)
	}
	if b2, _ := os.ReadFile("my.lua"); string(b2) != string(b) {
		t.Errorf("the refused policy new changed my.lua")
	}
	mustCLI(t, "policy", "new", "my.lua", "--from", "round_robin", "--force")
	if b, _ := os.ReadFile("my.lua"); !strings.Contains(string(b), `copy of the built-in "round_robin"`) {
		t.Errorf("--force --from round_robin wrote:\n%.300s", b)
	}
	mustCLI(t, "policy", "new", filepath.Join("policies", "eu.lua"), "--from", "least_inflight")
	if _, err := os.Stat(filepath.Join("policies", "eu.lua")); err != nil {
		t.Errorf("policy new into a new directory: %v", err)
	}
	for _, args := range [][]string{{"new", "a b"}, {"new", "x.y"}, {"new", "ok", "--from", "nope"}} {
		if _, _, err := runCLI(t, append([]string{"policy"}, args...)...); err == nil {
			t.Errorf("policy %v succeeded", args)
		}
	}
}

// TestREADMEPolicyLines runs the README's block of policy commands as a
// newcomer pastes them, in a fresh directory (the demo's data directory is
// a new, empty storage here, made by troupe migrate as by a demo that ran:
// replay refuses a data directory that does not exist), so that the
// README's lines keep working.
func TestREADMEPolicyLines(t *testing.T) {
	clearTroupeEnv(t)
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for block := range strings.SplitSeq(string(readme), "```sh\n") {
		block, _, _ = strings.Cut(block, "```")
		if strings.Contains(block, "./bin/troupe policy new") {
			for l := range strings.SplitSeq(block, "\n") {
				if strings.HasPrefix(l, "./bin/troupe policy ") {
					lines = append(lines, l)
				}
			}
		}
	}
	if len(lines) < 4 {
		t.Fatalf("README: found %d policy command lines in the block with policy new, want new, check, simulate, replay: %q", len(lines), lines)
	}
	t.Chdir(t.TempDir())
	mustCLI(t, "migrate", "--data", "./data/demo")
	for _, l := range lines {
		cmdline, _, _ := strings.Cut(l, "#")
		args := strings.Fields(strings.TrimPrefix(cmdline, "./bin/troupe "))
		if _, errOut, err := runCLI(t, args...); err != nil {
			t.Errorf("README line %q: %v\n%s", l, err, errOut)
		}
	}
}
