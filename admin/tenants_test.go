package admin

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/troupe-gw/troupe/storage"
)

// TestAdminUsersAndPrices: users created, listed, changed and credited
// through the admin API, with amounts as exact decimal strings and every
// balance change a ledger row naming who; prices set and listed; the spend
// route answers the daily rollups.
func TestAdminUsersAndPrices(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	r := c.do("POST", "/api/admin/users", map[string]any{"name": "alice", "email": "alice@example.com", "balance": "20.5", "rpm": 60}).want(t, 201)
	if r.json["balance"] != "20.500000" || r.json["has_password"] != false {
		t.Fatalf("created %v", r.json)
	}
	c.do("POST", "/api/admin/users", map[string]any{"name": "alice"}).want(t, 409)
	if c.do("POST", "/api/admin/users", map[string]any{"name": "bob", "balance": "1.0000001"}).want(t, 400).errParam() != "balance" {
		t.Fatal("a balance with 7 decimals was not refused for its balance")
	}
	if c.do("POST", "/api/admin/users", map[string]any{"name": "bob", "password": "short"}).want(t, 400).errParam() != "password" {
		t.Fatal("a weak password was not refused")
	}
	r = c.do("POST", "/api/admin/users/alice/ledger", map[string]any{"amount": "0.000001", "note": "rounding"}).want(t, 200)
	if u := r.json["user"].(map[string]any); u["balance"] != "20.500001" {
		t.Fatalf("after a top-up: %v", u)
	}
	ledger := r.json["ledger"].([]any)
	if len(ledger) != 2 || ledger[0].(map[string]any)["actor"] != "admin:admin" || ledger[0].(map[string]any)["note"] != "rounding" {
		t.Fatalf("ledger %v", ledger)
	}
	c.do("POST", "/api/admin/users/alice/ledger", map[string]any{"amount": "5"}).want(t, 400)
	c.do("POST", "/api/admin/users/alice/ledger", map[string]any{"amount": "-5", "note": "x"}).want(t, 400) // a negative top-up
	c.do("POST", "/api/admin/users/alice/ledger", map[string]any{"kind": "charge", "amount": "-5", "note": "x"}).want(t, 400)
	r = c.do("POST", "/api/admin/users/alice/ledger", map[string]any{"kind": "adjustment", "amount": "-0.5", "note": "correction"}).want(t, 200)
	if u := r.json["user"].(map[string]any); u["balance"] != "20.000001" {
		t.Fatalf("after an adjustment: %v", u)
	}
	r = c.do("PATCH", "/api/admin/users/alice", map[string]any{"disabled": true, "models": []string{"m"}}).want(t, 200)
	if u := r.json["user"].(map[string]any); u["disabled"] != true || len(u["models"].([]any)) != 1 || u["email"] != "alice@example.com" {
		t.Fatalf("after PATCH: %v", u)
	}
	c.do("PATCH", "/api/admin/users/alice", map[string]any{"balance": "100"}).want(t, 400)
	r = c.do("GET", "/api/admin/users?q=ALI", nil).want(t, 200)
	if users := r.json["users"].([]any); len(users) != 1 || users[0].(map[string]any)["balance_micro"].(float64) != 20_000_001 {
		t.Fatalf("users %v", users)
	}
	c.do("GET", "/api/admin/users/nobody", nil).want(t, 404)
	c.do("DELETE", "/api/admin/users/alice", nil).want(t, 409) // it has ledger rows
	c.do("POST", "/api/admin/users", map[string]any{"name": "temp"}).want(t, 201)
	c.do("DELETE", "/api/admin/users/temp", nil).want(t, 204)

	r = c.do("PUT", "/api/admin/prices/m", map[string]any{"input": "1.25", "output": "10"}).want(t, 200)
	if r.json["cached_input"] != "1.250000" || r.json["cache_write"] != "1.562500" || r.json["output"] != "10.000000" || r.json["currency"] != "USD" {
		t.Fatalf("price %v", r.json)
	}
	c.do("PUT", "/api/admin/prices/m", map[string]any{"input": "1.25"}).want(t, 400)
	c.do("PUT", "/api/admin/prices/m", map[string]any{"input": "x", "output": "1"}).want(t, 400)
	if p := c.do("GET", "/api/admin/prices", nil).want(t, 200).json["prices"].([]any); len(p) != 1 {
		t.Fatalf("prices %v", p)
	}
	c.do("DELETE", "/api/admin/prices/m", nil).want(t, 204)
	c.do("DELETE", "/api/admin/prices/m", nil).want(t, 404)

	// A user group's price multiplier: exact decimal strings, above 0.
	if r := c.do("PUT", "/api/admin/price-groups/resellers", map[string]any{"multiplier": "0.8"}).want(t, 200); r.json["multiplier"] != "0.800000" {
		t.Fatalf("price group %v", r.json)
	}
	for _, bad := range []string{"0", "-1", "0.0000001", "x", "", "1000.000001", "9223372036854.775807"} {
		if c.do("PUT", "/api/admin/price-groups/resellers", map[string]any{"multiplier": bad}).want(t, 400).errParam() != "multiplier" {
			t.Fatalf("multiplier %q was not refused for its multiplier", bad)
		}
	}
	if g := c.do("GET", "/api/admin/price-groups", nil).want(t, 200).json["price_groups"].([]any); len(g) != 1 || g[0].(map[string]any)["multiplier"] != "0.800000" {
		t.Fatalf("price groups %v", g)
	}
	if mult, err := e.store.ListPriceGroups(context.Background()); err != nil || len(mult) != 1 || mult[0].Multiplier != 800_000 {
		t.Fatalf("stored price groups %v %v, want resellers at 800000 ppm", mult, err)
	}
	c.do("DELETE", "/api/admin/price-groups/resellers", nil).want(t, 204)
	c.do("DELETE", "/api/admin/price-groups/resellers", nil).want(t, 404)
	c.do("POST", "/api/admin/price-groups", nil).want(t, 405)
	if rows := c.do("GET", "/api/admin/spend?user=alice", nil).want(t, 200).json["rows"].([]any); len(rows) != 0 {
		t.Fatalf("spend of a user who sent nothing: %v", rows)
	}
	c.do("GET", "/api/admin/spend?from=yesterday", nil).want(t, 400)
	// An admin key works too, and is named in the ledger.
	k := e.withKey(e.adminKey)
	r = k.do("POST", "/api/admin/users/alice/ledger", map[string]any{"amount": "1", "note": "by key"}).want(t, 200)
	if a := r.json["ledger"].([]any)[0].(map[string]any)["actor"]; a != "key:ops" {
		t.Fatalf("actor %v", a)
	}
	// A client key is refused.
	e.withKey(e.key).do("GET", "/api/admin/users", nil).want(t, 403)
}

