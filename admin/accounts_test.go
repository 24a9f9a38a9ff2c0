package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// noSecrets fails t if any answer body holds an upstream credential.
func noSecrets(t *testing.T, r *response) {
	t.Helper()
	for _, s := range []string{"sk-upstream-secret", "sk-new-secret", "tok-secret", "eyJ-secret"} {
		if strings.Contains(string(r.body), s) {
			t.Fatalf("answer leaks a credential (%s): %s", s, r.body)
		}
	}
}

func TestAdminAccountsCRUD(t *testing.T) {
	e := newAdminEnv(t, 3)
	c := e.login()

	r := c.do("GET", "/api/admin/accounts", nil).want(t, 200)
	noSecrets(t, r)
	if r.json["total"].(float64) != 3 || len(r.json["accounts"].([]any)) != 3 {
		t.Fatalf("list: %s", r.body)
	}
	a0 := r.json["accounts"].([]any)[0].(map[string]any)
	if a0["name"] != "acct-a" || a0["credentials"].(map[string]any)["api_key"] != true || a0["live"].(map[string]any)["status"] != "active" {
		t.Fatalf("first account: %v", a0)
	}
	waitFor(t, "scores", func() bool {
		r := c.do("GET", "/api/admin/accounts/acct-a", nil)
		return r.json["live"].(map[string]any)["tier"] == "healthy"
	})

	// Create.
	add := map[string]any{"name": "new-1", "provider": "openai_compat", "base_url": "http://127.0.0.1:1/v1", "models": []string{"m"},
		"max_concurrency": 2, "group": "g1", "tags": []string{"eu"}, "credentials": map[string]string{"api_key": "sk-new-secret"}}
	r = c.do("POST", "/api/admin/accounts", add).want(t, 201)
	noSecrets(t, r)
	id := r.json["id"].(string)
	if r.json["group"] != "g1" || r.json["credentials"].(map[string]any)["api_key"] != true {
		t.Fatalf("created: %s", r.body)
	}
	c.do("POST", "/api/admin/accounts", add).want(t, 409)
	// Without max_concurrency an account gets the default (4), as from the
	// config file and the CLI; an explicit 0 is kept (it means 1).
	r = c.do("POST", "/api/admin/accounts", map[string]any{"name": "dflt", "provider": "openai", "api_key": "sk-d"}).want(t, 201)
	if r.json["max_concurrency"] != float64(storage.DefaultMaxConcurrency) {
		t.Fatalf("created without max_concurrency: %v, want %d", r.json["max_concurrency"], storage.DefaultMaxConcurrency)
	}
	r = c.do("POST", "/api/admin/accounts", map[string]any{"name": "zero", "provider": "openai", "api_key": "sk-z", "max_concurrency": 0}).want(t, 201)
	if r.json["max_concurrency"] != float64(0) {
		t.Fatalf("created with max_concurrency 0: %v, want 0", r.json["max_concurrency"])
	}
	c.do("POST", "/api/admin/accounts", map[string]any{"name": "x", "provider": "nope"}).want(t, 400)
	c.do("POST", "/api/admin/accounts", map[string]any{"provider": "openai"}).want(t, 400)
	c.do("POST", "/api/admin/accounts", map[string]any{"name": "x", "provider": "openai", "unknown_field": 1}).want(t, 400)
	c.do("POST", "/api/admin/accounts", map[string]any{"name": "x", "provider": "openai", "max_concurrency": -1}).want(t, 400)
	for _, u := range []string{"file:///etc/passwd", "javascript:alert(1)", "not a url", "http://[::1", "/v1", "http://127.0.0.1:99999/v1", "http://:80/v1"} {
		r := c.do("POST", "/api/admin/accounts", map[string]any{"name": "x", "provider": "openai", "base_url": u})
		r.want(t, 400)
		if p := gjson.GetBytes(r.body, "error.param").Str; p != "base_url" {
			t.Errorf("base_url %q: param %q", u, p)
		}
	}
	c.do("POST", "/api/admin/accounts", map[string]any{"name": "x", "provider": "openai_compat"}).want(t, 400)
	c.do("POST", "/api/admin/accounts", `[`).want(t, 400)
	waitFor(t, "the new account in the pool", func() bool { _, ok := e.sys.View(id); return ok })
	stored, err := e.store.GetAccount(t.Context(), "new-1")
	if err != nil || stored.Credentials.APIKey != "sk-new-secret" {
		t.Fatalf("stored %+v %v", stored.Credentials, err)
	}

	// Edit: absent fields and credentials are kept.
	r = c.do("PATCH", "/api/admin/accounts/"+id, map[string]any{"priority": 5, "tags": []string{"us", "paid"}}).want(t, 200)
	noSecrets(t, r)
	if r.json["priority"].(float64) != 5 || r.json["group"] != "g1" || r.json["credentials"].(map[string]any)["api_key"] != true {
		t.Fatalf("patched: %s", r.body)
	}
	c.do("PATCH", "/api/admin/accounts/new-1", map[string]any{"name": "renamed"}).want(t, 400)
	c.do("PATCH", "/api/admin/accounts/new-1", map[string]any{"provider": "bogus"}).want(t, 400)
	c.do("PATCH", "/api/admin/accounts/new-1", `{"priority":"high"}`).want(t, 400)
	// A misspelt field is a 400 naming it, as on create, not an edit that
	// changes nothing in silence; so is a body that is no object.
	if r := c.do("PATCH", "/api/admin/accounts/new-1", `{"max_concurency":9}`).want(t, 400); !strings.Contains(string(r.body), `unknown field \"max_concurency\"`) {
		t.Errorf("misspelt field: %s", r.body)
	}
	c.do("PATCH", "/api/admin/accounts/new-1", `null`).want(t, 400)
	c.do("PATCH", "/api/admin/accounts/new-1", `{"priority":1}{"priority":2}`).want(t, 400)
	c.do("PATCH", "/api/admin/accounts/missing", map[string]any{"priority": 1}).want(t, 404)
	c.do("PATCH", "/api/admin/accounts/new-1", map[string]any{"credentials": map[string]string{"api_key": ""}}).want(t, 200)
	if s, _ := e.store.GetAccount(t.Context(), "new-1"); s.Credentials.APIKey != "" {
		t.Fatalf("credential not cleared")
	}

	// Disable, enable: the live state follows.
	r = c.do("POST", "/api/admin/accounts/acct-b/disable", nil).want(t, 200)
	if r.json["disabled"] != true {
		t.Fatalf("disable: %s", r.body)
	}
	waitFor(t, "acct-b disabled in the pool", func() bool {
		return c.do("GET", "/api/admin/accounts/acct-b", nil).json["live"].(map[string]any)["status"] == "disabled"
	})
	r = c.do("GET", "/api/admin/accounts?status=disabled", nil).want(t, 200)
	if r.json["total"].(float64) != 1 {
		t.Fatalf("filter status=disabled: %s", r.body)
	}
	c.do("POST", "/api/admin/accounts/acct-b/enable", nil).want(t, 200)
	waitFor(t, "acct-b enabled", func() bool {
		return c.do("GET", "/api/admin/accounts/acct-b", nil).json["live"].(map[string]any)["status"] == "active"
	})
	c.do("POST", "/api/admin/accounts/missing/disable", nil).want(t, 404)
	c.do("POST", "/api/admin/accounts/acct-b/explode", nil).want(t, 405)

	// Delete.
	c.do("DELETE", "/api/admin/accounts/new-1", nil).want(t, 200)
	c.do("DELETE", "/api/admin/accounts/new-1", nil).want(t, 404)
	c.do("GET", "/api/admin/accounts/new-1", nil).want(t, 404)
	waitFor(t, "the account to leave the pool", func() bool { _, ok := e.sys.View(id); return !ok })
}

