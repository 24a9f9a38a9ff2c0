package routing

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
)

// Cache pub/sub channels and entries by which instances share policies.
const (
	// PolicyChannel carries the name of a policy activated through the admin
	// API; every instance then loads the stored active policy (Follow).
	PolicyChannel = "policies"
	// CanaryChannel announces a canary's start or end; every instance then
	// reads the canary from the cache entry canaryKey (SyncCanary), so a
	// lost message costs nothing the next one does not repair.
	CanaryChannel = "policy-canary"
)

// canaryKey is the cache entry holding the running canary (a CanarySpec as
// JSON) while it runs, for every instance, including those that start
// later; canaryTTL bounds how long it outlives an instance that never ends
// it.
const (
	canaryKey = "policy:canary"
	canaryTTL = 30 * 24 * time.Hour
)

// canaryResync is how often Follow rereads the shared canary without an
// announcement.
const canaryResync = 10 * time.Second

// policyResync is how often Follow compares the stored activation with the
// policy serving, without a broadcast (SyncPolicy).
const policyResync = 10 * time.Second

// NewCanaryID returns a random canary id (16 hex digits).
func NewCanaryID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// cacheDegraded reports whether the cache serves from this process alone
// because the shared one is out of reach (storage/fallback's Degraded).
func (r *Runtime) cacheDegraded() bool {
	d, ok := r.opts.Cache.(interface{ Degraded() bool })
	return ok && d.Degraded()
}

// Broadcast announces that policy name was activated, so every other
// instance loads the stored active policy. A failure is logged: the others
// load it at their next start.
func (r *Runtime) Broadcast(ctx context.Context, name string) {
	if r.opts.Cache == nil {
		return
	}
	if err := r.opts.Cache.Publish(ctx, PolicyChannel, name); err != nil {
		r.log.Warn("policy broadcast failed; other instances reload on their next start", "err", err)
	}
}

// ShareCanary stores spec for every instance and announces it; without a
// reachable cache the canary runs here only, which is logged.
func (r *Runtime) ShareCanary(ctx context.Context, spec CanarySpec) {
	c := r.opts.Cache
	if c == nil {
		return
	}
	if r.cacheDegraded() {
		r.log.Warn("the shared cache is unavailable: the canary runs on this instance only until the next canary change", "policy", spec.Name)
	}
	b, _ := json.Marshal(spec)
	err := c.Set(ctx, canaryKey, string(b), canaryTTL)
	if err == nil {
		err = c.Publish(ctx, CanaryChannel, spec.ID)
	}
	if err != nil {
		r.log.Warn("canary broadcast failed; it runs on this instance only", "policy", spec.Name, "err", err)
	}
}

// UnshareCanary removes the shared canary and announces its end.
func (r *Runtime) UnshareCanary(ctx context.Context) {
	c := r.opts.Cache
	if c == nil {
		return
	}
	err := c.Delete(ctx, canaryKey)
	if err == nil {
		err = c.Publish(ctx, CanaryChannel, "end")
	}
	if err != nil {
		r.log.Warn("canary broadcast failed; other instances keep theirs until the next change", "err", err)
	}
}

// CanaryNotLoaded returns the shared canary that failed to load on this
// instance (SyncCanary), or nil.
func (r *Runtime) CanaryNotLoaded() *CanarySpec { return r.canaryFailed.Load() }

// ForgetCanaryNotLoaded clears CanaryNotLoaded (the canary was ended).
func (r *Runtime) ForgetCanaryNotLoaded() { r.canaryFailed.Store(nil) }

// SyncCanary makes this instance's canary the shared one: started when
// another instance started it, ended when it was ended or promoted there.
// A canary that fails to load here is not run (CanaryNotLoaded reports it)
// and its error returned; the active policy then routes all of this
// instance's traffic.
func (r *Runtime) SyncCanary(ctx context.Context) error {
	c := r.opts.Cache
	if c == nil || r.cacheDegraded() {
		return nil // the entry is out of reach: keep what runs until the cache is back
	}
	v, ok, err := c.Get(ctx, canaryKey)
	if err != nil {
		return err
	}
	if !ok {
		if cn := r.StopCanary(); cn != nil {
			r.log.Info("routing canary ended by another instance", "policy", cn.Policy.Name())
		}
		return nil
	}
	var spec CanarySpec
	if err := json.Unmarshal([]byte(v), &spec); err != nil {
		return fmt.Errorf("canary entry: %w", err)
	}
	if cur := r.Canary(); cur != nil && cur.Spec.ID == spec.ID {
		return nil
	}
	if f := r.canaryFailed.Load(); f != nil && f.ID == spec.ID {
		return nil // failed here already (logged, and shown in the policies status)
	}
	src, err := r.canarySource(ctx, spec)
	if err == nil {
		err = r.StartCanary(spec, src)
	}
	if err != nil {
		// Not the shared canary: none runs here rather than an older one.
		r.StopCanary()
		r.canaryFailed.Store(&spec)
		return err
	}
	r.canaryFailed.Store(nil)
	return nil
}

