package actors

import "time"

// Policy scores account views. The scheduler keeps the available accounts of
// every candidate set ordered by score and re-scores an account only when its
// view changes, so the cost of a pick does not grow with the pool.
// A Policy is called from the scheduler actor only; it need not be safe for
// concurrent use.
type Policy interface {
	// Name identifies the policy in logs, metrics and decision traces.
	Name() string
	// Score returns the account's score (higher is picked first) or ok=false to
	// exclude the account from routing.
	Score(v *View, now time.Time) (score float64, ok bool)
}

// LeastInFlight is the built-in policy: the account with the smallest share of
// its concurrency limit in use wins; ties go to the least recently granted.
type LeastInFlight struct{}

// Name returns "least_inflight".
func (LeastInFlight) Name() string { return "least_inflight" }

// Score returns 1 − InFlight/MaxInFlight, in [0, 1].
func (LeastInFlight) Score(v *View, _ time.Time) (float64, bool) {
	if v.MaxInFlight <= 0 {
		return 0, false
	}
	return 1 - float64(v.InFlight)/float64(v.MaxInFlight), true
}
