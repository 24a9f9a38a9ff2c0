package admin

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAdminLogin(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.browser()
	if r := c.do("GET", "/api/admin/me", nil).want(t, 401); r.errCode() != "unauthenticated" {
		t.Fatalf("me before login: %s", r.body)
	}
	c.do("POST", "/api/admin/login", map[string]string{"username": "admin", "password": "wrong password"}).want(t, 401)
	c.do("POST", "/api/admin/login", map[string]string{"username": "nobody", "password": "wrong password"}).want(t, 401)
	c.do("POST", "/api/admin/login", `{"username":"admin"}`).want(t, 400)
	c.do("POST", "/api/admin/login", `not json`).want(t, 400)
	c.do("GET", "/api/admin/login", nil).want(t, 405)
	// A form post (what a cross-site page can send without a preflight) is refused.
	req, _ := http.NewRequest("POST", e.base+"/api/admin/login", strings.NewReader("username=admin&password=x"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, err := c.hc.Do(req); err != nil || resp.StatusCode != 415 {
		t.Fatalf("form login: %v %v", resp.StatusCode, err)
	}
	evil := e.browser()
	evil.origin = "https://evil.example"
	if r := evil.do("POST", "/api/admin/login", map[string]string{"username": "admin", "password": testAdminPassword}).want(t, 403); r.errCode() != "csrf_failed" {
		t.Fatalf("cross-origin login: %s", r.body)
	}

	r := c.do("POST", "/api/admin/login", map[string]string{"username": "admin", "password": testAdminPassword}).want(t, 200)
	if strings.Contains(string(r.body), "argon2") || strings.Contains(string(r.body), testAdminPassword) {
		t.Fatalf("login answer leaks the hash or password: %s", r.body)
	}
	sc := r.header.Get("Set-Cookie")
	for _, attr := range []string{SessionCookie + "=", "HttpOnly", "SameSite=Strict", "Path=/", "max-age=43200"} {
		if !strings.Contains(strings.ToLower(sc), strings.ToLower(attr)) {
			t.Errorf("Set-Cookie %q lacks %s", sc, attr)
		}
	}
	if strings.Contains(strings.ToLower(sc), "; secure") {
		t.Errorf("Set-Cookie %q is Secure over plain HTTP", sc)
	}
	// Behind a TLS-terminating proxy the cookie is Secure.
	req, _ = http.NewRequest("POST", e.base+"/api/admin/login", strings.NewReader(`{"username":"admin","password":"`+testAdminPassword+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-Proto", "https")
	if resp, err := http.DefaultClient.Do(req); err != nil || !strings.Contains(strings.ToLower(resp.Header.Get("Set-Cookie")), "; secure") {
		t.Fatalf("login behind https: %v %v", resp.Header.Get("Set-Cookie"), err)
	}
	csrf, _ := r.json["csrf_token"].(string)
	if len(csrf) < 40 {
		t.Fatalf("csrf token %q", csrf)
	}
	me := c.do("GET", "/api/admin/me", nil).want(t, 200)
	if me.json["auth"] != "session" || me.json["csrf_token"] != csrf || me.json["user"].(map[string]any)["username"] != "admin" {
		t.Fatalf("me: %s", me.body)
	}
	if me.json["user"].(map[string]any)["last_login_at"] == nil {
		t.Fatalf("last_login_at not stamped: %s", me.body)
	}
	// An admin key works without a session; a client key is refused.
	if r := e.withKey(e.adminKey).do("GET", "/api/admin/me", nil).want(t, 200); r.json["auth"] != "api_key" {
		t.Fatalf("me with key: %s", r.body)
	}
	if r := e.withKey(e.key).do("GET", "/api/admin/me", nil).want(t, 403); r.errCode() != "admin_required" {
		t.Fatalf("client key: %s", r.body)
	}
	e.withKey("sk-troupe-made-up").do("GET", "/api/admin/me", nil).want(t, 401)
	// A forged cookie is refused.
	jar := e.browser()
	req, _ = http.NewRequest("GET", e.base+"/api/admin/me", nil)
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: "forged"})
	if resp, err := jar.hc.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("forged cookie: %v %v", resp.StatusCode, err)
	}
}

func TestAdminLogout(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	c.do("GET", "/api/admin/ops", nil).want(t, 200)
	// Logout is an unsafe method: it needs the CSRF token too.
	token := c.csrf
	c.csrf = ""
	c.do("POST", "/api/admin/logout", nil).want(t, 403)
	c.csrf = token
	c.do("GET", "/api/admin/logout", nil).want(t, 405)
	if r := c.do("POST", "/api/admin/logout", nil).want(t, 200); r.json["logged_out"] != true {
		t.Fatalf("logout: %s", r.body)
	}
	c.do("GET", "/api/admin/me", nil).want(t, 401)
}

func TestAdminCSRF(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	body := map[string]any{"name": "k1"}
	token := c.csrf
	c.csrf = ""
	if r := c.do("POST", "/api/admin/keys", body).want(t, 403); r.errCode() != "csrf_failed" {
		t.Fatalf("no token: %s", r.body)
	}
	c.csrf = "wrong-token"
	c.do("POST", "/api/admin/keys", body).want(t, 403)
	c.do("DELETE", "/api/admin/accounts/acct-a", nil).want(t, 403)
	c.csrf = token
	c.origin = "https://evil.example"
	c.do("POST", "/api/admin/keys", body).want(t, 403)
	c.origin = e.base
	c.do("POST", "/api/admin/keys", body).want(t, 201)
	// Safe methods need no token.
	c.csrf, c.origin = "", ""
	c.do("GET", "/api/admin/keys", nil).want(t, 200)
	// Keys are not sent by browsers on their own: no CSRF token needed.
	e.withKey(e.adminKey).do("POST", "/api/admin/keys", map[string]any{"name": "k2"}).want(t, 201)
	// Nothing was created by the refused requests.
	keys := e.withKey(e.adminKey).do("GET", "/api/admin/keys", nil).want(t, 200).json["keys"].([]any)
	if len(keys) != 4 { // ops, client, k1, k2
		t.Fatalf("%d keys: %v", len(keys), keys)
	}
}

// TestAdminJSONContentType: an admin body that is not labelled JSON is 415
// (a text/plain one was read as JSON and accepted), as docs/admin-api.md
// says; a request without a body needs no label, and an account import
// takes its text formats whatever they are labelled.
func TestAdminJSONContentType(t *testing.T) {
	e := newAdminEnv(t, 1)
	for _, c := range []*client{e.login(), e.withKey(e.adminKey)} {
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "application/jsonp", "multipart/form-data; boundary=x"} {
			c.ctype = ct
			for _, req := range []struct{ method, path, body string }{
				{"POST", "/api/admin/keys", `{"name":"plain"}`},
				{"PATCH", "/api/admin/accounts/acct-a", `{"group":"g"}`},
				{"POST", "/api/admin/accounts", `{"name":"plain","provider":"openai"}`},
				{"PUT", "/api/admin/settings", `{"settings":{}}`},
			} {
				r := c.do(req.method, req.path, req.body).want(t, 415)
				if r.errCode() != "unsupported_media_type" || !isOpenAIError(r.body) {
					t.Fatalf("%s %s as %s: %s", req.method, req.path, ct, r.body)
				}
			}
		}
		c.ctype = "Application/JSON; charset=utf-8"
		c.do("PATCH", "/api/admin/accounts/acct-a", `{"group":"g"}`).want(t, 200)
		// No body, no label needed.
		c.ctype = "text/plain"
		c.do("POST", "/api/admin/accounts/acct-a/disable", nil).want(t, 200)
		c.do("POST", "/api/admin/accounts/acct-a/enable", "").want(t, 200)
		// An import's refresh tokens, one per line, as plain text.
		r := c.do("POST", "/api/admin/accounts/import?dry_run=1", "rt_"+strings.Repeat("a", 40)+"\n").want(t, 200)
		if r.json["dry_run"] != true {
			t.Fatalf("import: %s", r.body)
		}
	}
	if a, err := e.store.GetAccount(t.Context(), "acct-a"); err != nil || a.Group != "g" {
		t.Fatalf("acct-a: %+v %v", a, err)
	}
	if _, err := e.store.GetAccount(t.Context(), "plain"); err == nil {
		t.Fatal("a refused create wrote an account")
	}
}

