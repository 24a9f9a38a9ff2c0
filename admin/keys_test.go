package admin

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/storage"
)

func chatWith(t *testing.T, e *adminEnv, secret, model string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", e.base+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestAdminKeys(t *testing.T) {
	e := newAdminEnv(t, 2)
	c := e.login()
	r := c.do("POST", "/api/admin/keys", map[string]any{"name": "app", "group": "", "models": []string{"m"},
		"limits": map[string]int{"rpm": 100, "rpd": 1000, "tokens_per_day": 50000}, "expires_in": "720h"}).want(t, 201)
	secret, _ := r.json["secret"].(string)
	k := r.json["key"].(map[string]any)
	if !strings.HasPrefix(secret, gateway.KeyPrefix) || !strings.HasPrefix(secret, k["prefix"].(string)) || k["state"] != "active" ||
		k["limits"].(map[string]any)["rpm"].(float64) != 100 || k["expires_at"] == nil {
		t.Fatalf("created: %s", r.body)
	}
	id := k["id"].(string)
	// The secret is shown once: never again, nor its hash.
	for _, path := range []string{"/api/admin/keys", "/api/admin/keys/" + id, "/api/admin/keys/app"} {
		r := c.do("GET", path, nil).want(t, 200)
		if strings.Contains(string(r.body), secret) || strings.Contains(string(r.body), storage.HashKey(secret)) || strings.Contains(string(r.body), `"secret"`) {
			t.Fatalf("%s leaks the secret or hash: %s", path, r.body)
		}
	}
	// The key works against /v1, within its allowlist.
	if st := chatWith(t, e, secret, "m"); st != 200 {
		t.Fatalf("new key on /v1: %d", st)
	}
	if st := chatWith(t, e, secret, "other-model"); st != 403 {
		t.Fatalf("model outside the allowlist: %d", st)
	}
	// Edit, disable, enable, expire: each takes effect at once.
	r = c.do("PATCH", "/api/admin/keys/"+id, map[string]any{"models": []string{}, "expires_at": nil}).want(t, 200)
	if r.json["expires_at"] != nil || len(r.json["models"].([]any)) != 0 || r.json["limits"].(map[string]any)["rpm"].(float64) != 100 {
		t.Fatalf("patched: %s", r.body)
	}
	if st := chatWith(t, e, secret, "other-model"); st == 403 {
		t.Fatalf("allowlist change not applied")
	}
	c.do("POST", "/api/admin/keys/"+id+"/disable", nil).want(t, 200)
	if st := chatWith(t, e, secret, "m"); st != 401 {
		t.Fatalf("disabled key: %d", st)
	}
	c.do("POST", "/api/admin/keys/"+id+"/enable", nil).want(t, 200)
	if st := chatWith(t, e, secret, "m"); st != 200 {
		t.Fatalf("re-enabled key: %d", st)
	}
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	if r := c.do("PATCH", "/api/admin/keys/app", map[string]any{"expires_at": past}).want(t, 200); r.json["state"] != "expired" {
		t.Fatalf("expired: %s", r.body)
	}
	if st := chatWith(t, e, secret, "m"); st != 401 {
		t.Fatalf("expired key: %d", st)
	}
	// Bad input.
	for _, body := range []any{
		map[string]any{}, map[string]any{"name": ""}, map[string]any{"name": "x", "limits": map[string]int{"rpm": -1}},
		map[string]any{"name": "x", "expires_in": "soon"}, map[string]any{"name": "x", "expires_at": "tomorrow"},
		map[string]any{"name": "x", "expires_at": past, "expires_in": "1h"}, map[string]any{"name": "x", "bogus": true}, `{`,
	} {
		if r := c.do("POST", "/api/admin/keys", body); r.status != 400 {
			t.Errorf("create %v: %d %s", body, r.status, r.body)
		}
	}
	c.do("POST", "/api/admin/keys", map[string]any{"name": "app"}).want(t, 409)
	c.do("PATCH", "/api/admin/keys/app", map[string]any{"name": "ops"}).want(t, 409)
	c.do("PATCH", "/api/admin/keys/ghost", map[string]any{"rpm": 1}).want(t, 404)
	c.do("POST", "/api/admin/keys/app/explode", nil).want(t, 405)
	// Admin keys can be made and used for the admin API.
	r = c.do("POST", "/api/admin/keys", map[string]any{"name": "ops-2", "admin": true}).want(t, 201)
	e.withKey(r.json["secret"].(string)).do("GET", "/api/admin/ops", nil).want(t, 200)
	// Filter and delete.
	if r := c.do("GET", "/api/admin/keys?q=OPS", nil).want(t, 200); len(r.json["keys"].([]any)) != 2 {
		t.Fatalf("filter: %s", r.body)
	}
	c.do("DELETE", "/api/admin/keys/"+id, nil).want(t, 200)
	c.do("DELETE", "/api/admin/keys/"+id, nil).want(t, 404)
	if st := chatWith(t, e, secret, "m"); st != 401 {
		t.Fatalf("deleted key: %d", st)
	}
}

