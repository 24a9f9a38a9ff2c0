package scripts

import "runtime"

// Router runs a policy's route from any goroutine: each call borrows a
// clone of the policy (its own Lua state) from a bounded pool, so the
// gateway can route a request without going through the scheduler actor
// that owns the policy itself. A Router is safe for concurrent use.
type Router struct {
	p    *Policy
	idle chan *Policy
}

// NewRouter returns a router for p keeping up to size idle clones
// (GOMAXPROCS when size ≤ 0). Clones are made on first need, each running
// p's top-level chunk again (about a millisecond), and never shared by two
// calls at once. p itself is not used, only cloned.
func NewRouter(p *Policy, size int) *Router {
	if size <= 0 {
		size = runtime.GOMAXPROCS(0)
	}
	return &Router{p: p, idle: make(chan *Policy, size)}
}

// Policy returns the policy the router clones.
func (r *Router) Policy() *Policy { return r.p }

// Route runs route(req) on an idle clone (see Policy.Route). Without a
// route function it returns at once and clones nothing.
func (r *Router) Route(req *RequestView) (RouteResult, error) {
	if !r.p.HasRoute() {
		return RouteResult{}, nil
	}
	var c *Policy
	select {
	case c = <-r.idle:
	default:
		var err error
		if c, err = r.p.Clone(); err != nil {
			return RouteResult{}, err
		}
	}
	res, err := c.Route(req)
	select {
	case r.idle <- c:
	default:
		c.Close()
	}
	return res, err
}