func TestAdminAccountsList(t *testing.T) {
	e := newAdminEnv(t, 0)
	c := e.withKey(e.adminKey)
	var list []map[string]any
	for i := range 120 {
		p := "openai"
		if i%3 == 0 {
			p = "codex"
		}
		list = append(list, map[string]any{"name": fmt.Sprintf("pool-%03d", i), "provider": p, "group": fmt.Sprintf("g%d", i%2),
			"models": []string{"m"}, "priority": i, "credentials": map[string]string{"api_key": "sk-upstream-secret"}})
	}
	c.do("POST", "/api/admin/accounts/import?format=troupe", list).want(t, 200)
	page := func(q string) *response { return c.do("GET", "/api/admin/accounts?"+q, nil).want(t, 200) }
	r := page("limit=50&offset=100")
	if r.json["total"].(float64) != 120 || len(r.json["accounts"].([]any)) != 20 || r.json["accounts"].([]any)[0].(map[string]any)["name"] != "pool-100" {
		t.Fatalf("page 3: total %v, %d rows", r.json["total"], len(r.json["accounts"].([]any)))
	}
	if r := page("provider=codex"); r.json["total"].(float64) != 40 {
		t.Fatalf("provider filter: %v", r.json["total"])
	}
	if r := page("group=g1&provider=openai"); r.json["total"].(float64) != 40 {
		t.Fatalf("group+provider filter: %v", r.json["total"])
	}
	if r := page("q=POOL-01"); r.json["total"].(float64) != 10 {
		t.Fatalf("search: %v", r.json["total"])
	}
	r = page("sort=priority&order=desc&limit=2")
	if r.json["accounts"].([]any)[0].(map[string]any)["name"] != "pool-119" {
		t.Fatalf("sort: %s", r.body)
	}
	waitFor(t, "scores", func() bool { return page("tier=healthy").json["total"].(float64) == 120 })
	if r := page("sort=score&order=desc&limit=1"); len(r.json["accounts"].([]any)) != 1 {
		t.Fatalf("sort by score: %s", r.body)
	}
	// By windows: the most used usage window first (desc); accounts
	// reporting none last.
	var hot, warm string
	for _, a := range page("q=pool-00&limit=2").json["accounts"].([]any) {
		if hot == "" {
			hot = a.(map[string]any)["id"].(string)
		} else {
			warm = a.(map[string]any)["id"].(string)
		}
	}
	e.sys.ReportRateLimits(hot, "", upstream.RateLimits{Windows: []upstream.RateWindow{{Name: "5h", UsedPercent: 90, WindowMinutes: 300}}}, time.Now())
	e.sys.ReportRateLimits(warm, "", upstream.RateLimits{Windows: []upstream.RateWindow{{Name: "5h", UsedPercent: 10, WindowMinutes: 300},
		{Name: "7d", UsedPercent: 40, WindowMinutes: 10080}}}, time.Now())
	waitFor(t, "windows", func() bool {
		got := page("sort=windows&order=desc&limit=2").json["accounts"].([]any)
		return got[0].(map[string]any)["id"] == hot && got[1].(map[string]any)["id"] == warm
	})
	for _, q := range []string{"limit=0", "limit=5000", "offset=-1", "sort=bogus", "order=sideways", "limit=x"} {
		c.do("GET", "/api/admin/accounts?"+q, nil).want(t, 400)
	}
	// A filter value no account can have is refused, not answered with an
	// empty page; every value the docs list is taken.
	for _, p := range []string{"status", "tier", "provider"} {
		r := c.do("GET", "/api/admin/accounts?"+p+"=bogus", nil).want(t, 400)
		if r.errParam() != p || !isOpenAIError(r.body) || !strings.Contains(string(r.body), p+" is one of") {
			t.Fatalf("%s=bogus: %s", p, r.body)
		}
	}
	for _, q := range []string{"status=active", "status=cooling", "status=disabled", "status=unauthorized", "status=banned", "status=absent",
		"tier=healthy", "tier=warm", "tier=risky", "tier=excluded", "provider=codex", "provider=openai", "provider=openai_compat", "provider=anthropic"} {
		page(q)
	}
	if r := page("provider=codex"); r.json["total"].(float64) != 40 {
		t.Fatalf("provider=codex: total %v", r.json["total"])
	}
	if r := page("offset=500"); len(r.json["accounts"].([]any)) != 0 || r.json["total"].(float64) != 120 {
		t.Fatalf("past the end: %s", r.body)
	}

	// Bulk.
	r = c.do("POST", "/api/admin/accounts/bulk", map[string]any{"ids": []string{"pool-000", "pool-001", "ghost"}, "action": "disable"}).want(t, 200)
	if r.json["done"].(float64) != 2 || len(r.json["missing"].([]any)) != 1 {
		t.Fatalf("bulk: %s", r.body)
	}
	if r := page("status=disabled"); r.json["total"].(float64) != 0 {
		waitFor(t, "bulk disable in the pool", func() bool { return page("status=disabled").json["total"].(float64) == 2 })
	}
	waitFor(t, "bulk disable in the pool", func() bool { return page("status=disabled").json["total"].(float64) == 2 })
	c.do("POST", "/api/admin/accounts/bulk", map[string]any{"ids": []string{"pool-002"}, "action": "delete"}).want(t, 200)
	c.do("POST", "/api/admin/accounts/bulk", map[string]any{"ids": []string{"pool-002"}, "action": "explode"}).want(t, 400)
	c.do("POST", "/api/admin/accounts/bulk", map[string]any{"ids": []string{}, "action": "delete"}).want(t, 400)
	if r := page(""); r.json["total"].(float64) != 119 {
		t.Fatalf("after bulk delete: %v", r.json["total"])
	}
}