func TestAdminUsage(t *testing.T) {
	e := newAdminEnv(t, 2)
	c := e.withKey(e.adminKey)
	keys, _ := e.store.ListAPIKeys(t.Context())
	views := e.sys.Views()
	hour := time.Now().UTC().Truncate(time.Hour)
	var recs []storage.UsageRecord
	for i := range 60 {
		r := storage.UsageRecord{RequestID: fmt.Sprintf("req-%02d", i), At: hour.Add(-time.Duration(i%3) * time.Hour).Add(time.Duration(i) * time.Second),
			KeyID: keys[i%2].ID, AccountID: views[i%2].ID, Model: []string{"m", "n", "o"}[i%3], Route: "chat.completions", Status: 200,
			Attempts: 1, Latency: 20 * time.Millisecond, InputTokens: 10, OutputTokens: 5, Cost: 12_345}
		if i%10 == 0 {
			r.Status, r.ErrorClass = 503, "transient"
		}
		r.Estimated = i == 7
		recs = append(recs, r)
	}
	if err := e.store.InsertUsage(t.Context(), recs); err != nil {
		t.Fatal(err)
	}
	r := c.do("GET", "/api/admin/usage", nil).want(t, 200)
	tot := r.json["total"].(map[string]any)
	if tot["requests"].(float64) != 60 || tot["errors"].(float64) != 6 || tot["input_tokens"].(float64) != 600 || r.json["group_by"] != "model" {
		t.Fatalf("usage: %s", r.body)
	}
	// Money as everywhere in the admin API: a decimal string and micro-units.
	if tot["cost"] != "0.740700" || tot["cost_micro"].(float64) != 740_700 {
		t.Fatalf("usage cost: %s", r.body)
	}
	if s := r.json["series"].([]any); len(s) != 3 || len(s[0].(map[string]any)["points"].([]any)) != 1 {
		t.Fatalf("series by model: %s", r.body)
	}
	for _, s := range r.json["series"].([]any) { // 20 requests a model
		total, point := s.(map[string]any)["total"].(map[string]any), s.(map[string]any)["points"].([]any)[0].(map[string]any)
		if total["cost"] != "0.246900" || total["cost_micro"].(float64) != 246_900 || point["cost"] != "0.246900" || point["cost_micro"].(float64) != 246_900 {
			t.Fatalf("series cost: %s", r.body)
		}
	}
	r = c.do("GET", "/api/admin/usage?group_by=key&bucket=day", nil).want(t, 200)
	s := r.json["series"].([]any)
	if len(s) != 2 || s[0].(map[string]any)["name"] == "" {
		t.Fatalf("series by key: %s", r.body)
	}
	r = c.do("GET", "/api/admin/usage?group_by=account&top=1&model=m", nil).want(t, 200)
	if s := r.json["series"].([]any); len(s) != 1 || r.json["groups"].(float64) != 2 || r.json["total"].(map[string]any)["requests"].(float64) != 20 {
		t.Fatalf("top 1 by account, model m: %s", r.body)
	}
	from := hour.Add(-30 * 24 * time.Hour).Format(time.RFC3339)
	c.do("GET", "/api/admin/usage?from="+from, nil).want(t, 200)
	for _, q := range []string{"group_by=color", "bucket=week", "from=yesterday", "from=" + hour.Format(time.RFC3339) + "&to=" + from,
		"from=" + hour.Add(-40*24*time.Hour).Format(time.RFC3339), "top=0"} {
		c.do("GET", "/api/admin/usage?"+q, nil).want(t, 400)
	}

	// The request log: pages, filters, cursor.
	seen := map[string]bool{}
	cursor := ""
	for range 10 {
		q := "/api/admin/usage/requests?limit=25"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		r := c.do("GET", q, nil).want(t, 200)
		for _, rec := range r.json["records"].([]any) {
			m := rec.(map[string]any)
			if seen[m["request_id"].(string)] {
				t.Fatalf("record %v twice", m["request_id"])
			}
			seen[m["request_id"].(string)] = true
			if m["key"] == "" || m["account"] == "" {
				t.Fatalf("names not resolved: %v", m)
			}
			if m["estimated"] != (m["request_id"] == "req-07") {
				t.Fatalf("estimated: %v", m)
			}
			// The record's own charge: no price is set here, so a cost
			// recomputed from prices would be 0.
			if m["cost"] != "0.012345" || m["cost_micro"].(float64) != 12_345 {
				t.Fatalf("cost: %v", m)
			}
		}
		next, _ := r.json["next_cursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	if len(seen) != 60 {
		t.Fatalf("paged %d records, want 60", len(seen))
	}
	if r := c.do("GET", "/api/admin/usage/requests?failed=1", nil).want(t, 200); len(r.json["records"].([]any)) != 6 || r.json["next_cursor"] != nil {
		t.Fatalf("failed only: %s", r.body)
	}
	if r := c.do("GET", "/api/admin/usage/requests?model=n&key="+keys[1].ID, nil).want(t, 200); len(r.json["records"].([]any)) != 10 {
		t.Fatalf("model n, key 1: %d", len(r.json["records"].([]any)))
	}
	for _, q := range []string{"cursor=%%%", "cursor=bm9wZQ", "status=999", "limit=0", "from=x"} {
		c.do("GET", "/api/admin/usage/requests?"+q, nil).want(t, 400)
	}
	c.do("GET", "/api/admin/usage/nope", nil).want(t, 404)
}

func TestAdminSettings(t *testing.T) {
	e := newAdminEnv(t, 1)
	e.srv.SetInfo(map[string]any{"version": "test"})
	c := e.login()
	r := c.do("GET", "/api/admin/settings", nil).want(t, 200)
	set := r.json["settings"].([]any)
	if len(set) != 4 || set[3].(map[string]any)["key"] != storage.SettingAccountTombstonesDays || set[3].(map[string]any)["value"] != "7" || set[0].(map[string]any)["value"] != "30" || set[2].(map[string]any)["key"] != storage.SettingUsageDailyDays || set[2].(map[string]any)["value"] != "1825" || set[0].(map[string]any)["set"] != false || r.json["instance"].(map[string]any)["version"] != "test" {
		t.Fatalf("settings: %s", r.body)
	}
	r = c.do("PUT", "/api/admin/settings", map[string]any{"settings": map[string]string{storage.SettingUsageRecordsDays: "7"}}).want(t, 200)
	c.do("PUT", "/api/admin/settings", map[string]any{"settings": map[string]string{storage.SettingUsageDailyDays: "36500"}}).want(t, 200)
	c.do("PUT", "/api/admin/settings", map[string]any{"settings": map[string]string{storage.SettingAccountTombstonesDays: "30"}}).want(t, 200)
	if v := r.json["settings"].([]any)[0].(map[string]any); v["value"] != "7" || v["set"] != true {
		t.Fatalf("after put: %s", r.body)
	}
	for _, body := range []any{
		map[string]any{"settings": map[string]string{"nope": "1"}},
		map[string]any{"settings": map[string]string{storage.SettingUsageRecordsDays: "0"}},
		map[string]any{"settings": map[string]string{storage.SettingUsageRecordsDays: "ten"}},
		map[string]any{"settings": map[string]string{storage.SettingUsageRecordsDays: "5", "nope": "1"}},
		map[string]any{"settings": map[string]string{storage.SettingUsageDailyDays: "36501"}},
		map[string]any{"settings": map[string]string{storage.SettingAccountTombstonesDays: "0"}},
		map[string]any{}, `x`,
	} {
		c.do("PUT", "/api/admin/settings", body).want(t, 400)
	}
	if v, _ := e.store.GetSetting(t.Context(), storage.SettingUsageRecordsDays); v != "7" {
		t.Fatalf("a refused PUT changed the setting: %q", v)
	}
	c.do("DELETE", "/api/admin/settings", nil).want(t, 405)
	c.do("GET", "/api/admin/settings/x", nil).want(t, 404)
}

// TestAdminKeyForUser: POST /api/admin/keys with "user" (id, name or
// email) makes the user's key, as troupe keys create --user does; an
// unknown user, a user's admin key and a change of owner are refused 400
// naming the field, with nothing stored.
func TestAdminKeyForUser(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	u := c.do("POST", "/api/admin/users", map[string]any{"name": "alice", "email": "alice@example.com", "balance": "1"}).want(t, 201)
	uid := u.json["id"].(string)
	for _, who := range []string{"alice", uid, "alice@example.com"} {
		r := c.do("POST", "/api/admin/keys", map[string]any{"name": "k-" + who, "user": who}).want(t, 201)
		if k := r.json["key"].(map[string]any); k["user_id"] != uid || k["admin"] != false {
			t.Errorf("user %q: key %v, want alice's (%s)", who, k, uid)
		}
	}
	if p := c.do("POST", "/api/admin/keys", map[string]any{"name": "ghost", "user": "nobody"}).want(t, 400).errParam(); p != "user" {
		t.Errorf("unknown user: param %q", p)
	}
	if p := c.do("POST", "/api/admin/keys", map[string]any{"name": "adm", "user": "alice", "admin": true}).want(t, 400).errParam(); p != "admin" {
		t.Errorf("a user's admin key: param %q", p)
	}
	if p := c.do("PATCH", "/api/admin/keys/k-alice", map[string]any{"user": ""}).want(t, 400).errParam(); p != "user" {
		t.Errorf("owner change: param %q", p)
	}
	// An empty user is an operator key, as without the field.
	if r := c.do("POST", "/api/admin/keys", map[string]any{"name": "op", "user": ""}).want(t, 201); r.json["key"].(map[string]any)["user_id"] != "" {
		t.Errorf("empty user: %s", r.body)
	}
	owned, refused := 0, 0
	for _, k := range c.do("GET", "/api/admin/keys", nil).want(t, 200).json["keys"].([]any) {
		k := k.(map[string]any)
		if k["user_id"] == uid {
			owned++
		}
		if k["name"] == "ghost" || k["name"] == "adm" {
			refused++
		}
	}
	if owned != 3 || refused != 0 {
		t.Errorf("alice owns %d keys (want 3), %d refused ones stored", owned, refused)
	}
}
