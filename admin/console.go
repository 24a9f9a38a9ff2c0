package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// The users' console API (/api/console/…; docs/admin-api.md, "Users'
// console"): tenants (storage.User) log in, register, manage their own keys
// and read their balance, spend and request log. It shares the admin
// logins' lockout, password rules and CSRF scheme, with its own cookie and
// session scope, so an admin session is not a user session and a user
// session never reaches /api/admin/.

// ConsoleCookie is the name of the users' console session cookie:
// HttpOnly, SameSite=Strict, Path=/api/console/, Secure over TLS. Its
// sessions are kept under "console:session:" in the cache, apart from the
// admin ones.
const ConsoleCookie = "troupe_console"

const consoleCookiePath = "/api/console/"

var pathConsole = []byte(consoleCookiePath)

// isConsolePath reports whether p is under /api/console/.
func isConsolePath(p []byte) bool {
	return len(p) > len(pathConsole) && bytes.HasPrefix(p, pathConsole)
}

// consoleLoginID is who a console login names: name, else email.
func consoleLoginID(b loginBody) string {
	if b.Name != "" {
		return b.Name
	}
	return b.Email
}

// consolePrincipal is a logged-in console user.
type consolePrincipal struct {
	session adminSession
	token   string
	user    storage.User
}

// consoleUserJSON is a user as the console shows it to itself.
type consoleUserJSON struct {
	ID          string     `json:"id"`
	Name        string     `json:"name"`
	Email       string     `json:"email"`
	Group       string     `json:"group"`
	Models      []string   `json:"models"` // allowlist; empty: every model
	RPM         int64      `json:"rpm"`
	CreatedAt   time.Time  `json:"created_at"`
	LastLoginAt *time.Time `json:"last_login_at"`
}

func toConsoleUserJSON(u storage.User) consoleUserJSON {
	return consoleUserJSON{ID: u.ID, Name: u.Name, Email: u.Email, Group: u.Group, Models: nonNil(u.Models), RPM: u.RPM,
		CreatedAt: u.CreatedAt, LastLoginAt: u.LastLoginAt}
}

func errConsoleAuth(msg string) *APIError {
	return &APIError{Status: 401, Type: "authentication_error", Code: "unauthenticated", Message: msg}
}

// console serves /api/console/*: JSON, Cache-Control: no-store. Login and
// registration are open; every other route takes a console session
// (consoleAuth), and the unsafe ones its CSRF token.
func (s *Server) console(ctx *fasthttp.RequestCtx) {
	defer ctx.Response.Header.Set("Cache-Control", "no-store") // set last: error answers reset the headers
	path := strings.TrimPrefix(string(ctx.Path()), consoleCookiePath)
	parts := strings.Split(strings.Trim(path, "/"), "/")
	method := string(ctx.Method())
	if refuseRepeatedKeys(ctx) {
		return
	}
	switch {
	case parts[0] == "login" && len(parts) == 1:
		s.consoleLogin(ctx)
		return
	case parts[0] == "register" && len(parts) == 1:
		if ctx.IsGet() {
			s.consoleRegistrationMode(ctx)
		} else {
			s.consoleRegister(ctx)
		}
		return
	}
	p, aerr := s.consoleAuth(ctx, method)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	switch parts[0] {
	case "logout":
		if method != "POST" || len(parts) != 1 {
			writeError(ctx, errMethod(method, string(ctx.Path())))
			return
		}
		s.consoleLogout(ctx, p)
	case "me":
		if method != "GET" || len(parts) != 1 {
			writeError(ctx, errMethod(method, string(ctx.Path())))
			return
		}
		writeJSON(ctx, 200, map[string]any{"user": toConsoleUserJSON(p.user), "csrf_token": p.session.CSRF,
			"expires_at": time.Unix(p.session.Expires, 0).UTC()})
	case "password":
		if method != "POST" || len(parts) != 1 {
			writeError(ctx, errMethod(method, string(ctx.Path())))
			return
		}
		s.consolePassword(ctx, p)
	default:
		s.consoleData(ctx, p, method, parts)
	}
}

