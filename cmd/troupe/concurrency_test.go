package main

import (
	"strings"
	"testing"
)

func TestConcurrencyColumn(t *testing.T) {
	for n, want := range map[int]string{-1: "1 (default)", 0: "1 (default)", 1: "1", 4: "4"} {
		if got := concurrencyColumn(n); got != want {
			t.Errorf("concurrencyColumn(%d) = %q, want %q", n, got, want)
		}
	}
}

// An account stored without max_concurrency is listed with its effective
// limit, not 0.
func TestAccountsListDefaultConcurrency(t *testing.T) {
	dir := t.TempDir()
	mustCLI(t, "accounts", "add", "--data", dir, "--name", "unset", "--provider", "openai", "--api-key", "sk-x", "--max-concurrency", "0")
	list := mustCLI(t, "accounts", "list", "--data", dir)
	if !strings.Contains(list, "1 (default)") {
		t.Errorf("accounts list shows no effective default concurrency:\n%s", list)
	}
}
