// Package routing is the routing-policy runtime: the one place that decides
// which Lua policy, and which canary, this instance routes with. A policy
// runs in two places at once — the scheduler actor scores accounts with its
// own copy, and the gateway runs route(request) through a Router of
// clones — and Runtime puts both into service together, or neither: what
// can fail (compiling, the self-test, the scheduler's copy) is done before
// anything changes, and its error is returned to the caller.
//
// The package also keeps the instance in step with the others (policy and
// canary broadcasts through the shared cache, share.go), counts outcomes by
// policy version for canary comparisons (outcomes.go), and holds the one
// policy simulator (rank.go, sim.go) behind `troupe policy simulate`,
// `troupe policy replay` and the admin API's simulate.
//
// Imports: routing → actors → scripts, and storage; the gateway and the
// admin API import routing, routing imports neither.
package routing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
)

// Policies is what the runtime reads of stored policies (storage.Store
// implements it).
type Policies interface {
	// GetPolicy returns version v of name (0: the latest), or storage.ErrNotFound.
	GetPolicy(ctx context.Context, name string, v int) (storage.PolicyVersion, error)
	// ActivePolicy returns the policy activated through the admin API, or
	// storage.ErrNotFound when none was.
	ActivePolicy(ctx context.Context) (storage.PolicyVersion, error)
}

// Options configure a Runtime. Zero values are valid: no policies
// directory (the built-ins), no stored policies, no other instances.
type Options struct {
	// Dir is policies.dir: the active policy NAME is read from Dir/NAME.lua
	// when that file exists, and reloaded when it changes (Follow). "" reads
	// the built-ins only.
	Dir string
	// Active is policies.active, the policy that serves when none was
	// activated through the admin API; Default is its default (an Active
	// equal to Default that a stored policy overrides is logged at info
	// rather than warning level: it was most likely not asked for).
	Active, Default string
	// Sandbox are the limits of every policy the runtime compiles.
	Sandbox scripts.Options
	// Store holds the stored policies; nil: none.
	Store Policies
	// Cache carries policy and canary broadcasts between instances and the
	// shared canary (share.go); nil: this instance is alone.
	Cache storage.Cache
	// Registry receives the per-version outcome metrics
	// (troupe_policy_requests_total, troupe_policy_failovers_total); nil:
	// outcomes are counted without metrics.
	Registry *prometheus.Registry
	// Log receives policy loads, canary changes and broadcast failures;
	// nil discards.
	Log *slog.Logger
}

// Runtime is the routing policy and canary this instance runs, installed in
// the scheduler and in the gateway's router together. It wraps the policy
// host (compile, self-test, status) and the file watcher. Safe for
// concurrent use; changes are serialized.
type Runtime struct {
	sys   *actors.System
	opts  Options
	log   *slog.Logger
	host  *scripts.Host
	watch *scripts.Watcher
	// clone makes the scheduler's copy of a policy ((*scripts.Policy).Clone;
	// a test may make it fail).
	clone func(*scripts.Policy) (*scripts.Policy, error)

	mu    sync.Mutex // serializes commits; taken inside the host's load lock, never around it
	state atomic.Pointer[state]

	canaryFailed atomic.Pointer[CanarySpec] // the shared canary that failed to load here (share.go)
	outcomes     outcomes                   // per policy version (outcomes.go)
}

// state is what routes requests now; it is replaced whole, never changed.
type state struct {
	router *scripts.Router // the active policy's; nil before the first install
	canary *Canary         // nil: no canary
}

// New returns a runtime over sys with no policy installed yet: until Load
// (or Activate) succeeds the scheduler keeps its built-in policy and
// requests are routed without route().
func New(sys *actors.System, opts Options) *Runtime {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runtime{sys: sys, opts: opts, log: log, clone: (*scripts.Policy).Clone}
	r.state.Store(&state{})
	r.host = scripts.NewHost(scripts.HostOptions{Options: opts.Sandbox, Sample: r.Sample, Install: r.install, Log: opts.Log})
	r.watch = scripts.NewWatcher(r.host, opts.Dir, opts.Active, opts.Log)
	r.outcomes.registry = opts.Registry
	return r
}

