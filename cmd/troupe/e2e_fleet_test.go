package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/fleet"
	"github.com/troupe-gw/troupe/storage/cachetest"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

// TestFleetMembership: two gateways on one PostgreSQL and Redis announce
// themselves and each sees both (troupe_fleet_members 2); when one shuts
// down it leaves the set and the other sees it gone at its next heartbeat.
// The embedded default (the in-memory cache) is one member, itself.
func TestFleetMembership(t *testing.T) {
	pg := storagetest.PostgresDB(t)
	rurl := cachetest.RedisURL(t)
	prefix := cachetest.RedisPrefix(t, rurl)
	numbers := span(2, 10, 4)
	cfgA := clusterConfig(t, pg, rurl, prefix)
	cfgA.Fleet.Heartbeat = 100 * time.Millisecond // see the join quickly
	a := startTestDemo(t, cfgA, tuned(numbers, nil))
	cfgB := clusterConfig(t, pg, rurl, prefix)
	b := startInstance(t, cfgB, len(numbers))

	ids := func(ap *app) []string {
		var out []string
		for _, m := range ap.fleet.Members() {
			out = append(out, m.ID)
		}
		return out
	}
	both := []string{a.app.fleet.Self().ID, b.fleet.Self().ID}
	slices.Sort(both)
	waitFleet(t, a.app, both, ids)
	if got := ids(b); !slices.Equal(got, both) {
		t.Fatalf("the second instance read %v at its start, want %v", got, both)
	}
	if g := gaugeValue(t, a, "troupe_fleet_members"); g != 2 {
		t.Fatalf("troupe_fleet_members %v, want 2", g)
	}
	if g := gaugeValue(t, a, "troupe_fleet_heartbeat_failing"); g != 0 {
		t.Fatalf("troupe_fleet_heartbeat_failing %v, want 0", g)
	}
	if addr := b.fleet.Self().Addr; addr != b.addr() {
		t.Fatalf("announced address %q, want the listen address %q", addr, b.addr())
	}

	if err := b.fleet.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFleet(t, a.app, []string{a.app.fleet.Self().ID}, ids)

	// The embedded default: this instance alone, nothing shared.
	solo := startTestDemo(t, nil, tuned(numbers, nil))
	if solo.app.fleet.Shared() || len(solo.app.fleet.Members()) != 1 {
		t.Fatalf("in-memory cache: shared %v, members %v", solo.app.fleet.Shared(), solo.app.fleet.Members())
	}
}

// waitFleet waits on a's fleet change signal until its live set is want.
func waitFleet(t *testing.T, a *app, want []string, ids func(*app) []string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		ch := a.fleet.Changed()
		if got := ids(a); slices.Equal(got, want) {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("fleet members %v, want %v", ids(a), want)
		}
	}
}

// TestFleetOwnership: with fleet.ownership two gateways on one PostgreSQL
// and Redis split the accounts: each account's actor runs on exactly one
// of them (its views), together they run all, and when one shuts down the
// other runs every account again.
func TestFleetOwnership(t *testing.T) {
	pg := storagetest.PostgresDB(t)
	rurl := cachetest.RedisURL(t)
	prefix := cachetest.RedisPrefix(t, rurl)
	numbers := span(2, 40, 2)
	cfg := func() *Config {
		c := clusterConfig(t, pg, rurl, prefix)
		c.Fleet.Ownership = true
		c.Fleet.TTL, c.Fleet.Heartbeat = 2*time.Second, 100*time.Millisecond
		return c
	}
	a := startTestDemo(t, cfg(), tuned(numbers, nil)) // alone: it owns every account
	b, stopB := startStoppable(t, cfg())
	views := func(ap *app) map[string]bool {
		out := map[string]bool{}
		for _, v := range ap.sys.Views() {
			out[v.ID] = true
		}
		return out
	}
	eventually(t, 20*time.Second, "the accounts split between the two", func() (bool, string) {
		va, vb := views(a.app), views(b)
		for id := range vb {
			if va[id] {
				return false, "account " + id + " runs on both"
			}
		}
		return len(va)+len(vb) == len(numbers) && len(vb) > 0 && len(va) > 0,
			fmt.Sprintf("a runs %d, b %d of %d", len(va), len(vb), len(numbers))
	})
	if g := gaugeValue(t, a, "troupe_fleet_owned_accounts"); int(g) != len(views(a.app)) {
		t.Fatalf("troupe_fleet_owned_accounts %v, a runs %d", g, len(views(a.app)))
	}

	// The admin API shows the members and each account's owner.
	resp, body := a.do(t, http.MethodGet, "/api/admin/fleet", nil, map[string]string{"Authorization": "Bearer " + adminKey(t, a)})
	if resp.StatusCode != 200 {
		t.Fatalf("GET /api/admin/fleet: %d %s", resp.StatusCode, body)
	}
	var fj struct {
		Self      string `json:"self"`
		Ownership bool   `json:"ownership"`
		Owned     int    `json:"owned"`
		Members   []struct {
			ID    string `json:"id"`
			Self  bool   `json:"self"`
			AgeMs *int64 `json:"heartbeat_age_ms"`
		} `json:"members"`
		Accounts []struct {
			ID    string `json:"id"`
			Owner string `json:"owner"`
			Held  bool   `json:"held"`
			Token uint64 `json:"token"`
		} `json:"accounts"`
	}
	if err := json.Unmarshal(body, &fj); err != nil {
		t.Fatal(err)
	}
	va := views(a.app)
	if !fj.Ownership || len(fj.Members) != 2 || fj.Self != a.app.fleet.Self().ID || len(fj.Accounts) != len(numbers) || fj.Owned != len(va) {
		t.Fatalf("GET /api/admin/fleet: %s", body)
	}
	for _, m := range fj.Members {
		// Each member's own last heartbeat, not a's: at most a TTL old while it is live.
		if m.AgeMs == nil || *m.AgeMs < 0 || *m.AgeMs > fleet.DefaultTTL.Milliseconds()*4 {
			t.Fatalf("member %s heartbeat age %v; %s", m.ID, m.AgeMs, body)
		}
	}
	for _, acc := range fj.Accounts {
		if acc.Held != va[acc.ID] || (acc.Owner == fj.Self) != va[acc.ID] || (acc.Held && acc.Token == 0) {
			t.Fatalf("account %+v: a runs it %v; %s", acc, va[acc.ID], body)
		}
	}
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "a runs every account again", func() (bool, string) {
		n := len(views(a.app))
		return n == len(numbers), fmt.Sprintf("%d of %d", n, len(numbers))
	})
}
