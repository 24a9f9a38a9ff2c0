package admin

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/troupe-gw/troupe/storage"
)

const testUserPassword2 = "amber lantern quietly folds"

// consoleCookie returns c's console session token ("" when none).
func consoleCookie(t *testing.T, e *adminEnv, c *client) string {
	t.Helper()
	for _, ck := range c.hc.Jar.Cookies(mustURL(t, e.base+"/api/console/me")) {
		if ck.Name == ConsoleCookie {
			return ck.Value
		}
	}
	return ""
}

// TestConsolePassword: a user changes its own password with the current
// one and the CSRF token; every other session of the user ends, this one
// goes on under a new token and CSRF token; the old password no longer
// logs in and the new one does; weak, missing and wrong passwords are
// refused, and nothing changed.
func TestConsolePassword(t *testing.T) {
	e := newAdminEnv(t, 1)
	alice := e.newConsoleUser("alice", "alice@example.com")
	e.newConsoleUser("bob", "")
	a, other, bob := e.consoleLogin("alice"), e.consoleLogin("alice"), e.consoleLogin("bob")
	oldToken := consoleCookie(t, e, a)
	body := map[string]string{"current_password": testUserPassword, "new_password": testUserPassword2}

	// CSRF: the token is required.
	csrf := a.csrf
	a.csrf = ""
	if r := a.do("POST", "/api/console/password", body).want(t, 403); r.errCode() != "csrf_failed" {
		t.Fatalf("without the CSRF token: %s", r.body)
	}
	a.csrf = csrf
	a.do("GET", "/api/console/password", nil).want(t, 405)
	if r := a.do("POST", "/api/console/password", map[string]string{"current_password": testUserPassword, "new_password": "password1234"}).want(t, 400); r.errParam() != "new_password" {
		t.Fatalf("weak: %s", r.body)
	}
	if r := a.do("POST", "/api/console/password", map[string]string{"new_password": testUserPassword2}).want(t, 400); r.errParam() != "current_password" {
		t.Fatalf("no current password: %s", r.body)
	}
	a.do("POST", "/api/console/password", map[string]string{"current_password": testUserPassword, "new_password": testUserPassword}).want(t, 400)
	if r := a.do("POST", "/api/console/password", map[string]string{"current_password": "not the password at all", "new_password": testUserPassword2}).want(t, 403); r.errCode() != "wrong_password" {
		t.Fatalf("wrong current: %s", r.body)
	}
	other.do("GET", "/api/console/me", nil).want(t, 200) // nothing changed yet

	r := a.do("POST", "/api/console/password", body).want(t, 200)
	newCSRF, _ := r.json["csrf_token"].(string)
	if r.json["changed"] != true || newCSRF == "" || newCSRF == csrf {
		t.Fatalf("changed: %v", r.json)
	}
	if tok := consoleCookie(t, e, a); tok == "" || tok == oldToken {
		t.Fatal("the session token was not replaced")
	}
	// This session goes on with the new CSRF token (the old one is dead).
	a.do("POST", "/api/console/keys", map[string]any{"name": "k"}).want(t, 403)
	a.csrf = newCSRF
	if r := a.do("GET", "/api/console/me", nil).want(t, 200); r.json["csrf_token"] != newCSRF {
		t.Fatalf("me after the change: %v", r.json)
	}
	a.do("POST", "/api/console/keys", map[string]any{"name": "k"}).want(t, 201)
	// Every other session of alice ended; the old cookie is worthless; bob's lives.
	other.do("GET", "/api/console/me", nil).want(t, 401)
	if st := doCookie(t, e.base+"/api/console/me", ConsoleCookie, oldToken); st != 401 {
		t.Fatalf("the old token after the change: %d", st)
	}
	bob.do("GET", "/api/console/me", nil).want(t, 200)
	// The old password no longer logs in; the new one does, by name and email.
	e.browser().do("POST", "/api/console/login", map[string]string{"name": "alice", "password": testUserPassword}).want(t, 401)
	e.browser().do("POST", "/api/console/login", map[string]string{"name": "alice", "password": testUserPassword2}).want(t, 200)
	e.browser().do("POST", "/api/console/login", map[string]string{"email": "alice@example.com", "password": testUserPassword2}).want(t, 200)
	u, err := e.store.GetUser(context.Background(), alice.ID)
	if err != nil || u.PasswordHash == alice.PasswordHash || !strings.HasPrefix(u.PasswordHash, "$argon2id$") {
		t.Fatalf("stored %q %v", u.PasswordHash, err)
	}
	// Cross-origin, even with the token, is refused.
	a.origin = "https://evil.example"
	a.do("POST", "/api/console/password", map[string]string{"current_password": testUserPassword2, "new_password": testUserPassword}).want(t, 403)
}

