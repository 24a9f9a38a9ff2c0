package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/routing"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/cachetest"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

const traceChat = `{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`

// chatWith sends a chat request with key and extra headers and returns the answer's decision header.
func (d *testDemo) chatWith(t *testing.T, key string, extra map[string]string) string {
	t.Helper()
	h := map[string]string{"Authorization": "Bearer " + key, "Content-Type": "application/json"}
	for k, v := range extra {
		h[k] = v
	}
	resp, body := d.do(t, http.MethodPost, "/v1/chat/completions", strings.NewReader(traceChat), h)
	if resp.StatusCode != 200 {
		t.Fatalf("chat: %d %s", resp.StatusCode, body)
	}
	return resp.Header.Get(gateway.DecisionHeader)
}

// An admin key that asks gets the decision trace in a header; other keys
// never do; every served request keeps its trace in the request log.
func TestDecisionTraceHeaderAndLog(t *testing.T) {
	d := startTestDemo(t, nil, tuned(span(1, 4, 1), nil))
	key := adminKey(t, d)
	dec := d.chatWith(t, key, map[string]string{gateway.TraceHeader: "1"})
	for _, want := range []string{"policy=smart@", " via=score", " candidates=", " top=", " chosen="} {
		if !strings.Contains(dec, want) {
			t.Errorf("decision %q lacks %q", dec, want)
		}
	}
	if dec := d.chatWith(t, d.apiKey, map[string]string{gateway.TraceHeader: "1"}); dec != "" {
		t.Errorf("a client key got a decision header: %q", dec)
	}
	if dec := d.chatWith(t, key, nil); dec != "" {
		t.Errorf("an admin key that did not ask got a decision header: %q", dec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.app.sys.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := d.app.store.UsageRecords(ctx, storage.RequestLogQuery{})
	if err != nil || len(recs) != 3 {
		t.Fatalf("usage records: %d, %v; want 3", len(recs), err)
	}
	for _, r := range recs {
		if !strings.HasPrefix(r.Decision, "policy=smart@") || !strings.Contains(r.Decision, "chosen=") {
			t.Errorf("record %s: decision %q", r.RequestID, r.Decision)
		}
	}
	if recs[0].Decision != dec && !strings.Contains(recs[0].Decision, "chosen=") {
		t.Errorf("stored decision %q differs from the header %q", recs[0].Decision, dec)
	}
}

// saveCalm stores the policy "calm" (fewest leases in flight first) through d's admin API.
func saveCalm(t *testing.T, d *testDemo, key string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"source": "function score(a, now)\n  if a.status ~= \"active\" then return nil end\n  return 10 - a.inflight\nend\n"})
	if st, m := d.admin(t, "PUT", "/api/admin/policies/calm", key, string(body)); st != 200 {
		t.Fatalf("save: %d %v", st, m)
	}
}

