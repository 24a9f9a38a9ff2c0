package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// CanaryControl is the optional capability of a PolicyControl to run a
// canary: a policy prepared (compiled, self-tested, versioned) without being
// activated, and later installed as the active policy under that version.
// Implemented by cmd/troupe around scripts.Host.Prepare and Install.
type CanaryControl interface {
	// Prepare compiles and self-tests source as stored version version of
	// name (0: not stored, a built-in).
	Prepare(name, source string, version int) (*scripts.Policy, error)
	Install(ctx context.Context, p *scripts.Policy) error
}

// canary is a running canary: which traffic it routes and with what.
type canary struct {
	policy  *scripts.Policy // shared metadata; Score and Route run on clones
	router  *scripts.Router
	id      string // canarySpec.ID (canary_share.go)
	stored  int    // the stored version it was loaded from (0: a built-in)
	percent int    // share of requests, 0-100
	group   string // every request of API keys in this group ("" = none)
	started time.Time
}

// canaryRuntime is the Server's canary and the outcome counters of every
// policy version that routed requests. Safe for concurrent use.
type canaryRuntime struct {
	cur      atomic.Pointer[canary]
	change   sync.Mutex                 // serializes starting and stopping (canary_share.go)
	failed   atomic.Pointer[canarySpec] // the shared canary this instance could not load (nil: none)
	mu       sync.Mutex
	outcomes map[outcomeKey]*outcomeSums
	once     sync.Once
	requests *prometheus.CounterVec // troupe_policy_requests_total{policy,version,canary,result}
	failover *prometheus.CounterVec // troupe_policy_failovers_total{policy,version,canary}
}

type outcomeKey struct {
	policy  string
	version uint64
	canary  bool
}

type outcomeSums struct {
	requests, failed, failovers int64
	latency                     time.Duration
}

// inCanary decides whether the canary routes c: every request of a key in
// the canary's group, and percent of the others (uniformly at random).
func (s *Server) inCanary(c *call) bool {
	cn := s.canaryRT.cur.Load()
	if cn == nil {
		return false
	}
	if cn.group != "" && c.key.Group == cn.group {
		return true
	}
	return cn.percent > 0 && rand.IntN(100) < cn.percent
}

// routerFor returns the router of the policy that routes c.
func (s *Server) routerFor(c *call) *scripts.Router {
	if c.canary {
		if cn := s.canaryRT.cur.Load(); cn != nil {
			return cn.router
		}
	}
	return s.router.Load()
}

// countPolicy adds c's outcome to its policy version's counters and metrics.
func (s *Server) countPolicy(c *call, status int) {
	if !c.decided {
		return
	}
	rt := &s.canaryRT
	rt.once.Do(func() { rt.register(s.metrics.Registry) })
	k := outcomeKey{policy: c.decision.Policy, version: c.decision.PolicyVersion, canary: c.decision.Canary}
	failed := status >= 500 || status == 429
	lat := s.now().Sub(c.start)
	rt.mu.Lock()
	if rt.outcomes == nil {
		rt.outcomes = make(map[outcomeKey]*outcomeSums)
	}
	o := rt.outcomes[k]
	if o == nil {
		o = &outcomeSums{}
		rt.outcomes[k] = o
	}
	o.requests++
	if failed {
		o.failed++
	}
	o.failovers += int64(max(c.attempts-1, 0))
	o.latency += lat
	rt.mu.Unlock()
	if rt.requests != nil {
		v, cn, res := strconv.FormatUint(k.version, 10), strconv.FormatBool(k.canary), "ok"
		if failed {
			res = "failed"
		}
		rt.requests.WithLabelValues(k.policy, v, cn, res).Inc()
		if c.attempts > 1 {
			rt.failover.WithLabelValues(k.policy, v, cn).Add(float64(c.attempts - 1))
		}
	}
}