func TestAdminLoginRateLimit(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.browser()
	for i := range loginUserLimit {
		c.do("POST", "/api/admin/login", map[string]string{"username": "admin", "password": "wrong " + strconv.Itoa(i)}).want(t, 401)
	}
	// The right password does not get through a locked user either.
	r := c.do("POST", "/api/admin/login", map[string]string{"username": "admin", "password": testAdminPassword}).want(t, 429)
	if r.errCode() != "login_rate_limited" || r.header.Get("Retry-After") == "" {
		t.Fatalf("locked user: %s %v", r.body, r.header)
	}
	// Per IP: attempts for other users count until the IP limit.
	n := loginUserLimit + 1
	for ; n < loginIPLimit; n++ {
		c.do("POST", "/api/admin/login", map[string]string{"username": "user" + strconv.Itoa(n), "password": "x"}).want(t, 401)
	}
	if r := c.do("POST", "/api/admin/login", map[string]string{"username": "someone", "password": "x"}).want(t, 429); !strings.Contains(string(r.body), "address") {
		t.Fatalf("IP limit: %s", r.body)
	}
}

// TestAdminLoginRetryAfter: a locked-out login's Retry-After is the time
// until its fixed window rolls over (the counters' windows start on the
// minute and the quarter hour), not the whole window: at 12:07:30.25 the
// user's 15-minute window has 449.75 s left and the address's minute 29.75.
func TestAdminLoginRetryAfter(t *testing.T) {
	e := newAdminEnv(t, 1)
	at := time.Date(2026, 12, 6, 12, 7, 30, 250e6, time.UTC)
	e.srv.now = func() time.Time { return at }
	c := e.browser()
	for i := range loginUserLimit {
		c.do("POST", "/api/admin/login", map[string]string{"username": "admin", "password": "wrong " + strconv.Itoa(i)}).want(t, 401)
	}
	r := c.do("POST", "/api/admin/login", map[string]string{"username": "admin", "password": testAdminPassword}).want(t, 429)
	if got := r.header.Get("Retry-After"); got != "450" {
		t.Fatalf("locked user: Retry-After %q, want 450: %s", got, r.body)
	}
	for n := loginUserLimit + 1; n < loginIPLimit; n++ {
		c.do("POST", "/api/admin/login", map[string]string{"username": "user" + strconv.Itoa(n), "password": "x"}).want(t, 401)
	}
	r = c.do("POST", "/api/admin/login", map[string]string{"username": "someone", "password": "x"}).want(t, 429)
	if got := r.header.Get("Retry-After"); got != "30" || !strings.Contains(string(r.body), "address") {
		t.Fatalf("locked address: Retry-After %q, want 30: %s", got, r.body)
	}
	for _, tc := range []struct {
		now  time.Time
		w    time.Duration
		want time.Duration
	}{
		{at, 15 * time.Minute, 449750 * time.Millisecond},
		{at, time.Minute, 29750 * time.Millisecond},
		{time.Date(2026, 12, 6, 12, 15, 0, 0, time.UTC), 15 * time.Minute, 15 * time.Minute}, // a window just begun
		{time.Date(2026, 12, 6, 12, 14, 59, 999e6, time.UTC), 15 * time.Minute, time.Millisecond},
	} {
		if got := windowLeft(tc.now, tc.w); got != tc.want {
			t.Errorf("windowLeft(%v, %v) = %v, want %v", tc.now, tc.w, got, tc.want)
		}
	}
}

