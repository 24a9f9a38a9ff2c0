package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/routing"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
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

// adminPolicySource returns the source a validate or simulate request is about:
// the body's "source", else version "version" of the stored policy (0: the
// latest), else the built-in of that name.
func (s *Server) adminPolicySource(ctx context.Context, name string, body []byte) (string, *APIError) {
	var in struct {
		Source  string `json:"source"`
		Version int    `json:"version"`
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &in); err != nil {
			return "", errBadParam("source", `The body must be JSON {"source": "<lua>"} or {"version": N}, or empty.`)
		}
	}
	if in.Source != "" {
		return in.Source, nil
	}
	p, err := s.store.GetPolicy(ctx, name, in.Version)
	if err == nil {
		return p.Source, nil
	}
	if errors.Is(err, storage.ErrNotFound) && in.Version == 0 {
		if src, ok := scripts.Builtin(name); ok {
			return src, nil
		}
		return "", &APIError{Status: 404, Type: "invalid_request_error", Code: "not_found", Message: "No such policy or version."}
	}
	if errors.Is(err, storage.ErrNotFound) {
		return "", &APIError{Status: 404, Type: "invalid_request_error", Code: "not_found", Message: "No such policy or version."}
	}
	s.log.Error("admin storage", "err", err)
	return "", &APIError{Status: 500, Type: "server_error", Message: "Storage error; see the gateway log."}
}

// writePolicyError answers a policy that failed to compile or self-test:
// 400 with error.line (0 when unknown).
func writePolicyError(ctx *fasthttp.RequestCtx, err error) {
	writeJSON(ctx, 400, map[string]any{"error": map[string]any{
		"message": err.Error(), "type": "invalid_request_error", "code": "policy_invalid", "param": "source", "line": errorLine(err)}})
}

// policyValidate serves POST /api/admin/policies/{name}/validate: compile
// and self-test against the live pool, store nothing.
func (s *Server) policyValidate(ctx *fasthttp.RequestCtx, rctx context.Context, name string) {
	src, aerr := s.adminPolicySource(rctx, name, ctx.PostBody())
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if err := s.routing.Validate(name, src); err != nil {
		writePolicyError(ctx, err)
		return
	}
	writeJSON(ctx, 200, map[string]any{"valid": true, "name": name})
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
	writeJSON(ctx, 200, res)
}

// policyRollback serves POST /api/admin/policies/{name}/rollback: activate
// the version of name that was active before the current one (by
// activated_at), or, when none was, the version before the latest.
func (s *Server) policyRollback(ctx *fasthttp.RequestCtx, rctx context.Context, name string) {
	hist, err := s.store.PolicyHistory(rctx, name)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	cur := 0
	if act, err := s.store.ActivePolicy(rctx); err == nil && act.Name == name {
		cur = act.Version
	}
	target := 0
	var best time.Time
	for _, p := range hist {
		if p.Version != cur && p.ActivatedAt != nil && p.ActivatedAt.After(best) {
			best, target = *p.ActivatedAt, p.Version
		}
	}
	if target == 0 {
		for _, p := range hist { // newest first
			if p.Version < max(cur, hist[0].Version) {
				target = p.Version
				break
			}
		}
	}
	if target == 0 {
		writeError(ctx, &APIError{Status: 409, Type: "invalid_request_error", Code: "no_previous_version", Message: "This policy has no earlier version to roll back to."})
		return
	}
	s.activatePolicy(ctx, rctx, name, target)
}