// install readies p for the scheduler and returns the commit that puts it
// into service with its router (scripts.HostOptions.Install). A promoted
// canary (p is the running canary's policy) leaves the canary slot in the
// same commit.
func (r *Runtime) install(p *scripts.Policy) (func(), error) {
	clone, err := r.clone(p)
	if err != nil {
		return nil, fmt.Errorf("policy %s: the scheduler's copy: %w", p.Name(), err)
	}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		next := &state{router: scripts.NewRouter(p, 0), canary: r.state.Load().canary}
		promoted := next.canary != nil && next.canary.Policy == p
		if promoted {
			next.canary = nil
		}
		r.state.Store(next)
		r.sys.SetPolicy(actors.NewLuaPolicy(clone))
		if promoted {
			r.sys.SetCanary(nil)
		}
	}, nil
}

// Status returns the last load attempt's outcome and the serving policy.
func (r *Runtime) Status() scripts.ReloadStatus { return r.host.Status() }

// Active returns the serving policy (shared: only its metadata may be
// read), or nil before the first successful load.
func (r *Runtime) Active() *scripts.Policy { return r.host.Active() }

// Load loads the policy that should serve: the one activated through the
// admin API (stored; it takes precedence, and file changes are ignored
// from then on), else Options.Active from Options.Dir or the built-ins. On
// failure the serving policy is unchanged and the error is returned.
func (r *Runtime) Load(ctx context.Context) error {
	if r.opts.Store != nil {
		p, err := r.opts.Store.ActivePolicy(ctx)
		switch {
		case err == nil:
			r.watch.Pause()
			if want := r.opts.Active; want != "" && want != p.Name {
				level := slog.LevelWarn
				if want == r.opts.Default {
					level = slog.LevelInfo
				}
				r.log.Log(ctx, level, "policies.active (--policy, TROUPE_POLICIES_ACTIVE) is not used: the policy activated through the admin API serves; activate the other one there to switch",
					"serving", p.Name, "version", p.Version, "ignored", want)
			}
			_, err = r.host.LoadVersion(p.Name, p.Source, uint64(max(p.Version, 0)))
			return err
		case !errors.Is(err, storage.ErrNotFound):
			return err
		}
	}
	_, err := r.watch.Load()
	return err
}

// SetActive makes name the policy followed in Options.Dir (or the
// built-in of that name) and loads it.
func (r *Runtime) SetActive(name string) (*scripts.Policy, error) { return r.watch.SetActive(name) }

// Activate compiles, self-tests and installs source as stored version
// version of policy name (storage.PolicyVersion.Version; 0: not stored);
// from then on file changes in Options.Dir are ignored until the next
// start. On error nothing changes.
func (r *Runtime) Activate(name, source string, version int) error {
	if _, err := r.host.LoadVersion(name, source, uint64(max(version, 0))); err != nil {
		return err
	}
	r.watch.Pause()
	return nil
}

// Validate compiles source as policy name and self-tests it against the
// live pool, without installing it; the error carries the line.
func (r *Runtime) Validate(name, source string) error {
	p, err := r.host.Prepare(name, source, 0)
	if err != nil {
		return err
	}
	p.Close()
	return nil
}

// Router returns the router of the policy that routes a request: the
// canary's when canary is set and a canary runs, else the active policy's
// (nil before the first install). Safe for concurrent use; costs one
// atomic load.
func (r *Runtime) Router(canary bool) *scripts.Router {
	st := r.state.Load()
	if canary && st.canary != nil {
		return st.canary.router
	}
	return st.router
}

// sampleSize bounds the live views a self-test runs on.
const sampleSize = 200

// Sample returns up to 200 live account views for policy self-tests.
func (r *Runtime) Sample() []scripts.AccountView {
	views := r.sys.Views()
	return AccountViews(views[:min(len(views), sampleSize)])
}
