package gateway

import (
	"encoding/json"
	"math"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// codexUsage answers the ChatGPT backend's usage endpoint as the Codex CLI
// asks it (openai/codex codex-rs/backend-client: GET {chatgpt_base_url}/wham/usage,
// i.e. /backend-api/wham/usage, or /api/codex/usage for a base URL that is
// not ChatGPT's) for a Troupe API key from the pool: the capacity of the codex accounts the key
// may use, in the backend's RateLimitStatusPayload shape (docs/codex.md#the-pools-usage).
func (s *Server) codexUsage(ctx *fasthttp.RequestCtx) {
	key, aerr := s.authenticate(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if _, aerr := s.keyUser(ctx, &key); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	b, err := json.Marshal(poolCodexUsage(s.sys.Views(), &key, s.now()))
	if err != nil { // plain structs of strings, bools and numbers: cannot fail
		writeError(ctx, &APIError{Status: 500, Type: "server_error", Message: "The server had an error while processing your request."})
		return
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}

// rateLimitStatus is the ChatGPT backend's answer to GET /wham/usage
// (openai/codex codex-rs/codex-backend-openapi-models RateLimitStatusPayload):
// plan_type is one of the backend's plans ("guest", "free", "go", "plus",
// "pro", "team", "business", "enterprise", "edu", …).
type rateLimitStatus struct {
	PlanType  string             `json:"plan_type"`
	RateLimit *rateLimitDetails  `json:"rate_limit"`
	Credits   *creditStatusShape `json:"credits,omitempty"`
}

// rateLimitDetails is RateLimitStatusDetails: allowed and limit_reached,
// and the windows (null when no account reported one).
type rateLimitDetails struct {
	Allowed         bool               `json:"allowed"`
	LimitReached    bool               `json:"limit_reached"`
	PrimaryWindow   *rateLimitSnapshot `json:"primary_window"`
	SecondaryWindow *rateLimitSnapshot `json:"secondary_window"`
}

// rateLimitSnapshot is RateLimitWindowSnapshot: whole numbers (i32), the
// percent used (0–100), the window's length and its reset in seconds, and
// the reset as a Unix time in seconds.
type rateLimitSnapshot struct {
	UsedPercent        int   `json:"used_percent"`
	LimitWindowSeconds int   `json:"limit_window_seconds"`
	ResetAfterSeconds  int   `json:"reset_after_seconds"`
	ResetAt            int64 `json:"reset_at"`
}

// creditStatusShape is CreditStatusDetails; balance is a decimal string.
type creditStatusShape struct {
	HasCredits bool   `json:"has_credits"`
	Unlimited  bool   `json:"unlimited"`
	Balance    string `json:"balance,omitempty"`
}

// codexUsable reports whether key may be routed to the account of v: a
// codex account of the key's group (any group for a key without one) that
// serves a model the key may ask for.
func codexUsable(v *actors.View, key *storage.APIKey) bool {
	if v.Provider != storage.ProviderCodex || (key.Group != "" && v.Group != key.Group) {
		return false
	}
	if len(key.Models) == 0 || len(v.Models) == 0 {
		return true
	}
	return slices.ContainsFunc(v.Models, func(m string) bool { return modelAllowed(key, m) })
}

// poolCodexUsage is the pool's usage as the ChatGPT backend reports one
// login's, over the codex accounts key may use that still serve (not
// disabled, unauthorized or banned):
//
//   - used_percent of each window (the accounts' first reported window is
//     the primary, the second the secondary, as the backend orders them):
//     the share of the pool's capacity used, the mean of the accounts'
//     used percents (capped at 100; an account that reported no such
//     window counts as unused), rounded up;
//   - reset_at: the soonest reset of a window with usage in it, when some
//     of the pool's capacity returns (when all are used up, the soonest
//     time any account can serve again); of any window when none is used;
//   - limit_reached when no account can serve now (each one's own limit is
//     used up or it rests), allowed its opposite;
//   - plan_type: the plan most of the accounts have ("guest", the backend's
//     default, when none is known); credits when any account reported them:
//     has_credits and unlimited when any has, the balances summed.
func poolCodexUsage(views []actors.View, key *storage.APIKey, now time.Time) rateLimitStatus {
	var serving []*actors.View
	for i := range views {
		v := &views[i]
		if codexUsable(v, key) && (v.Status == actors.StatusActive || v.Status == actors.StatusCooling) {
			serving = append(serving, v)
		}
	}
	out := rateLimitStatus{PlanType: majorityPlan(serving), RateLimit: &rateLimitDetails{}}
	canServe := false
	for _, v := range serving {
		exhausted := false
		for _, w := range v.Windows {
			exhausted = exhausted || w.UsedPercent >= 100 && (w.ResetsAt.IsZero() || w.ResetsAt.After(now))
		}
		if !exhausted && (v.Status == actors.StatusActive || !now.Before(v.CooldownUntil)) {
			canServe = true
		}
	}
	out.RateLimit.Allowed, out.RateLimit.LimitReached = canServe, !canServe
	out.RateLimit.PrimaryWindow = poolWindow(serving, 0, now)
	out.RateLimit.SecondaryWindow = poolWindow(serving, 1, now)
	out.Credits = poolCredits(serving)
	return out
}

// poolWindow aggregates the i-th reported window of the accounts (see
// poolCodexUsage); nil when no account reported one.
func poolWindow(accounts []*actors.View, i int, now time.Time) *rateLimitSnapshot {
	var used float64
	var minutes int
	var soonestUsed, soonest time.Time
	reported := 0
	earlier := func(t *time.Time, at time.Time) {
		if at.After(now) && (t.IsZero() || at.Before(*t)) {
			*t = at
		}
	}
	for _, v := range accounts {
		if i >= len(v.Windows) {
			continue
		}
		w := v.Windows[i]
		reported++
		minutes = max(minutes, w.WindowMinutes)
		p := min(max(w.UsedPercent, 0), 100)
		if !w.ResetsAt.IsZero() && !w.ResetsAt.After(now) {
			p = 0 // the window has reset since it was reported
		}
		used += p
		if p > 0 {
			earlier(&soonestUsed, w.ResetsAt)
		}
		earlier(&soonest, w.ResetsAt)
	}
	if reported == 0 {
		return nil
	}
	resetAt := soonest
	if !soonestUsed.IsZero() {
		resetAt = soonestUsed
	}
	snap := &rateLimitSnapshot{
		UsedPercent:        int(math.Ceil(used / float64(len(accounts)))),
		LimitWindowSeconds: minutes * 60,
	}
	if !resetAt.IsZero() {
		snap.ResetAt = resetAt.Unix()
		snap.ResetAfterSeconds = int(math.Ceil(resetAt.Sub(now).Seconds()))
	}
	return snap
}

// majorityPlan is the plan most of accounts have (ties: the first in name
// order), "guest" when none is known.
func majorityPlan(accounts []*actors.View) string {
	counts := map[string]int{}
	best := ""
	for _, v := range accounts {
		if v.Plan != "" {
			counts[v.Plan]++
		}
	}
	for p, n := range counts {
		if best == "" || n > counts[best] || n == counts[best] && p < best {
			best = p
		}
	}
	if best == "" {
		return "guest"
	}
	return best
}

// poolCredits merges the accounts' credits; nil when none reported any. A
// balance that is not a decimal number is left out of the sum.
func poolCredits(accounts []*actors.View) *creditStatusShape {
	var out *creditStatusShape
	sum, decimals, summed := new(big.Rat), 0, false
	for _, v := range accounts {
		c := v.Credits
		if c == nil {
			continue
		}
		if out == nil {
			out = &creditStatusShape{}
		}
		out.HasCredits = out.HasCredits || c.HasCredits
		out.Unlimited = out.Unlimited || c.Unlimited
		if r, ok := new(big.Rat).SetString(c.Balance); ok && c.Balance != "" {
			sum.Add(sum, r)
			summed = true
			if i := strings.IndexByte(c.Balance, '.'); i >= 0 {
				decimals = max(decimals, len(c.Balance)-i-1)
			}
		}
	}
	if out != nil && summed {
		out.Balance = sum.FloatString(decimals)
	}
	return out
}
