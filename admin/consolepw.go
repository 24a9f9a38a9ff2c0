package admin

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// consoleRegistrationMode serves GET /api/console/register: {"mode":
// "closed" | "invite" | "open"}, so the registration page can ask for an
// invitation code or say that registration is closed before anyone types
// a password. It needs no session: a POST would tell the same.
func (s *Server) consoleRegistrationMode(ctx *fasthttp.RequestCtx) {
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mode, err := s.registration(rctx)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	writeJSON(ctx, 200, map[string]any{"mode": mode})
}

// consolePasswordKey is the cache key of a user's failed-login counter:
// console logins by name and password changes share it, so a stolen
// session cannot guess the current password faster than a login could.
func consolePasswordKey(name string) string {
	return "console:login:user:" + pwPrint(strings.ToLower(name))
}

// consolePassword serves POST /api/console/password {"current_password",
// "new_password"} → 200 {"changed": true, "csrf_token", "expires_at"} and
// a new console cookie. The new password follows CheckPassword (400
// new_password); a wrong current one is 403 wrong_password and counts as a
// failed login of the user (429 login_rate_limited past the limit, as
// logins). The stored argon2id hash changes, which ends every other
// session of the user (their password fingerprint no longer matches,
// consoleAuth); this session is replaced by a new one (new token and CSRF
// token), so a copy of the old cookie is worthless too. 409 conflict when
// the password changed meanwhile (an operator, another tab).
func (s *Server) consolePassword(ctx *fasthttp.RequestCtx, p *consolePrincipal) {
	var body struct {
		Current string `json:"current_password"`
		New     string `json:"new_password"`
	}
	if err := json.Unmarshal(ctx.PostBody(), &body); err != nil || body.Current == "" {
		writeError(ctx, errBadParam("current_password", `The body must be JSON {"current_password": "...", "new_password": "..."}.`))
		return
	}
	if err := CheckPassword(body.New); err != nil {
		writeError(ctx, errBadParam("new_password", err.Error()))
		return
	}
	if body.New == body.Current {
		writeError(ctx, errBadParam("new_password", "The new password is the current one."))
		return
	}
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cache := s.adminCache()
	userKey := consolePasswordKey(p.user.Name)
	if s.loginLimited(ctx, rctx, cache, userKey) {
		return
	}
	wrong := &APIError{Status: 403, Type: "permission_error", Code: "wrong_password", Param: "current_password", Message: "The current password is wrong."}
	if len(body.Current) > maxPasswordBytes {
		writeError(ctx, wrong)
		return
	}
	match, err := verifyPassword(rctx, body.Current, p.user.PasswordHash)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		s.log.Error("console password check", "user", p.user.Name, "err", err)
	}
	if !match {
		s.log.Warn("console password change: wrong current password", "user", p.user.Name, "ip", ctx.RemoteIP().String())
		writeError(ctx, wrong)
		return
	}
	s.countAttempt(rctx, cache, userKey, -1, loginUserWindow) // a right password gives its attempt back
	hash, err := HashPassword(body.New)
	if err != nil {
		writeError(ctx, &APIError{Status: 500, Type: "server_error", Message: "The server could not hash the password."})
		return
	}
	// UpdateUser writes every field: change a copy read after the password
	// check, and only if nobody changed the password or disabled the user
	// during it.
	unlock := s.edits.lock("user:" + p.user.ID)
	defer unlock()
	fresh, err := s.store.GetUser(rctx, p.user.ID)
	if err != nil {
		s.tenantStorageError(ctx, "user", err)
		return
	}
	if fresh.Disabled {
		writeError(ctx, errConsoleAuth("The session has ended; log in again."))
		return
	}
	if fresh.PasswordHash != p.user.PasswordHash {
		writeError(ctx, &APIError{Status: 409, Type: "invalid_request_error", Code: "conflict", Message: "The password was changed meanwhile; log in again."})
		return
	}
	fresh.PasswordHash = hash
	if _, err := s.store.UpdateUser(rctx, fresh); err != nil {
		s.tenantStorageError(ctx, "user", err)
		return
	}
	if err := cache.Delete(rctx, sessionKey("console", p.token)); err != nil {
		s.log.Warn("console password change: old session", "err", err)
	}
	token, sess, ok := s.newSession(ctx, rctx, cache, "console", fresh.ID, hash)
	if !ok {
		// The password changed; the user logs in again with it.
		setCookie(ctx, ConsoleCookie, consoleCookiePath, "", 0)
		return
	}
	setCookie(ctx, ConsoleCookie, consoleCookiePath, token, SessionTTL)
	s.log.Info("console password changed", "user", fresh.Name, "ip", ctx.RemoteIP().String())
	writeJSON(ctx, 200, map[string]any{"changed": true, "csrf_token": sess.CSRF, "expires_at": time.Unix(sess.Expires, 0).UTC()})
}