// register creates the metrics on reg (reusing ones another Server registered).
func (rt *canaryRuntime) register(reg *prometheus.Registry) {
	rt.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "troupe_policy_requests_total",
		Help: "Client requests by the routing policy version that chose their account, whether it ran as a canary, and result (ok; failed: 429 or 5xx to the client).",
	}, []string{"policy", "version", "canary", "result"})
	rt.failover = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "troupe_policy_failovers_total", Help: "Failovers (extra upstream attempts) by the routing policy version that chose the serving account.",
	}, []string{"policy", "version", "canary"})
	for _, c := range []**prometheus.CounterVec{&rt.requests, &rt.failover} {
		if err := reg.Register(*c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				*c = are.ExistingCollector.(*prometheus.CounterVec)
			}
		}
	}
}

// PolicyOutcome is one policy version's results on this instance since start.
type PolicyOutcome struct {
	Policy        string  `json:"policy"`
	Version       uint64  `json:"version"`
	Canary        bool    `json:"canary"`
	Requests      int64   `json:"requests"`
	Failed        int64   `json:"failed"`          // answered 429 or 5xx
	FailedRate    float64 `json:"failed_rate"`     // failed / requests
	Failovers     int64   `json:"failovers"`       // extra upstream attempts
	MeanLatencyMs float64 `json:"mean_latency_ms"` // start to last byte
}

// CanaryStatus is the running canary as GET /api/admin/policies shows it.
type CanaryStatus struct {
	Name          string    `json:"name"`
	Version       uint64    `json:"version"`        // the policy host's version (as in decision traces and metrics)
	StoredVersion int       `json:"stored_version"` // the stored version it came from (0: a built-in)
	Percent       int       `json:"percent"`
	Group         string    `json:"group,omitempty"`
	Started       time.Time `json:"started"`
}

// policyOutcomes returns the counters of every policy version, active first.
func (s *Server) policyOutcomes() []PolicyOutcome {
	rt := &s.canaryRT
	rt.mu.Lock()
	out := make([]PolicyOutcome, 0, len(rt.outcomes))
	for k, o := range rt.outcomes {
		po := PolicyOutcome{Policy: k.policy, Version: k.version, Canary: k.canary, Requests: o.requests, Failed: o.failed, Failovers: o.failovers}
		if o.requests > 0 {
			po.FailedRate = float64(o.failed) / float64(o.requests)
			po.MeanLatencyMs = float64(o.latency.Microseconds()) / 1000 / float64(o.requests)
		}
		out = append(out, po)
	}
	rt.mu.Unlock()
	slices.SortFunc(out, func(a, b PolicyOutcome) int {
		if a.Version != b.Version {
			if a.Version > b.Version {
				return -1
			}
			return 1
		}
		if a.Canary != b.Canary {
			if a.Canary {
				return -1
			}
			return 1
		}
		return 0
	})
	return out
}

func (s *Server) canaryStatus() *CanaryStatus {
	cn := s.canaryRT.cur.Load()
	if cn == nil {
		return nil
	}
	return s.canaryStatusOf(cn)
}

// canaryBody is the JSON of POST /api/admin/policies/{name}/canary.
type canaryBody struct {
	Version int    `json:"version"` // stored version (0: the latest; a built-in when none is stored)
	Percent *int   `json:"percent"` // share of requests, 0-100
	Group   string `json:"group"`   // every request of keys in this group
}

