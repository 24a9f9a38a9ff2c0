package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/journal"
)

// A second demo start in the same data directory revokes the first run's
// API key (only the current run's key stays active) and keeps keys that are
// not the demo's.
func TestDemoRevokesPreviousKeys(t *testing.T) {
	cfg := testConfig(t)
	accounts := func(addr string) ([]mock.Account, []storage.Account) { return demoAccounts(2, addr) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := startDemoWith(ctx, cfg, &syncBuffer{}, accounts)
	if err != nil {
		t.Fatalf("first demo: %v", err)
	}
	if _, err := first.app.store.CreateAPIKey(ctx, storage.APIKey{Name: "mine", Hash: storage.HashKey("sk-troupe-mine"), Prefix: "sk-troupe-mi"}); err != nil {
		t.Fatalf("create key: %v", err)
	}
	oldSecret := first.apiKey
	if err := first.close(); err != nil {
		t.Fatalf("close first demo: %v", err)
	}

	var keys []storage.APIKey
	second := startTestDemo(t, cfg, accounts)
	keys, err = second.app.store.ListAPIKeys(ctx)
	if err != nil {
		t.Fatalf("list keys: %v", err)
	}
	var demoKeys, mine int
	for _, k := range keys {
		switch {
		case k.Name == "mine":
			mine++
		case strings.HasPrefix(k.Name, "demo-"):
			demoKeys++
			if k.Hash != storage.HashKey(second.apiKey) {
				t.Errorf("demo key %s is not the current run's", k.Name)
			}
			if k.Hash == storage.HashKey(oldSecret) {
				t.Errorf("the previous run's key %s is still stored", k.Name)
			}
		}
	}
	if demoKeys != 1 || mine != 1 {
		t.Errorf("after a second start: %d demo keys (want 1), %d other keys (want 1): %+v", demoKeys, mine, keys)
	}
}

// A second demo on the data directory of a running one fails before it
// touches anything: the running demo keeps its accounts and its key (a
// newcomer's second `make demo` used to rewrite both, then fail on the usage
// journal's lock). Once the first has stopped, the directory is free again.
func TestDemoRefusesBusyDataDir(t *testing.T) {
	cfg := testConfig(t)
	first := startTestDemo(t, cfg, tuned(span(1, 2, 1), nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	accounts := func(addr string) ([]mock.Account, []storage.Account) { return demoAccounts(2, addr) }
	if d, err := startDemoWith(ctx, cfg, &syncBuffer{}, accounts); err == nil {
		d.close()
		t.Fatal("a second demo started on a busy data directory")
	} else if msg := err.Error(); !strings.Contains(msg, "another troupe demo is already running on the data directory "+cfg.DataDir) ||
		!strings.Contains(msg, "troupe stop --data "+cfg.DataDir) || strings.Contains(msg, "demo.lock") || strings.Contains(msg, "temporarily unavailable") {
		t.Fatalf("second demo: %v, want it to say another demo runs there and how to stop it, without the lock's internals", err)
	}
	resp, body := first.post(t, "/v1/chat/completions", `{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("the first demo after the second's attempt: %d %s", resp.StatusCode, body)
	}

	// A gateway (not a demo) holding the directory's usage journal.
	if err := first.close(); err != nil {
		t.Fatal(err)
	}
	unlock, err := journal.LockFile(filepath.Join(cfg.DataDir, "usage.journal"))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := startDemoWith(ctx, cfg, &syncBuffer{}, accounts); err == nil {
		d.close()
		t.Fatal("a demo started on a data directory whose journal is in use")
	} else if msg := err.Error(); !strings.Contains(msg, "a troupe serve is already running on the data directory") || strings.Contains(msg, "usage.journal") {
		t.Fatalf("demo beside a gateway: %v", err)
	}
	unlock()
	d, err := startDemoWith(ctx, cfg, &syncBuffer{}, accounts)
	if err != nil {
		t.Fatalf("a demo on the freed directory: %v", err)
	}
	if err := d.close(); err != nil {
		t.Fatal(err)
	}
}
