package admin

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/valyala/fasthttp"
)

// OpsView is the body of GET /api/admin/ops: the pool's health at a glance.
type OpsView struct {
	At       time.Time      `json:"at"`
	Accounts map[string]int `json:"accounts"` // by status: active, cooling, disabled, unauthorized, banned
	Tiers    map[string]int `json:"tiers"`    // by the policy's tier: healthy, warm, risky, excluded
	// Cooldowns groups cooling accounts by reason (failure class).
	Cooldowns map[string]CooldownGroup `json:"cooldowns"`
	// Failures counts upstream attempts by outcome class ("ok" for successes)
	// over the last 1, 5, 15 and 60 minutes.
	Failures map[string]map[string]int64 `json:"failures"`
	// Failovers counts client requests by the extra attempts they needed
	// ("0", "1", "2", "3", "4+") since start.
	Failovers map[string]int64  `json:"failovers"`
	Waiters   int               `json:"waiters"`
	InFlight  int               `json:"inflight"`
	Policy    OpsPolicy         `json:"policy"`
	Soonest   []CooldownAccount `json:"soonest_back"` // the cooling accounts that return first (up to 20)
	// UsageWindows summarizes the upstream usage windows (ops_usage.go).
	UsageWindows OpsUsageWindows `json:"usage_windows"`
}

// CooldownGroup summarizes the accounts cooling for one reason.
type CooldownGroup struct {
	Count      int     `json:"count"`
	MinSeconds float64 `json:"min_remaining_seconds"`
	MaxSeconds float64 `json:"max_remaining_seconds"`
}

// CooldownAccount is one cooling account.
type CooldownAccount struct {
	Name      string  `json:"name"`
	Reason    string  `json:"reason"`
	Remaining float64 `json:"remaining_seconds"`
}

// OpsPolicy is the routing policy part of the ops view.
type OpsPolicy struct {
	Name      string `json:"name"`
	Version   uint64 `json:"version"`
	Rescoring int    `json:"rescoring"`
	Reload    any    `json:"reload,omitempty"` // the host's last reload status
}

// ops serves GET /api/admin/ops (OpsView).
func (s *Server) ops(ctx *fasthttp.RequestCtx) {
	now := s.now()
	v := OpsView{At: now.UTC(), Accounts: map[string]int{}, Tiers: map[string]int{}, Cooldowns: map[string]CooldownGroup{}}
	for _, st := range []actors.Status{actors.StatusActive, actors.StatusCooling, actors.StatusDisabled, actors.StatusUnauthorized, actors.StatusBanned} {
		v.Accounts[st.String()] = 0
	}
	for _, a := range s.sys.Views() {
		v.Accounts[a.Status.String()]++
		v.InFlight += a.InFlight
		if a.Status != actors.StatusCooling {
			continue
		}
		rem := max(a.CooldownUntil.Sub(now).Seconds(), 0)
		g := v.Cooldowns[a.CooldownReason]
		if g.Count == 0 || rem < g.MinSeconds {
			g.MinSeconds = rem
		}
		g.MaxSeconds = max(g.MaxSeconds, rem)
		g.Count++
		v.Cooldowns[a.CooldownReason] = g
		v.Soonest = append(v.Soonest, CooldownAccount{Name: a.Name, Reason: a.CooldownReason, Remaining: rem})
	}
	slices.SortFunc(v.Soonest, func(a, b CooldownAccount) int {
		switch {
		case a.Remaining < b.Remaining:
			return -1
		case a.Remaining > b.Remaining:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	v.Soonest = v.Soonest[:min(len(v.Soonest), 20)]
	o := s.front.Outcomes(now)
	v.Failures, v.Failovers = o.Failures, o.Failovers
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if st, err := s.sys.SchedulerStats(sctx); err == nil {
		v.Waiters = st.Waiters
		v.Tiers["healthy"], v.Tiers["warm"], v.Tiers["risky"], v.Tiers["excluded"] = st.Tiers[0], st.Tiers[1], st.Tiers[2], st.Excluded
		v.Policy = OpsPolicy{Name: st.Policy, Version: st.PolicyVersion, Rescoring: st.Rescoring}
	}
	if s.routing != nil {
		v.Policy.Reload = s.routing.Status()
	}
	v.UsageWindows = usageWindowsOps(s.sys.Views(), now)
	writeJSON(ctx, 200, v)
}
