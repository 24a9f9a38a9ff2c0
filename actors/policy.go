package actors

import (
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/troupe-gw/troupe/scripts"
)

// Scored is a policy's verdict on one account view.
type Scored struct {
	Score        float64       // higher is picked first (within a tier)
	OK           bool          // false excludes the account
	Tier         scripts.Tier  // healthy, warm or risky: orders before Score and caps concurrency
	RecheckAfter time.Duration // rescore after this long without an event (0: only on events)
}

// Policy scores account views. The scheduler keeps the available accounts of
// every candidate set ordered by (tier, score) and re-scores an account only
// when its view changes or its RecheckAfter passes, so the cost of a pick
// does not grow with the pool. A Policy is called from the scheduler actor
// only; it need not be safe for concurrent use.
type Policy interface {
	// Name identifies the policy in logs, metrics and decision traces.
	Name() string
	// Version identifies the loaded revision (0 for built-in Go policies).
	Version() uint64
	// Score judges one view.
	Score(v *View, now time.Time) Scored
	// Knobs are the policy's static settings (top-k jitter, tier caps, stickiness).
	Knobs() *scripts.Knobs
	// Reads is the set of counter fields Score may depend on; a view that
	// differs from the last scored one only in other counters keeps its
	// score (scripts.Policy.Reads).
	Reads() scripts.Fields
}

// LeastInFlight is the built-in Go policy: the account with the smallest share
// of its concurrency limit in use wins; ties go to the least recently granted.
// It is the fallback when no Lua policy is loaded.
type LeastInFlight struct{}

var leastInFlightKnobs = func() *scripts.Knobs {
	k := &scripts.Knobs{TopK: 1, TieBreak: []scripts.TieBreak{scripts.TieLeastRecent}, StickyTTL: scripts.DefaultStickyTTL}
	for i := range k.Concurrency {
		k.Concurrency[i] = scripts.Share{Fraction: 1}
	}
	return k
}()

// Name returns "least_inflight".
func (LeastInFlight) Name() string { return "least_inflight" }

// Version returns 0.
func (LeastInFlight) Version() uint64 { return 0 }

// Score returns 1 − InFlight/MaxInFlight, in [0, 1], tier healthy.
func (LeastInFlight) Score(v *View, _ time.Time) Scored {
	if v.MaxInFlight <= 0 {
		return Scored{}
	}
	return Scored{Score: 1 - float64(v.InFlight)/float64(v.MaxInFlight), OK: true}
}

// Knobs returns the defaults: no jitter, full concurrency in every tier.
func (LeastInFlight) Knobs() *scripts.Knobs { return leastInFlightKnobs }

// Reads returns scripts.FieldInFlight.
func (LeastInFlight) Reads() scripts.Fields { return scripts.FieldInFlight }

// LuaPolicy adapts a compiled scripts.Policy to the scheduler. It owns the
// Lua state: use it from one goroutine (the scheduler actor) only.
type LuaPolicy struct {
	p     *scripts.Policy
	knobs scripts.Knobs
	av    scripts.AccountView // reused for every call
	errs  uint64

	// Runtime errors are logged at most once per scoreErrorLogEvery, with
	// the count since the last line, so a policy failing on every account
	// is visible without flooding the log. The scheduler sets log.
	log          *slog.Logger
	lastLog      time.Time
	errsSinceLog uint64
}

// scoreErrorLogEvery spaces the log lines of a policy's score errors.
const scoreErrorLogEvery = 10 * time.Second

// NewLuaPolicy wraps p, which the caller must not use concurrently afterwards
// (give the scheduler a Clone).
func NewLuaPolicy(p *scripts.Policy) *LuaPolicy {
	return &LuaPolicy{p: p, knobs: p.Knobs()}
}

// Name returns the Lua policy's name.
func (l *LuaPolicy) Name() string { return l.p.Name() }

// Version returns the host's version of the loaded policy.
func (l *LuaPolicy) Version() uint64 { return l.p.Version() }

// Knobs returns the policy table's knobs.
func (l *LuaPolicy) Knobs() *scripts.Knobs { return &l.knobs }

