package admin

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// admin serves /api/admin/*: JSON, Cache-Control: no-store. Login is open;
// every other route takes an admin API key or a logged-in session
// (adminAuth). The routes are listed in docs/admin-api.md.
func (s *Server) admin(ctx *fasthttp.RequestCtx) {
	// Set last: error answers reset the response headers.
	defer ctx.Response.Header.Set("Cache-Control", "no-store")
	path := strings.TrimPrefix(string(ctx.Path()), "/api/admin/")
	parts := strings.Split(strings.Trim(path, "/"), "/")
	method := string(ctx.Method())
	if parts[0] == "login" && len(parts) == 1 {
		s.adminLogin(ctx)
		return
	}
	p, aerr := s.adminAuth(ctx, method)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	switch parts[0] {
	case "ops":
		switch {
		case method != "GET" || len(parts) > 2:
			writeError(ctx, errMethod(method, string(ctx.Path())))
		case len(parts) == 2 && parts[1] == "series":
			s.opsSeries(ctx)
		case len(parts) == 2:
			writeError(ctx, errNotFound(string(ctx.Path())))
		default:
			s.ops(ctx)
		}
	case "policies":
		s.adminPolicies(ctx, method, parts[1:])
	case "logout":
		if method != "POST" || len(parts) != 1 {
			writeError(ctx, errMethod(method, string(ctx.Path())))
			return
		}
		s.adminLogout(ctx, p)
	case "me":
		s.adminMe(ctx, p, method, parts[1:])
	case "accounts":
		s.adminAccounts(ctx, method, parts[1:])
	case "keys":
		s.adminKeys(ctx, method, parts[1:])
	case "usage":
		s.adminUsage(ctx, method, parts[1:])
	case "settings":
		s.adminSettings(ctx, method, parts[1:])
	default:
		writeError(ctx, errNotFound(string(ctx.Path())))
	}
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(ctx, &APIError{Status: 500, Type: "server_error", Message: "The server could not encode its answer."})
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}

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

// policyBody is the JSON of PUT /api/admin/policies/{name}.
type policyBody struct {
	Source string `json:"source"`
}

// policyJSON is a stored policy version as the admin API shows it.
type policyJSON struct {
	Name        string     `json:"name"`
	Version     int        `json:"version"`
	Source      string     `json:"source,omitempty"`
	CreatedAt   time.Time  `json:"created_at,omitzero"` // absent for a built-in never stored
	ActivatedAt *time.Time `json:"activated_at,omitempty"`
	Builtin     bool       `json:"builtin,omitempty"`
}

func toPolicyJSON(p storage.PolicyVersion, withSource bool) policyJSON {
	j := policyJSON{Name: p.Name, Version: p.Version, CreatedAt: p.CreatedAt, ActivatedAt: p.ActivatedAt}
	if withSource {
		j.Source = p.Source
	}
	return j
}

// maxGroupBytes bounds a routing group's name, on keys, accounts and
// canaries alike (storage refuses longer ones too).
const maxGroupBytes = storage.MaxGroupBytes

// errGroup is the error for a group longer than maxGroupBytes.
func errGroup() *APIError { return errBadParam("group", "A group has at most 200 bytes.") }

