package admin

import (
	"context"
	"errors"
	"strconv"

	"github.com/troupe-gw/troupe/routing"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// canaryStatus is the running canary as GET /api/admin/policies shows it (nil: none).
func (s *Server) canaryStatus() *routing.CanaryStatus {
	if cn := s.routing.Canary(); cn != nil {
		return cn.Status()
	}
	return nil
}

// canaryBody is the JSON of POST /api/admin/policies/{name}/canary.
type canaryBody struct {
	Version int    `json:"version"` // stored version (0: the latest; a built-in when none is stored)
	Percent *int   `json:"percent"` // share of requests, 0-100
	Group   string `json:"group"`   // every request of keys in this group
}

// adminCanary serves POST /api/admin/policies/{name}/{canary,promote,abort}.
func (s *Server) adminCanary(ctx *fasthttp.RequestCtx, rctx context.Context, name, action string) {
	switch action {
	case "canary":
		s.startCanary(ctx, rctx, name)
	case "promote":
		s.promoteCanary(ctx, rctx, name)
	case "abort":
		s.abortCanary(ctx, rctx, name)
	}
}

// startCanary starts a canary of name (canaryBody) on this instance and
// shares it with the others.
func (s *Server) startCanary(ctx *fasthttp.RequestCtx, rctx context.Context, name string) {
	rt := s.routing
	var body canaryBody
	if err := decodeStrict(ctx.PostBody(), &body); err != nil {
		writeError(ctx, errBadParam("percent", "The body must be JSON {\"percent\": 0-100, \"group\": \"...\", \"version\": N}: "+jsonDecodeError(err)))
		return
	}
	pct := 0
	if body.Percent != nil {
		pct = *body.Percent
	}
	if body.Version < 0 {
		writeError(ctx, errBadParam("version", "version is a stored version (1 or more), or absent for the latest."))
		return
	}
	if pct < 0 || pct > 100 || (pct == 0 && body.Group == "") {
		writeError(ctx, errBadParam("percent", "Give percent (1-100) or group, or both; percent must be 0-100."))
		return
	}
	if len(body.Group) > maxGroupBytes || !storage.TextOK(body.Group) {
		writeError(ctx, errBadParam("group", "A group is UTF-8 text of at most 200 bytes, without NUL bytes."))
		return
	}
	src, stored, ok := s.policySource(ctx, rctx, name, body.Version)
	if !ok {
		return
	}
	spec := routing.CanarySpec{ID: routing.NewCanaryID(), Name: name, Version: stored, Percent: pct, Group: body.Group, Started: s.now()}
	if err := rt.StartCanary(spec, src); err != nil {
		writeJSON(ctx, 400, map[string]any{"error": map[string]any{
			"message": err.Error(), "type": "invalid_request_error", "code": "policy_invalid", "param": nil, "line": errorLine(err)}})
		return
	}
	rt.ShareCanary(rctx, spec)
	writeJSON(ctx, 200, map[string]any{"canary": s.canaryStatus(), "status": rt.Status()})
}

// promoteCanary makes the running canary of name the active policy, here
// and (through the stored activation and its broadcast) everywhere.
func (s *Server) promoteCanary(ctx *fasthttp.RequestCtx, rctx context.Context, name string) {
	rt := s.routing
	cn := rt.Canary()
	if cn == nil || cn.Policy.Name() != name {
		s.noCanary(ctx, name)
		return
	}
	if cn.Spec.Version == 0 {
		// A built-in: stored and activated like POST …/activate, so
		// every instance loads it.
		rt.StopCanary()
		rt.UnshareCanary(rctx)
		s.log.Info("routing canary promoted", "policy", name, "version", cn.Policy.Version())
		s.activatePolicy(ctx, rctx, name, 0)
		return
	}
	if _, err := rt.PromoteCanary(name); err != nil {
		s.log.Error("canary promotion", "policy", name, "err", err)
		writeError(ctx, &APIError{Status: 500, Type: "server_error", Message: "The canary could not be promoted; see the gateway log."})
		return
	}
	resp := map[string]any{"promoted": cn.Status(), "status": rt.Status()}
	act, err := s.store.ActivatePolicy(rctx, name, cn.Spec.Version)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	resp["activated"] = toPolicyJSON(act, false)
	rt.Broadcast(rctx, name)
	rt.UnshareCanary(rctx)
	s.log.Info("routing canary promoted", "policy", name, "version", cn.Policy.Version())
	writeJSON(ctx, 200, resp)
}

// abortCanary stops the canary of name everywhere, also when it runs on
// other instances but failed to load on this one.
func (s *Server) abortCanary(ctx *fasthttp.RequestCtx, rctx context.Context, name string) {
	rt := s.routing
	cn := rt.Canary()
	if cn == nil || cn.Policy.Name() != name {
		if f := rt.CanaryNotLoaded(); f != nil && f.Name == name {
			// Running elsewhere, not loaded here: end it everywhere.
			rt.ForgetCanaryNotLoaded()
			rt.UnshareCanary(rctx)
			s.log.Info("routing canary aborted", "policy", name, "stored_version", f.Version)
			writeJSON(ctx, 200, map[string]any{"aborted": map[string]any{"name": f.Name, "stored_version": f.Version}, "outcomes": rt.Outcomes()})
			return
		}
		s.noCanary(ctx, name)
		return
	}
	rt.StopCanary()
	rt.UnshareCanary(rctx)
	s.log.Info("routing canary aborted", "policy", name, "version", cn.Policy.Version())
	writeJSON(ctx, 200, map[string]any{"aborted": cn.Status(), "outcomes": rt.Outcomes()})
}

// noCanary answers 409 no_canary for name, saying so when the shared canary
// of that name failed to load on this instance.
func (s *Server) noCanary(ctx *fasthttp.RequestCtx, name string) {
	msg := "No canary of this policy is running."
	if f := s.routing.CanaryNotLoaded(); f != nil && f.Name == name {
		msg = "The canary of this policy runs on other instances but failed to load on this one (see its log): promote it there, or abort it here or there."
	}
	writeError(ctx, &APIError{Status: 409, Type: "invalid_request_error", Code: "no_canary", Message: msg})
}

// policySource is loadPolicySource answering the client itself on failure
// (ok false).
func (s *Server) policySource(ctx *fasthttp.RequestCtx, rctx context.Context, name string, v int) (src string, stored int, ok bool) {
	src, stored, err := s.loadPolicySource(rctx, name, v)
	if err != nil {
		s.policyStorageError(ctx, err, name, v)
		return "", 0, false
	}
	return src, stored, true
}

// policyStorageError is storageError for a read of version v (0: the
// latest) of the policy name: a 404 says which policy or version is
// missing, not "Nothing found at" a URL that is right.
func (s *Server) policyStorageError(ctx *fasthttp.RequestCtx, err error, name string, v int) {
	if !errors.Is(err, storage.ErrNotFound) {
		s.storageError(ctx, err)
		return
	}
	e := &APIError{Status: 404, Type: "invalid_request_error", Code: "not_found", Message: "No policy " + strconv.Quote(name) + " is stored, and no built-in has that name."}
	if v > 0 {
		e.Param = "version"
		e.Message = "Policy " + strconv.Quote(name) + " has no stored version " + strconv.Itoa(v) + " (GET …/history lists them)."
	}
	writeError(ctx, e)
}

// loadPolicySource returns the source of stored version v of name (v 0: the
// latest), or the built-in of that name when v is 0 and none is stored; the
// stored version it found is returned too (0 for a built-in).
func (s *Server) loadPolicySource(ctx context.Context, name string, v int) (src string, stored int, err error) {
	p, err := s.store.GetPolicy(storeCtx(ctx), name, v)
	switch {
	case err == nil:
		return p.Source, p.Version, nil
	case errors.Is(err, storage.ErrNotFound) && v == 0:
		if src, ok := scripts.Builtin(name); ok {
			return src, 0, nil
		}
	}
	return "", 0, err
}
