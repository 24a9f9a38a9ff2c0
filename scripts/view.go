package scripts

import "time"

// AccountView is what a policy's score function sees of one account. The
// caller (the scheduler) fills it from its own view of the account; this
// package imports none of Troupe's other packages, so it has its own type.
// Every field maps to one field of the Lua table passed to score; the Lua names,
// types and units are in docs/policies.md and in each field's comment.
//
// Score reads an AccountView and does not retain it or anything it points to,
// so the caller may reuse one AccountView (and its slices) for every call.
type AccountView struct {
	ID       string   // id: string, the account's stable id
	Name     string   // name: string
	Provider string   // provider: "codex" | "openai" | "openai_compat" | "anthropic"
	Plan     string   // plan: string, "" when unknown ("free", "plus", "pro", "team", …)
	Group    string   // group: string, "" is the default group
	Tags     []string // tags: list of strings, in configuration order
	Priority int      // priority: number (integer), as configured; policies decide what it means

	Status         string    // status: "active" | "cooling" | "disabled" | "unauthorized" | "banned"
	CooldownUntil  time.Time // cooldown_until: unix seconds (float), nil when zero
	CooldownReason string    // cooldown_reason: failure class that caused the cooldown, "" when none

	InFlight    int // inflight: leases held now
	MaxInFlight int // max_inflight: the account's concurrency limit

	Requests      uint64 // requests: leases granted since the account's actor started
	Successes     uint64 // successes: successful outcomes since start
	Failures      uint64 // failures: account-level failures since start
	SuccessStreak int    // success_streak: consecutive successes (reset by a failure)
	FailureStreak int    // failure_streak: consecutive account-level failures (reset by a success)

	// LastFailure is the time of the latest failure of each class
	// (last_failure.quota, .rate, .auth, .banned, .transient, .timeout).
	LastFailure FailureTimes

	EWMASuccess float64       // ewma_success: success rate in [0, 1]; 1 before the first outcome
	EWMALatency time.Duration // ewma_latency_ms: total latency of successful requests, milliseconds (float); 0 before the first
	EWMATTFT    time.Duration // ewma_ttft_ms: time to first token of successful streams, milliseconds (float); 0 before the first

	// Windows are the account's usage windows as the upstream last reported
	// them (usage_windows: list of tables), e.g. Codex's 5-hour and 7-day windows.
	Windows []UsageWindow

	// ActiveLimit is the limit the upstream last applied (active_limit:
	// string; Codex's x-codex-active-limit, "codex" for the account's own,
	// else a limit family's id); "" when never reported.
	ActiveLimit string
	// Credits are the account's purchased credits (credits: table
	// {has_credits: boolean, unlimited: boolean, balance: string}, nil
	// when never reported).
	Credits *Credits
	// Families are the account's per-model limits (limit_families: list of
	// tables), by id.
	Families []LimitFamily
}

// Credits are an account's purchased credits as the upstream reports them
// (Lua: credits).
type Credits struct {
	HasCredits bool   // has_credits: boolean
	Unlimited  bool   // unlimited: boolean
	Balance    string // balance: string, as the upstream wrote it ("0", "5.39"); "" when not given
}

// LimitFamily is one per-model usage limit of an account (Lua: one element
// of limit_families): when it runs out, the account rests for its models
// only, and the scheduler does not offer the account for them.
type LimitFamily struct {
	ID        string        // id: string, e.g. "bengalfox"
	LimitName string        // limit_name: string, the model it covers ("" when not given)
	Models    []string      // models: list of strings, further models the upstream answered under it
	Windows   []UsageWindow // usage_windows: list of tables, as the account's own (burn_rate 0, exhausts_at nil)
	// CoolingUntil is when its models may be served again after it ran out
	// (cooling_until: unix seconds (float)); nil when it has not.
	CoolingUntil time.Time
}

// FailureTimes holds the time of the latest failure of each failure class;
// a zero time (nil in Lua) means none since the account's actor started.
// Lua: the table last_failure, each field unix seconds (float) or nil.
type FailureTimes struct {
	Quota  time.Time // quota: usage or quota exhausted (429 usage_limit_reached, 402 quota)
	Rate   time.Time // rate: rate limited (429 without quota signals)
	Auth   time.Time // auth: credentials rejected (401)
	Banned time.Time // banned: account deactivated or forbidden (402 deactivated, 403)
	// Transient is the latest 5xx, connect/TLS error or broken stream; it also
	// covers timeouts when the host does not tell them apart.
	Transient time.Time // transient
	// Timeout is the latest timeout, when the host tells timeouts apart from
	// other transient failures (a timeout then updates Timeout, not Transient).
	// Zero when the host does not distinguish them.
	Timeout time.Time // timeout
}

// UsageWindow is one usage window of an account as the upstream reports it
// (Lua: one element of usage_windows).
type UsageWindow struct {
	Name          string    // name: e.g. "5h", "7d"; "" when the upstream gave none
	UsedPercent   float64   // used_percent: 0–100, may exceed 100 when the upstream says so
	WindowMinutes int       // window_minutes: length of the window (300 for 5 h, 10080 for 7 days); 0 when unknown
	ResetsAt      time.Time // resets_at: unix seconds (float), nil when zero (unknown)
	// BurnRate is the window's recent use, percent per hour (burn_rate:
	// number); 0 until the host has measured it.
	BurnRate float64
	// ExhaustsAt is when the window is forecast to reach 100 % at BurnRate
	// (exhausts_at: unix seconds (float)); nil when it is not forecast to run
	// out before it resets.
	ExhaustsAt time.Time
}

// RequestView is what a policy's route function sees of one request.
// Route does not retain it.
type RequestView struct {
	Model      string     // model: string, the requested model after aliases
	Protocol   string     // protocol: "chat.completions" | "responses" | "messages"
	Stream     bool       // stream: boolean
	APIKey     APIKeyView // api_key: table {id, name, group}
	SessionKey string     // session_key: string, "" when the client sent none
	ClientIP   string     // client_ip: string
}

// APIKeyView identifies the Troupe API key a request came with (Lua: api_key).
type APIKeyView struct {
	ID    string // id
	Name  string // name
	Group string // group: "" is the default group
}

// Tier is the health tier a policy assigns to an account. The scheduler
// prefers a better tier and caps concurrency per tier (Knobs.Concurrency).
// The zero value is TierHealthy: a policy that returns no tier puts every
// account in the healthy tier.
type Tier uint8

// Tiers, best first.
const (
	TierHealthy Tier = iota // "healthy"
	TierWarm                // "warm"
	TierRisky               // "risky"

	// NumTiers is the number of tiers, for arrays indexed by Tier.
	NumTiers = 3
)

var tierNames = [NumTiers]string{"healthy", "warm", "risky"}

// String returns the tier's Lua name ("healthy", "warm", "risky").
func (t Tier) String() string {
	if int(t) < NumTiers {
		return tierNames[t]
	}
	return "unknown"
}

// ParseTier returns the tier named s ("healthy", "warm" or "risky").
func ParseTier(s string) (Tier, bool) {
	for i, n := range tierNames {
		if n == s {
			return Tier(i), true
		}
	}
	return 0, false
}
