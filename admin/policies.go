package admin

import (
	"context"
	"errors"
	"time"

	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

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
//	POST /api/admin/policies/{name}/validate       {"source"} or {"version"}: compile and self-test, store nothing
//	POST /api/admin/policies/{name}/simulate       the same: rank the live pool under it beside the serving policy
//	POST /api/admin/policies/{name}/rollback       activate the version active before the current one
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
		s.listPolicies(ctx, rctx)
		return
	}
	name := parts[0]
	if !validPolicyName(name) {
		writeError(ctx, errBadParam("name", "A policy name is 1 to 64 letters, digits, '-' or '_'."))
		return
	}
	switch {
	case len(parts) == 1 && method == "GET":
		s.getPolicy(ctx, rctx, name)
	case len(parts) == 1 && method == "PUT":
		s.savePolicy(ctx, rctx, name)
	case len(parts) == 2 && parts[1] == "history" && method == "GET":
		s.policyHistory(ctx, rctx, name)
	case len(parts) == 2 && (parts[1] == "canary" || parts[1] == "promote" || parts[1] == "abort") && method == "POST":
		s.adminCanary(ctx, rctx, name, parts[1])
	case len(parts) == 2 && parts[1] == "activate" && method == "POST":
		var body struct {
			Version int `json:"version"`
		}
		if b := ctx.PostBody(); len(b) > 0 {
			if err := decodeStrict(b, &body); err != nil {
				writeError(ctx, errBadParam("version", "The body must be JSON {\"version\": N} or empty: "+jsonDecodeError(err)))
				return
			}
		}
		if body.Version < 0 { // storage reads v <= 0 as the latest: -1 would activate it
			writeError(ctx, errBadParam("version", "version is a stored version (1 or more), or absent for the latest."))
			return
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

// listPolicies serves GET /api/admin/policies: the latest version of every
// stored policy, the built-ins, the reload status, the running canary (and
// one that runs elsewhere but failed to load here) and the outcomes by
// policy version.
func (s *Server) listPolicies(ctx *fasthttp.RequestCtx, rctx context.Context) {
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
}

// getPolicy serves GET /api/admin/policies/{name}: the latest stored
// version with its source, else the built-in of that name.
func (s *Server) getPolicy(ctx *fasthttp.RequestCtx, rctx context.Context, name string) {
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
}

// savePolicy serves PUT /api/admin/policies/{name}: the source is compiled
// and self-tested (routing.Runtime.Validate), then stored as the next
// version; nothing is activated.
func (s *Server) savePolicy(ctx *fasthttp.RequestCtx, rctx context.Context, name string) {
	var body policyBody
	if err := decodeStrict(ctx.PostBody(), &body); err != nil {
		writeError(ctx, errBadParam("source", "The body must be JSON {\"source\": \"<lua>\"}: "+jsonDecodeError(err)))
		return
	}
	if body.Source == "" {
		writeError(ctx, errBadParam("source", "The body must be JSON {\"source\": \"<lua>\"}."))
		return
	}
	if err := s.routing.Validate(name, body.Source); err != nil {
		writePolicyError(ctx, err)
		return
	}
	p, err := s.store.SavePolicy(rctx, name, body.Source)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	writeJSON(ctx, 200, toPolicyJSON(p, false))
}

// policyHistory serves GET /api/admin/policies/{name}/history: every
// stored version with its source, newest first.
func (s *Server) policyHistory(ctx *fasthttp.RequestCtx, rctx context.Context, name string) {
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
		s.policyStorageError(ctx, err, name, v)
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

// adminPolicySource returns the source a validate or simulate request is about:
// the body's "source", else version "version" of the stored policy (0: the
// latest), else the built-in of that name.
func (s *Server) adminPolicySource(ctx context.Context, name string, body []byte) (string, *APIError) {
	var in struct {
		Source  string `json:"source"`
		Version int    `json:"version"`
	}
	if len(body) > 0 {
		if err := decodeStrict(body, &in); err != nil {
			return "", errBadParam("source", `The body must be JSON {"source": "<lua>"} or {"version": N}, or empty: `+jsonDecodeError(err))
		}
	}
	if in.Version < 0 { // storage reads v <= 0 as the latest
		return "", errBadParam("version", "version is a stored version (1 or more), or absent for the latest.")
	}
	if in.Source != "" {
		return in.Source, nil
	}
	p, err := s.store.GetPolicy(storeCtx(ctx), name, in.Version)
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

// policyRollback serves POST /api/admin/policies/{name}/rollback: activate
// the version of name that was active before the current one (by
// activated_at), or, when none was, the version before the latest; when
// name is the serving policy and has no earlier version (its first stored
// version), the built-in default as it ships (rollbackToBuiltin).
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
	if target == 0 && cur != 0 {
		s.rollbackToBuiltin(ctx, rctx, name, cur)
		return
	}
	if target == 0 {
		writeError(ctx, &APIError{Status: 409, Type: "invalid_request_error", Code: "no_previous_version", Message: "This policy has no earlier version to roll back to."})
		return
	}
	s.activatePolicy(ctx, rctx, name, target)
}

// rollbackToBuiltin activates the built-in default policy
// (scripts.DefaultPolicy) with its shipped source, in place of version cur
// of name, the serving policy, which has nothing earlier: a stored version
// of the default with exactly that source, else the source stored as its
// next version. 409 when the serving policy already is that.
func (s *Server) rollbackToBuiltin(ctx *fasthttp.RequestCtx, rctx context.Context, name string, cur int) {
	def := scripts.DefaultPolicy
	src, _ := scripts.Builtin(def)
	hist, err := s.store.PolicyHistory(rctx, def)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		s.storageError(ctx, err)
		return
	}
	for _, p := range hist {
		if p.Source != src {
			continue
		}
		if name == def && p.Version == cur {
			writeError(ctx, &APIError{Status: 409, Type: "invalid_request_error", Code: "no_previous_version",
				Message: "The built-in " + def + " policy is serving already; there is nothing earlier to roll back to."})
			return
		}
		s.log.Info("admin: policy rolled back to the built-in default", "from", name, "from_version", cur, "to", def)
		s.activatePolicy(ctx, rctx, def, p.Version)
		return
	}
	p, err := s.store.SavePolicy(rctx, def, src)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	s.log.Info("admin: policy rolled back to the built-in default", "from", name, "from_version", cur, "to", def)
	s.activatePolicy(ctx, rctx, def, p.Version)
}
