package gateway

import (
	"context"
	"log/slog"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/routing"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// SetRouting installs the routing-policy runtime: the gateway calls the
// route() of its active policy (or canary) for every request when the
// policy defines one, and counts outcomes by policy version. Call it before
// Serve.
func (s *Server) SetRouting(rt *routing.Runtime) { s.routing = rt }

// inCanary decides whether the canary routes c (routing.Runtime.InCanary).
func (s *Server) inCanary(c *call) bool {
	return s.routing != nil && s.routing.InCanary(c.key.Group)
}

// routerFor returns the router of the policy that routes c (nil: none).
func (s *Server) routerFor(c *call) *scripts.Router {
	if s.routing == nil {
		return nil
	}
	return s.routing.Router(c.canary)
}

// countPolicy adds c's outcome to its policy version's counters and metrics
// (routing.Runtime.Count).
func (s *Server) countPolicy(c *call, status int) {
	if c.decision == nil || s.routing == nil {
		return
	}
	s.routing.Count(routing.Result{Policy: c.decision.Policy, Version: c.decision.PolicyVersion, Canary: c.decision.Canary,
		Failed: status >= 500 || status == 429, Failovers: c.attempts - 1, Latency: s.now().Sub(c.start)})
}

// sessionHeaders are the client headers that name a session, in order of
// preference (Codex sends session-id; older clients session_id).
// They are written in fasthttp's canonical form (the form the server
// stores received names in; TestSessionHeadersCanonical), so sessionKey
// looks them up with PeekCanonical: Peek copied and normalized each name
// on every request, five times a request (docs/benchmarks.md, issue 21).
var sessionHeaders = [][]byte{[]byte("Session-Id"), []byte("Session_id"), []byte("X-Session-Id"), []byte("Conversation_id"), []byte("X-Claude-Code-Session-Id")}

// sessionKey returns the client's session key: a session header, else the
// body's prompt_cache_key, else "".
func sessionKey(ctx *fasthttp.RequestCtx, body []byte) string {
	for _, h := range sessionHeaders {
		if v := ctx.Request.Header.PeekCanonical(h); len(v) > 0 {
			return string(v)
		}
	}
	return gjson.GetBytes(body, "prompt_cache_key").String()
}

// route runs the policy's route(request) and applies what it returns:
// constraints only narrow. A group applies only to keys of the default group
// (a key with a group stays in it); a model replaces the routing target and
// the model the upstream is asked for; provider and tags filter candidates; a sticky key and
// max_attempts go to the scheduler and the failover loop. A request the
// canary routes (inCanary) runs the canary's route(). A route error is
// logged and the request routed without constraints (fail open: the
// policy's score still applies).
func (s *Server) route(ctx *fasthttp.RequestCtx, c *call) *APIError {
	return s.routeWith(c, c.session, ctx.RemoteIP().String())
}

// routeWith is route for a request whose session key and client address
// are known (a WebSocket frame has no request context of its own).
func (s *Server) routeWith(c *call, session, clientIP string) *APIError {
	r := s.routerFor(c)
	if r == nil || !r.Policy().HasRoute() {
		return nil
	}
	rv := scripts.RequestView{
		Model: c.target, Protocol: c.endpoint.Route(), Stream: c.stream,
		APIKey:     scripts.APIKeyView{ID: c.key.ID, Name: c.key.Name, Group: c.key.Group},
		SessionKey: session,
		ClientIP:   clientIP,
	}
	res, err := r.Route(&rv)
	if err != nil {
		if ok, held := s.logs.route.Take(context.Background(), s.log, slog.LevelWarn); ok {
			s.log.Warn("route() failed; routing without constraints", "request_id", c.id, "policy", r.Policy().Name(), "err", err, "suppressed", held)
		}
		return nil
	}
	if res.Group != "" && c.key.Group == "" {
		c.group = res.Group
	}
	if res.Model != "" {
		c.target = res.Model // written into the body each upstream gets (upstreamBody)
	}
	c.provider = storage.Provider(res.Provider)
	c.tags = res.Tags
	c.sticky = res.StickyKey
	if res.MaxAttempts > 0 {
		c.maxAttempts = res.MaxAttempts
	}
	return nil
}