func TestAdminAccountsImportExport(t *testing.T) {
	e := newAdminEnv(t, 2)
	c := e.login()
	r := c.do("GET", "/api/admin/accounts/export?format=troupe", nil).want(t, 200)
	noSecrets(t, r)
	if !strings.HasPrefix(string(r.body), "[") || !strings.Contains(r.header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("export: %s %v", r.body, r.header)
	}
	exported := r.body

	// Invalid entries: nothing is written, every error is named.
	bad := `[{"name":"ok-1","provider":"openai"},{"name":"","provider":"openai"},{"name":"b","provider":"nope"},{"name":"ok-1","provider":"openai"}]`
	r = c.do("POST", "/api/admin/accounts/import?format=troupe", bad).want(t, 400)
	if errs := r.json["errors"].([]any); len(errs) != 3 || r.errCode() != "import_invalid" {
		t.Fatalf("errors: %s", r.body)
	}
	if _, err := e.store.GetAccount(t.Context(), "ok-1"); err == nil {
		t.Fatal("a refused import wrote an account")
	}
	for _, body := range []string{``, `{}`, `[]`, `"x"`, `[1]`} {
		c.do("POST", "/api/admin/accounts/import?format=troupe", body).want(t, 400)
	}

	// Dry run, then the import: a new account and an update of acct-a (group only).
	imp := `{"accounts":[{"name":"imp-1","provider":"codex","credentials":{"access_token":"eyJ-secret","account_id":"acc-1"}},{"name":"acct-a","group":"moved"}]}`
	r = c.do("POST", "/api/admin/accounts/import?format=troupe&dry_run=1", imp).want(t, 200)
	if r.json["created"].(float64) != 1 || r.json["updated"].(float64) != 1 {
		t.Fatalf("dry run: %s", r.body)
	}
	if _, err := e.store.GetAccount(t.Context(), "imp-1"); err == nil {
		t.Fatal("dry run wrote")
	}
	c.do("POST", "/api/admin/accounts/import?format=troupe", imp).want(t, 200)
	a, err := e.store.GetAccount(t.Context(), "acct-a")
	if err != nil || a.Group != "moved" || a.Credentials.APIKey != "sk-upstream-secret-a" || a.Provider != "openai" {
		t.Fatalf("updated by import: %+v %v", a, err)
	}
	if a, _ := e.store.GetAccount(t.Context(), "imp-1"); a.Credentials.AccessToken != "eyJ-secret" {
		t.Fatalf("imported credentials: %+v", a.Credentials)
	}
	// The export, older than the import's change of acct-a, is refused:
	// writing it back would undo the newer group (409 import_stale naming
	// acct-a, nothing written). With ?overwrite=1 it imports back,
	// credentials kept.
	r = c.do("POST", "/api/admin/accounts/import?format=troupe", exported).want(t, 409)
	if errs := r.json["errors"].([]any); r.errCode() != "import_stale" || len(errs) != 1 || errs[0].(map[string]any)["name"] != "acct-a" {
		t.Fatalf("stale import: %s", r.body)
	}
	if a, _ := e.store.GetAccount(t.Context(), "acct-a"); a.Group != "moved" {
		t.Fatalf("a refused import wrote: %+v", a)
	}
	c.do("POST", "/api/admin/accounts/import?format=troupe&overwrite=1", exported).want(t, 200)
	if a, _ := e.store.GetAccount(t.Context(), "acct-a"); a.Group != "" || a.Credentials.APIKey != "sk-upstream-secret-a" {
		t.Fatalf("after re-import: %+v", a)
	}
}