// Reads returns the counter fields the Lua source may read.
func (l *LuaPolicy) Reads() scripts.Fields { return l.p.Reads() }

// Errors returns how many score calls failed (each excluded its account).
func (l *LuaPolicy) Errors() uint64 { return l.errs }

// Score runs score(account, now). A runtime error excludes the account and
// asks for a recheck after scripts.ErrorRecheck.
func (l *LuaPolicy) Score(v *View, now time.Time) Scored {
	FillAccountView(&l.av, v)
	s, ok, tier, recheck, err := l.p.Score(&l.av, now)
	if err != nil {
		l.errs++
		l.errsSinceLog++
		if l.log != nil && time.Since(l.lastLog) >= scoreErrorLogEvery {
			l.log.Warn("routing policy score failed: the account is excluded until its recheck", "policy", l.p.Name(),
				"version", l.p.Version(), "account", v.Name, "err", err, "errors_since_last_report", l.errsSinceLog)
			l.lastLog, l.errsSinceLog = time.Now(), 0
		}
		return Scored{RecheckAfter: scripts.ErrorRecheck}
	}
	return Scored{Score: s, OK: ok, Tier: tier, RecheckAfter: recheck}
}

// FillAccountView copies v into the Lua-facing view av, reusing av's slices.
func FillAccountView(av *scripts.AccountView, v *View) {
	av.ID, av.Name, av.Provider, av.Group = v.ID, v.Name, string(v.Provider), v.Group
	av.Plan = v.Plan
	av.Tags = v.Tags
	av.Priority = v.Priority
	av.Status = v.Status.String()
	av.CooldownUntil, av.CooldownReason = v.CooldownUntil, v.CooldownReason
	av.InFlight, av.MaxInFlight = v.InFlight, v.MaxInFlight
	av.Requests, av.Successes, av.Failures = v.Requests, v.Successes, v.Failures
	av.SuccessStreak, av.FailureStreak = v.SuccessStreak, v.FailureStreak
	f := v.failures()
	lf := &f.LastFailure
	av.LastFailure = scripts.FailureTimes{
		Quota: lf[classQuota], Rate: lf[classRate], Auth: lf[classAuth], Banned: lf[classBanned],
		Transient: lf[classTransient], Timeout: f.LastTimeout,
	}
	av.EWMASuccess, av.EWMALatency, av.EWMATTFT = v.EWMASuccess, v.EWMALatency, v.EWMATTFT
	av.Windows = appendWindows(av.Windows[:0], v.Windows)
	av.ActiveLimit = v.ActiveLimit
	switch {
	case v.Credits == nil:
		av.Credits = nil
	case av.Credits == nil:
		av.Credits = &scripts.Credits{}
		fallthrough
	default: // av's own, from an earlier fill: rewritten in place
		*av.Credits = scripts.Credits{HasCredits: v.Credits.HasCredits, Unlimited: v.Credits.Unlimited, Balance: v.Credits.Balance}
	}
	av.Families = slices.Grow(av.Families[:0], len(v.Families))[:len(v.Families)]
	for i := range v.Families {
		f, af := &v.Families[i], &av.Families[i]
		af.ID, af.LimitName, af.Models, af.CoolingUntil = f.ID, f.LimitName, f.Models, f.CoolingUntil
		af.Windows = appendWindows(af.Windows[:0], f.Windows)
	}
}

// appendWindows appends the Lua-facing copies of ws to dst.
func appendWindows(dst []scripts.UsageWindow, ws []UsageWindow) []scripts.UsageWindow {
	for _, w := range ws {
		dst = append(dst, scripts.UsageWindow{Name: w.Name, UsedPercent: w.UsedPercent, WindowMinutes: w.WindowMinutes, ResetsAt: w.ResetsAt,
			BurnRate: w.BurnRate, ExhaustsAt: w.ExhaustsAt})
	}
	return dst
}

// pickRank applies the knobs' top-k jitter.
func pickRank(k *scripts.Knobs, n int, r *rand.Rand) int { return k.PickRank(n, r) }
