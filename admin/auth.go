package admin

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/alexedwards/argon2id"
	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// Admin session and login rules (docs/admin-api.md, "Authentication").
const (
	// SessionCookie is the name of the admin UI's session cookie:
	// HttpOnly, SameSite=Strict, Path=/, Secure over TLS.
	SessionCookie = "troupe_admin"
	// CSRFHeader must carry the session's CSRF token on every unsafe
	// request (POST, PUT, PATCH, DELETE) authenticated by the cookie.
	CSRFHeader = "X-CSRF-Token"
	// SessionTTL is how long a session lasts after login.
	SessionTTL = 12 * time.Hour

	loginIPLimit     = 20               // login attempts per IP in a loginIPWindow (fixed, epoch-aligned)
	loginIPWindow    = time.Minute      //
	loginUserLimit   = 10               // failed logins per username in a loginUserWindow (fixed, epoch-aligned)
	loginUserWindow  = 15 * time.Minute //
	maxPasswordBytes = 1024             // longer passwords are refused before hashing
)

// HashParams are the argon2id parameters of new admin password hashes:
// OWASP's recommended minimum for argon2id (19 MiB of memory, 2 passes, 1
// lane; https://cheatsheetseries.owasp.org/cheatsheets/Password_Storage_Cheat_Sheet.html),
// 16-byte salt, 32-byte key. Existing hashes keep the parameters they were
// made with (they are in the PHC string).
var HashParams = argon2id.Params{Memory: 19 * 1024, Iterations: 2, Parallelism: 1, SaltLength: 16, KeyLength: 32}

// HashPassword returns the argon2id PHC string of password, for
// storage.AdminUser.PasswordHash. Errors only if the random source fails.
func HashPassword(password string) (string, error) {
	return argon2id.CreateHash(password, &HashParams)
}

// NewPassword returns a random password for a new admin user: 24
// characters of base64url (144 bits).
func NewPassword() (string, error) {
	b := make([]byte, 18)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// dummyHash returns the hash compared against when the username does not
// exist, so a login takes as long for unknown users as for known ones. It is
// made on first use (hashing costs tens of milliseconds).
var dummyHash = sync.OnceValue(func() string {
	h, _ := HashPassword("troupe-no-such-user")
	return h
})

// adminSession is a logged-in session as kept in the cache under
// "admin:session:" + hex SHA-256 of the cookie's token (the token itself
// is never stored).
type adminSession struct {
	UserID  string `json:"uid"`
	CSRF    string `json:"csrf"`
	PwPrint string `json:"pw"`  // fingerprint of the password hash: a password change ends the session
	Expires int64  `json:"exp"` // unix seconds
}

// principal is who makes an admin request: a session's user or an admin key.
type principal struct {
	session *adminSession
	token   string // the session cookie's token
	user    storage.AdminUser
	key     storage.APIKey
}

func (p *principal) kind() string {
	if p.session != nil {
		return "session"
	}
	return "api_key"
}

func adminSessionKey(token string) string { return sessionKey("admin", token) }

// sessionKey is the cache key of a session token of scope ("admin" or
// "console"): scope + ":session:" + hex SHA-256 of the token. The scopes
// keep admin and console sessions apart: a token is looked up in its own.
func sessionKey(scope, token string) string {
	h := sha256.Sum256([]byte(token))
	return scope + ":session:" + hex.EncodeToString(h[:])
}

func pwPrint(hash string) string {
	h := sha256.Sum256([]byte(hash))
	return hex.EncodeToString(h[:8])
}

func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func errAdminAuth(msg string) *APIError {
	return &APIError{Status: 401, Type: "authentication_error", Code: "unauthenticated", Message: msg}
}

func errCSRF(msg string) *APIError {
	return &APIError{Status: 403, Type: "permission_error", Code: "csrf_failed", Message: msg}
}

// unsafeMethod reports whether m may change state (and so needs CSRF checks).
func unsafeMethod(m string) bool {
	switch m {
	case "GET", "HEAD", "OPTIONS":
		return false
	}
	return true
}

// sameOrigin checks the browser's Origin and Sec-Fetch-Site headers: a
// request another site's page made is refused. Requests without them
// (curl, older browsers) pass; the CSRF token still guards those.
func sameOrigin(ctx *fasthttp.RequestCtx) bool {
	if site := string(ctx.Request.Header.Peek("Sec-Fetch-Site")); site == "cross-site" || site == "same-site" {
		return false
	}
	origin := string(ctx.Request.Header.Peek("Origin"))
	if origin == "" {
		return true
	}
	host := string(ctx.Host())
	return origin == "http://"+host || origin == "https://"+host
}

// adminAuth authenticates an admin request: an admin API key (Bearer or
// x-api-key), else the session cookie. Cookie-authenticated unsafe
// requests must come from the same origin and carry the CSRF header.
func (s *Server) adminAuth(ctx *fasthttp.RequestCtx, method string) (*principal, *APIError) {
	if len(clientSecret(ctx)) > 0 {
		key, aerr := s.authenticate(ctx)
		if aerr != nil {
			return nil, aerr
		}
		if !key.Admin {
			return nil, &APIError{Status: 403, Type: "permission_error", Code: "admin_required", Message: "This API key may not use the admin API."}
		}
		return &principal{key: key}, nil
	}
	token := string(ctx.Request.Header.Cookie(SessionCookie))
	if token == "" {
		return nil, errAdminAuth("Log in (POST /api/admin/login) or send an admin API key as Authorization: Bearer.")
	}
	p, aerr := s.sessionPrincipal(token)
	if aerr != nil {
		return nil, aerr
	}
	if unsafeMethod(method) {
		if aerr := checkCSRF(ctx, p.session, "login and GET /api/admin/me"); aerr != nil {
			return nil, aerr
		}
	}
	return p, nil
}

// sessionPrincipal resolves a session token to its live, enabled user.
// (Admin handlers derive their contexts from context.Background: a
// fasthttp.RequestCtx must not be a parent context, since the context
// package may read it from another goroutine after the handler returned.)
func (s *Server) sessionPrincipal(token string) (*principal, *APIError) {
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sess, ok, err := s.loadSession(cctx, "admin", token)
	if err != nil {
		s.log.Error("admin session lookup", "err", err)
		return nil, &APIError{Status: 503, Type: "server_error", Message: "Sessions are unavailable; retry, or use an admin API key."}
	}
	if !ok {
		return nil, errAdminAuth("The session has ended; log in again.")
	}
	u, err := s.store.GetAdminUser(cctx, sess.UserID)
	if err != nil || u.Disabled || pwPrint(u.PasswordHash) != sess.PwPrint {
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			s.log.Error("admin user lookup", "err", err)
			return nil, &APIError{Status: 500, Type: "server_error", Message: "Storage error; see the gateway log."}
		}
		return nil, errAdminAuth("The session has ended; log in again.")
	}
	return &principal{session: &sess, token: token, user: u}, nil
}