// TestAdminImportKeepsNewerState: an export re-imported after one of its
// accounts changed (a codex token refresh here, which stores new tokens,
// and an edit of another) does not write the exported state back: 409
// import_stale lists both, with the versions, and nothing is written, not
// even the unchanged entries; the tokens and the edit stay. The dry run
// says the same. A fresh export imports back (unchanged accounts), and an
// entry without a version (written by hand) still applies.
func TestAdminImportKeepsNewerState(t *testing.T) {
	e := newAdminEnv(t, 3)
	c := e.login()
	exported := c.do("GET", "/api/admin/accounts/export?format=troupe", nil).want(t, 200).body
	ctx := t.Context()
	a, err := e.store.GetAccount(ctx, "acct-a")
	if err != nil {
		t.Fatal(err)
	}
	a.Credentials.AccessToken = "eyJ-refreshed"
	if _, err := e.store.PutAccount(ctx, a); err != nil { // the refresher, on any instance
		t.Fatal(err)
	}
	c.do("PATCH", "/api/admin/accounts/acct-b", map[string]any{"priority": 9}).want(t, 200)

	for _, q := range []string{"", "&dry_run=1"} {
		r := c.do("POST", "/api/admin/accounts/import?format=troupe"+q, exported).want(t, 409)
		errs := r.json["errors"].([]any)
		if r.errCode() != "import_stale" || len(errs) != 2 || !strings.Contains(r.json["error"].(map[string]any)["message"].(string), "overwrite=1") {
			t.Fatalf("import%s of a stale export: %s", q, r.body)
		}
		for i, name := range []string{"acct-a", "acct-b"} {
			if m := errs[i].(map[string]any); m["name"] != name || !strings.Contains(m["message"].(string), "changed since the export") {
				t.Fatalf("stale entry %d: %v", i, m)
			}
		}
	}
	if got, _ := e.store.GetAccount(ctx, "acct-a"); got.Credentials.AccessToken != "eyJ-refreshed" {
		t.Fatalf("the refreshed token was overwritten: %q", got.Credentials.AccessToken)
	}
	if got, _ := e.store.GetAccount(ctx, "acct-b"); got.Priority != 9 {
		t.Fatalf("the newer priority was overwritten: %d", got.Priority)
	}
	fresh := c.do("GET", "/api/admin/accounts/export?format=troupe", nil).want(t, 200).body
	c.do("POST", "/api/admin/accounts/import?format=troupe", fresh).want(t, 200)
	c.do("POST", "/api/admin/accounts/import?format=troupe", `[{"name":"acct-b","priority":3}]`).want(t, 200)
	if got, _ := e.store.GetAccount(ctx, "acct-b"); got.Priority != 3 {
		t.Fatalf("an entry without a version: priority %d, want 3", got.Priority)
	}
}

