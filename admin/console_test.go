package admin

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

const testUserPassword = "violet staple orbit canyon"

// newConsoleUser stores an enabled user with testUserPassword.
func (e *adminEnv) newConsoleUser(name, email string) storage.User {
	e.t.Helper()
	hash, err := HashPassword(testUserPassword)
	if err != nil {
		e.t.Fatal(err)
	}
	u, err := e.store.CreateUser(context.Background(), storage.User{Name: name, Email: email, PasswordHash: hash}, storage.NewUser{})
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

// consoleLogin logs a browser in to the console and keeps the CSRF token.
func (e *adminEnv) consoleLogin(id string) *client {
	e.t.Helper()
	c := e.browser()
	r := c.do("POST", "/api/console/login", map[string]string{"name": id, "password": testUserPassword}).want(e.t, 200)
	c.csrf = r.json["csrf_token"].(string)
	return c
}

// TestConsoleLogin: a user logs in by name or email, sees itself, needs
// the CSRF token to log out, and is logged out; wrong passwords, users
// without a password and disabled users are refused alike.
func TestConsoleLogin(t *testing.T) {
	e := newAdminEnv(t, 1)
	e.newConsoleUser("alice", "alice@example.com")
	c := e.consoleLogin("alice")
	if r := c.do("GET", "/api/console/me", nil).want(t, 200); r.json["user"].(map[string]any)["name"] != "alice" || r.json["csrf_token"] != c.csrf {
		t.Fatalf("me %v", r.json)
	}
	if _, ok := c.do("GET", "/api/console/me", nil).json["user"].(map[string]any)["password_hash"]; ok {
		t.Fatal("the hash is shown")
	}
	c2 := e.browser()
	r := c2.do("POST", "/api/console/login", map[string]string{"email": "alice@example.com", "password": testUserPassword}).want(t, 200)
	c2.csrf = r.json["csrf_token"].(string)
	if r.json["user"].(map[string]any)["last_login_at"] == nil {
		t.Fatalf("login %v", r.json)
	}
	e.browser().do("POST", "/api/console/login", map[string]string{"name": "alice", "password": "wrong password here"}).want(t, 401)
	e.browser().do("POST", "/api/console/login", map[string]string{"name": "nobody", "password": testUserPassword}).want(t, 401)
	e.browser().do("POST", "/api/console/login", map[string]string{"name": "alice"}).want(t, 400)
	// Logout is state-changing: the CSRF token is required.
	token := c.csrf
	c.csrf = ""
	if r := c.do("POST", "/api/console/logout", nil).want(t, 403); r.errCode() != "csrf_failed" {
		t.Fatalf("logout without token: %s", r.body)
	}
	c.csrf = token
	c.do("POST", "/api/console/logout", nil).want(t, 200)
	c.do("GET", "/api/console/me", nil).want(t, 401)
	c2.do("GET", "/api/console/me", nil).want(t, 200) // another session lives on

	// A user made without a password (keys only) cannot log in.
	if _, err := e.store.CreateUser(context.Background(), storage.User{Name: "keysonly"}, storage.NewUser{}); err != nil {
		t.Fatal(err)
	}
	e.browser().do("POST", "/api/console/login", map[string]string{"name": "keysonly", "password": testUserPassword}).want(t, 401)
	// Disabling a user ends its sessions and refuses its logins.
	admin := e.login()
	admin.do("PATCH", "/api/admin/users/alice", map[string]any{"disabled": true}).want(t, 200)
	c2.do("GET", "/api/console/me", nil).want(t, 401)
	e.browser().do("POST", "/api/console/login", map[string]string{"name": "alice", "password": testUserPassword}).want(t, 401)
}

// TestConsoleAdminApart: a console session never reaches /api/admin/ (not
// even its token sent as the admin cookie), and an admin session is not a
// console session.
func TestConsoleAdminApart(t *testing.T) {
	e := newAdminEnv(t, 1)
	e.newConsoleUser("alice", "")
	c := e.consoleLogin("alice")
	c.do("GET", "/api/admin/me", nil).want(t, 401)
	c.do("GET", "/api/admin/users", nil).want(t, 401)
	var token string
	for _, ck := range c.hc.Jar.Cookies(mustURL(t, e.base+"/api/console/me")) {
		if ck.Name == ConsoleCookie {
			token = ck.Value
		}
	}
	if token == "" {
		t.Fatal("no console cookie")
	}
	r := doCookie(t, e.base+"/api/admin/users", SessionCookie, token)
	if r != 401 {
		t.Fatalf("a console token as the admin cookie: %d", r)
	}
	admin := e.login()
	admin.do("GET", "/api/console/me", nil).want(t, 401)
	admin.do("POST", "/api/console/logout", nil).want(t, 401)
	// An admin API key is not a console login either.
	e.withKey(e.adminKey).do("GET", "/api/console/me", nil).want(t, 401)
}

// TestConsoleLoginLockout: console logins share the admins' lockout: after
// loginUserLimit wrong passwords even the right one is refused with 429.
func TestConsoleLoginLockout(t *testing.T) {
	e := newAdminEnv(t, 1)
	e.newConsoleUser("alice", "")
	c := e.browser()
	for i := range loginUserLimit {
		c.do("POST", "/api/console/login", map[string]string{"name": "alice", "password": "wrong " + strconv.Itoa(i)}).want(t, 401)
	}
	if r := c.do("POST", "/api/console/login", map[string]string{"name": "alice", "password": testUserPassword}).want(t, 429); r.errCode() != "login_rate_limited" {
		t.Fatalf("locked: %s", r.body)
	}
	// The admin of the same name is another account.
	e.login()
}

// TestConsoleRegister: closed refuses, invite needs a code with uses left
// (used once, then refused), open takes anyone; weak passwords and taken
// names are refused.
func TestConsoleRegister(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.browser()
	body := map[string]any{"name": "bob", "email": "bob@example.com", "password": testUserPassword}
	if r := c.do("POST", "/api/console/register", body).want(t, 403); r.errCode() != "registration_closed" {
		t.Fatalf("closed: %s", r.body)
	}
	admin := e.login()
	admin.do("PUT", "/api/admin/registration", map[string]any{"mode": "invite"}).want(t, 200)
	if r := c.do("POST", "/api/console/register", body).want(t, 403); r.errCode() != "invalid_invitation" {
		t.Fatalf("no code: %s", r.body)
	}
	code := admin.do("POST", "/api/admin/invitations", map[string]any{"max_uses": 1}).want(t, 201).json["code"].(string)
	body["invitation"] = "inv-wrong"
	c.do("POST", "/api/console/register", body).want(t, 403)
	body["invitation"] = code
	body["password"] = "password1234"
	if c.do("POST", "/api/console/register", body).want(t, 400).errParam() != "password" {
		t.Fatal("a weak password was not refused for its password")
	}
	body["password"] = testUserPassword
	if r := c.do("POST", "/api/console/register", body).want(t, 201); r.json["user"].(map[string]any)["name"] != "bob" {
		t.Fatalf("registered %v", r.json)
	}
	body["name"], body["email"] = "carol", ""
	if r := c.do("POST", "/api/console/register", body).want(t, 403); r.errCode() != "invalid_invitation" {
		t.Fatalf("a used-up code: %s", r.body)
	}
	e.consoleLogin("bob")
	admin.do("PUT", "/api/admin/registration", map[string]any{"mode": "open"}).want(t, 200)
	delete(body, "invitation")
	c.do("POST", "/api/console/register", body).want(t, 201)
	c.do("POST", "/api/console/register", body).want(t, 409)
	body["name"] = "x@y"
	c.do("POST", "/api/console/register", body).want(t, 400)
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// doCookie GETs url with one cookie and returns the status.
func doCookie(t *testing.T, url, name, value string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(&http.Cookie{Name: name, Value: value})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestConsoleKeys: a user creates (secret shown once), lists and revokes
// its own keys; another user's key is 404 and not listed; the key is
// stored as the user's, never admin.
func TestConsoleKeys(t *testing.T) {
	e := newAdminEnv(t, 1)
	alice := e.newConsoleUser("alice", "")
	e.newConsoleUser("bob", "")
	a, b := e.consoleLogin("alice"), e.consoleLogin("bob")
	r := a.do("POST", "/api/console/keys", map[string]any{"name": "laptop"}).want(t, 201)
	secret := r.json["secret"].(string)
	id := r.json["key"].(map[string]any)["id"].(string)
	if r.json["key"].(map[string]any)["name"] != "laptop" || len(secret) < 20 {
		t.Fatalf("created %v", r.json["key"])
	}
	a.do("POST", "/api/console/keys", map[string]any{"name": "laptop"}).want(t, 409)
	b.do("POST", "/api/console/keys", map[string]any{"name": "laptop"}).want(t, 201) // names are per user
	a.do("POST", "/api/console/keys", map[string]any{"name": ""}).want(t, 400)
	keys := a.do("GET", "/api/console/keys", nil).want(t, 200)
	if ks := keys.json["keys"].([]any); len(ks) != 1 || ks[0].(map[string]any)["id"] != id {
		t.Fatalf("alice's keys %v", ks)
	}
	if strings.Contains(string(keys.body), secret) || strings.Contains(string(keys.body), storage.HashKey(secret)) {
		t.Fatal("the list shows the secret or its hash")
	}
	k, err := e.store.APIKeyByHash(context.Background(), storage.HashKey(secret))
	if err != nil || k.UserID != alice.ID || k.Admin {
		t.Fatalf("stored %+v %v", k, err)
	}
	b.do("DELETE", "/api/console/keys/"+id, nil).want(t, 404)
	b.csrf = ""
	a.csrf, b.csrf = "", a.csrf
	a.do("DELETE", "/api/console/keys/"+id, nil).want(t, 403)
	a.csrf = b.csrf
	a.do("DELETE", "/api/console/keys/"+id, nil).want(t, 204)
	a.do("DELETE", "/api/console/keys/"+id, nil).want(t, 404)
	if ks := a.do("GET", "/api/console/keys", nil).want(t, 200).json["keys"].([]any); len(ks) != 0 {
		t.Fatalf("after revoking: %v", ks)
	}
}

// TestConsoleBalanceUsageSpend: a user sees its own balance and ledger,
// request log with each request's cost, and daily spend; never another
// user's.
func TestConsoleBalanceUsageSpend(t *testing.T) {
	e := newAdminEnv(t, 1)
	ctx := context.Background()
	alice := e.newConsoleUser("alice", "")
	bob := e.newConsoleUser("bob", "")
	admin := e.login()
	admin.do("POST", "/api/admin/users/alice/ledger", map[string]any{"amount": "10", "note": "welcome"}).want(t, 200)
	admin.do("POST", "/api/admin/users/bob/ledger", map[string]any{"amount": "3", "note": "bob"}).want(t, 200)
	a := e.consoleLogin("alice")
	r := a.do("POST", "/api/console/keys", map[string]any{"name": "ci"}).want(t, 201)
	keyID := r.json["key"].(map[string]any)["id"].(string)
	at := time.Now().UTC().Add(-time.Minute)
	recs := []storage.UsageRecord{
		{RequestID: "r-a1", At: at, KeyID: keyID, Model: "m", Route: "chat.completions", Status: 200, Attempts: 1, InputTokens: 10, OutputTokens: 5, UserID: alice.ID, Cost: 1_250_000},
		{RequestID: "r-a2", At: at.Add(time.Second), KeyID: keyID, Model: "m", Route: "chat.completions", Status: 200, Attempts: 1, InputTokens: 1, OutputTokens: 1, UserID: alice.ID, Cost: 1},
		{RequestID: "r-b1", At: at, KeyID: "other", Model: "m", Route: "chat.completions", Status: 200, Attempts: 1, InputTokens: 7, UserID: bob.ID, Cost: 500_000},
	}
	if err := e.store.InsertUsage(ctx, recs); err != nil {
		t.Fatal(err)
	}
	r = a.do("GET", "/api/console/balance", nil).want(t, 200)
	if r.json["balance"] != "8.749999" || r.json["currency"] != "USD" {
		t.Fatalf("balance %v", r.json)
	}
	ledger := r.json["ledger"].([]any)
	if len(ledger) != 3 || ledger[2].(map[string]any)["note"] != "welcome" || ledger[0].(map[string]any)["amount"] != "-0.000001" {
		t.Fatalf("ledger %v", ledger)
	}
	if _, ok := ledger[2].(map[string]any)["actor"]; ok {
		t.Fatal("the ledger names the operator")
	}
	r = a.do("GET", "/api/console/balance?limit=1", nil).want(t, 200)
	before := strconv.FormatInt(int64(r.json["next_before"].(float64)), 10)
	if l := a.do("GET", "/api/console/balance?limit=5&before="+before, nil).want(t, 200).json["ledger"].([]any); len(l) != 2 {
		t.Fatalf("second page %v", l)
	}
	a.do("GET", "/api/console/balance?before=x", nil).want(t, 400)

	r = a.do("GET", "/api/console/usage", nil).want(t, 200)
	got := r.json["records"].([]any)
	if len(got) != 2 {
		t.Fatalf("alice's records %v", got)
	}
	first := got[0].(map[string]any)
	if first["request_id"] != "r-a2" || first["cost"] != "0.000001" || first["key"] != "ci" {
		t.Fatalf("newest record %v", first)
	}
	if _, ok := first["account_id"]; ok {
		t.Fatal("the serving account is shown")
	}
	r = a.do("GET", "/api/console/usage?limit=1", nil).want(t, 200)
	cur := r.json["next_cursor"].(string)
	if l := a.do("GET", "/api/console/usage?cursor="+cur, nil).want(t, 200).json["records"].([]any); len(l) != 1 || l[0].(map[string]any)["request_id"] != "r-a1" {
		t.Fatalf("second page %v", l)
	}
	a.do("GET", "/api/console/usage?from=yesterday", nil).want(t, 400)

	r = a.do("GET", "/api/console/spend", nil).want(t, 200)
	rows := r.json["rows"].([]any)
	if len(rows) != 1 || rows[0].(map[string]any)["cost"] != "1.250001" || rows[0].(map[string]any)["requests"].(float64) != 2 || r.json["total"] != "1.250001" {
		t.Fatalf("spend %v", r.json)
	}
	a.do("POST", "/api/console/spend", nil).want(t, 405)
	a.do("GET", "/api/console/nothing", nil).want(t, 404)
	e.browser().do("GET", "/api/console/balance", nil).want(t, 401)
}

// TestConsoleLoginKeepsVersion: a user's console login records its time
// without bumping the version admins edit against, so an admin who read
// the user before the login saves the edit (200, not 409 edit_conflict),
// and the login time stays.
func TestConsoleLoginKeepsVersion(t *testing.T) {
	e := newAdminEnv(t, 1)
	admin := e.login()
	u := e.newConsoleUser("alice", "alice@example.com")
	read := admin.do("GET", "/api/admin/users/"+u.ID, nil).want(t, 200)
	v := read.json["user"].(map[string]any)["version"].(float64)
	e.consoleLogin("alice")
	after := admin.do("GET", "/api/admin/users/"+u.ID, nil).want(t, 200).json["user"].(map[string]any)
	if after["last_login_at"] == nil || after["version"].(float64) != v {
		t.Fatalf("after the login: last_login_at %v, version %v; want a time and the version read before, %v", after["last_login_at"], after["version"], v)
	}
	r := admin.do("PATCH", "/api/admin/users/"+u.ID, map[string]any{"rpm": 7, "version": v}).want(t, 200)
	got := r.json["user"].(map[string]any)
	if got["rpm"].(float64) != 7 || got["last_login_at"] == nil {
		t.Fatalf("the edit after the login: %s", r.body)
	}
}
