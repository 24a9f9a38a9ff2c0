package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// DefaultOAuthTokenURL is the OAuth token endpoint the Codex CLI refreshes
// ChatGPT logins at (codex-rs/login/src/auth/manager.rs, REFRESH_TOKEN_URL).
const DefaultOAuthTokenURL = "https://auth.openai.com/oauth/token"

// DefaultOAuthClientID is the Codex CLI's OAuth client id (the "aud" of its
// id tokens; codex-rs/login/src/auth/manager.rs CLIENT_ID).
const DefaultOAuthClientID = "app_EMoamEEZ73f0CkXaXp7hrann"

// ErrRefreshRejected means the OAuth server refused the refresh token for
// good: invalid_grant, refresh_token_expired, refresh_token_reused,
// refresh_token_invalidated, or another 4xx (codex-rs
// classify_refresh_token_failure). The account needs a new login; retrying
// cannot help. Test with errors.Is.
var ErrRefreshRejected = errors.New("oauth: refresh token rejected")

// ErrNoRefreshToken means the account has no refresh token to refresh with.
var ErrNoRefreshToken = errors.New("oauth: no refresh token")

// Tokens are the result of a refresh: the rotated tokens. Codex reads
// id_token, access_token and refresh_token, all optional
// (codex-rs RefreshResponse); empty fields keep their old value.
type Tokens struct {
	AccessToken  string
	RefreshToken string
	IDToken      string
	ExpiresIn    time.Duration // expires_in, 0 when absent (the access token's exp claim is authoritative)
}

// OAuthConfig configures an OAuth client. Zero fields take the defaults.
type OAuthConfig struct {
	TokenURL  string       // default DefaultOAuthTokenURL
	ClientID  string       // default DefaultOAuthClientID
	UserAgent string       // default DefaultCodexUserAgent
	Client    *http.Client // default SharedClient()
}

// OAuth refreshes ChatGPT OAuth tokens as the Codex CLI does: POST TokenURL
// with Content-Type application/json, originator and User-Agent headers and
// the body {"client_id","grant_type":"refresh_token","refresh_token"}
// (see the fixture oauth-refresh.request.http). Safe for concurrent use.
type OAuth struct {
	cfg OAuthConfig
}

// NewOAuth returns an OAuth client for cfg.
func NewOAuth(cfg OAuthConfig) *OAuth {
	if cfg.TokenURL == "" {
		cfg.TokenURL = DefaultOAuthTokenURL
	}
	if cfg.ClientID == "" {
		cfg.ClientID = DefaultOAuthClientID
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultCodexUserAgent
	}
	if cfg.Client == nil {
		cfg.Client = SharedClient()
	}
	return &OAuth{cfg: cfg}
}

// RefreshError is a failed refresh. Code is the OAuth error code the server
// gave ("refresh_token_reused", "invalid_grant", …; "" when none), Status
// the HTTP status (0 when no answer arrived). Its message never contains a
// token.
type RefreshError struct {
	Status int
	Code   string
	Err    error // ErrRefreshRejected for a permanent refusal, else the cause
}

// Error says the refresh failed, with the status and OAuth error code when
// the token endpoint answered ("oauth refresh: status 400, code invalid_grant: …").
func (e *RefreshError) Error() string {
	switch {
	case e.Status == 0:
		return fmt.Sprintf("oauth refresh: %v", e.Err)
	case e.Code != "":
		return fmt.Sprintf("oauth refresh: status %d, code %s: %v", e.Status, e.Code, e.Err)
	}
	return fmt.Sprintf("oauth refresh: status %d: %v", e.Status, e.Err)
}

// Unwrap returns the cause: ErrRefreshRejected for a permanent refusal.
func (e *RefreshError) Unwrap() error { return e.Err }

// Permanent reports whether err is a refusal that retrying cannot fix.
func Permanent(err error) bool {
	return errors.Is(err, ErrRefreshRejected) || errors.Is(err, ErrNoRefreshToken)
}

// maxOAuthBody bounds the token endpoint's answer: 1 MiB.
const maxOAuthBody = 1 << 20

// Refresh exchanges refreshToken for new tokens. Errors are *RefreshError:
// wrapping ErrRefreshRejected when the server refused the grant (4xx other
// than 408 and 429), else the network error or a server-error status, which
// may be retried with backoff. A refresh token is single use: after a
// successful call the old one is spent and only the returned one works.
func (o *OAuth) Refresh(ctx context.Context, refreshToken string) (Tokens, error) {
	if refreshToken == "" {
		return Tokens{}, &RefreshError{Err: ErrNoRefreshToken}
	}
	body, err := json.Marshal(map[string]string{
		"client_id":     o.cfg.ClientID,
		"grant_type":    "refresh_token",
		"refresh_token": refreshToken,
	})
	if err != nil {
		return Tokens{}, &RefreshError{Err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.cfg.TokenURL, bytes.NewReader(body))
	if err != nil {
		return Tokens{}, &RefreshError{Err: errors.New("bad token URL")}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Originator", CodexOriginator)
	req.Header.Set("User-Agent", o.cfg.UserAgent)
	resp, err := o.cfg.Client.Do(req)
	if err != nil {
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) {
			err = ue.Unwrap() // drop the URL, which is config, not secret, but noisy
		}
		return Tokens{}, &RefreshError{Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxOAuthBody))
	if err != nil {
		return Tokens{}, &RefreshError{Status: resp.StatusCode, Err: err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		code := refreshErrorCode(b)
		e := &RefreshError{Status: resp.StatusCode, Code: code, Err: errors.New("server error")}
		if refreshRejected(resp.StatusCode, code) {
			e.Err = ErrRefreshRejected
		}
		return Tokens{}, e
	}
	if !gjson.ValidBytes(b) {
		return Tokens{}, &RefreshError{Status: resp.StatusCode, Err: errors.New("answer is not JSON")}
	}
	r := gjson.ParseBytes(b)
	t := Tokens{
		AccessToken:  r.Get("access_token").String(),
		RefreshToken: r.Get("refresh_token").String(),
		IDToken:      r.Get("id_token").String(),
		ExpiresIn:    time.Duration(r.Get("expires_in").Int()) * time.Second,
	}
	if t.AccessToken == "" {
		return Tokens{}, &RefreshError{Status: resp.StatusCode, Err: errors.New("answer has no access_token")}
	}
	return t, nil
}

// refreshErrorCode reads the OAuth error code from an error body: the
// fixtures' {"error":{"code":…}}, RFC 6749's {"error":"invalid_grant"}, or
// {"code":…}.
func refreshErrorCode(b []byte) string {
	if !gjson.ValidBytes(b) {
		return ""
	}
	r := gjson.ParseBytes(b)
	if e := r.Get("error"); e.IsObject() {
		return firstString(e.Get("code"), e.Get("type"))
	} else if e.Type == gjson.String {
		return e.Str
	}
	return r.Get("code").String()
}

// refreshRejected decides whether a refresh failure is permanent: the codes
// Codex treats as such, and any other 4xx except 408 and 429.
func refreshRejected(status int, code string) bool {
	switch code {
	case "invalid_grant", "refresh_token_expired", "refresh_token_reused", "refresh_token_invalidated", "invalid_client", "unauthorized_client":
		return true
	}
	if strings.HasPrefix(code, "refresh_token_") {
		return true
	}
	return status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests
}