// consoleAuth authenticates a console request by its session cookie alone
// (API keys are for /v1); unsafe requests must come from the same origin
// and carry the session's CSRF token. The user must still exist, be
// enabled and have the password the session was made with.
func (s *Server) consoleAuth(ctx *fasthttp.RequestCtx, method string) (*consolePrincipal, *APIError) {
	token := string(ctx.Request.Header.Cookie(ConsoleCookie))
	if token == "" {
		return nil, errConsoleAuth("Log in (POST /api/console/login).")
	}
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sess, ok, err := s.loadSession(rctx, "console", token)
	if err != nil {
		s.log.Error("console session lookup", "err", err)
		return nil, &APIError{Status: 503, Type: "server_error", Message: "Sessions are unavailable; retry later."}
	}
	if !ok {
		return nil, errConsoleAuth("The session has ended; log in again.")
	}
	u, err := s.store.GetUser(rctx, sess.UserID)
	if err != nil || u.ID != sess.UserID || u.Disabled || pwPrint(u.PasswordHash) != sess.PwPrint {
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			s.log.Error("console user lookup", "err", err)
			return nil, &APIError{Status: 500, Type: "server_error", Message: "Storage error; see the gateway log."}
		}
		return nil, errConsoleAuth("The session has ended; log in again.")
	}
	if unsafeMethod(method) {
		if aerr := checkCSRF(ctx, &sess, "login and GET /api/console/me"); aerr != nil {
			return nil, aerr
		}
	}
	return &consolePrincipal{session: sess, token: token, user: u}, nil
}

// consoleLogin serves POST /api/console/login: {"name" or "email",
// "password"} → the console cookie and {"user", "csrf_token",
// "expires_at"}. Counted and locked out as admin logins are
// (loginLimited), per user under its own key.
func (s *Server) consoleLogin(ctx *fasthttp.RequestCtx) {
	body, ok := readLogin(ctx, consoleLoginID, 254, `The body must be JSON {"name" (or "email"): "...", "password": "..."}.`)
	if !ok {
		return
	}
	id := consoleLoginID(body)
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cache := s.adminCache()
	userKey := "console:login:user:" + pwPrint(strings.ToLower(id))
	if s.loginLimited(ctx, rctx, cache, userKey) {
		return
	}
	u, err := s.store.GetUser(rctx, id)
	found := err == nil
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		s.storageError(ctx, err)
		return
	}
	// GetUser matches an ID too: only the name or the email logs in.
	found = found && (u.Name == id || (u.Email != "" && u.Email == id))
	hash := dummyHash()
	if found && u.PasswordHash != "" {
		hash = u.PasswordHash
	}
	match, err := verifyPassword(rctx, body.Password, hash)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		s.log.Error("console password check", "user", clip(id), "err", err)
	}
	if !found || !match || u.PasswordHash == "" || u.Disabled {
		s.log.Warn("console login failed", "user", clip(id), "ip", ctx.RemoteIP().String())
		writeError(ctx, errConsoleAuth("Wrong name or password."))
		return
	}
	s.countAttempt(rctx, cache, userKey, -1, loginUserWindow) // a right password gives its attempt back
	token, sess, ok := s.newSession(ctx, rctx, cache, "console", u.ID, u.PasswordHash)
	if !ok {
		return
	}
	// The login time is written alone (SetUserLastLogin), leaving the
	// user's version (UpdatedAt) as it was: an admin editing the user
	// meanwhile is not refused 409 edit_conflict for a login. It is not
	// recorded when an operator disabled the user or changed the password
	// during the password check.
	unlock := s.edits.lock("user:" + u.ID)
	if fresh, err := s.store.GetUser(rctx, u.ID); err == nil && !fresh.Disabled && fresh.PasswordHash == u.PasswordHash {
		if stored, err := s.store.SetUserLastLogin(rctx, u.ID, time.Now().UTC()); err == nil {
			u = stored
		} else {
			s.log.Warn("console last login", "err", err)
		}
	}
	unlock()
	setCookie(ctx, ConsoleCookie, consoleCookiePath, token, SessionTTL)
	s.log.Info("console login", "user", u.Name, "ip", ctx.RemoteIP().String())
	writeJSON(ctx, 200, map[string]any{"user": toConsoleUserJSON(u), "csrf_token": sess.CSRF, "expires_at": time.Unix(sess.Expires, 0).UTC()})
}

// consoleLogout serves POST /api/console/logout: ends the session.
func (s *Server) consoleLogout(ctx *fasthttp.RequestCtx, p *consolePrincipal) {
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.adminCache().Delete(rctx, sessionKey("console", p.token)); err != nil {
		s.log.Warn("console logout", "err", err)
	}
	setCookie(ctx, ConsoleCookie, consoleCookiePath, "", 0)
	writeJSON(ctx, 200, map[string]any{"logged_out": true})
}