// TestConsolePasswordLockout: wrong current passwords count as failed
// logins of the user: past the limit the password change and the login
// are both refused with 429, even with the right password.
func TestConsolePasswordLockout(t *testing.T) {
	e := newAdminEnv(t, 1)
	e.newConsoleUser("alice", "")
	a := e.consoleLogin("alice")
	for i := range loginUserLimit {
		a.do("POST", "/api/console/password", map[string]string{"current_password": "wrong " + strconv.Itoa(i), "new_password": testUserPassword2}).want(t, 403)
	}
	if r := a.do("POST", "/api/console/password", map[string]string{"current_password": testUserPassword, "new_password": testUserPassword2}).want(t, 429); r.errCode() != "login_rate_limited" {
		t.Fatalf("locked: %s", r.body)
	}
	e.browser().do("POST", "/api/console/login", map[string]string{"name": "alice", "password": testUserPassword}).want(t, 429)
	a.do("GET", "/api/console/me", nil).want(t, 200) // the session itself lives on
}

// TestConsoleRegistrationMode: GET /api/console/register tells the mode
// without a session, so the page can ask for a code or say it is closed.
func TestConsoleRegistrationMode(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.browser()
	if r := c.do("GET", "/api/console/register", nil).want(t, 200); r.json["mode"] != "closed" {
		t.Fatalf("default: %v", r.json)
	}
	admin := e.login()
	for _, mode := range []string{"invite", "open", "closed"} {
		admin.do("PUT", "/api/admin/registration", map[string]any{"mode": mode}).want(t, 200)
		if r := c.do("GET", "/api/console/register", nil).want(t, 200); r.json["mode"] != mode {
			t.Fatalf("%s: %v", mode, r.json)
		}
	}
	c.do("DELETE", "/api/console/register", nil).want(t, 405)
}

// TestConsoleKeyLimits: a user's key may carry an allowlist within the
// user's own, request and token limits and an expiry; each is shown in
// the list and stored; bad ones are refused naming the field.
func TestConsoleKeyLimits(t *testing.T) {
	e := newAdminEnv(t, 1)
	e.newConsoleUser("alice", "")
	admin := e.login()
	admin.do("PATCH", "/api/admin/users/alice", map[string]any{"models": []string{"gpt-4.1-mini", "gpt-5.5"}}).want(t, 200)
	a := e.consoleLogin("alice")
	r := a.do("POST", "/api/console/keys", map[string]any{"name": "ci", "models": []string{"gpt-4.1-mini"},
		"limits": map[string]int{"rpm": 60, "rpd": 1000, "tokens_per_day": 50000}, "expires_in": "720h"}).want(t, 201)
	k := r.json["key"].(map[string]any)
	lim := k["limits"].(map[string]any)
	if k["models"].([]any)[0] != "gpt-4.1-mini" || lim["rpm"] != 60.0 || lim["rpd"] != 1000.0 || lim["tokens_per_day"] != 50000.0 || k["expires_at"] == nil || k["state"] != "active" {
		t.Fatalf("created %v", k)
	}
	stored, err := e.store.APIKeyByHash(context.Background(), storage.HashKey(r.json["secret"].(string)))
	if err != nil || stored.Limits.RPM != 60 || stored.ExpiresAt == nil || len(stored.Models) != 1 {
		t.Fatalf("stored %+v %v", stored, err)
	}
	for _, bad := range []struct {
		body  map[string]any
		param string
	}{
		{map[string]any{"name": "x", "models": []string{"claude-opus-4"}}, "models"},
		{map[string]any{"name": "x", "limits": map[string]int{"rpm": -1}}, "limits"},
		{map[string]any{"name": "x", "expires_in": "soon"}, "expires_in"},
		{map[string]any{"name": "x", "expires_in": "-1h"}, "expires_in"},
	} {
		if r := a.do("POST", "/api/console/keys", bad.body).want(t, 400); r.errParam() != bad.param {
			t.Fatalf("%v: %s", bad.body, r.body)
		}
	}
}

// TestConsoleUI: the users' console is the admin UI's app under
// /console: every path there gets index.html with the UI's headers, titled
// as the console before its script runs; /admin's keeps its own title.
func TestConsoleUI(t *testing.T) {
	e := newAdminEnv(t, 0)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(e.base + "/console")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 302 || !strings.HasSuffix(resp.Header.Get("Location"), "/console/") {
		t.Fatalf("/console: %d %v", resp.StatusCode, resp.Header)
	}
	for _, p := range []string{"/console/", "/console/keys", "/console/register", "/console/assets/app-123.js"} {
		resp, err := http.Get(e.base + p)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 512)
		n, _ := resp.Body.Read(b)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b[:n]), "<title>Troupe console</title>") || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
			!strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
			t.Fatalf("%s: %d %v %q", p, resp.StatusCode, resp.Header, b[:n])
		}
	}
	resp, err = http.Get(e.base + "/admin/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "<title>Troupe admin</title>") {
		t.Fatalf("/admin/: %q", b)
	}
}