// hashSlots bounds concurrent argon2id computations (19 MiB each).
var hashSlots = make(chan struct{}, 2)

// verifyPassword checks password against hash within the hashing slots.
func verifyPassword(ctx context.Context, password, hash string) (bool, error) {
	select {
	case hashSlots <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-hashSlots }()
	return argon2id.ComparePasswordAndHash(password, hash)
}

// loginBody is the body of a login: admins send username, console users
// name or email.
type loginBody struct {
	Username string `json:"username"`
	Name     string `json:"name"`
	Email    string `json:"email"`
	Password string `json:"password"`
}

// adminLoginID is who an admin login names.
func adminLoginID(b loginBody) string { return b.Username }

// countAttempt adds n to the login counter at key in the current window
// and returns the window's total, in one atomic step of the cache (a Redis
// script; a lock in memory), so parallel attempts cannot all read the same
// count. A cache error counts 0 (logins are not refused because the cache
// is down) and is logged.
func (s *Server) countAttempt(ctx context.Context, c storage.Cache, key string, n int64, window time.Duration) int64 {
	total, err := c.Incr(ctx, key, n, window)
	if err != nil {
		s.log.Warn("admin login counter unavailable", "err", err)
		return 0
	}
	return total
}

// adminLogin serves POST /api/admin/login: {"username","password"} → a
// session cookie and {"user", "csrf_token"}.
func (s *Server) adminLogin(ctx *fasthttp.RequestCtx) {
	body, ok := readLogin(ctx, adminLoginID, 64, `The body must be JSON {"username": "...", "password": "..."}.`)
	if !ok {
		return
	}
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cache := s.adminCache()
	userKey := "admin:login:user:" + pwPrint(strings.ToLower(body.Username))
	if s.loginLimited(ctx, rctx, cache, userKey) {
		return
	}
	// The attempt was counted as a failure before the password was checked
	// (loginLimited): a right one gives it back.
	if u, ok := s.checkLogin(ctx, rctx, body); ok {
		s.countAttempt(rctx, cache, userKey, -1, loginUserWindow)
		s.startSession(ctx, rctx, cache, u)
	}
}

