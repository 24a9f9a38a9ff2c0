package gateway

import (
	"encoding/json"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// SetHealth names the dependencies /readyz reports on (storage, the shared
// cache, the usage journal: the wrappers that track their outages). Call
// it before Serve; it is not safe to call while serving.
func (s *Server) SetHealth(deps ...storage.HealthReporter) { s.health = deps }

// readiness is the /readyz body (docs/storage.md#readiness).
type readiness struct {
	// Status is "starting", "no accounts" or "unavailable" (503), or
	// "degraded" or "ready" (200).
	Status string `json:"status"`
	// Accounts is how many accounts can take requests now (active or
	// cooling down).
	Accounts int           `json:"accounts"`
	Checks   []healthCheck `json:"checks,omitempty"`
}

// healthCheck is one dependency's state in the /readyz body.
type healthCheck struct {
	Name   string     `json:"name"`
	Status string     `json:"status"` // "ok", "degraded" or "down"
	Since  *time.Time `json:"since,omitempty"`
	Detail string     `json:"detail,omitempty"`
}

// readyz answers 200 when the instance can serve requests — possibly
// degraded, which the body says — and 503 when it cannot: starting, no
// account that can take a request, or a dependency it cannot work without.
func (s *Server) readyz(ctx *fasthttp.RequestCtx) {
	r := s.readiness()
	if r.Status != "ready" && r.Status != "degraded" {
		ctx.SetStatusCode(503)
	}
	b, _ := json.Marshal(r)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func (s *Server) readiness() readiness {
	if !s.ready.Load() {
		return readiness{Status: "starting"}
	}
	r := readiness{Status: "ready"}
	// The views are read in place (EachView): with Views a load balancer's
	// probe every few seconds copied every account's (BenchmarkViews).
	s.sys.EachView(func(v *actors.View) {
		if v.Status == actors.StatusActive || v.Status == actors.StatusCooling {
			r.Accounts++
		}
	})
	down := false
	for _, d := range s.health {
		h := d.Health()
		c := healthCheck{Name: h.Name, Status: "ok", Detail: h.Detail}
		switch {
		case h.Down:
			c.Status, down = "down", true
		case h.Degraded:
			c.Status = "degraded"
			if r.Status == "ready" {
				r.Status = "degraded"
			}
		}
		if !h.Since.IsZero() {
			since := h.Since.UTC()
			c.Since = &since
		}
		r.Checks = append(r.Checks, c)
	}
	switch {
	case r.Accounts == 0:
		r.Status = "no accounts"
	case down:
		r.Status = "unavailable"
	}
	return r
}
