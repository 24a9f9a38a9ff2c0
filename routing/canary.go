package routing

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/scripts"
)

// CanarySpec is a canary as instances share it (share.go): which stored
// version of which policy, on which traffic, started when. ID tells one
// start from the next.
type CanarySpec struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Version int       `json:"version"` // the stored version (0: the built-in of that name)
	Percent int       `json:"percent"` // share of requests, 0-100
	Group   string    `json:"group,omitempty"`
	Started time.Time `json:"started"`
}

// Canary is a running canary: a policy prepared (compiled, self-tested,
// versioned) beside the active one, judging the requests InCanary picks.
type Canary struct {
	Spec   CanarySpec
	Policy *scripts.Policy // shared metadata; Score and Route run on clones
	router *scripts.Router
}

// CanaryStatus is a canary as the admin API shows it.
type CanaryStatus struct {
	Name          string    `json:"name"`
	Version       uint64    `json:"version"`        // the policy host's version (as in decision traces and metrics)
	StoredVersion int       `json:"stored_version"` // the stored version it came from (0: a built-in)
	Percent       int       `json:"percent"`
	Group         string    `json:"group,omitempty"`
	Started       time.Time `json:"started"`
}

// Status describes c for the admin API.
func (c *Canary) Status() *CanaryStatus {
	return &CanaryStatus{Name: c.Policy.Name(), Version: c.Policy.Version(), StoredVersion: c.Spec.Version,
		Percent: c.Spec.Percent, Group: c.Spec.Group, Started: c.Spec.Started}
}

// Canary returns the running canary, or nil.
func (r *Runtime) Canary() *Canary { return r.state.Load().canary }

// InCanary decides whether the canary routes a request of an API key in
// group: every request of the canary's group, and its percent of the others
// (uniformly at random). False when no canary runs. Safe for concurrent
// use; costs one atomic load.
func (r *Runtime) InCanary(group string) bool {
	cn := r.state.Load().canary
	if cn == nil {
		return false
	}
	if cn.Spec.Group != "" && group == cn.Spec.Group {
		return true
	}
	return cn.Spec.Percent > 0 && rand.IntN(100) < cn.Spec.Percent
}

// StartCanary compiles and self-tests src as spec's policy (under its
// stored version) and runs it as this instance's canary, replacing any.
// On error (the policy's, with its line, or the scheduler's copy failing)
// nothing changes.
func (r *Runtime) StartCanary(spec CanarySpec, src string) error {
	p, err := r.host.Prepare(spec.Name, src, uint64(max(spec.Version, 0)))
	if err != nil {
		return err
	}
	clone, err := r.clone(p)
	if err != nil {
		p.Close()
		return err
	}
	// The router's first: a scheduler that reports the canary
	// (SchedulerStats) implies the runtime reports it, and until the
	// scheduler has it, its requests are judged by the active policy.
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state.Store(&state{router: r.state.Load().router, canary: &Canary{Spec: spec, Policy: p, router: scripts.NewRouter(p, 0)}})
	r.sys.SetCanary(actors.NewLuaPolicy(clone))
	r.log.Info("routing canary started", "policy", spec.Name, "version", p.Version(), "percent", spec.Percent, "group", spec.Group)
	return nil
}

// ErrNoCanary is PromoteCanary's error when no canary of the name runs.
var ErrNoCanary = errors.New("no canary of this policy runs")

// StopCanary ends this instance's canary, if any, and returns it.
func (r *Runtime) StopCanary() *Canary {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.state.Load()
	if cur.canary == nil {
		return nil
	}
	r.state.Store(&state{router: cur.router})
	r.sys.SetCanary(nil)
	return cur.canary
}

// PromoteCanary makes the running canary of policy name the active policy,
// under the version it ran as (so its outcomes continue), and ends the
// canary in the same step; file changes in Options.Dir are ignored from
// then on. It returns the promoted canary, or ErrNoCanary when no canary
// of that name runs; on error nothing changes.
func (r *Runtime) PromoteCanary(name string) (*Canary, error) {
	cn := r.Canary()
	if cn == nil || cn.Policy.Name() != name {
		return nil, ErrNoCanary
	}
	if err := r.host.Install(cn.Policy); err != nil {
		return nil, err
	}
	r.watch.Pause()
	return cn, nil
}
