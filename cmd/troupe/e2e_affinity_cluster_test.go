package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/storage/cachetest"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

// clusterConfig is a test configuration on a fresh PostgreSQL database and
// a Redis prefix of the test's own, shared by every instance built from it.
// Its Redis client waits cachetest.SlackTimeout: on a loaded machine the
// default 200 ms reads a slow reply as an outage, and what the instances
// share there (sessions, a moved account's cooldown) is then not shared.
func clusterConfig(t *testing.T, pgURL, redisURL, prefix string) *Config {
	cfg := testConfig(t)
	cfg.Storage.Driver, cfg.Storage.DSN = "postgres", pgURL
	cfg.Storage.MasterKey = strings.Repeat("ab", 32)
	cfg.Cache.Driver, cfg.Cache.URL, cfg.Cache.Prefix = "redis", cachetest.SlackURL(redisURL), prefix
	cfg.Policies.Active = "round_robin" // spread sessions, so keeping one is affinity's doing
	return cfg
}

// startInstance starts one more gateway over cfg's shared storage and
// cache (no fleet of its own: it serves the pool the first instance stored)
// and stops it when t ends. It returns its base URL.
func startInstance(t *testing.T, cfg *Config, accounts int) *app {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := openStore(ctx, cfg)
	if err != nil {
		t.Fatalf("second instance storage: %v", err)
	}
	logs := &syncBuffer{}
	a := &app{cfg: cfg, log: newLogger(cfg, logs), store: store}
	if err := a.start(ctx); err != nil {
		store.Close()
		t.Fatalf("second instance: %v", err)
	}
	serveTestApp(t, a, logs, accounts, "second instance")
	return a
}

// startStoppable starts one more instance in this process on cfg, for a
// test that stops it midway: stop shuts it down (at most once; the test's
// cleanup does it otherwise).
func startStoppable(t *testing.T, cfg *Config) (b *app, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store, err := openStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	b = &app{cfg: cfg, log: newLogger(cfg, logs), store: store}
	if err := b.start(ctx); err != nil {
		store.Close()
		t.Fatal(err)
	}
	b.serve()
	var once sync.Once
	stop = func() (err error) {
		once.Do(func() { err = b.shutdown(10 * time.Second) })
		return err
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("stoppable instance's log:\n%s", logs.String())
		}
	})
	return b, stop
}

// TestAffinityAcrossInstances: two gateways share PostgreSQL and Redis. A
// follow-up naming a response served through one instance goes, through the
// other, to the account that served it; a session keeps its account across
// instances; and when the owning account is out of the pool, the follow-up
// gets 409 previous_response_not_found in OpenAI's shape.
func TestAffinityAcrossInstances(t *testing.T) {
	pg := storagetest.PostgresDB(t)
	rurl := cachetest.RedisURL(t)
	prefix := cachetest.RedisPrefix(t, rurl)
	numbers := span(2, 30, 4) // openai accounts
	a := startTestDemo(t, clusterConfig(t, pg, rurl, prefix), tuned(numbers, nil))
	bApp := startInstance(t, clusterConfig(t, pg, rurl, prefix), len(numbers))
	b := &testDemo{demo: &demo{app: bApp, apiKey: a.apiKey, fleet: a.fleet}, base: bApp.baseURL(), names: a.names, logs: &syncBuffer{}}

	post := func(d *testDemo, body string, hdr map[string]string) (int, []byte) {
		h := map[string]string{"Authorization": "Bearer " + a.apiKey, "Content-Type": "application/json"}
		for k, v := range hdr {
			h[k] = v
		}
		resp, out := d.do(t, http.MethodPost, "/v1/responses", stringsReader(body), h)
		return resp.StatusCode, out
	}
	served := func(b []byte) string { return servedBy.FindString(gjson.GetBytes(b, "output.0.content.0.text").Str) }

	// Response affinity, alternating instances.
	st, out := post(a, `{"model":"gpt-4.1-mini","input":"hi"}`, nil)
	if st != 200 {
		t.Fatalf("first: %d %s", st, out)
	}
	id, owner := gjson.GetBytes(out, "id").Str, served(out)
	for i := range 6 {
		d := b
		if i%2 == 1 {
			d = a
		}
		st, out := post(d, fmt.Sprintf(`{"model":"gpt-4.1-mini","input":"again","previous_response_id":%q}`, id), nil)
		if st != 200 || served(out) != owner {
			t.Fatalf("follow-up %d: %d served by %q, want %s: %s", i, st, served(out), owner, out)
		}
		id = gjson.GetBytes(out, "id").Str
	}

	// Session affinity: each session's account on A is its account on B.
	sessions := map[string]string{}
	for i := range 8 {
		s := fmt.Sprintf("sess-%d", i)
		_, out := post(a, `{"model":"gpt-4.1-mini","input":"hi"}`, map[string]string{"Session-Id": s})
		sessions[s] = served(out)
	}
	distinct := map[string]bool{}
	for _, acc := range sessions {
		distinct[acc] = true
	}
	if len(distinct) < 3 {
		t.Fatalf("round robin put 8 sessions on %d accounts: %v", len(distinct), sessions)
	}
	for s, acc := range sessions {
		_, out := post(b, `{"model":"gpt-4.1-mini","input":"hi"}`, map[string]string{"Session-Id": s})
		if served(out) != acc {
			t.Fatalf("session %s served by %s on the second instance, by %s on the first", s, served(out), acc)
		}
	}

	// The owner leaves the pool of the second instance: 409 there, no guess.
	var ownerID string
	for _, v := range bApp.sys.Views() {
		if v.Name == owner {
			ownerID = v.ID
		}
	}
	bApp.sys.RemoveAccount(ownerID)
	eventually(t, 5*time.Second, "the owner left the second instance's pool", func() (bool, string) {
		_, ok := bApp.sys.View(ownerID)
		return !ok, ""
	})
	st, out = post(b, fmt.Sprintf(`{"model":"gpt-4.1-mini","input":"again","previous_response_id":%q}`, id), nil)
	e, err := parseOpenAIError(out)
	if st != 409 || err != nil || e.Code == nil || *e.Code != "previous_response_not_found" || e.Param == nil || *e.Param != "previous_response_id" {
		t.Fatalf("follow-up of an unavailable owner: %d %s (%v)", st, out, err)
	}
	// A response id the gateway never saw is left to the upstream.
	st, out = post(b, `{"model":"gpt-4.1-mini","input":"x","previous_response_id":"resp_unknown"}`, nil)
	if st != 200 {
		t.Fatalf("unknown previous_response_id: %d %s", st, out)
	}
}
