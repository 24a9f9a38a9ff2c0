package routing

import (
	"fmt"
	"slices"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/scripts"
)

// Verdict is a policy's judgement of one account view.
type Verdict struct {
	View    *scripts.AccountView
	Score   float64       // higher is picked first within a tier
	OK      bool          // false: score() excluded the account
	Tier    scripts.Tier  // when OK
	Recheck time.Duration // score()'s recheck_after (0: none)
}

// TierName is the verdict's tier as the admin API and the CLI show it:
// healthy, warm, risky, or excluded.
func (v *Verdict) TierName() string {
	if !v.OK {
		return "excluded"
	}
	return v.Tier.String()
}

// Rank scores every view with p at now and orders the verdicts as the
// scheduler prefers them: scored before excluded, then by tier, then by
// score, higher first; ties keep the order of views. It fails on the first
// error of score(), naming the account. p's Score runs on the caller's
// goroutine: p must not be in use elsewhere (a compiled policy of the
// caller's, or one installed in a Runtime, whose scheduler and router run
// on clones).
func Rank(p *scripts.Policy, views []scripts.AccountView, now time.Time) ([]Verdict, error) {
	out := make([]Verdict, len(views))
	for i := range views {
		s, ok, tier, recheck, err := p.Score(&views[i], now)
		if err != nil {
			return nil, fmt.Errorf("score(%s): %w", views[i].Name, err)
		}
		out[i] = Verdict{View: &views[i], Score: s, OK: ok, Tier: tier, Recheck: recheck}
	}
	slices.SortStableFunc(out, func(a, b Verdict) int {
		switch {
		case a.OK != b.OK:
			if a.OK {
				return -1
			}
			return 1
		case a.Tier != b.Tier:
			return int(a.Tier) - int(b.Tier)
		case a.Score > b.Score:
			return -1
		case a.Score < b.Score:
			return 1
		}
		return 0
	})
	return out, nil
}

// AccountViews returns the policy's view of each account view, in order.
func AccountViews(views []actors.View) []scripts.AccountView {
	out := make([]scripts.AccountView, len(views))
	for i := range views {
		actors.FillAccountView(&out[i], &views[i])
	}
	return out
}