// readLogin reads a login's body, answering the client itself (ok false)
// when it is not a same-origin POST of JSON naming a login (id, at most
// maxID bytes) and a password; shape is the 400's message.
func readLogin(ctx *fasthttp.RequestCtx, id func(loginBody) string, maxID int, shape string) (body loginBody, ok bool) {
	if !ctx.IsPost() {
		writeError(ctx, errMethod(string(ctx.Method()), string(ctx.Path())))
		return body, false
	}
	if !sameOrigin(ctx) {
		writeError(ctx, errCSRF("Cross-origin logins are refused."))
		return body, false
	}
	if ct := string(ctx.Request.Header.ContentType()); !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		writeError(ctx, &APIError{Status: 415, Type: "invalid_request_error", Code: "unsupported_media_type", Message: "Login takes Content-Type: application/json."})
		return body, false
	}
	if err := json.Unmarshal(ctx.PostBody(), &body); err != nil || id(body) == "" || body.Password == "" {
		param := "username"
		if err == nil && body.Password == "" && id(body) != "" {
			param = "password"
		} else if id(body) == "" && body.Username == "" {
			param = "name"
		}
		writeError(ctx, errBadParam(param, shape))
		return body, false
	}
	if len(body.Password) > maxPasswordBytes || len(id(body)) > maxID {
		writeError(ctx, errAdminAuth("Wrong username or password."))
		return body, false
	}
	return body, true
}

// loginLimited counts the attempt against the client's address and, as a
// failure until the password proves right, against the user at userKey,
// and answers 429 (true) when the address has made more than loginIPLimit
// attempts or the user more than loginUserLimit failed ones in the window.
// Each count is incremented and read in one atomic step before the
// password hash is checked: checking first and counting after let 60
// parallel wrong passwords all through.
func (s *Server) loginLimited(ctx *fasthttp.RequestCtx, rctx context.Context, cache storage.Cache, userKey string) bool {
	if s.addressLimited(ctx, rctx, cache) {
		return true
	}
	if n := s.countAttempt(rctx, cache, userKey, 1, loginUserWindow); n > loginUserLimit {
		writeError(ctx, &APIError{Status: 429, Type: "rate_limit_error", Code: "login_rate_limited",
			Message: "Too many failed logins for this user; wait and retry.", RetryAfter: windowLeft(s.now(), loginUserWindow)})
		return true
	}
	return false
}

// windowLeft is the time from now until the fixed window of length w that
// holds now ends: the counters' windows are aligned to the Unix epoch
// (storage.Cache.Incr), so a count past its limit starts again from zero
// then, not a whole window after the refused attempt. It is the login
// 429's Retry-After (rounded up to whole seconds, at least 1), which said
// the whole window however little of it was left.
func windowLeft(now time.Time, w time.Duration) time.Duration {
	return w - time.Duration(now.UnixNano()%int64(w))
}

// addressLimited counts an attempt (an admin or console login, a console
// registration: one budget) against the client's address and answers 429
// (true) when the address made more than loginIPLimit in the window.
func (s *Server) addressLimited(ctx *fasthttp.RequestCtx, rctx context.Context, cache storage.Cache) bool {
	ipKey := "admin:login:ip:" + ctx.RemoteIP().String()
	if n := s.countAttempt(rctx, cache, ipKey, 1, loginIPWindow); n > loginIPLimit {
		writeError(ctx, &APIError{Status: 429, Type: "rate_limit_error", Code: "login_rate_limited",
			Message: "Too many login attempts from this address; wait and retry.", RetryAfter: windowLeft(s.now(), loginIPWindow)})
		return true
	}
	return false
}

// checkLogin returns the enabled user the login's password matches. An
// unknown user costs a hash comparison too (dummyHash), so both take as
// long. On a mismatch it logs the failure and answers 401 (loginLimited
// counted it already); on a storage error it answers that; either way ok
// is false.
func (s *Server) checkLogin(ctx *fasthttp.RequestCtx, rctx context.Context, body loginBody) (u storage.AdminUser, ok bool) {
	u, err := s.store.GetAdminUser(rctx, body.Username)
	found := err == nil
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		s.storageError(ctx, err)
		return u, false
	}
	hash := dummyHash()
	if found {
		hash = u.PasswordHash
	}
	match, err := verifyPassword(rctx, body.Password, hash)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		s.log.Error("admin password check", "user", body.Username, "err", err)
	}
	if !found || !match || u.Disabled || u.Username != body.Username {
		s.log.Warn("admin login failed", "user", clip(body.Username), "ip", ctx.RemoteIP().String())
		writeError(ctx, errAdminAuth("Wrong username or password."))
		return u, false
	}
	return u, true
}

