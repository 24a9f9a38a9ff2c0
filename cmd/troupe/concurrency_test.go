package main

import (
	"context"
	"strings"
	"testing"
	"time"
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

// An account of the config file without max_concurrency gets the CLI's
// default (it silently ran one request at a time).
func TestConfigAccountDefaultConcurrency(t *testing.T) {
	cfg := testConfig(t)
	cfg.Accounts = []AccountConfig{{Name: "from-file", Provider: "openai", APIKey: "sk-x", Models: []string{"m"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := startApp(ctx, cfg, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer a.shutdown(5 * time.Second)
	accts, err := a.store.ListAccounts(ctx)
	if err != nil || len(accts) != 1 || accts[0].MaxConcurrency != defaultMaxConcurrency {
		t.Fatalf("accounts %+v (%v), want one with max_concurrency %d", accts, err, defaultMaxConcurrency)
	}
}