func TestAdminAccountProbe(t *testing.T) {
	e := newAdminEnv(t, 0)
	var auth string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		if auth != "Bearer sk-good" {
			w.WriteHeader(401)
			fmt.Fprint(w, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, okChat.body)
	}))
	defer up.Close()
	c := e.withKey(e.adminKey)
	c.do("POST", "/api/admin/accounts", map[string]any{"name": "good", "provider": "openai", "base_url": up.URL + "/v1", "api_key": "sk-good"}).want(t, 201)
	c.do("POST", "/api/admin/accounts", map[string]any{"name": "bad", "provider": "openai", "base_url": up.URL + "/v1", "api_key": "sk-bad"}).want(t, 201)
	r := c.do("POST", "/api/admin/accounts/good/probe", nil).want(t, 200)
	if r.json["ok"] != true || r.json["status"].(float64) != 200 || auth != "Bearer sk-good" {
		t.Fatalf("probe good: %s", r.body)
	}
	r = c.do("POST", "/api/admin/accounts/bad/probe", nil).want(t, 200)
	if r.json["ok"] != false || r.json["class"] != "auth" || strings.Contains(string(r.body), "sk-bad") {
		t.Fatalf("probe bad: %s", r.body)
	}
	c.do("POST", "/api/admin/accounts/ghost/probe", nil).want(t, 404)
	c.do("GET", "/api/admin/accounts/good/probe", nil).want(t, 405)
}

