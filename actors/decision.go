package actors

import (
	"time"

	"github.com/troupe-gw/troupe/scripts"
)

// Via says how the scheduler chose an account.
type Via uint8

// The ways an account is chosen.
const (
	ViaScore  Via = iota // the best candidate by (tier, score), with the policy's top-k jitter
	ViaSticky            // the account the request's sticky key last used
	ViaPrefer            // the account that holds the state the request continues (AcquireRequest.Prefer)
)

// String returns "score", "sticky" or "prefer".
func (v Via) String() string {
	switch v {
	case ViaSticky:
		return "sticky"
	case ViaPrefer:
		return "prefer"
	}
	return "score"
}

// TraceTop is how many of the best candidates a Decision keeps.
const TraceTop = 3

// Ranked is one candidate of a Decision: its account and the policy's verdict.
type Ranked struct {
	ID, Name string
	Score    float64
	Tier     scripts.Tier
}

// Decision is the trace of one pick: why the lease's account was chosen. The
// scheduler fills it in place for every pick (a fixed-size value: nothing
// is allocated, the strings are the views' own), and the lease carries it.
// Encoding it (gateway) is left to those who record or show it.
type Decision struct {
	Policy        string // name of the policy that scored the candidates
	PolicyVersion uint64 // its version
	Canary        bool   // the canary policy chose (see System.SetCanary)
	Via           Via    // how the account was chosen
	Candidates    int    // available accounts in the request's candidate sets (endpoint × group × model, and any-model)
	Skipped       int    // candidates walked and skipped by the request's exclusions and route filters (provider, tags)
	Top           [TraceTop]Ranked
	NTop          int           // entries of Top in use, best first
	Chosen        int           // index in Top of the chosen account
	Refusals      int           // grants the accounts refused before this one (stale views)
	Waited        time.Duration // time parked in the wait queue (0: served at once)
}

// ChosenAccount returns the chosen account's entry.
func (d *Decision) ChosenAccount() Ranked { return d.Top[d.Chosen] }

// trace records, in req's lease's Decision, the pick of e among top (best first) by via.
func (s *scheduler) trace(req *acquireState, via Via, e *entry, top []*entry, candidates, skipped int, pol Policy, canary bool) {
	d := &req.lease.Decision
	d.Policy, d.PolicyVersion, d.Canary = pol.Name(), pol.Version(), canary
	d.Via, d.Candidates, d.Skipped, d.Refusals = via, candidates, skipped, req.tries
	d.Waited = 0
	if !req.enqueued.IsZero() {
		d.Waited = s.cfg.now().Sub(req.enqueued)
	}
	if len(top) == 0 {
		d.Top[0] = rankOf(e, canary)
		d.NTop, d.Chosen = 1, 0
		return
	}
	d.NTop, d.Chosen = min(len(top), TraceTop), -1
	for i := range d.NTop {
		d.Top[i] = rankOf(top[i], canary)
		if top[i] == e {
			d.Chosen = i
		}
	}
	if d.Chosen < 0 { // chosen beyond the kept ranks (top_k > TraceTop): it takes the last slot
		d.Chosen = d.NTop - 1
		d.Top[d.Chosen] = rankOf(e, canary)
	}
}

func rankOf(e *entry, canary bool) Ranked {
	sl := slotPolicy
	if canary {
		sl = slotCanary
	}
	v := &e.v[sl].scored
	return Ranked{ID: e.view.ID, Name: e.view.Name, Score: v.Score, Tier: v.Tier}
}
