package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage/cachetest"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

// TestAccountFeedAcrossInstances: two gateways on one PostgreSQL and Redis;
// the second reads the account change feed only when a change is announced
// (its poll is an hour away). An account created, changed and deleted
// through the first one's admin API appears, changes and disappears in the
// second one's pool: the broadcast brought each, not the poll.
func TestAccountFeedAcrossInstances(t *testing.T) {
	pg := storagetest.PostgresDB(t)
	rurl := cachetest.RedisURL(t)
	prefix := cachetest.RedisPrefix(t, rurl)
	numbers := span(2, 8, 2)
	a := startTestDemo(t, clusterConfig(t, pg, rurl, prefix), tuned(numbers, nil))
	b := startInstance(t, clusterConfig(t, pg, rurl, prefix), len(numbers))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go b.syncAccounts(ctx, time.Hour)
	key := adminKey(t, a)
	view := func(name string) (actors.View, bool) {
		for _, v := range b.sys.Views() {
			if v.Name == name {
				return v, true
			}
		}
		return actors.View{}, false
	}

	code, body := a.admin(t, "POST", "/api/admin/accounts", key,
		`{"name":"feed-new","provider":"openai","base_url":"http://127.0.0.1:1/v1","api_key":"sk-feed","models":["gpt-4.1-mini"],"max_concurrency":2}`)
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	eventually(t, 10*time.Second, "the new account in the second instance's pool", func() (bool, string) {
		v, ok := view("feed-new")
		return ok && v.MaxInFlight == 2, fmt.Sprintf("present %v, max in flight %d", ok, v.MaxInFlight)
	})

	code, body = a.admin(t, "PATCH", "/api/admin/accounts/feed-new", key, `{"name":"feed-new","max_concurrency":5}`)
	if code != 200 {
		t.Fatalf("edit: %d %v", code, body)
	}
	eventually(t, 10*time.Second, "the change in the second instance's pool", func() (bool, string) {
		v, _ := view("feed-new")
		return v.MaxInFlight == 5, fmt.Sprintf("max in flight %d", v.MaxInFlight)
	})

	code, body = a.admin(t, "DELETE", "/api/admin/accounts/feed-new", key, "")
	if code != 200 {
		t.Fatalf("delete: %d %v", code, body)
	}
	eventually(t, 10*time.Second, "the deletion in the second instance's pool", func() (bool, string) {
		_, ok := view("feed-new")
		return !ok, fmt.Sprintf("%d views", len(b.sys.Views()))
	})
	if n := len(b.sys.Views()); n != len(numbers) {
		t.Fatalf("second instance runs %d accounts, want %d", n, len(numbers))
	}
}

// TestAccountFeedResyncAfterPrune: a second instance that has not read the
// account change feed while an account was deleted and its tombstone then
// pruned (away longer than retention.account_tombstones_days) reads every
// account again at its next read and drops the deleted one from its pool,
// keeping the others and taking an account created meanwhile.
func TestAccountFeedResyncAfterPrune(t *testing.T) {
	cfg := testConfig(t) // one PostgreSQL; each instance its own in-memory cache
	cfg.Storage.Driver, cfg.Storage.DSN = "postgres", storagetest.PostgresDB(t)
	cfg.Storage.MasterKey = strings.Repeat("ab", 32)
	numbers := span(2, 6, 2)
	a := startTestDemo(t, cfg, tuned(numbers, nil))
	bcfg := *cfg
	bcfg.DataDir = t.TempDir()
	b := startInstance(t, &bcfg, len(numbers))
	ctx := t.Context()
	key := adminKey(t, a)
	names := func() map[string]bool {
		out := map[string]bool{}
		for _, v := range b.sys.Views() {
			out[v.Name] = true
		}
		return out
	}
	create := func(name string) {
		t.Helper()
		code, body := a.admin(t, "POST", "/api/admin/accounts", key,
			`{"name":"`+name+`","provider":"openai","base_url":"http://127.0.0.1:1/v1","api_key":"sk-feed","models":["gpt-4.1-mini"]}`)
		if code != 201 {
			t.Fatalf("create %s: %d %v", name, code, body)
		}
	}

	create("feed-gone")
	if err := b.applyAccountChanges(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "feed-gone in the second instance's pool", func() (bool, string) {
		return names()["feed-gone"], fmt.Sprint(names())
	})
	// b is away: feed-gone is deleted, feed-new created, and the tombstone
	// outlives its retention and is pruned.
	if code, body := a.admin(t, "DELETE", "/api/admin/accounts/feed-gone", key, ""); code != 200 {
		t.Fatalf("delete: %d %v", code, body)
	}
	create("feed-new")
	if n, err := a.app.store.PruneAccountTombstones(ctx, time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("prune = %d, %v; want 1", n, err)
	}
	if err := b.applyAccountChanges(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the second instance's pool after a full resync", func() (bool, string) {
		got := names()
		return !got["feed-gone"] && got["feed-new"] && len(got) == len(numbers)+1, fmt.Sprint(got)
	})
}