// startSession stores a new session of u in cache, notes the login on the
// user and answers the session cookie with the user and the CSRF token.
func (s *Server) startSession(ctx *fasthttp.RequestCtx, rctx context.Context, cache storage.Cache, u storage.AdminUser) {
	// Re-read the user: the password check takes a while, and a disable or
	// password change meanwhile must win, not be written back over by the
	// copy read before it (UpdateAdminUser rewrites every field).
	fresh, err := s.store.GetAdminUser(rctx, u.ID)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	if fresh.Disabled || fresh.PasswordHash != u.PasswordHash {
		writeError(ctx, errAdminAuth("Wrong username or password."))
		return
	}
	u = fresh
	token, sess, ok := s.newSession(ctx, rctx, cache, "admin", u.ID, u.PasswordHash)
	if !ok {
		return
	}
	at := time.Now().UTC()
	u.LastLoginAt = &at
	if stored, err := s.store.UpdateAdminUser(rctx, u); err == nil {
		u = stored
	} else {
		s.log.Warn("admin last login", "err", err)
	}
	s.setSessionCookie(ctx, token, SessionTTL)
	s.log.Info("admin login", "user", u.Username, "ip", ctx.RemoteIP().String())
	writeJSON(ctx, 200, map[string]any{"user": toAdminUserJSON(u), "csrf_token": sess.CSRF, "expires_at": time.Unix(sess.Expires, 0).UTC()})
}

// newSession stores a new session of scope ("admin" or "console") for the
// user uid whose password hash is pwHash, lasting SessionTTL, and returns
// its token; on failure it answers the client itself (ok false).
func (s *Server) newSession(ctx *fasthttp.RequestCtx, rctx context.Context, cache storage.Cache, scope, uid, pwHash string) (token string, sess adminSession, ok bool) {
	token, err := randomToken()
	csrf, err2 := randomToken()
	if err != nil || err2 != nil {
		writeError(ctx, &APIError{Status: 500, Type: "server_error", Message: "The server could not create a session."})
		return "", sess, false
	}
	sess = adminSession{UserID: uid, CSRF: csrf, PwPrint: pwPrint(pwHash), Expires: time.Now().Add(SessionTTL).Unix()}
	raw, _ := json.Marshal(sess)
	if err := cache.Set(rctx, sessionKey(scope, token), string(raw), SessionTTL); err != nil {
		s.log.Error(scope+" session store", "err", err)
		writeError(ctx, &APIError{Status: 503, Type: "server_error", Message: "Sessions are unavailable; retry later."})
		return "", sess, false
	}
	return token, sess, true
}

// loadSession returns the live session of scope the token names; found
// false when there is none (or it expired); an error when the cache failed.
func (s *Server) loadSession(rctx context.Context, scope, token string) (sess adminSession, found bool, err error) {
	if len(token) > 128 {
		return sess, false, nil
	}
	raw, ok, err := s.adminCache().Get(rctx, sessionKey(scope, token))
	if err != nil {
		return sess, false, err
	}
	if !ok || json.Unmarshal([]byte(raw), &sess) != nil || time.Now().Unix() >= sess.Expires {
		return sess, false, nil
	}
	return sess, true, nil
}

// checkCSRF answers whether an unsafe request authenticated by a session
// cookie comes from the same origin and carries the session's CSRF token
// (nil), or the 403 to answer; where tells where the token comes from.
func checkCSRF(ctx *fasthttp.RequestCtx, sess *adminSession, where string) *APIError {
	if !sameOrigin(ctx) {
		return errCSRF("Cross-origin requests may not change state.")
	}
	got := ctx.Request.Header.Peek(CSRFHeader)
	if len(got) == 0 || subtle.ConstantTimeCompare(got, []byte(sess.CSRF)) != 1 {
		return errCSRF("Missing or wrong " + CSRFHeader + " header (it is returned by " + where + ").")
	}
	return nil
}

// setSessionCookie sets (ttl > 0) or clears the admin session cookie.
func (s *Server) setSessionCookie(ctx *fasthttp.RequestCtx, token string, ttl time.Duration) {
	setCookie(ctx, SessionCookie, "/", token, ttl)
}

