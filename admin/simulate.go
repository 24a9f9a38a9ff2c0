package admin

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/routing"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/valyala/fasthttp"
)

// simAccount is one account of a simulation's ranking.
type simAccount struct {
	ID           string   `json:"id"`
	Name         string   `json:"name"`
	Status       string   `json:"status"`
	Tier         string   `json:"tier"` // healthy, warm, risky or excluded under the simulated policy
	Score        *float64 `json:"score"`
	ServingTier  string   `json:"serving_tier"` // under the serving policy ("" when not scored yet)
	ServingScore *float64 `json:"serving_score"`
}

// simResult is the answer of POST /api/admin/policies/{name}/simulate.
type simResult struct {
	Policy       string         `json:"policy"`
	Description  string         `json:"description"`
	Accounts     int            `json:"accounts"`
	Tiers        map[string]int `json:"tiers"`         // under the simulated policy
	ServingTiers map[string]int `json:"serving_tiers"` // under the serving policy
	Changed      int            `json:"changed"`       // accounts whose tier differs between the two
	Top          []simAccount   `json:"top"`           // the best 20 under the simulated policy: where traffic goes first
	DurationMs   float64        `json:"duration_ms"`   // time spent scoring
	Load         *simLoad       `json:"load"`          // a steady load routed through the pool as stored (null when it could not run)
}

// simLoad is how a steady synthetic load spreads over the pool under the
// simulated policy (routing.SimulatePool, routing.Spread).
type simLoad struct {
	Requests     int     `json:"requests"`
	Unserved     int     `json:"unserved"`
	Accounts     int     `json:"accounts"` // the enabled accounts counted
	Serving      int     `json:"serving"`  // of them, those that got requests
	Busiest      int     `json:"busiest"`
	BusiestShare float64 `json:"busiest_share"` // 0–1; even: 1/accounts
	Top1Accounts int     `json:"top1_accounts"` // the busiest 1 % (at least one)
	Top1Share    float64 `json:"top1_share"`
	Top1Even     float64 `json:"top1_even"`
	Gini         float64 `json:"gini"`
	DurationMs   float64 `json:"duration_ms"`
}

// simLoadRequests is how many requests the admin simulation routes per
// enabled account, and at most in all.
const (
	simLoadPerAccount = 20
	simLoadMax        = 20000
)

// simulateLoad routes a steady load through the pool as stored with a
// fresh compile of src (the Sim owns its policy) and measures its spread.
func (s *Server) simulateLoad(ctx context.Context, name, src string) (*simLoad, error) {
	accounts, err := s.store.ListAccounts(storeCtx(ctx))
	if err != nil {
		return nil, err
	}
	enabled := 0
	for _, a := range accounts {
		if !a.Disabled {
			enabled++
		}
	}
	p, err := scripts.Compile(name, src, scripts.Options{})
	if err != nil {
		return nil, err
	}
	start := time.Now()
	load, err := routing.SimulatePool(ctx, p, accounts, min(simLoadPerAccount*enabled, simLoadMax))
	if err != nil {
		return nil, err
	}
	sp := load.Spread
	return &simLoad{Requests: load.Requests, Unserved: load.Unserved, Accounts: sp.Accounts, Serving: sp.Serving, Busiest: sp.Busiest,
		BusiestShare: sp.BusiestShare, Top1Accounts: sp.Top1Accounts, Top1Share: sp.Top1Share, Top1Even: sp.Top1Even, Gini: sp.Gini,
		DurationMs: float64(time.Since(start).Microseconds()) / 1000}, nil
}

// servingTier is the serving policy's verdict as the admin API names it
// ("" when the account has not been scored yet).
func servingTier(sc actors.Scored, found bool) string {
	switch {
	case !found:
		return ""
	case !sc.OK:
		return "excluded"
	}
	return sc.Tier.String()
}

// simulate ranks every account of the live pool with policy p
// (routing.Rank) and compares the verdicts with the serving policy's. The
// pool is not changed.
func (s *Server) simulate(ctx context.Context, p *scripts.Policy) (simResult, error) {
	live, serving := s.liveIndex(ctx)
	res := simResult{Policy: p.Name(), Description: p.Knobs().Description, Accounts: len(live),
		Tiers: map[string]int{"healthy": 0, "warm": 0, "risky": 0, "excluded": 0}, ServingTiers: map[string]int{"healthy": 0, "warm": 0, "risky": 0, "excluded": 0}}
	views := make([]actors.View, 0, len(live))
	for _, v := range live {
		views = append(views, *v)
	}
	slices.SortFunc(views, func(a, b actors.View) int { return cmp.Compare(a.Name, b.Name) }) // ties rank by name
	start := time.Now()
	ranked, err := routing.Rank(p, routing.AccountViews(views), s.now())
	if err != nil {
		return res, err
	}
	res.DurationMs = float64(time.Since(start).Microseconds()) / 1000
	res.Top = make([]simAccount, 0, min(20, len(ranked)))
	for i := range ranked {
		v := &ranked[i]
		a := simAccount{ID: v.View.ID, Name: v.View.Name, Status: v.View.Status, Tier: v.TierName()}
		if v.OK {
			a.Score = &v.Score
		}
		cur, found := serving[v.View.ID]
		if a.ServingTier = servingTier(cur, found); found {
			if cur.OK {
				a.ServingScore = &cur.Score
			}
			res.ServingTiers[a.ServingTier]++
		}
		if a.ServingTier != "" && a.ServingTier != a.Tier {
			res.Changed++
		}
		res.Tiers[a.Tier]++
		if len(res.Top) < 20 {
			res.Top = append(res.Top, a)
		}
	}
	return res, nil
}

// policySimulate serves POST /api/admin/policies/{name}/simulate.
func (s *Server) policySimulate(ctx *fasthttp.RequestCtx, rctx context.Context, name string) {
	src, aerr := s.adminPolicySource(rctx, name, ctx.PostBody())
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	p, err := scripts.Compile(name, src, scripts.Options{})
	if err != nil {
		writePolicyError(ctx, err)
		return
	}
	defer p.Close()
	res, err := s.simulate(rctx, p)
	if err != nil {
		writePolicyError(ctx, err)
		return
	}
	if res.Load, err = s.simulateLoad(rctx, name, src); err != nil {
		s.log.Warn("admin simulation: the load simulation failed", "policy", name, "err", err)
	}
	writeJSON(ctx, 200, res)
}
