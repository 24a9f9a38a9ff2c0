package admin

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"testing"

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