// adminCanary serves POST /api/admin/policies/{name}/{canary,promote,abort}.
func (s *Server) adminCanary(ctx *fasthttp.RequestCtx, rctx context.Context, name, action string) {
	cc, ok := s.policies.(CanaryControl)
	if !ok {
		writeError(ctx, &APIError{Status: 503, Type: "server_error", Message: "Canaries are not available on this instance."})
		return
	}
	switch action {
	case "canary":
		var body canaryBody
		if err := json.Unmarshal(ctx.PostBody(), &body); err != nil {
			writeError(ctx, errBadParam("percent", "The body must be JSON {\"percent\": 0-100, \"group\": \"...\", \"version\": N}."))
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
		spec := canarySpec{ID: newCanaryID(), Name: name, Version: stored, Percent: pct, Group: body.Group, Started: s.now()}
		if err := s.startCanary(spec, src); err != nil {
			writeJSON(ctx, 400, map[string]any{"error": map[string]any{
				"message": err.Error(), "type": "invalid_request_error", "code": "policy_invalid", "param": nil, "line": errorLine(err)}})
			return
		}
		s.shareCanary(rctx, spec)
		writeJSON(ctx, 200, map[string]any{"canary": s.canaryStatus(), "status": s.policies.Status()})
	case "promote":
		cn := s.canaryRT.cur.Load()
		if cn == nil || cn.policy.Name() != name {
			s.noCanary(ctx, name)
			return
		}
		if cn.stored == 0 {
			// A built-in: stored and activated like POST …/activate, so
			// every instance loads it.
			s.stopCanary()
			s.unshareCanary(rctx)
			s.log.Info("routing canary promoted", "policy", name, "version", cn.policy.Version())
			s.activatePolicy(ctx, rctx, name, 0)
			return
		}
		if err := cc.Install(rctx, cn.policy); err != nil {
			s.log.Error("canary promotion", "policy", name, "err", err)
			writeError(ctx, &APIError{Status: 500, Type: "server_error", Message: "The canary could not be promoted; see the gateway log."})
			return
		}
		s.stopCanary()
		resp := map[string]any{"promoted": s.canaryStatusOf(cn), "status": s.policies.Status()}
		if cn.stored > 0 {
			act, err := s.store.ActivatePolicy(rctx, name, cn.stored)
			if err != nil {
				s.storageError(ctx, err)
				return
			}
			resp["activated"] = toPolicyJSON(act, false)
			if s.cache != nil {
				if err := s.cache.Publish(rctx, PolicyChannel, name); err != nil {
					s.log.Warn("policy broadcast failed; other instances reload on their next start", "err", err)
				}
			}
		}
		s.unshareCanary(rctx)
		s.log.Info("routing canary promoted", "policy", name, "version", cn.policy.Version())
		writeJSON(ctx, 200, resp)
	case "abort":
		cn := s.canaryRT.cur.Load()
		if cn == nil || cn.policy.Name() != name {
			if f := s.canaryRT.failed.Load(); f != nil && f.Name == name {
				// Running elsewhere, not loaded here: end it everywhere.
				s.canaryRT.failed.Store(nil)
				s.unshareCanary(rctx)
				s.log.Info("routing canary aborted", "policy", name, "stored_version", f.Version)
				writeJSON(ctx, 200, map[string]any{"aborted": map[string]any{"name": f.Name, "stored_version": f.Version}, "outcomes": s.policyOutcomes()})
				return
			}
			s.noCanary(ctx, name)
			return
		}
		s.stopCanary()
		s.unshareCanary(rctx)
		s.log.Info("routing canary aborted", "policy", name, "version", cn.policy.Version())
		writeJSON(ctx, 200, map[string]any{"aborted": s.canaryStatusOf(cn), "outcomes": s.policyOutcomes()})
	}
}

// noCanary answers 409 no_canary for name, saying so when the shared canary
// of that name failed to load on this instance.
func (s *Server) noCanary(ctx *fasthttp.RequestCtx, name string) {
	msg := "No canary of this policy is running."
	if f := s.canaryRT.failed.Load(); f != nil && f.Name == name {
		msg = "The canary of this policy runs on other instances but failed to load on this one (see its log): promote it there, or abort it here or there."
	}
	writeError(ctx, &APIError{Status: 409, Type: "invalid_request_error", Code: "no_canary", Message: msg})
}

func (s *Server) canaryStatusOf(cn *canary) *CanaryStatus {
	return &CanaryStatus{Name: cn.policy.Name(), Version: cn.policy.Version(), StoredVersion: cn.stored,
		Percent: cn.percent, Group: cn.group, Started: cn.started}
}

// policySource is loadPolicySource answering the client itself on failure
// (ok false).
func (s *Server) policySource(ctx *fasthttp.RequestCtx, rctx context.Context, name string, v int) (src string, stored int, ok bool) {
	src, stored, err := s.loadPolicySource(rctx, name, v)
	if err != nil {
		s.storageError(ctx, err)
		return "", 0, false
	}
	return src, stored, true
}