// setCookie sets (ttl > 0) or clears a session cookie: HttpOnly,
// SameSite=Strict, Secure over TLS (or behind a TLS proxy).
func setCookie(ctx *fasthttp.RequestCtx, name, path, token string, ttl time.Duration) {
	c := fasthttp.AcquireCookie()
	defer fasthttp.ReleaseCookie(c)
	c.SetKey(name)
	c.SetValue(token)
	c.SetPath(path)
	c.SetHTTPOnly(true)
	c.SetSameSite(fasthttp.CookieSameSiteStrictMode)
	c.SetSecure(ctx.IsTLS() || string(ctx.Request.Header.Peek("X-Forwarded-Proto")) == "https")
	if ttl > 0 {
		c.SetMaxAge(int(ttl / time.Second))
	} else {
		c.SetMaxAge(-1)
		c.SetValue("")
	}
	ctx.Response.Header.SetCookie(c)
}

// adminUserJSON is an admin user as the API shows it (never the hash).
type adminUserJSON struct {
	ID          string     `json:"id"`
	Username    string     `json:"username"`
	Disabled    bool       `json:"disabled"`
	CreatedAt   time.Time  `json:"created_at"`
	LastLoginAt *time.Time `json:"last_login_at"`
}

func toAdminUserJSON(u storage.AdminUser) adminUserJSON {
	return adminUserJSON{ID: u.ID, Username: u.Username, Disabled: u.Disabled, CreatedAt: u.CreatedAt, LastLoginAt: u.LastLoginAt}
}

// adminLogout serves POST /api/admin/logout: ends the session (a key gets 200 too, with nothing to end).
func (s *Server) adminLogout(ctx *fasthttp.RequestCtx, p *principal) {
	if p.session != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.adminCache().Delete(cctx, adminSessionKey(p.token)); err != nil {
			s.log.Warn("admin logout", "err", err)
		}
	}
	s.setSessionCookie(ctx, "", 0)
	writeJSON(ctx, 200, map[string]any{"logged_out": p.session != nil})
}

// adminMe serves GET /api/admin/me and PUT /api/admin/me/password.
func (s *Server) adminMe(ctx *fasthttp.RequestCtx, p *principal, method string, parts []string) {
	switch {
	case len(parts) == 0 && method == "GET":
		out := map[string]any{"auth": p.kind()}
		if p.session != nil {
			out["user"] = toAdminUserJSON(p.user)
			out["csrf_token"] = p.session.CSRF
			out["expires_at"] = time.Unix(p.session.Expires, 0).UTC()
		} else {
			out["key"] = map[string]any{"id": p.key.ID, "name": p.key.Name, "prefix": p.key.Prefix}
		}
		writeJSON(ctx, 200, out)
	case len(parts) == 1 && parts[0] == "password" && method == "PUT":
		if p.session == nil {
			writeError(ctx, &APIError{Status: 400, Type: "invalid_request_error", Code: "session_required", Message: "Changing a password needs a logged-in session, not an API key."})
			return
		}
		var body struct {
			Current string `json:"current_password"`
			New     string `json:"new_password"`
		}
		if err := json.Unmarshal(ctx.PostBody(), &body); err != nil {
			writeError(ctx, errBadParam("new_password", `The body must be JSON {"current_password": "...", "new_password": "..."}.`))
			return
		}
		if err := CheckPassword(body.New); err != nil {
			writeError(ctx, errBadParam("new_password", err.Error()))
			return
		}
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ok, err := verifyPassword(rctx, body.Current, p.user.PasswordHash)
		if err != nil || !ok {
			writeError(ctx, &APIError{Status: 403, Type: "permission_error", Code: "wrong_password", Message: "The current password is wrong."})
			return
		}
		hash, err := HashPassword(body.New)
		if err != nil {
			writeError(ctx, &APIError{Status: 500, Type: "server_error", Message: "The server could not hash the password."})
			return
		}
		u := p.user
		u.PasswordHash = hash
		if _, err := s.store.UpdateAdminUser(rctx, u); err != nil {
			s.storageError(ctx, err)
			return
		}
		_ = s.adminCache().Delete(rctx, adminSessionKey(p.token))
		s.setSessionCookie(ctx, "", 0)
		s.log.Info("admin password changed", "user", u.Username)
		writeJSON(ctx, 200, map[string]any{"changed": true, "logged_out": true})
	default:
		writeError(ctx, errMethod(method, string(ctx.Path())))
	}
}

// adminSessionHeader reports whether a request head names an admin route
// and carries a live session cookie (checked in the cache only; the handler
// checks the user).
func (s *Server) adminSessionHeader(h *fasthttp.RequestHeader) bool {
	tok := h.Cookie(SessionCookie)
	if len(tok) == 0 || len(tok) > 128 || !bytes.HasPrefix(h.RequestURI(), []byte("/api/admin/")) {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, ok, err := s.adminCache().Get(ctx, adminSessionKey(string(tok)))
	return ok && err == nil
}