// registerBody is the body of POST /api/console/register.
type registerBody struct {
	Name       string `json:"name"`
	Email      string `json:"email"`
	Password   string `json:"password"`
	Invitation string `json:"invitation"` // the code, in invite mode
}

// registration returns the registration mode (closed when unset).
func (s *Server) registration(rctx context.Context) (string, error) {
	mode, err := s.store.GetSetting(rctx, storage.SettingRegistration)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && !storage.ValidRegistration(mode)) {
		return storage.RegistrationClosed, nil
	}
	return mode, err
}

// consoleRegister serves POST /api/console/register: {"name", "email"
// (optional), "password", "invitation" (in invite mode)} → 201 {"user"}.
// Closed mode refuses it (403 registration_closed); invite mode needs a
// code with uses left, redeemed in the transaction that creates the user
// (403 invalid_invitation otherwise); open mode takes anyone. Attempts
// count against the address as logins do. The new user has a balance of
// 0, the default group, and logs in next.
func (s *Server) consoleRegister(ctx *fasthttp.RequestCtx) {
	if !ctx.IsPost() {
		writeError(ctx, errMethod(string(ctx.Method()), string(ctx.Path())))
		return
	}
	if !sameOrigin(ctx) {
		writeError(ctx, errCSRF("Cross-origin registrations are refused."))
		return
	}
	if ct := string(ctx.Request.Header.ContentType()); !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		writeError(ctx, &APIError{Status: 415, Type: "invalid_request_error", Code: "unsupported_media_type", Message: "Registration takes Content-Type: application/json."})
		return
	}
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mode, err := s.registration(rctx)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	if mode == storage.RegistrationClosed {
		writeError(ctx, &APIError{Status: 403, Type: "permission_error", Code: "registration_closed", Message: "Registration is closed; ask the operator for an account."})
		return
	}
	var b registerBody
	if err := json.Unmarshal(ctx.PostBody(), &b); err != nil {
		writeError(ctx, errBadParam("", "The body must be JSON {\"name\", \"email\", \"password\", \"invitation\"}: "+jsonDecodeError(err)+"."))
		return
	}
	u := storage.User{Name: b.Name, Email: b.Email}
	if err := u.Validate(); err != nil {
		param := "name"
		if strings.Contains(err.Error(), "email") {
			param = "email"
		}
		writeError(ctx, errBadParam(param, clip(storageReason(err))))
		return
	}
	if err := CheckPassword(b.Password); err != nil {
		writeError(ctx, errBadParam("password", err.Error()))
		return
	}
	var n storage.NewUser
	if mode == storage.RegistrationInvite {
		if b.Invitation == "" || len(b.Invitation) > 128 {
			writeError(ctx, &APIError{Status: 403, Type: "permission_error", Code: "invalid_invitation", Param: "invitation", Message: "Registration needs an invitation code."})
			return
		}
		n.Invitation = storage.HashKey(b.Invitation)
	}
	if s.addressLimited(ctx, rctx, s.adminCache()) {
		return
	}
	hash, err := HashPassword(b.Password)
	if err != nil {
		writeError(ctx, &APIError{Status: 500, Type: "server_error", Message: "The server could not hash the password."})
		return
	}
	u.PasswordHash = hash
	stored, err := s.store.CreateUser(rctx, u, n)
	switch {
	case errors.Is(err, storage.ErrInvalid) && n.Invitation != "":
		// u passed Validate: what storage refused is the code.
		writeError(ctx, &APIError{Status: 403, Type: "permission_error", Code: "invalid_invitation", Param: "invitation",
			Message: "The invitation code is unknown, disabled, expired or used up."})
		return
	case errors.Is(err, storage.ErrConflict):
		writeError(ctx, &APIError{Status: 409, Type: "invalid_request_error", Code: "conflict", Message: "That name or email is taken."})
		return
	case err != nil:
		s.tenantStorageError(ctx, "user", err)
		return
	}
	s.billingChanged(rctx, "user registered "+stored.ID)
	s.log.Info("console: user registered", "user", stored.Name, "mode", mode, "ip", ctx.RemoteIP().String())
	writeJSON(ctx, 201, map[string]any{"user": toConsoleUserJSON(stored)})
}