// A canary routes its share of traffic beside the active policy, shows in
// the policies status with both versions' outcomes, and is aborted or
// promoted through the admin API.
func TestCanaryAdmin(t *testing.T) {
	d := startTestDemo(t, nil, tuned(span(1, 4, 1), nil))
	key := adminKey(t, d)
	saveCalm(t, d, key)
	if st, m := d.admin(t, "POST", "/api/admin/policies/calm/canary", key, `{"percent":0}`); st != 400 {
		t.Fatalf("canary without share: %d %v", st, m)
	}
	if st, m := d.admin(t, "POST", "/api/admin/policies/calm/promote", key, ""); st != 409 {
		t.Fatalf("promote without canary: %d %v", st, m)
	}
	long := strings.Repeat("g", 201)
	if st, m := d.admin(t, "POST", "/api/admin/policies/calm/canary", key, `{"group":"`+long+`"}`); st != 400 || strings.Contains(fmt.Sprint(m), long) {
		t.Fatalf("canary with a 201-byte group: %d %v", st, m)
	}
	st, m := d.admin(t, "POST", "/api/admin/policies/calm/canary", key, `{"percent":100}`)
	if st != 200 || m["canary"].(map[string]any)["name"] != "calm" {
		t.Fatalf("canary: %d %v", st, m)
	}
	eventually(t, 5*time.Second, "canary rescored", func() (bool, string) {
		st, _ := d.app.sys.SchedulerStats(context.Background())
		return st.Canary == "calm" && st.Rescoring == 0, st.Canary
	})
	trace := map[string]string{gateway.TraceHeader: "1"}
	for range 4 {
		if dec := d.chatWith(t, key, trace); !strings.Contains(dec, "policy=calm@") || !strings.Contains(dec, " canary=1") {
			t.Fatalf("at 100 %%, decision %q: want the canary calm", dec)
		}
	}
	st, m = d.admin(t, "GET", "/api/admin/policies", key, "")
	if st != 200 || m["canary"] == nil {
		t.Fatalf("status: %d %v", st, m)
	}
	var canaryReqs float64
	for _, o := range m["outcomes"].([]any) {
		o := o.(map[string]any)
		if o["canary"] == true && o["policy"] == "calm" {
			canaryReqs = o["requests"].(float64)
		}
	}
	if canaryReqs != 4 {
		t.Errorf("outcomes %v: want 4 canary requests of calm", m["outcomes"])
	}
	if st, m := d.admin(t, "POST", "/api/admin/policies/calm/abort", key, ""); st != 200 {
		t.Fatalf("abort: %d %v", st, m)
	}
	if dec := d.chatWith(t, key, trace); !strings.Contains(dec, "policy=smart@") || strings.Contains(dec, "canary") {
		t.Fatalf("after abort, decision %q: want smart", dec)
	}
	// Run it again and promote it: it becomes the active, stored policy.
	if st, m := d.admin(t, "POST", "/api/admin/policies/calm/canary", key, `{"percent":10}`); st != 200 {
		t.Fatalf("canary again: %d %v", st, m)
	}
	st, m = d.admin(t, "POST", "/api/admin/policies/calm/promote", key, "")
	if st != 200 {
		t.Fatalf("promote: %d %v", st, m)
	}
	eventually(t, 5*time.Second, "promoted policy active", func() (bool, string) {
		st, _ := d.app.sys.SchedulerStats(context.Background())
		return st.Policy == "calm" && st.Canary == "" && st.Rescoring == 0, st.Policy + "/" + st.Canary
	})
	if act, err := d.app.store.ActivePolicy(context.Background()); err != nil || act.Name != "calm" || act.Version != 1 {
		t.Errorf("stored active after promotion: %+v, %v", act, err)
	}
	if dec := d.chatWith(t, key, trace); !strings.Contains(dec, "policy=calm@") || strings.Contains(dec, "canary") {
		t.Fatalf("after promotion, decision %q: want calm, no canary", dec)
	}
}

