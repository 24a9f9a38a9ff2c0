package scripts

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// Knobs are a policy's static settings, read once from its global `policy`
// table at compile time. They tell the scheduler how to use the scores; the
// scheduler, not Lua, applies them on every pick. Knobs are immutable after
// Compile and safe to read from any goroutine.
type Knobs struct {
	// Description is shown in the admin UI (policy.description).
	Description string
	// TopK and Jitter: with probability Jitter a pick is uniform among the
	// best min(TopK, available) candidates (the best included) instead of the
	// best one (policy.top_k, default 1, 1–100; policy.jitter, default 0, 0–1).
	TopK   int
	Jitter float64
	// ScoreBand, when positive, makes scores within the same band of that
	// many points equally good: the scheduler orders candidates of a tier by
	// Band(score) instead of the score itself, so the tie-break (least
	// recently granted, by default) spreads the requests over every account
	// of the best band instead of sending them all to the single best score
	// (policy.score_band, default 0: exact scores; 0–1000).
	ScoreBand float64
	// TieBreak orders candidates whose tier and score (or score band) are
	// equal (policy.tie_break, default {"least_recent"}). The scheduler's last
	// resort after these is the order accounts joined the index.
	TieBreak []TieBreak
	// Concurrency caps the leases an account may hold by its tier
	// (policy.concurrency, default "max" for every tier).
	Concurrency [NumTiers]Share
	// StickyTTL is how long a stickiness key (RouteResult.StickyKey) keeps
	// its account after its last use (policy.sticky_ttl seconds, default 1 h).
	StickyTTL time.Duration
	// MaxAttempts is the default number of upstream attempts per request,
	// failovers included (policy.max_attempts, 1–20); 0 leaves the gateway's
	// setting. RouteResult.MaxAttempts overrides it per request.
	MaxAttempts int
}

// TieBreak is one tie-breaking rule of Knobs.TieBreak.
type TieBreak string

// Tie-breaking rules.
const (
	TieLeastRecent   TieBreak = "least_recent"   // the account granted a lease least recently first
	TieLeastInflight TieBreak = "least_inflight" // the smallest inflight/max_inflight share first
	TiePriority      TieBreak = "priority"       // the higher priority first
	TieID            TieBreak = "id"             // the smaller id (byte order) first
)

// DefaultStickyTTL is Knobs.StickyTTL when the policy sets none.
const DefaultStickyTTL = time.Hour

// Share is a per-tier concurrency cap: either an absolute number of leases
// or a fraction of the account's max_inflight. In Lua it is written as a
// number (absolute: 1 means one lease at a time) or a string: "max" (the full
// limit), "max/N" (the limit divided by N) or "P%" (P percent of the limit).
type Share struct {
	Absolute int     // > 0: at most this many leases (never above max_inflight)
	Fraction float64 // used when Absolute is 0: this fraction of max_inflight, at least 1
}

// Limit is the cap for an account whose limit is maxInflight: never above
// maxInflight, and at least 1 when maxInflight is positive.
func (s Share) Limit(maxInflight int) int {
	if maxInflight <= 0 {
		return 0
	}
	if s.Absolute > 0 {
		return min(s.Absolute, maxInflight)
	}
	return max(1, min(maxInflight, int(math.Floor(float64(maxInflight)*s.Fraction))))
}

// String returns the share in its Lua form ("max", "max/2", "25%", "1").
func (s Share) String() string {
	switch {
	case s.Absolute > 0:
		return strconv.Itoa(s.Absolute)
	case s.Fraction == 1:
		return "max"
	case s.Fraction > 0 && math.Abs(1/s.Fraction-math.Round(1/s.Fraction)) < 1e-9:
		return "max/" + strconv.Itoa(int(math.Round(1/s.Fraction)))
	}
	return strconv.FormatFloat(s.Fraction*100, 'f', -1, 64) + "%"
}

// Limit returns the concurrency cap of an account in tier t whose own limit
// is maxInflight.
func (k *Knobs) Limit(t Tier, maxInflight int) int {
	if int(t) >= NumTiers {
		t = TierRisky
	}
	return k.Concurrency[t].Limit(maxInflight)
}

// PickRank returns which of the n best candidates (0 = the best) to pick,
// applying TopK and Jitter with r.
func (k *Knobs) PickRank(n int, r *rand.Rand) int {
	top := min(k.TopK, n)
	if top <= 1 || k.Jitter <= 0 || r.Float64() >= k.Jitter {
		return 0
	}
	return r.IntN(top)
}

// Band is the key by which the scheduler compares score within a tier:
// the score itself without a ScoreBand, else ⌈score / ScoreBand⌉, so with a
// band of 10 the scores in (90, 100] are one band, (80, 90] the next.
func (k *Knobs) Band(score float64) float64 {
	if k.ScoreBand <= 0 {
		return score
	}
	return math.Ceil(score / k.ScoreBand)
}

// defaultKnobs are the knobs of a policy without a policy table.
func defaultKnobs() Knobs {
	k := Knobs{TopK: 1, TieBreak: []TieBreak{TieLeastRecent}, StickyTTL: DefaultStickyTTL}
	for i := range k.Concurrency {
		k.Concurrency[i] = Share{Fraction: 1}
	}
	return k
}

// parseKnobs reads the policy table; t may be nil. Unknown keys are errors,
// so a misspelt knob does not pass silently.
func parseKnobs(t *lua.LTable) (Knobs, error) {
	k := defaultKnobs()
	if t == nil {
		return k, nil
	}
	// Keys in order, so that of several bad knobs the same one is reported
	// every time (the table's own order is a Go map's).
	var names []string
	var err error
	t.ForEach(func(key, _ lua.LValue) {
		if name, ok := key.(lua.LString); ok {
			names = append(names, string(name))
		} else if err == nil {
			err = &knobError{msg: fmt.Sprintf("policy table: key %s is not a string", key.String())}
		}
	})
	if err != nil {
		return k, err
	}
	slices.Sort(names)
	for _, name := range names {
		v := t.RawGetString(name)
		err = parseKnob(&k, name, v)
		if err != nil {
			return k, &knobError{knob: name, msg: err.Error()}
		}
	}
	return k, nil
}