// canarySource returns the source of spec's policy: its stored version, or
// the built-in of its name for version 0.
func (r *Runtime) canarySource(ctx context.Context, spec CanarySpec) (string, error) {
	if spec.Version == 0 {
		if src, ok := scripts.Builtin(spec.Name); ok {
			return src, nil
		}
		return "", fmt.Errorf("canary %s: no built-in of that name", spec.Name)
	}
	if r.opts.Store == nil {
		return "", fmt.Errorf("canary %s version %d: no stored policies here", spec.Name, spec.Version)
	}
	p, err := r.opts.Store.GetPolicy(ctx, spec.Name, spec.Version)
	if err != nil {
		return "", fmt.Errorf("canary %s version %d: %w", spec.Name, spec.Version, err)
	}
	return p.Source, nil
}

// Follow keeps the runtime in step until ctx ends: it reloads the active
// policy when its file changes (with Options.Dir) and when another instance
// activates one (PolicyChannel), and follows the shared canary now, at every
// announcement and every canaryResync. It returns once the subscriptions
// are made; the loops run on goroutines that end with ctx. A failed reload
// keeps the last good policy serving; every failure is logged.
func (r *Runtime) Follow(ctx context.Context) {
	if r.opts.Dir != "" {
		go func() {
			if err := r.watch.Run(ctx); err != nil {
				r.log.Error("policy watcher stopped", "err", err)
			}
		}()
	}
	if r.opts.Cache == nil {
		return
	}
	msgs, err := r.opts.Cache.Subscribe(ctx, PolicyChannel)
	if err != nil {
		r.log.Warn("policy broadcasts unavailable; activations on other instances are loaded every policyResync", "err", err)
	}
	go func() {
		// A broadcast makes the change at once; the resync every
		// policyResync catches an activation whose broadcast was lost (made
		// while the shared cache was down, or on an instance that could not
		// reach it), which nothing would otherwise repeat.
		t := time.NewTicker(policyResync)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case name, ok := <-msgs:
				if !ok {
					msgs = nil // ended with ctx; the ticker's case sees it
					continue
				}
				if err := r.Load(ctx); err != nil {
					r.log.Error("policy broadcast: reload failed; the previous policy keeps serving", "policy", name, "err", err)
				}
			case <-t.C:
				if err := r.SyncPolicy(ctx); err != nil && ctx.Err() == nil {
					r.log.Error("policy resync: the stored activation could not be loaded; the previous policy keeps serving", "err", err)
				}
			}
		}
	}()
	r.followCanary(ctx)
}

// SyncPolicy loads the policy activated through the admin API (stored) when
// it is not the one serving, by name and stored version; it does nothing
// without stored policies or an activation, or when that one serves. An
// error (storage unreachable, a policy that fails to load) leaves the
// serving policy in place.
func (r *Runtime) SyncPolicy(ctx context.Context) error {
	if r.opts.Store == nil {
		return nil
	}
	p, err := r.opts.Store.ActivePolicy(ctx)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	if a := r.Active(); a != nil && a.Name() == p.Name && a.Version() == uint64(max(p.Version, 0)) {
		return nil
	}
	return r.Load(ctx)
}

// followCanary runs SyncCanary now, at every announcement on CanaryChannel
// and every canaryResync, until ctx ends.
func (r *Runtime) followCanary(ctx context.Context) {
	msgs, err := r.opts.Cache.Subscribe(ctx, CanaryChannel)
	if err != nil {
		r.log.Warn("canary broadcasts unavailable; canaries run on the instance that started them", "err", err)
		return
	}
	sync := func() {
		if err := r.SyncCanary(ctx); err != nil && ctx.Err() == nil {
			r.log.Error("canary from another instance not loaded", "err", err)
		}
	}
	sync()
	go func() {
		// Announcements make the change at once; the resync every
		// canaryResync repairs what an outage of the cache or a lost
		// message left behind.
		t := time.NewTicker(canaryResync)
		defer t.Stop()
		for {
			select {
			case _, ok := <-msgs:
				if !ok {
					return
				}
			case <-t.C:
			}
			sync()
		}
	}()
}