// TestCanaryAcrossInstances: two gateways share PostgreSQL and Redis. A
// canary started on one runs on the other, also on one that starts while
// it runs; ending it on one ends it on both, and promoting it makes it the
// active policy of both.
func TestCanaryAcrossInstances(t *testing.T) {
	pg := storagetest.PostgresDB(t)
	rurl := cachetest.RedisURL(t)
	prefix := cachetest.RedisPrefix(t, rurl)
	numbers := span(2, 10, 4)
	a := startTestDemo(t, clusterConfig(t, pg, rurl, prefix), tuned(numbers, nil))
	key := adminKey(t, a)
	saveCalm(t, a, key)
	if st, m := a.admin(t, "POST", "/api/admin/policies/calm/canary", key, `{"percent":100}`); st != 200 {
		t.Fatalf("canary: %d %v", st, m)
	}
	b := startInstance(t, clusterConfig(t, pg, rurl, prefix), len(numbers)) // joins while the canary runs
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // before the instances stop
	a.app.watchPolicies(ctx)
	b.watchPolicies(ctx)
	canaryOf := func(x *app) string {
		st, _ := x.sys.SchedulerStats(context.Background())
		if st.Rescoring > 0 {
			return "rescoring"
		}
		return st.Canary
	}
	for _, x := range []*app{a.app, b} {
		eventually(t, 10*time.Second, "the canary on both instances", func() (bool, string) { return canaryOf(x) == "calm", canaryOf(x) })
	}
	if st, m := a.admin(t, "POST", "/api/admin/policies/calm/abort", key, ""); st != 200 {
		t.Fatalf("abort: %d %v", st, m)
	}
	eventually(t, 10*time.Second, "the canary ended on the other instance", func() (bool, string) { return canaryOf(b) == "", canaryOf(b) })
	// Started again on B, promoted on A: A learned of it from B.
	bd := &testDemo{demo: &demo{app: b, apiKey: a.apiKey, fleet: a.fleet}, base: b.baseURL(), names: a.names, logs: &syncBuffer{}}
	if st, m := bd.admin(t, "POST", "/api/admin/policies/calm/canary", key, `{"percent":10}`); st != 200 {
		t.Fatalf("canary on the second instance: %d %v", st, m)
	}
	eventually(t, 10*time.Second, "the canary on the first instance", func() (bool, string) { return canaryOf(a.app) == "calm", canaryOf(a.app) })
	if st, m := a.admin(t, "POST", "/api/admin/policies/calm/promote", key, ""); st != 200 {
		t.Fatalf("promote: %d %v", st, m)
	}
	activeEverywhere(t, "calm", a.app, b)
	// A built-in promoted on one instance becomes the active policy of both.
	if st, m := a.admin(t, "POST", "/api/admin/policies/smart/canary", key, `{"percent":10}`); st != 200 {
		t.Fatalf("built-in canary: %d %v", st, m)
	}
	eventually(t, 10*time.Second, "the built-in canary on B", func() (bool, string) { return canaryOf(b) == "smart", canaryOf(b) })
	if st, m := bd.admin(t, "POST", "/api/admin/policies/smart/promote", key, ""); st != 200 {
		t.Fatalf("promote the built-in on B: %d %v", st, m)
	}
	activeEverywhere(t, "smart", a.app, b)
	// A shared canary an instance cannot load (here: a version nobody
	// stored) runs nowhere, not an older one; the status says so, and
	// aborting it there ends it.
	if st, m := a.admin(t, "POST", "/api/admin/policies/calm/canary", key, `{"percent":10}`); st != 200 {
		t.Fatalf("canary once more: %d %v", st, m)
	}
	eventually(t, 10*time.Second, "calm canary on B", func() (bool, string) { return canaryOf(b) == "calm", canaryOf(b) })
	bogus := `{"id":"bogus","name":"calm","version":99,"percent":10,"started":"2026-12-02T00:00:00Z"}`
	if err := a.app.cache.Set(ctx, "policy:canary", bogus, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := a.app.cache.Publish(ctx, routing.CanaryChannel, "bogus"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "no canary on B", func() (bool, string) { return canaryOf(b) == "", canaryOf(b) })
	if st, m := bd.admin(t, "GET", "/api/admin/policies", key, ""); st != 200 || m["canary_not_loaded"] == nil {
		t.Fatalf("status with an unloadable canary: %d %v", st, m["canary_not_loaded"])
	}
	if st, m := bd.admin(t, "POST", "/api/admin/policies/calm/promote", key, ""); st != 409 || !strings.Contains(fmt.Sprint(m), "failed to load") {
		t.Fatalf("promote an unloaded canary: %d %v", st, m)
	}
	if st, m := bd.admin(t, "POST", "/api/admin/policies/calm/abort", key, ""); st != 200 {
		t.Fatalf("abort an unloaded canary: %d %v", st, m)
	}
	if _, ok, _ := a.app.cache.Get(ctx, "policy:canary"); ok {
		t.Error("the aborted canary is still shared")
	}
}

// activeEverywhere waits until policy is active, with no canary, on every app.
func activeEverywhere(t *testing.T, policy string, apps ...*app) {
	t.Helper()
	for _, x := range apps {
		eventually(t, 10*time.Second, policy+" active, no canary", func() (bool, string) {
			st, _ := x.sys.SchedulerStats(context.Background())
			return st.Policy == policy && st.Canary == "", st.Policy + "/" + st.Canary
		})
	}
}
