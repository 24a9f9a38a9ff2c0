package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
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