// TestAdminLoginLockoutParallel: 60 wrong passwords for one user sent at
// once from 4 addresses (15 each, under the per-address limit) get exactly
// loginUserLimit 401s and 429s for the rest. Before, the count was read
// before the slow password check and written after it, so all 60 got 401
// (issue 16, finding 5).
func TestAdminLoginLockoutParallel(t *testing.T) {
	e := newAdminEnv(t, 1)
	const perAddr, addrs = 15, 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	start := make(chan struct{})
	for a := range addrs {
		local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+a))}
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			DialContext:     (&net.Dialer{LocalAddr: local}).DialContext,
			MaxConnsPerHost: perAddr, MaxIdleConnsPerHost: perAddr,
		}}
		for i := range perAddr {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				body := `{"username":"admin","password":"wrong password ` + strconv.Itoa(a*perAddr+i) + `"}`
				resp, err := client.Post(e.base+"/api/admin/login", "application/json", strings.NewReader(body))
				code := 0
				if err == nil {
					code = resp.StatusCode
					resp.Body.Close()
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}()
		}
	}
	close(start)
	wg.Wait()
	if codes[401] != loginUserLimit || codes[429] != addrs*perAddr-loginUserLimit {
		t.Fatalf("statuses %v, want %d × 401 and %d × 429", codes, loginUserLimit, addrs*perAddr-loginUserLimit)
	}
	// The right password is locked out too, and a right one never counts
	// as a failure (checked in TestAdminLoginRateLimit).
	e.browser().do("POST", "/api/admin/login", map[string]string{"username": "admin", "password": testAdminPassword}).want(t, 429)
}

// A successful login gives back the attempt it was counted as: a user's
// right logins never lock it out.
func TestAdminLoginSuccessNotCounted(t *testing.T) {
	e := newAdminEnv(t, 1)
	for range loginUserLimit + 2 {
		e.browser().do("POST", "/api/admin/login", map[string]string{"username": "admin", "password": testAdminPassword}).want(t, 200)
	}
}

