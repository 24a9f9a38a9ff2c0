package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/gateway"
)

// adminKey creates an admin API key in the demo's store.
func adminKey(t *testing.T, d *testDemo) string {
	t.Helper()
	secret, k, err := gateway.NewKey("admin-test")
	if err != nil {
		t.Fatal(err)
	}
	k.Admin = true
	if _, err := d.app.store.CreateAPIKey(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	return secret
}

func (d *testDemo) admin(t *testing.T, method, path, key, body string) (int, map[string]any) {
	t.Helper()
	h := map[string]string{"Content-Type": "application/json"}
	if key != "" {
		h["Authorization"] = "Bearer " + key
	}
	resp, b := d.do(t, method, path, strings.NewReader(body), h)
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("%s %s: Cache-Control %q, want no-store", method, path, cc)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, m
}

func TestAdminAuth(t *testing.T) {
	d := startTestDemo(t, nil, tuned(span(1, 4, 1), nil))
	if st, _ := d.admin(t, "GET", "/api/admin/ops", "", ""); st != 401 {
		t.Fatalf("no key: %d", st)
	}
	if st, m := d.admin(t, "GET", "/api/admin/ops", d.apiKey, ""); st != 403 {
		t.Fatalf("client key: %d %v", st, m)
	}
	key := adminKey(t, d)
	if st, _ := d.admin(t, "GET", "/api/admin/nope", key, ""); st != 404 {
		t.Fatalf("unknown admin route: %d", st)
	}
	if st, _ := d.admin(t, "POST", "/api/admin/ops", key, ""); st != 405 {
		t.Fatalf("POST ops: %d", st)
	}
}

func TestAdminOps(t *testing.T) {
	d := startTestDemo(t, nil, tuned(span(1, 6, 1), nil))
	key := adminKey(t, d)
	for range 4 {
		d.post(t, "/v1/chat/completions", `{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`)
	}
	// A release reaches the accounts' windows after the answer is sent (the
	// account actor counts it from its mailbox), so the window is read until
	// the four requests are in it.
	var m map[string]any
	eventually(t, 10*time.Second, "the four requests in the 1m window", func() (bool, string) {
		var st int
		st, m = d.admin(t, "GET", "/api/admin/ops", key, "")
		if st != 200 {
			t.Fatalf("ops: %d %v", st, m)
		}
		ok := m["failures"].(map[string]any)["1m"].(map[string]any)["ok"].(float64)
		return ok >= 4, fmt.Sprintf("failures %v", m["failures"])
	})
	accounts := m["accounts"].(map[string]any)
	if accounts["active"].(float64) != 6 {
		t.Fatalf("accounts %v", accounts)
	}
	if m["policy"].(map[string]any)["name"] != "smart" {
		t.Fatalf("policy %v", m["policy"])
	}
}

func TestAdminPolicies(t *testing.T) {
	d := startTestDemo(t, nil, tuned(span(1, 4, 1), nil))
	key := adminKey(t, d)
	st, m := d.admin(t, "PUT", "/api/admin/policies/mine", key, `{"source":"function score(a, now)\n  return a.x.y\nend\n"}`)
	if st != 400 || m["error"].(map[string]any)["line"].(float64) != 2 {
		t.Fatalf("broken policy: %d %v", st, m)
	}
	for i, src := range []string{"return 1", "return 2"} {
		body, _ := json.Marshal(map[string]string{"source": "function score(a, now)\n  if a.status ~= \"active\" then return nil end\n  " + src + "\nend\n"})
		st, m = d.admin(t, "PUT", "/api/admin/policies/mine", key, string(body))
		if st != 200 || m["version"].(float64) != float64(i+1) {
			t.Fatalf("save v%d: %d %v", i+1, st, m)
		}
	}
	st, m = d.admin(t, "GET", "/api/admin/policies/mine/history", key, "")
	if st != 200 || len(m["versions"].([]any)) != 2 {
		t.Fatalf("history: %d %v", st, m)
	}
	st, m = d.admin(t, "POST", "/api/admin/policies/mine/activate", key, "")
	if st != 200 {
		t.Fatalf("activate: %d %v", st, m)
	}
	// One version number: the stored one, in the activation's answer, the
	// host's status, the scheduler (ops, decision traces) and the metric.
	assertServing := func(want int) {
		t.Helper()
		eventually(t, 5e9, fmt.Sprintf("mine v%d serving everywhere", want), func() (bool, string) {
			name, sv := schedulerPolicy(t, d)
			hs := d.app.policies.Status()
			_, ops := d.admin(t, "GET", "/api/admin/ops", key, "")
			ov, _ := ops["policy"].(map[string]any)["version"].(float64)
			mv := gaugeValue(t, d, "troupe_policy_version")
			ok := name == "mine" && sv == uint64(want) && hs.Active == "mine" && hs.Version == uint64(want) && ov == float64(want) && mv == float64(want)
			return ok, fmt.Sprintf("scheduler %s v%d, host %s v%d, ops v%v, metric %v", name, sv, hs.Active, hs.Version, ov, mv)
		})
	}
	if act := m["activated"].(map[string]any); act["version"].(float64) != 2 || m["status"].(map[string]any)["version"].(float64) != 2 {
		t.Fatalf("activate answer: %v", m)
	}
	assertServing(2)
	// Roll back to version 1: a new swap, and the stored activation moves.
	st, m = d.admin(t, "POST", "/api/admin/policies/mine/activate", key, `{"version":1}`)
	if st != 200 {
		t.Fatalf("rollback: %d %v", st, m)
	}
	if act := m["activated"].(map[string]any); act["version"].(float64) != 1 {
		t.Fatalf("rollback answer: %v", m)
	}
	assertServing(1)
	act, err := d.app.store.ActivePolicy(context.Background())
	if err != nil || act.Version != 1 {
		t.Fatalf("stored active: %+v %v", act, err)
	}
	st, m = d.admin(t, "GET", "/api/admin/policies", key, "")
	if st != 200 || len(m["policies"].([]any)) != 1 || len(m["builtins"].([]any)) < 6 {
		t.Fatalf("list: %d %v", st, m)
	}
	// Requests keep flowing under the stored policy.
	resp, body := d.post(t, "/v1/chat/completions", `{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("after activation: %d %s", resp.StatusCode, body)
	}
}

// gaugeValue is the value of the unlabeled gauge name in the app's registry (-1 when absent).
func gaugeValue(t *testing.T, d *testDemo, name string) float64 {
	t.Helper()
	mfs, err := d.app.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