// The live state carries the upstream's other limits (Codex's active limit,
// credits and per-model limit families), a family's cooldown only while it
// runs; an account that reported none shows an empty list and no credits.
func TestLiveLimits(t *testing.T) {
	now := time.Unix(1790000000, 0)
	v := &actors.View{Status: actors.StatusActive, MaxInFlight: 1, ActiveLimit: "premium",
		Credits: &upstream.Credits{HasCredits: true, Balance: "5.39"},
		Families: []actors.LimitFamily{
			{ID: "bengalfox", LimitName: "gpt-5.2-codex-sonic", CoolingUntil: now.Add(time.Hour),
				Windows: []actors.UsageWindow{{Name: "7d", UsedPercent: 100, WindowMinutes: 10080, ResetsAt: now.Add(time.Hour)}}},
			{ID: "old", CoolingUntil: now.Add(-time.Minute)},
		}}
	b, err := json.Marshal(liveOf(v, nil, now))
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{`"active_limit":"premium"`, `"credits":{"has_credits":true,"unlimited":false,"balance":"5.39"}`,
		`"limit_families":[{"id":"bengalfox","limit_name":"gpt-5.2-codex-sonic","models":[],"usage_windows":[{"name":"7d","used_percent":100,"window_minutes":10080,"resets_at":"2026-09-21T15:13:20Z"}],"cooling_until":"2026-09-21T15:13:20Z"},` +
			`{"id":"old","limit_name":"","models":[],"usage_windows":[],"cooling_until":null}]`} {
		if !strings.Contains(got, want) {
			t.Errorf("live JSON\n%s\nlacks %s", got, want)
		}
	}
	b, _ = json.Marshal(liveOf(&actors.View{Status: actors.StatusActive}, nil, now))
	if s := string(b); !strings.Contains(s, `"limit_families":[]`) || strings.Contains(s, "credits") || strings.Contains(s, "active_limit") {
		t.Errorf("no limits reported: %s", s)
	}
}

// Credentials in an account's base_url are refused with a 400 naming
// base_url, on create, update and import, and never echoed; a row stored
// before that shows them redacted (before, they were stored unsealed and
// returned by GET /api/admin/accounts/{name}; issue 16, finding 8).
func TestAccountBaseURLCredentials(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.withKey(e.adminKey)
	for _, u := range []string{"http://user:SECRET@127.0.0.1:1/v1", "https://SECRET@api.example.com/v1", "http://user:SECRET@127.0.0.1:99999/v1"} {
		r := c.do("POST", "/api/admin/accounts", map[string]any{"name": "cred", "provider": "openai_compat", "base_url": u, "models": []string{"m"}})
		r.want(t, 400)
		if p := gjson.GetBytes(r.body, "error.param").Str; p != "base_url" || !strings.Contains(string(r.body), "credentials") || strings.Contains(string(r.body), "SECRET") {
			t.Errorf("create with %q: %s", u, r.body)
		}
	}
	r := c.do("PUT", "/api/admin/accounts/acct-a", map[string]any{"base_url": "http://user:SECRET@127.0.0.1:1/v1"})
	r.want(t, 400)
	if strings.Contains(string(r.body), "SECRET") || gjson.GetBytes(r.body, "error.param").Str != "base_url" {
		t.Errorf("update: %s", r.body)
	}
	r = c.do("POST", "/api/admin/accounts/import?base_url="+url.QueryEscape("https://u:SECRET@chatgpt.com/backend-api/codex"), `{"refresh_token":"rt"}`)
	r.want(t, 400)
	if strings.Contains(string(r.body), "SECRET") || gjson.GetBytes(r.body, "error.param").Str != "base_url" {
		t.Errorf("import: %s", r.body)
	}
	if a, err := e.store.GetAccount(t.Context(), "acct-a"); err != nil || storage.URLHasCredentials(a.BaseURL) {
		t.Fatalf("stored: %+v %v", a.BaseURL, err)
	}
	// The store refuses them too (the config file, the CLI), without the URL in the error.
	_, err := e.store.PutAccount(t.Context(), storage.Account{Name: "cfg", Provider: storage.ProviderOpenAI, BaseURL: "http://u:SECRET@h/v1"})
	if !errors.Is(err, storage.ErrInvalid) || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("store: %v", err)
	}
	// A row from before: shown redacted, in the account and in the export.
	old := storage.Account{Name: "old", Provider: storage.ProviderOpenAICompat, BaseURL: "http://user:SECRET@10.0.0.1/v1"}
	if j, _ := json.Marshal(toAccountJSON(old, nil, nil, time.Now())); strings.Contains(string(j), "SECRET") || strings.Contains(string(j), "user") {
		t.Fatalf("legacy account: %s", j)
	}
	if j, _ := json.Marshal(exportOf(old)); strings.Contains(string(j), "SECRET") || !strings.Contains(string(j), "REDACTED@10.0.0.1") {
		t.Fatalf("legacy export: %s", j)
	}
}
