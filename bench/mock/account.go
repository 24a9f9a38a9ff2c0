package mock

import (
	"strconv"
	"sync/atomic"
	"time"
)

// Kind is the upstream API an Account simulates.
type Kind string

// The account kinds the fleet serves.
const (
	// KindOpenAI is an OpenAI API key: /v1/chat/completions, /v1/responses
	// and /v1/models.
	KindOpenAI Kind = "openai"
	// KindOpenAICompat is any OpenAI-compatible endpoint: /v1/chat/completions
	// and /v1/models only.
	KindOpenAICompat Kind = "openai_compat"
	// KindCodex is a ChatGPT OAuth account on the Codex backend:
	// /backend-api/codex/responses and /backend-api/codex/models.
	KindCodex Kind = "codex"
	// KindAnthropic is an Anthropic API key: /v1/messages,
	// /v1/messages/count_tokens and /v1/models (asked with x-api-key), in
	// Anthropic's shapes. Requests authenticate with `x-api-key: <Token>`
	// and must carry an anthropic-version header.
	KindAnthropic Kind = "anthropic"
)

// Account is one simulated upstream account.
type Account struct {
	// Name identifies the account (e.g. "demo-0042") in Stats, Remove and in
	// the text of every answer it gives (see AnswerText). Names are unique
	// within a fleet.
	Name string
	// Kind selects the routes the account answers on; empty means KindOpenAI.
	Kind Kind
	// Token is the bearer token the account authenticates with
	// (`Authorization: Bearer <Token>`): the API key for openai and
	// openai_compat, the access token for codex; for anthropic the
	// `x-api-key` value. Tokens must be unique within
	// a fleet; an account with an empty Token can never be reached.
	Token string
	// ChatGPTAccountID is for codex only: the `chatgpt-account-id` request
	// header must equal it (401 when missing, 403 when different). Empty
	// means the header is not checked.
	ChatGPTAccountID string
	// Models are the model ids the account serves; a request for any other
	// model is refused (404 model_not_found, or 400 on codex). Empty means any
	// model is served and the model listings show DefaultModels().
	Models []string
	// Latency is the time to first token: from accepting the request to the
	// first content event of a stream (headers are sent at once), or added to
	// the generation time of a JSON answer.
	Latency time.Duration
	// TokensPerSecond paces output tokens (one streamed delta each); a JSON
	// answer is held back OutputTokens/TokensPerSecond seconds after Latency.
	// 0 (or negative) means as fast as possible.
	TokensPerSecond float64
	// OutputTokens is the number of output text tokens (words, deltas) of
	// every answer; 0 (or negative) means DefaultOutputTokens.
	OutputTokens int
	// Fault, when set, makes the account fail the way it describes (see
	// Fault and FaultKind); nil means the account always answers normally.
	// The fleet keeps a copy: change a serving account's fault with
	// Fleet.SetFault. A quota fault's reset clock (Fault.ResetsIn) starts
	// when the account is added.
	Fault *Fault
}

// defaultModels are listed by an account whose Models is empty.
var defaultModels = []string{"gpt-5.4", "gpt-5.4-mini", "gpt-5-nano"}

// DefaultModels returns (a copy of) the model ids listed by an account whose
// Models is empty; such an account serves any model.
func DefaultModels() []string { return append([]string(nil), defaultModels...) }

// account is the runtime state of one Account: its configuration, what is
// precomputed from it, its current fault and its counters. Everything an
// account decides about one request lives in plan and in the rate-limit
// methods below.
type account struct {
	cfg      Account             // cfg.Fault is nil: the live fault is in fault
	models   map[string]struct{} // nil: any model
	ans      answer
	tokens   int                        // output tokens per answer, >= 1
	interval time.Duration              // between two deltas; 0: no pacing
	fault    atomic.Pointer[faultState] // nil: no fault; swapped by Fleet.SetFault
	stats    counters
}

func newAccount(a Account) *account {
	if a.Kind == "" {
		a.Kind = KindOpenAI
	}
	fault := a.Fault
	a.Fault = nil
	acc := &account{cfg: a, ans: newAnswer(a.Name), tokens: a.OutputTokens}
	acc.setFault(fault, time.Now())
	a.Models = append([]string(nil), a.Models...)
	acc.cfg.Models = a.Models
	if len(a.Models) > 0 {
		acc.models = make(map[string]struct{}, len(a.Models))
		for _, m := range a.Models {
			acc.models[m] = struct{}{}
		}
	}
	if acc.tokens <= 0 {
		acc.tokens = DefaultOutputTokens
	}
	if a.TokensPerSecond > 0 {
		acc.interval = time.Duration(float64(time.Second) / a.TokensPerSecond)
	}
	return acc
}

// servesRoute reports whether the account answers on route rt.
func (a *account) servesRoute(rt route) bool {
	switch rt {
	case routeChat, routeModels:
		return a.cfg.Kind == KindOpenAI || a.cfg.Kind == KindOpenAICompat
	case routeResponses, routeCompact:
		return a.cfg.Kind == KindOpenAI
	case routeCodex, routeCodexModels, routeCodexCompact:
		return a.cfg.Kind == KindCodex
	case routeMessages, routeCountTokens, routeAnthropicModels:
		return a.cfg.Kind == KindAnthropic
	}
	return false
}

// listedModels returns the models shown by the model listings.
func (a *account) listedModels() []string {
	if len(a.cfg.Models) == 0 {
		return defaultModels
	}
	return a.cfg.Models
}