func validPolicyName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, r := range n {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// adminPolicies serves:
//
//	GET  /api/admin/policies                       stored policies (latest versions), built-ins, reload status
//	GET  /api/admin/policies/{name}                the latest stored version (or the built-in source)
//	PUT  /api/admin/policies/{name}                {"source"}: validate, then store as the next version
//	POST /api/admin/policies/{name}/activate       {"version"} (optional, default latest): load and serve it
//	GET  /api/admin/policies/{name}/history        every version, newest first
//	POST /api/admin/policies/{name}/canary         {"percent", "group", "version"}: run it for that traffic beside the active policy
//	POST /api/admin/policies/{name}/promote        the running canary becomes the active policy
//	POST /api/admin/policies/{name}/abort          stop the running canary
//
// Rolling back is activating an older version. The list also shows the
// running canary and every policy version's outcomes side by side (canary.go).
func (s *Server) adminPolicies(ctx *fasthttp.RequestCtx, method string, parts []string) {
	if s.routing == nil {
		writeError(ctx, &APIError{Status: 503, Type: "server_error", Message: "Routing policies are not available on this instance."})
		return
	}
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(parts) == 0 || parts[0] == "" {
		if method != "GET" {
			writeError(ctx, errMethod(method, string(ctx.Path())))
			return
		}
		stored, err := s.store.ListPolicies(rctx)
		if err != nil {
			s.storageError(ctx, err)
			return
		}
		list := make([]policyJSON, 0, len(stored))
		for _, p := range stored {
			list = append(list, toPolicyJSON(p, false))
		}
		resp := map[string]any{"policies": list, "builtins": scripts.Builtins(), "status": s.routing.Status(),
			"canary": s.canaryStatus(), "outcomes": s.routing.Outcomes()}
		if f := s.routing.CanaryNotLoaded(); f != nil {
			resp["canary_not_loaded"] = map[string]any{"name": f.Name, "stored_version": f.Version}
		}
		writeJSON(ctx, 200, resp)
		return
	}
	name := parts[0]
	if !validPolicyName(name) {
		writeError(ctx, errBadParam("name", "A policy name is 1 to 64 letters, digits, '-' or '_'."))
		return
	}
	switch {
	case len(parts) == 1 && method == "GET":
		p, err := s.store.GetPolicy(rctx, name, 0)
		if errors.Is(err, storage.ErrNotFound) {
			if src, ok := scripts.Builtin(name); ok {
				writeJSON(ctx, 200, policyJSON{Name: name, Source: src, Builtin: true})
				return
			}
		}
		if err != nil {
			s.storageError(ctx, err)
			return
		}
		writeJSON(ctx, 200, toPolicyJSON(p, true))
	case len(parts) == 1 && method == "PUT":
		var body policyBody
		if err := json.Unmarshal(ctx.PostBody(), &body); err != nil || body.Source == "" {
			writeError(ctx, errBadParam("source", "The body must be JSON {\"source\": \"<lua>\"}."))
			return
		}
		if err := s.routing.Validate(name, body.Source); err != nil {
			writeJSON(ctx, 400, map[string]any{"error": map[string]any{
				"message": err.Error(), "type": "invalid_request_error", "code": "policy_invalid", "param": "source", "line": errorLine(err)}})
			return
		}
		p, err := s.store.SavePolicy(rctx, name, body.Source)
		if err != nil {
			s.storageError(ctx, err)
			return
		}
		writeJSON(ctx, 200, toPolicyJSON(p, false))
	case len(parts) == 2 && parts[1] == "history" && method == "GET":
		h, err := s.store.PolicyHistory(rctx, name)
		if err != nil {
			s.storageError(ctx, err)
			return
		}
		list := make([]policyJSON, 0, len(h))
		for _, p := range h {
			list = append(list, toPolicyJSON(p, true))
		}
		writeJSON(ctx, 200, map[string]any{"name": name, "versions": list})
	case len(parts) == 2 && (parts[1] == "canary" || parts[1] == "promote" || parts[1] == "abort") && method == "POST":
		s.adminCanary(ctx, rctx, name, parts[1])
	case len(parts) == 2 && parts[1] == "activate" && method == "POST":
		var body struct {
			Version int `json:"version"`
		}
		if b := ctx.PostBody(); len(b) > 0 {
			if err := json.Unmarshal(b, &body); err != nil {
				writeError(ctx, errBadParam("version", "The body must be JSON {\"version\": N} or empty."))
				return
			}
		}
		s.activatePolicy(ctx, rctx, name, body.Version)
	case len(parts) == 2 && parts[1] == "validate" && method == "POST":
		s.policyValidate(ctx, rctx, name)
	case len(parts) == 2 && parts[1] == "simulate" && method == "POST":
		s.policySimulate(ctx, rctx, name)
	case len(parts) == 2 && parts[1] == "rollback" && method == "POST":
		s.policyRollback(ctx, rctx, name)
	default:
		writeError(ctx, errMethod(method, string(ctx.Path())))
	}
}

// activatePolicy loads version v of name (0: the latest), stores the
// activation and broadcasts it. A built-in never stored (smart, …) is
// stored first as version 1 of its name, so the operator can always return
// to it and the activation survives a restart like any other.
func (s *Server) activatePolicy(ctx *fasthttp.RequestCtx, rctx context.Context, name string, v int) {
	p, err := s.store.GetPolicy(rctx, name, v)
	if src, ok := scripts.Builtin(name); ok && v == 0 && errors.Is(err, storage.ErrNotFound) {
		p, err = s.store.SavePolicy(rctx, name, src)
	}
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	if err := s.routing.Activate(name, p.Source, p.Version); err != nil {
		writeJSON(ctx, 400, map[string]any{"error": map[string]any{
			"message": err.Error(), "type": "invalid_request_error", "code": "policy_invalid", "param": nil, "line": errorLine(err)}})
		return
	}
	act, err := s.store.ActivatePolicy(rctx, name, p.Version)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	s.routing.Broadcast(rctx, name)
	s.log.Info("admin: policy activated", "policy", name, "version", act.Version)
	writeJSON(ctx, 200, map[string]any{"activated": toPolicyJSON(act, false), "status": s.routing.Status()})
}

// errorLine returns the Lua line of a policy error, 0 when unknown.
func errorLine(err error) int {
	var pe *scripts.Error
	if errors.As(err, &pe) {
		return pe.Line
	}
	return 0
}

func (s *Server) storageError(ctx *fasthttp.RequestCtx, err error) {
	switch {
	case errors.Is(err, storage.ErrNotFound):
		writeError(ctx, &APIError{Status: 404, Type: "invalid_request_error", Code: "not_found", Message: "No such policy or version."})
	case errors.Is(err, storage.ErrInvalid):
		writeError(ctx, &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid", Message: "The request was refused by storage validation."})
	default:
		s.log.Error("admin storage", "err", err)
		writeError(ctx, &APIError{Status: 500, Type: "server_error", Message: "Storage error; see the gateway log."})
	}
}