// TestAdminUserLedgerPaging: a user's ledger of more than a page, read
// through the admin API from GET /users/{id} and then GET …/ledger with
// each answer's next_before, comes out newest first, every row once, none
// missing, none of another user's; a cursor that is not a row id is a 400
// in the admin API's error shape, naming before.
func TestAdminUserLedgerPaging(t *testing.T) {
	e := newAdminEnv(t, 0)
	c := e.login()
	alice := c.do("POST", "/api/admin/users", map[string]any{"name": "alice", "balance": "1"}).want(t, 201).json["id"].(string)
	bob := c.do("POST", "/api/admin/users", map[string]any{"name": "bob", "balance": "1"}).want(t, 201).json["id"].(string)
	ctx := context.Background()
	for i := range 120 { // bob's rows between alice's, so her pages' ids are not consecutive
		for _, u := range []string{alice, bob} {
			if _, err := e.store.PostLedger(ctx, storage.LedgerEntry{UserID: u, Kind: storage.LedgerTopup, Amount: 1, Actor: "test", Note: fmt.Sprint("row ", i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	want, err := e.store.Ledger(ctx, storage.LedgerQuery{UserID: alice, Limit: 1000})
	if err != nil || len(want) != 121 {
		t.Fatalf("alice's stored ledger: %d rows, %v; want 121", len(want), err)
	}
	// collect appends a page's ids to got and returns its next_before ("" when null).
	var got []int64
	collect := func(r *response) string {
		t.Helper()
		for _, row := range r.json["ledger"].([]any) {
			got = append(got, int64(row.(map[string]any)["id"].(float64)))
		}
		next, ok := r.json["next_before"].(float64)
		if !ok {
			if r.json["next_before"] != nil {
				t.Fatalf("next_before = %v, want a number or null", r.json["next_before"])
			}
			return ""
		}
		return strconv.FormatInt(int64(next), 10)
	}
	next := collect(c.do("GET", "/api/admin/users/alice", nil).want(t, 200))
	if len(got) != 50 || next == "" {
		t.Fatalf("GET user: %d rows, next_before %q; want 50 and a cursor", len(got), next)
	}
	pages := 1
	for next != "" {
		next = collect(c.do("GET", "/api/admin/users/"+alice+"/ledger?limit=50&before="+next, nil).want(t, 200))
		if pages++; pages > 10 {
			t.Fatal("paging does not end")
		}
	}
	if len(got) != len(want) {
		t.Fatalf("paged %d rows, the store has %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i].ID {
			t.Fatalf("row %d: id %d, want %d (paged ids %v)", i, got[i], want[i].ID, got)
		}
	}
	// The default page is 50 rows; a smaller limit pages the same rows.
	got = got[:0]
	if next = collect(c.do("GET", "/api/admin/users/alice/ledger", nil).want(t, 200)); len(got) != 50 || next != strconv.FormatInt(want[49].ID, 10) {
		t.Fatalf("default page: %d rows, next_before %s; want 50, %d", len(got), next, want[49].ID)
	}
	got, next = got[:0], ""
	for page := 0; page == 0 || next != ""; page++ {
		next = collect(c.do("GET", "/api/admin/users/alice/ledger?limit=11&before="+next, nil).want(t, 200))
	}
	if len(got) != len(want) || got[0] != want[0].ID || got[len(got)-1] != want[len(want)-1].ID {
		t.Fatalf("pages of 11: %d rows from %d to %d", len(got), got[0], got[len(got)-1])
	}
	// A full last page is followed by an empty one with a null next_before.
	got = got[:0]
	r := c.do("GET", "/api/admin/users/alice/ledger?limit=1&before="+strconv.FormatInt(want[len(want)-2].ID, 10), nil).want(t, 200)
	if next = collect(r); len(got) != 1 || next == "" {
		t.Fatalf("the last row's page: %d rows, next_before %q", len(got), next)
	}
	if next = collect(c.do("GET", "/api/admin/users/alice/ledger?before="+next, nil).want(t, 200)); len(got) != 1 || next != "" {
		t.Fatalf("past the last row: %d rows, next_before %q", len(got), next)
	}

	for _, bad := range []string{"x", "0", "-1", "1.5", "99999999999999999999"} {
		r := c.do("GET", "/api/admin/users/alice/ledger?before="+bad, nil).want(t, 400)
		if !isOpenAIError(r.body) || r.errParam() != "before" {
			t.Errorf("before=%s: %s, want the admin API's error naming before", bad, r.body)
		}
	}
	for _, bad := range []string{"0", "1001", "x"} {
		if r := c.do("GET", "/api/admin/users/alice/ledger?limit="+bad, nil).want(t, 400); r.errParam() != "limit" {
			t.Errorf("limit=%s: %s", bad, r.body)
		}
	}
	c.do("GET", "/api/admin/users/nobody/ledger", nil).want(t, 404)
	c.do("DELETE", "/api/admin/users/alice/ledger", nil).want(t, 405)
}

// TestAdminInvitationsAndRegistration: a code is shown once and stored as
// its hash, used up after its uses, disabled on DELETE; the registration
// mode is one of three and defaults to closed.
func TestAdminInvitationsAndRegistration(t *testing.T) {
	e := newAdminEnv(t, 0)
	c := e.login()
	if m := c.do("GET", "/api/admin/registration", nil).want(t, 200).json["mode"]; m != "closed" {
		t.Fatalf("default mode %v", m)
	}
	c.do("PUT", "/api/admin/registration", map[string]string{"mode": "invite"}).want(t, 200)
	c.do("PUT", "/api/admin/registration", map[string]string{"mode": "anyone"}).want(t, 400)
	if m := c.do("GET", "/api/admin/registration", nil).want(t, 200).json["mode"]; m != "invite" {
		t.Fatalf("mode %v", m)
	}
	r := c.do("POST", "/api/admin/invitations", map[string]any{"max_uses": 1, "note": "friends", "expires_in_hours": 24}).want(t, 201)
	code, _ := r.json["code"].(string)
	inv := r.json["invitation"].(map[string]any)
	if len(code) < 20 || inv["prefix"] != code[:8] || inv["created_by"] != "admin:admin" || inv["expires_at"] == nil {
		t.Fatalf("created %v", r.json)
	}
	// The code registers one user (the console's registration uses this path).
	if _, err := e.store.CreateUser(t.Context(), storage.User{Name: "friend"}, storage.NewUser{Invitation: storage.HashKey(code)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.CreateUser(t.Context(), storage.User{Name: "second"}, storage.NewUser{Invitation: storage.HashKey(code)}); err == nil {
		t.Fatal("a 1-use code registered twice")
	}
	l := c.do("GET", "/api/admin/invitations", nil).want(t, 200).json["invitations"].([]any)
	if len(l) != 1 || l[0].(map[string]any)["uses"].(float64) != 1 || strings.Contains(string(c.do("GET", "/api/admin/invitations", nil).body), code) {
		t.Fatalf("invitations %v (the code must never be listed)", l)
	}
	c.do("DELETE", "/api/admin/invitations/"+inv["id"].(string), nil).want(t, 204)
	c.do("DELETE", "/api/admin/invitations/nope", nil).want(t, 404)
	if l := c.do("GET", "/api/admin/invitations", nil).want(t, 200).json["invitations"].([]any); l[0].(map[string]any)["disabled"] != true {
		t.Fatalf("after DELETE: %v", l)
	}
	c.do("POST", "/api/admin/invitations", map[string]any{"max_uses": -1}).want(t, 400)
}

// TestAdminConflictMessages: a 409 says what conflicts (it said "…
// conflicts with one stored: invalid value" for a taken name and a
// repeated refund alike).
func TestAdminConflictMessages(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	c.do("POST", "/api/admin/users", map[string]any{"name": "alice", "email": "alice@example.com", "balance": "5"}).want(t, 201)
	c.do("POST", "/api/admin/users", map[string]any{"name": "bob"}).want(t, 201)
	for _, tc := range []struct {
		method, path string
		body         map[string]any
		param, msg   string
	}{
		{"POST", "/api/admin/users", map[string]any{"name": "alice"}, "name", "A user named alice exists."},
		{"POST", "/api/admin/users", map[string]any{"name": "carol", "email": "alice@example.com"}, "email", "A user with the email alice@example.com exists."},
		{"PATCH", "/api/admin/users/bob", map[string]any{"email": "alice@example.com"}, "email", "A user with the email alice@example.com exists."},
		{"DELETE", "/api/admin/users/alice", nil, "", "User alice has ledger rows and cannot be deleted; disable it instead."},
	} {
		var body any
		if tc.body != nil {
			body = tc.body
		}
		r := c.do(tc.method, tc.path, body).want(t, 409)
		if r.errCode() != "conflict" || r.errParam() != tc.param || !strings.Contains(string(r.body), tc.msg) {
			t.Fatalf("%s %s: %s", tc.method, tc.path, r.body)
		}
	}
	alice, err := e.store.GetUser(t.Context(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.PostLedger(t.Context(), storage.LedgerEntry{UserID: alice.ID, Kind: storage.LedgerCharge, Amount: -2_000_000,
		Actor: "gateway", RequestID: "req-1"}); err != nil {
		t.Fatal(err)
	}
	refund := map[string]any{"kind": "refund", "amount": "1", "note": "bad answer", "request_id": "req-1"}
	c.do("POST", "/api/admin/users/alice/ledger", refund).want(t, 200)
	r := c.do("POST", "/api/admin/users/alice/ledger", refund).want(t, 409)
	if r.errParam() != "request_id" || !strings.Contains(string(r.body), "Request req-1 already has a refund in the ledger") {
		t.Fatalf("a repeated refund: %s", r.body)
	}
}

// TestAdminTenantBodiesRefuseUnknownFields: a body of the users, ledger,
// prices, price-group, invitation and registration routes with a field the
// route does not take is a 400 naming it, as the keys and accounts routes
// answer, and changes nothing. Before, such a field was dropped in silence:
// {"name":"bob","concurrency":2} (the CLI's flag name) made a user without a
// concurrency limit, {"expires_at":…} an invitation that never expires, and
// a refund's misspelt "request" a goodwill credit naming no request.
func TestAdminTenantBodiesRefuseUnknownFields(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	c.do("POST", "/api/admin/users", map[string]any{"name": "alice", "balance": "1"}).want(t, 201)
	for _, tc := range []struct {
		method, path string
		body         map[string]any
		field        string
	}{
		{"POST", "/api/admin/users", map[string]any{"name": "bob", "concurrency": 2}, "concurrency"},
		{"PATCH", "/api/admin/users/alice", map[string]any{"concurrency": 2}, "concurrency"},
		{"POST", "/api/admin/users/alice/ledger", map[string]any{"kind": "refund", "amount": "0.5", "note": "x", "request": "req_1"}, "request"},
		{"PUT", "/api/admin/prices/m", map[string]any{"input": "1", "output": "2", "cached": "0.1"}, "cached"},
		{"PUT", "/api/admin/price-groups/g", map[string]any{"multiplier": "0.8", "group": "g"}, "group"},
		{"POST", "/api/admin/invitations", map[string]any{"max_uses": 1, "expires_at": "2020-01-01T00:00:00Z"}, "expires_at"},
		{"PUT", "/api/admin/registration", map[string]any{"mode": "open", "invite_only": true}, "invite_only"},
	} {
		r := c.do(tc.method, tc.path, tc.body).want(t, 400)
		if msg, _ := r.json["error"].(map[string]any)["message"].(string); !strings.Contains(msg, `"`+tc.field+`"`) {
			t.Errorf("%s %s: message %q does not name the field %q", tc.method, tc.path, msg, tc.field)
		}
	}
	if u := c.do("GET", "/api/admin/users/alice", nil).want(t, 200).json["user"].(map[string]any); u["balance"] != "1.000000" {
		t.Errorf("alice after the refused bodies: %v", u)
	}
	c.do("GET", "/api/admin/users/bob", nil).want(t, 404)
	if p := c.do("GET", "/api/admin/prices", nil).want(t, 200).json["prices"].([]any); len(p) != 0 {
		t.Errorf("prices after the refused body: %v", p)
	}
	if inv := c.do("GET", "/api/admin/invitations", nil).want(t, 200).json["invitations"].([]any); len(inv) != 0 {
		t.Errorf("invitations after the refused body: %v", inv)
	}
}

// TestAdminListsRefuseEmptyEntries: a models or tags list with an empty or
// null entry is a 400 naming the list, for users, keys and accounts. Before,
// null decoded to "" and was stored: a key or user allowed only the model
// "" (every request refused 403), an account tagged "".
func TestAdminListsRefuseEmptyEntries(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	for _, tc := range []struct {
		path  string
		body  map[string]any
		param string
	}{
		{"/api/admin/users", map[string]any{"name": "u", "models": []any{nil}}, "models"},
		{"/api/admin/users", map[string]any{"name": "u", "models": []any{"m", ""}}, "models"},
		{"/api/admin/keys", map[string]any{"name": "k", "models": []any{nil, ""}}, "models"},
		{"/api/admin/accounts", map[string]any{"name": "a", "provider": "openai", "models": []any{""}, "credentials": map[string]any{"api_key": "sk-x"}}, "models"},
		{"/api/admin/accounts", map[string]any{"name": "a", "provider": "openai", "tags": []any{"t", nil}, "credentials": map[string]any{"api_key": "sk-x"}}, "tags"},
	} {
		if got := c.do("POST", tc.path, tc.body).want(t, 400).errParam(); got != tc.param {
			t.Errorf("POST %s %v: param %q, want %q", tc.path, tc.body, got, tc.param)
		}
	}
	c.do("POST", "/api/admin/users", map[string]any{"name": "u", "models": []any{"m"}}).want(t, 201)
	c.do("PATCH", "/api/admin/users/u", map[string]any{"models": []any{nil}}).want(t, 400)
	c.do("POST", "/api/admin/keys", map[string]any{"name": "k", "models": []any{"m"}}).want(t, 201)
}

// TestAdminAmountsAsNumbers: an amount sent as a JSON number (a user's
// starting balance, a ledger amount, a price) is a 400 naming the field,
// saying that amounts are decimal strings of the currency with an example,
// and which string to send for the number sent (as units, and as
// micro-units for a number that looks like a count of them); not "the body
// must be JSON with at least a name", which it said for a balance. A string
// that is not an amount names the format too. Nothing is stored.
func TestAdminAmountsAsNumbers(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	msg := func(r *response) string {
		em, _ := r.json["error"].(map[string]any)
		s, _ := em["message"].(string)
		return s
	}
	for _, tc := range []struct {
		method, path string
		body         string
		param        string
		wants        []string
	}{
		{"POST", "/api/admin/users", `{"name":"carol","balance":20000000}`, "balance",
			[]string{"balance was the JSON number 20000000", `{"balance": "12.50"}`, `For 20000000 units send "20000000"`, `for 20000000 micro-units send "20.000000"`}},
		{"POST", "/api/admin/users", `{"name":"carol","balance":5.5}`, "balance",
			[]string{"JSON number 5.5", `For 5.5 units send "5.5"`, "12500000 micro-units"}},
		{"POST", "/api/admin/users", `{"name":"carol","balance":"20,5"}`, "balance",
			[]string{`balance "20,5" is not a decimal amount`, `{"balance": "12.50"}`}},
		{"POST", "/api/admin/users", `{"name":"carol","balance":"-1"}`, "balance", []string{"negative"}},
		{"PUT", "/api/admin/prices/gpt-x", `{"input":1.25,"output":"10"}`, "input", []string{"JSON number 1.25", `{"input": "12.50"}`}},
	} {
		r := c.do(tc.method, tc.path, tc.body).want(t, 400)
		if r.errParam() != tc.param {
			t.Errorf("%s: param %q, want %q", tc.body, r.errParam(), tc.param)
		}
		for _, w := range tc.wants {
			if !strings.Contains(msg(r), w) {
				t.Errorf("%s: message %q lacks %q", tc.body, msg(r), w)
			}
		}
	}
	c.do("GET", "/api/admin/users/carol", nil).want(t, 404)
	alice := c.do("POST", "/api/admin/users", `{"name":"alice","balance":"1"}`).want(t, 201).json["id"].(string)
	r := c.do("POST", "/api/admin/users/"+alice+"/ledger", `{"amount":2,"note":"x"}`).want(t, 400)
	if r.errParam() != "amount" || !strings.Contains(msg(r), `For 2 units send "2"`) {
		t.Errorf("ledger amount 2: %s", r.body)
	}
}

// GET /api/admin/users pages as GET /api/admin/accounts does: offset and
// limit validated (a 400 naming the parameter, never the whole list), one
// page with total (filtered), pool (all), offset and limit.
func TestAdminUsersPaging(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	for i := range 7 {
		c.do("POST", "/api/admin/users", map[string]any{"name": fmt.Sprintf("user-%d", i)}).want(t, 201)
	}
	names := func(r *response) []string {
		var out []string
		for _, u := range r.json["users"].([]any) {
			out = append(out, u.(map[string]any)["name"].(string))
		}
		return out
	}
	all := names(c.do("GET", "/api/admin/users", nil).want(t, 200))
	if len(all) != 7 {
		t.Fatalf("default page: %v", all)
	}
	var paged []string
	for off := 0; off < 7; off += 3 {
		r := c.do("GET", fmt.Sprintf("/api/admin/users?limit=3&offset=%d", off), nil).want(t, 200)
		if r.json["total"].(float64) != 7 || r.json["pool"].(float64) != 7 || r.json["offset"].(float64) != float64(off) || r.json["limit"].(float64) != 3 {
			t.Fatalf("offset %d: %s", off, r.body)
		}
		paged = append(paged, names(r)...)
	}
	if strings.Join(paged, ",") != strings.Join(all, ",") {
		t.Fatalf("pages %v, whole list %v", paged, all)
	}
	if r := c.do("GET", "/api/admin/users?limit=50&offset=100", nil).want(t, 200); len(names(r)) != 0 || r.json["total"].(float64) != 7 {
		t.Fatalf("past the end: %s", r.body)
	}
	if r := c.do("GET", "/api/admin/users?q=user-1&limit=1", nil).want(t, 200); r.json["total"].(float64) != 1 || r.json["pool"].(float64) != 7 {
		t.Fatalf("filtered: %s", r.body)
	}
	for q, param := range map[string]string{"limit=abc": "limit", "limit=0": "limit", "limit=5000": "limit", "offset=-1": "offset", "offset=abc": "offset"} {
		r := c.do("GET", "/api/admin/users?"+q, nil).want(t, 400)
		if r.errParam() != param || !isOpenAIError(r.body) {
			t.Fatalf("%s: %s", q, r.body)
		}
	}
}