// knobError is a bad entry of the policy table; knob is its key ("" when
// the key is not a string), so the error can name the key's line.
type knobError struct{ knob, msg string }

func (e *knobError) Error() string { return e.msg }

// parseKnob reads the knob name with value v into k.
func parseKnob(k *Knobs, name string, v lua.LValue) error {
	var err error
	switch name {
	case "description":
		s, ok := v.(lua.LString)
		if !ok {
			err = fmt.Errorf("policy.description: want a string, got %s", v.Type())
		}
		k.Description = string(s)
	case "top_k":
		k.TopK, err = intKnob("policy.top_k", v, 1, 100)
	case "jitter":
		n, ok := v.(lua.LNumber)
		if !ok || float64(n) < 0 || float64(n) > 1 || math.IsNaN(float64(n)) {
			err = fmt.Errorf("policy.jitter: want a probability in [0, 1], got %s", v.String())
		}
		k.Jitter = float64(n)
	case "score_band":
		n, ok := v.(lua.LNumber)
		if !ok || float64(n) < 0 || float64(n) > 1000 || math.IsNaN(float64(n)) {
			err = fmt.Errorf("policy.score_band: want a number of points in [0, 1000], got %s", v.String())
		}
		k.ScoreBand = float64(n)
	case "tie_break":
		k.TieBreak, err = tieBreakKnob(v)
	case "concurrency":
		err = concurrencyKnob(k, v)
	case "sticky_ttl":
		var s int
		s, err = intKnob("policy.sticky_ttl", v, 1, 30*24*3600)
		k.StickyTTL = time.Duration(s) * time.Second
	case "max_attempts":
		k.MaxAttempts, err = intKnob("policy.max_attempts", v, 1, 20)
	default:
		err = fmt.Errorf("policy table: unknown knob %q (known: description, top_k, jitter, score_band, tie_break, concurrency, sticky_ttl, max_attempts)", name)
	}
	return err
}

func intKnob(name string, v lua.LValue, lo, hi int) (int, error) {
	n, ok := v.(lua.LNumber)
	if !ok || float64(n) != math.Trunc(float64(n)) || int(n) < lo || int(n) > hi {
		return 0, fmt.Errorf("%s: want an integer in [%d, %d], got %s", name, lo, hi, v.String())
	}
	return int(n), nil
}

func tieBreakKnob(v lua.LValue) ([]TieBreak, error) {
	t, ok := v.(*lua.LTable)
	if !ok {
		return nil, fmt.Errorf("policy.tie_break: want a list of strings, got %s", v.Type())
	}
	var out []TieBreak
	for i := 1; i <= t.Len(); i++ {
		s, ok := t.RawGetInt(i).(lua.LString)
		tb := TieBreak(s)
		switch {
		case !ok:
			return nil, fmt.Errorf("policy.tie_break[%d]: want a string", i)
		case tb != TieLeastRecent && tb != TieLeastInflight && tb != TiePriority && tb != TieID:
			return nil, fmt.Errorf("policy.tie_break[%d]: unknown rule %q (known: least_recent, least_inflight, priority, id)", i, s)
		}
		for _, seen := range out {
			if seen == tb {
				return nil, fmt.Errorf("policy.tie_break[%d]: %q listed twice", i, s)
			}
		}
		out = append(out, tb)
	}
	return out, nil
}

func concurrencyKnob(k *Knobs, v lua.LValue) error {
	t, ok := v.(*lua.LTable)
	if !ok {
		return fmt.Errorf("policy.concurrency: want a table {healthy=…, warm=…, risky=…}, got %s", v.Type())
	}
	var err error
	t.ForEach(func(key, v lua.LValue) {
		if err != nil {
			return
		}
		tier, ok := ParseTier(key.String())
		if _, isStr := key.(lua.LString); !ok || !isStr {
			err = fmt.Errorf("policy.concurrency: unknown tier %s (known: healthy, warm, risky)", key.String())
			return
		}
		var s Share
		s, err = parseShare(v)
		if err != nil {
			err = fmt.Errorf("policy.concurrency.%s: %w", tier, err)
		}
		k.Concurrency[tier] = s
	})
	return err
}

func parseShare(v lua.LValue) (Share, error) {
	switch x := v.(type) {
	case lua.LNumber:
		n := float64(x)
		if n != math.Trunc(n) || n < 1 || n > 1e6 {
			return Share{}, fmt.Errorf("want an integer ≥ 1 or \"max\", \"max/N\", \"P%%\"; got %s", x)
		}
		return Share{Absolute: int(n)}, nil
	case lua.LString:
		s := strings.TrimSpace(string(x))
		switch {
		case s == "max":
			return Share{Fraction: 1}, nil
		case strings.HasPrefix(s, "max/"):
			n, err := strconv.Atoi(s[4:])
			if err == nil && n >= 1 {
				return Share{Fraction: 1 / float64(n)}, nil
			}
		case strings.HasSuffix(s, "%"):
			p, err := strconv.ParseFloat(strings.TrimSpace(s[:len(s)-1]), 64)
			if err == nil && p > 0 && p <= 100 {
				return Share{Fraction: p / 100}, nil
			}
		}
	}
	return Share{}, fmt.Errorf("want an integer ≥ 1 or \"max\", \"max/N\", \"P%%\"; got %s", v.String())
}