// plan is what an account does with one valid request. reject, when set, is
// answered instead (in the route's protocol, with its headers) and counted as
// Rejected. fault, when set, is the fault that fires on this request; the
// fault code in faults.go renders it, and the request is counted in Faults.
type plan struct {
	reject   *failure
	fault    *faultState   // nil: a normal answer
	latency  time.Duration // before the first content event
	interval time.Duration // between deltas; 0: as fast as possible
	tokens   int           // number of deltas, >= 1
	cutAfter int           // > 0: the stream stops right after this many deltas
	// capped: tokens was cut to the request's output limit (request.maxOutput),
	// so the answer says it stopped there (finish_reason "length", status
	// "incomplete", stop_reason "max_tokens").
	capped bool
}

// plan decides how the account answers r. It is the single place for
// per-account behaviour: a request the account cannot serve (unknown model)
// is refused first, then the account's fault, if it fires, replaces the
// normal answer.
func (a *account) plan(r *request) plan {
	if a.models != nil {
		if _, ok := a.models[r.model]; !ok {
			return plan{reject: &failure{kind: failModelNotFound, arg: r.model}}
		}
	}
	p := plan{latency: a.cfg.Latency, interval: a.interval, tokens: a.tokens}
	switch r.script.kind {
	case scriptResult: // "Hello from NAME. The tool returned:" and the result's words
		p.tokens = 3 + len(resultPrefix) + len(r.script.words)
	case scriptToolCall: // one delta per argument fragment
		p.tokens = toolFragments
	}
	if r.maxOutput > 0 && p.tokens > r.maxOutput { // parseRequest left no tool call this cuts
		p.tokens, p.capped = r.maxOutput, true
	}
	if fs := a.fault.Load(); fs != nil && fs.fires(time.Now()) {
		p.fault = fs
		switch fs.Kind {
		case FaultSlowFirstToken, FaultJSONWhenStream:
			// A normal answer, later than usual.
			p.latency += fs.Delay
		case FaultDisconnectAfterContent:
			p.cutAfter = max(p.tokens/2, 1)
		}
	}
	return p
}

// modelsFault returns the fault that refuses a model listing now, if any:
// a revoked credential (unauthorized) or a gone account (deactivated) is
// refused on every endpoint. Quota, rate-limit and transient faults only
// hit answers; listings are never counted in the stats.
func (a *account) modelsFault() *faultState {
	fs := a.fault.Load()
	if fs == nil || (fs.Kind != FaultUnauthorized && fs.Kind != FaultDeactivated) || !fs.fires(time.Now()) {
		return nil
	}
	return fs
}

// setFault replaces the account's fault with a copy of f (nil: none), armed
// at now.
func (a *account) setFault(f *Fault, now time.Time) {
	if f == nil {
		a.fault.Store(nil)
		return
	}
	a.fault.Store(newFaultState(*f, now))
}

// nonStreamDelay is how long a JSON answer is held back: Latency plus the
// generation time of all tokens.
func (p *plan) nonStreamDelay() time.Duration {
	return p.latency + time.Duration(p.tokens)*p.interval
}

// Plausible codex rate-limit windows: 5 hours primary, 7 days secondary.
const (
	codexPrimaryWindow   = 300 * time.Minute
	codexSecondaryWindow = 10080 * time.Minute
)

// codexLimits are the x-codex-* rate-limit values an account reports.
type codexLimits struct {
	primaryUsed, secondaryUsed             float64 // percent
	primaryResetAfter, secondaryResetAfter int64   // seconds
	primaryResetAt, secondaryResetAt       int64   // unix seconds
}

// codexLimits derives plausible usage from the account's request count (a
// sawtooth: primary usage climbs 0.1% per request and wraps at 100%) and
// resets from the fleet's start time.
func (a *account) codexLimits(now, started time.Time) codexLimits {
	n := a.stats.requests.Load()
	elapsed := int64(now.Sub(started) / time.Second)
	pw := int64(codexPrimaryWindow / time.Second)
	sw := int64(codexSecondaryWindow / time.Second)
	l := codexLimits{
		primaryUsed:         float64(n%1000) / 10,
		secondaryUsed:       float64(n%10000) / 100,
		primaryResetAfter:   pw - elapsed%pw,
		secondaryResetAfter: sw - elapsed%sw,
	}
	l.primaryResetAt = now.Unix() + l.primaryResetAfter
	l.secondaryResetAt = now.Unix() + l.secondaryResetAfter
	return l
}

// header is one response header with a precomputed value.
type header struct{ name, value string }

// openAIRateHeaders are the x-ratelimit-* headers of openai and
// openai_compat answers: a generous, never-exhausted budget.
var openAIRateHeaders = []header{
	{"X-Ratelimit-Limit-Requests", "10000"},
	{"X-Ratelimit-Remaining-Requests", "9999"},
	{"X-Ratelimit-Reset-Requests", "6ms"},
	{"X-Ratelimit-Limit-Tokens", "30000000"},
	{"X-Ratelimit-Remaining-Tokens", "29999000"},
	{"X-Ratelimit-Reset-Tokens", "2ms"},
	{"Openai-Version", "2020-10-01"},
}

// appendFloat formats a percentage the way the codex backend does ("22",
// "87.5").
func appendFloat(dst []byte, v float64) []byte {
	return strconv.AppendFloat(dst, v, 'f', -1, 64)
}
