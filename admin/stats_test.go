package admin

import (
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// TestAdminStats sends chat requests through the front and reads them back
// from the account and provider statistics routes.
func TestAdminStats(t *testing.T) {
	e := newAdminEnv(t, 1)
	for range 3 {
		if st := chatWith(t, e, e.key, "m"); st != 200 {
			t.Fatalf("chat: %d", st)
		}
	}
	c := e.withKey(e.adminKey)
	r := c.do("GET", "/api/admin/accounts/acct-a/stats?window=5m", nil).want(t, 200)
	j := gjson.ParseBytes(r.body)
	if j.Get("name").Str != "acct-a" || j.Get("provider").Str != "openai" || j.Get("window").Str != "5m" || j.Get("step_s").Int() != 60 {
		t.Fatalf("head: %s", r.body)
	}
	if n := len(j.Get("windows").Array()); n != 5 {
		t.Fatalf("%d windows, want 5: %s", n, r.body)
	}
	for _, w := range j.Get("windows").Array() {
		if w.Get("requests").Int() != 3 || w.Get("success_rate").Float() != 1 || w.Get("statuses.200").Int() != 3 ||
			w.Get("tokens.input").Int() != 9 || w.Get("tokens.output").Int() != 6 || w.Get("latency_ms.count").Int() != 3 {
			t.Errorf("window %s: %s", w.Get("window").Str, w.Raw)
		}
	}
	pts := j.Get("points").Array()
	if len(pts) != 6 || pts[5].Get("requests").Int() != 3 {
		t.Errorf("points: %s", j.Get("points").Raw)
	}
	r = c.do("GET", "/api/admin/stats/providers", nil).want(t, 200)
	if p := gjson.GetBytes(r.body, "providers.0"); p.Get("provider").Str != "openai" || p.Get("requests").Int() != 3 || gjson.GetBytes(r.body, "window").Str != "1h" {
		t.Errorf("providers: %s", r.body)
	}
	// Each answer names the instance whose counts it is, and since when.
	for _, a := range []gjson.Result{gjson.ParseBytes(r.body), j} {
		if a.Get("instance").Str != "test-instance" || a.Get("since").Time().IsZero() || a.Get("since").Time().After(time.Now()) {
			t.Errorf("source: instance %q since %q, want test-instance and the store's start", a.Get("instance").Str, a.Get("since").Str)
		}
	}
	r = c.do("GET", "/api/admin/stats/accounts?window=24h", nil).want(t, 200)
	id := j.Get("id").Str
	if b := gjson.GetBytes(r.body, "accounts."+id); b.Get("requests").Int() != 3 || b.Get("success_rate").Float() != 1 {
		t.Errorf("briefs: %s", r.body)
	}
	// Bad input: an unknown window, account, route or method.
	if r := c.do("GET", "/api/admin/stats/providers?window=2h", nil).want(t, 400); r.errParam() != "window" {
		t.Errorf("bad window: %s", r.body)
	}
	c.do("GET", "/api/admin/accounts/nobody/stats", nil).want(t, 404)
	c.do("GET", "/api/admin/stats/keys", nil).want(t, 404)
	c.do("POST", "/api/admin/stats/providers", nil).want(t, 405)
	// Statistics need a logged-in admin.
	e.withKey(e.key).do("GET", "/api/admin/stats/providers", nil).want(t, 403)
}

// TestAccountListStats: the list carries each account's last hour and sorts
// by its success rate and p95 latency.
func TestAccountListStats(t *testing.T) {
	e := newAdminEnv(t, 2)
	if st := chatWith(t, e, e.key, "m"); st != 200 {
		t.Fatalf("chat: %d", st)
	}
	c := e.withKey(e.adminKey)
	for _, q := range []string{"sort=success_rate", "sort=latency_p95&order=desc"} {
		r := c.do("GET", "/api/admin/accounts?"+q, nil).want(t, 200)
		served := gjson.GetBytes(r.body, "accounts.0")
		if served.Get("stats_1h.requests").Int() != 1 || served.Get("stats_1h.success_rate").Float() != 1 {
			t.Errorf("%s: the account that served is not first with its stats: %s", q, r.body)
		}
		if idle := gjson.GetBytes(r.body, "accounts.1"); idle.Get("stats_1h").Exists() {
			t.Errorf("%s: an idle account has stats: %s", q, idle.Raw)
		}
	}
	if r := c.do("GET", "/api/admin/accounts?sort=p95", nil).want(t, 400); r.errParam() != "sort" {
		t.Errorf("bad sort: %s", r.body)
	}
}