func TestAdminPasswordChange(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	c.do("PUT", "/api/admin/me/password", map[string]string{"current_password": "wrong", "new_password": "a new long password"}).want(t, 403)
	c.do("PUT", "/api/admin/me/password", map[string]string{"current_password": testAdminPassword, "new_password": "short"}).want(t, 400)
	c.do("PUT", "/api/admin/me/password", `nope`).want(t, 400)
	e.withKey(e.adminKey).do("PUT", "/api/admin/me/password", map[string]string{"current_password": testAdminPassword, "new_password": "a new long password"}).want(t, 400)
	other := e.login() // a second session of the same user
	c.do("PUT", "/api/admin/me/password", map[string]string{"current_password": testAdminPassword, "new_password": "a new long password"}).want(t, 200)
	c.do("GET", "/api/admin/me", nil).want(t, 401)
	other.do("GET", "/api/admin/me", nil).want(t, 401) // every session of the user ends
	e.browser().do("POST", "/api/admin/login", map[string]string{"username": "admin", "password": testAdminPassword}).want(t, 401)
	e.browser().do("POST", "/api/admin/login", map[string]string{"username": "admin", "password": "a new long password"}).want(t, 200)
}

func TestAdminDisabledUser(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	u, err := e.store.GetAdminUser(t.Context(), "admin")
	if err != nil {
		t.Fatal(err)
	}
	u.Disabled = true
	if _, err := e.store.UpdateAdminUser(t.Context(), u); err != nil {
		t.Fatal(err)
	}
	c.do("GET", "/api/admin/me", nil).want(t, 401)
	e.browser().do("POST", "/api/admin/login", map[string]string{"username": "admin", "password": testAdminPassword}).want(t, 401)
}

// TestAdminRoutesNeedAuth checks that every admin route refuses a request
// without credentials (401) and one with a client key (403).
func TestAdminRoutesNeedAuth(t *testing.T) {
	e := newAdminEnv(t, 1)
	routes := [][2]string{
		{"GET", "/api/admin/me"}, {"PUT", "/api/admin/me/password"}, {"POST", "/api/admin/logout"}, {"GET", "/api/admin/ops"},
		{"GET", "/api/admin/accounts"}, {"POST", "/api/admin/accounts"}, {"GET", "/api/admin/accounts/acct-a"},
		{"PATCH", "/api/admin/accounts/acct-a"}, {"DELETE", "/api/admin/accounts/acct-a"}, {"POST", "/api/admin/accounts/acct-a/disable"},
		{"POST", "/api/admin/accounts/acct-a/enable"}, {"POST", "/api/admin/accounts/acct-a/probe"}, {"POST", "/api/admin/accounts/import"},
		{"GET", "/api/admin/accounts/export"}, {"POST", "/api/admin/accounts/bulk"},
		{"GET", "/api/admin/keys"}, {"POST", "/api/admin/keys"}, {"GET", "/api/admin/keys/ops"}, {"PATCH", "/api/admin/keys/ops"},
		{"DELETE", "/api/admin/keys/ops"}, {"POST", "/api/admin/keys/ops/disable"}, {"POST", "/api/admin/keys/ops/enable"},
		{"GET", "/api/admin/usage"}, {"GET", "/api/admin/usage/requests"}, {"GET", "/api/admin/settings"}, {"PUT", "/api/admin/settings"},
		{"GET", "/api/admin/policies"}, {"GET", "/api/admin/policies/smart"}, {"PUT", "/api/admin/policies/p"},
		{"POST", "/api/admin/policies/p/validate"}, {"POST", "/api/admin/policies/p/simulate"}, {"POST", "/api/admin/policies/p/activate"},
		{"POST", "/api/admin/policies/p/rollback"}, {"GET", "/api/admin/policies/p/history"},
	}
	anon, client := e.browser(), e.withKey(e.key)
	for _, rt := range routes {
		if r := anon.do(rt[0], rt[1], `{}`); r.status != 401 {
			t.Errorf("%s %s without credentials: %d %s", rt[0], rt[1], r.status, r.body)
		}
		if r := client.do(rt[0], rt[1], `{}`); r.status != 403 {
			t.Errorf("%s %s with a client key: %d %s", rt[0], rt[1], r.status, r.body)
		}
	}
	// Nothing changed.
	if _, err := e.store.GetAccount(t.Context(), "acct-a"); err != nil {
		t.Fatal(err)
	}
	admin := e.withKey(e.adminKey)
	admin.do("GET", "/api/admin/nope", nil).want(t, 404)
	admin.do("POST", "/api/admin/ops", nil).want(t, 405)
	admin.do("DELETE", "/api/admin/usage", nil).want(t, 405)
}
