package main

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/bench/mock"
)

// The Codex CLI's status view asks the ChatGPT backend for its usage
// (GET /backend-api/wham/usage); Troupe answers it, for a Troupe API key,
// from the codex accounts of the pool, whose windows the mock fleet sends
// as x-codex-* headers: a 5-hour primary and a 7-day secondary window, a
// Pro plan, no credits; then, its quota used up, limit_reached until the
// quota's reset (issue 15).
func TestCodexUsageFromThePool(t *testing.T) {
	d := startTestDemo(t, nil, demoPool(4)) // demo-0001 is the codex account
	get := func(path string, key bool) (int, []byte) {
		h := map[string]string{}
		if key {
			h["Authorization"] = "Bearer " + d.apiKey
		}
		resp, b := d.do(t, http.MethodGet, path, nil, h)
		return resp.StatusCode, b
	}
	if st, b := get("/backend-api/wham/usage", false); st != 401 {
		t.Fatalf("without a key: %d %s", st, b)
	}
	m := fmt.Sprintf("%q", demoCodexModel)
	if resp, b := d.post(t, "/v1/responses", `{"model":`+m+`,"input":"hi"}`); resp.StatusCode != 200 {
		t.Fatalf("responses: %d %s", resp.StatusCode, b)
	}
	var usage []byte
	eventually(t, 5*time.Second, "the pool's windows", func() (bool, string) {
		_, usage = get("/backend-api/wham/usage", true)
		return gjson.GetBytes(usage, "rate_limit.secondary_window").IsObject(), string(usage)
	})
	now := time.Now().Unix()
	u := gjson.ParseBytes(usage)
	p, s := u.Get("rate_limit.primary_window"), u.Get("rate_limit.secondary_window")
	if u.Get("plan_type").Str != "pro" || !u.Get("rate_limit.allowed").Bool() || u.Get("rate_limit.limit_reached").Bool() ||
		p.Get("limit_window_seconds").Int() != 18000 || s.Get("limit_window_seconds").Int() != 604800 ||
		p.Get("used_percent").Int() > 1 || s.Get("used_percent").Int() > 1 || // a request or two: 0.1 % and 0.01 % each
		p.Get("reset_at").Int() <= now-1 || p.Get("reset_at").Int() > now+18000 || p.Get("reset_after_seconds").Int() > 18000 ||
		u.Get("credits").Raw != `{"has_credits":false,"unlimited":false,"balance":"0"}` {
		t.Fatalf("usage: %s", usage)
	}
	for _, path := range []string{"/api/codex/usage", "/wham/usage"} {
		st, b := get(path, true)
		if st != 200 || gjson.GetBytes(b, "rate_limit.primary_window.reset_at").Int() != p.Get("reset_at").Int() {
			t.Fatalf("%s: %d %s", path, st, b)
		}
	}
	if resp, b := d.post(t, "/backend-api/wham/usage", `{}`); resp.StatusCode != 405 {
		t.Fatalf("POST: %d %s", resp.StatusCode, b)
	}

	// The only codex account runs out: no codex account can serve, and
	// capacity comes back when its quota resets.
	armed := time.Now()
	if !d.fleet.SetFault("demo-0001", &mock.Fault{Kind: mock.FaultRateLimitReset, ResetsIn: 20 * time.Minute}) {
		t.Fatal("no demo-0001 in the fleet")
	}
	if resp, b := d.post(t, "/v1/responses", `{"model":`+m+`,"input":"hi"}`); resp.StatusCode == 200 {
		t.Fatalf("a used-up quota served: %s", b)
	}
	eventually(t, 5*time.Second, "limit reached", func() (bool, string) {
		_, usage = get("/backend-api/wham/usage", true)
		return gjson.GetBytes(usage, "rate_limit.limit_reached").Bool(), string(usage)
	})
	u = gjson.ParseBytes(usage)
	at := u.Get("rate_limit.primary_window.reset_at").Int()
	if u.Get("rate_limit.allowed").Bool() || u.Get("rate_limit.primary_window.used_percent").Int() != 100 ||
		at < armed.Add(20*time.Minute).Unix()-1 || at > time.Now().Add(20*time.Minute).Unix()+1 {
		t.Fatalf("used up: %s", usage)
	}
}
