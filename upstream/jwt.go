package upstream

import (
	"encoding/base64"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// TokenClaims are the claims of a ChatGPT OAuth token (access or id token)
// that Codex reads (codex-rs/login/src/token_data.rs): exp, email (top level
// or https://api.openai.com/profile.email) and, under
// https://api.openai.com/auth, chatgpt_account_id and chatgpt_plan_type.
// The signature is not verified: the tokens are the upstream's to check.
type TokenClaims struct {
	Expires   time.Time // exp; zero when absent
	Email     string
	AccountID string // chatgpt_account_id
	Plan      string // chatgpt_plan_type
}

// ParseTokenClaims reads the claims of a JWT's payload. ok is false when tok
// is not a three-part JWT with a base64url JSON payload.
func ParseTokenClaims(tok string) (c TokenClaims, ok bool) {
	parts := strings.SplitN(tok, ".", 3)
	if len(parts) != 3 {
		return c, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil || !gjson.ValidBytes(payload) {
		return c, false
	}
	p := gjson.ParseBytes(payload)
	if !p.IsObject() {
		return c, false
	}
	if exp := p.Get("exp"); exp.Type == gjson.Number && exp.Float() > 0 {
		c.Expires = time.Unix(int64(exp.Float()), 0)
	}
	c.Email = p.Get("email").String()
	if c.Email == "" {
		c.Email = p.Get(`https://api\.openai\.com/profile.email`).String()
	}
	auth := p.Get(`https://api\.openai\.com/auth`)
	c.AccountID = auth.Get("chatgpt_account_id").String()
	c.Plan = auth.Get("chatgpt_plan_type").String()
	return c, true
}

// TokenExpiry returns the exp claim of a JWT, or the zero time when tok has
// none or is not a JWT.
func TokenExpiry(tok string) time.Time {
	c, _ := ParseTokenClaims(tok)
	return c.Expires
}
