package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
)

// CanaryChannel is the cache pub/sub channel on which a canary's start or
// end is announced; every instance then reads the canary from the cache
// entry canaryKey (SyncCanary), so a lost message costs nothing the next
// one does not repair.
const CanaryChannel = "policy-canary"

// canaryKey is the cache entry holding the running canary (a canarySpec as
// JSON) while it runs, for every instance, including those that start
// later; canaryTTL bounds how long it outlives an instance that never ends it.
const (
	canaryKey = "policy:canary"
	canaryTTL = 30 * 24 * time.Hour
)

// canarySpec is a running canary as instances share it: which stored
// version of which policy, on which traffic, started when. ID tells one
// start from the next.
type canarySpec struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Version int       `json:"version"` // the stored version (0: the built-in of that name)
	Percent int       `json:"percent"`
	Group   string    `json:"group,omitempty"`
	Started time.Time `json:"started"`
}

// startCanary compiles and self-tests src as spec's policy and runs it as
// this instance's canary, replacing any. The error is the policy's (with
// its line), or errCanaryUnsupported.
func (s *Server) startCanary(spec canarySpec, src string) error {
	cc, ok := s.policies.(CanaryControl)
	if !ok {
		return errCanaryUnsupported
	}
	p, err := cc.Prepare(spec.Name, src, spec.Version)
	if err != nil {
		return err
	}
	clone, err := p.Clone()
	if err != nil {
		return err
	}
	// The scheduler's canary and the router's change together, so an admin
	// call and a broadcast cannot leave one of each. The router's first: a
	// scheduler that reports the canary (SchedulerStats) implies the admin
	// API sees it, and until the scheduler has it, its requests are judged
	// by the active policy.
	s.canaryRT.change.Lock()
	defer s.canaryRT.change.Unlock()
	s.canaryRT.cur.Store(&canary{policy: p, router: scripts.NewRouter(p, 0), id: spec.ID, stored: spec.Version,
		percent: spec.Percent, group: spec.Group, started: spec.Started})
	s.sys.SetCanary(actors.NewLuaPolicy(clone))
	s.log.Info("routing canary started", "policy", spec.Name, "version", p.Version(), "percent", spec.Percent, "group", spec.Group)
	return nil
}

// stopCanary ends this instance's canary, if any, and returns it.
func (s *Server) stopCanary() *canary {
	s.canaryRT.change.Lock()
	defer s.canaryRT.change.Unlock()
	cn := s.canaryRT.cur.Swap(nil)
	if cn != nil {
		s.sys.SetCanary(nil)
	}
	return cn
}

var errCanaryUnsupported = errors.New("canaries are not available on this instance")

// cacheDegraded reports whether the cache serves from this process alone
// because the shared one is out of reach (storage/fallback's Degraded).
func (s *Server) cacheDegraded() bool {
	d, ok := s.cache.(interface{ Degraded() bool })
	return ok && d.Degraded()
}

// shareCanary stores spec for every instance and announces it; without a
// reachable cache the canary runs here only, which is logged.
func (s *Server) shareCanary(ctx context.Context, spec canarySpec) {
	if s.cache == nil {
		return
	}
	if s.cacheDegraded() {
		s.log.Warn("the shared cache is unavailable: the canary runs on this instance only until the next canary change", "policy", spec.Name)
	}
	b, _ := json.Marshal(spec)
	err := s.cache.Set(ctx, canaryKey, string(b), canaryTTL)
	if err == nil {
		err = s.cache.Publish(ctx, CanaryChannel, spec.ID)
	}
	if err != nil {
		s.log.Warn("canary broadcast failed; it runs on this instance only", "policy", spec.Name, "err", err)
	}
}

// unshareCanary removes the shared canary and announces its end.
func (s *Server) unshareCanary(ctx context.Context) {
	if s.cache == nil {
		return
	}
	err := s.cache.Delete(ctx, canaryKey)
	if err == nil {
		err = s.cache.Publish(ctx, CanaryChannel, "end")
	}
	if err != nil {
		s.log.Warn("canary broadcast failed; other instances keep theirs until the next change", "err", err)
	}
}

// SyncCanary makes this instance's canary the shared one (canaryKey):
// started when another instance started it, ended when it was ended or
// promoted there. A canary that fails to load here is logged and not run;
// the active policy then routes all of this instance's traffic.
func (s *Server) SyncCanary(ctx context.Context) error {
	if s.cache == nil {
		return nil
	}
	if s.cacheDegraded() {
		return nil // the entry is out of reach: keep what runs until the cache is back
	}
	v, ok, err := s.cache.Get(ctx, canaryKey)
	if err != nil {
		return err
	}
	cur := s.canaryRT.cur.Load()
	if !ok {
		if cn := s.stopCanary(); cn != nil {
			s.log.Info("routing canary ended by another instance", "policy", cn.policy.Name())
		}
		return nil
	}
	var spec canarySpec
	if err := json.Unmarshal([]byte(v), &spec); err != nil {
		return fmt.Errorf("canary entry: %w", err)
	}
	if cur != nil && cur.id == spec.ID {
		return nil
	}
	if f := s.canaryRT.failed.Load(); f != nil && f.ID == spec.ID {
		return nil // failed here already (logged, and shown in the policies status)
	}
	var src string
	if spec.Version == 0 {
		if src, ok = scripts.Builtin(spec.Name); !ok {
			err = fmt.Errorf("canary %s: no built-in of that name", spec.Name)
		}
	} else if p, perr := s.store.GetPolicy(ctx, spec.Name, spec.Version); perr != nil {
		err = fmt.Errorf("canary %s version %d: %w", spec.Name, spec.Version, perr)
	} else {
		src = p.Source
	}
	if err == nil {
		err = s.startCanary(spec, src)
	}
	if err != nil {
		// Not the shared canary: none runs here rather than an older one.
		s.stopCanary()
		s.canaryRT.failed.Store(&spec)
		return err
	}
	s.canaryRT.failed.Store(nil)
	return nil
}

// WatchCanary runs SyncCanary now, at every announcement on CanaryChannel
// and every canaryResync, until ctx ends. Errors are logged.
func (s *Server) WatchCanary(ctx context.Context) {
	if s.cache == nil {
		return
	}
	msgs, err := s.cache.Subscribe(ctx, CanaryChannel)
	if err != nil {
		s.log.Warn("canary broadcasts unavailable; canaries run on the instance that started them", "err", err)
		return
	}
	sync := func() {
		if err := s.SyncCanary(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("canary from another instance not loaded", "err", err)
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

// canaryResync is how often WatchCanary rereads the shared canary without
// an announcement.
const canaryResync = 10 * time.Second

// loadPolicySource returns the source of stored version v of name (v 0: the
// latest), or the built-in of that name when v is 0 and none is stored; the
// stored version it found is returned too (0 for a built-in).
func (s *Server) loadPolicySource(ctx context.Context, name string, v int) (src string, stored int, err error) {
	p, err := s.store.GetPolicy(ctx, name, v)
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

// newCanaryID returns a random canary id (16 hex digits).
func newCanaryID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
