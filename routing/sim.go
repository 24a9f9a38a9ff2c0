package routing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// Sim is the policy simulator: the real scheduler and account actors, in
// memory, over a pool of accounts, routing with a policy installed through
// a Runtime exactly as a serving instance installs one. Requests are
// routed (Route, Acquire) and their outcomes fed back (Release) by the
// caller; nothing is sent upstream and nothing is stored. Simulate and
// Replay drive it; the admin API's simulate ranks the live pool with the
// same Rank. A Sim is safe for concurrent use; Close it.
type Sim struct {
	*actors.System
	rt     *Runtime
	policy *scripts.Policy
}

// discardUsage is the usage store of a simulation: it records nothing.
type discardUsage struct{}

func (discardUsage) InsertUsage(context.Context, []storage.UsageRecord) error { return nil }

// noUpstream is the transport of a simulation's accounts: nothing leaves
// the process.
type noUpstream struct{}

func (noUpstream) Do(context.Context, *upstream.Request) (*upstream.Response, error) {
	return nil, errors.New("simulation: no upstream")
}

// simIndexWait bounds how long NewSim waits for the scheduler to index the
// pool under the policy.
const simIndexWait = time.Minute

// NewSim starts a simulation of accounts (their credentials are dropped:
// nothing is sent upstream) routed by p, judged by clock (nil: the wall
// clock), and returns once the scheduler has indexed every account under
// p. p serves as the simulation's active policy; the caller must not use
// it elsewhere. The scheduler's jitter has a fixed seed, so the same
// accounts and requests, sent in the same order, route the same way.
func NewSim(ctx context.Context, accounts []storage.Account, p *scripts.Policy, clock func() time.Time) (*Sim, error) {
	sys, err := actors.Start(actors.Config{Store: discardUsage{}, Logger: slog.New(slog.DiscardHandler), Clock: clock, Seed: 1,
		Transport: func(storage.Account) (upstream.Transport, error) { return noUpstream{}, nil }})
	if err != nil {
		return nil, err
	}
	s := &Sim{System: sys, rt: New(sys, Options{}), policy: p}
	for _, a := range accounts {
		a.Credentials = storage.Credentials{}
		sys.PutAccount(a)
	}
	if err := s.rt.host.Install(p); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.waitIndexed(ctx, len(accounts)); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// waitIndexed waits until the scheduler holds n accounts, all scored by
// the simulated policy.
func (s *Sim) waitIndexed(ctx context.Context, n int) error {
	deadline := time.Now().Add(simIndexWait)
	for {
		st, err := s.SchedulerStats(ctx)
		if err != nil {
			return err
		}
		if st.Accounts == n && st.Rescoring == 0 && st.Policy == s.policy.Name() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("simulation: the scheduler did not index %d accounts", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ReleaseSettled releases l with out, as Release does, and returns once
// the account has handled the release and the scheduler has its resulting
// view queued ahead of any later Acquire: the account's published view
// version moved past the one seen before the release (the account sends
// the view to the scheduler before it publishes it). A sequential caller
// (Replay) then routes its next request on the released state every run,
// instead of racing the release (a busy machine made a replay's spread
// differ from run to run). It gives up waiting after simSettleWait.
func (s *Sim) ReleaseSettled(l *actors.Lease, out actors.Outcome) {
	before, _ := s.View(l.AccountID)
	s.Release(l, out)
	settled := func() bool {
		v, ok := s.View(l.AccountID)
		return !ok || v.Version > before.Version
	}
	for range 64 {
		if settled() {
			return
		}
		runtime.Gosched()
	}
	deadline := time.Now().Add(simSettleWait)
	for !settled() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Microsecond)
	}
}

// simSettleWait bounds ReleaseSettled's wait: far above an account actor's
// turn on a loaded machine, and finite for an account removed meanwhile.
const simSettleWait = 5 * time.Second

// Route runs the policy's route(req) (when it has one) and applies its
// answer to acq as the gateway does: a group only for keys of the default
// group (keyGroup ""), then model, provider, tags and sticky key. A route()
// error leaves acq as it is (the gateway fails open too).
func (s *Sim) Route(acq *actors.AcquireRequest, req *scripts.RequestView, keyGroup string) {
	r := s.rt.Router(false)
	if r == nil || !r.Policy().HasRoute() {
		return
	}
	res, err := r.Route(req)
	if err != nil {
		return
	}
	if res.Group != "" && keyGroup == "" {
		acq.Group = res.Group
	}
	if res.Model != "" {
		acq.Model = res.Model
	}
	acq.Provider, acq.Tags, acq.StickyKey = storage.Provider(res.Provider), res.Tags, res.StickyKey
}

// Rank ranks the pool's current views with the simulated policy at now
// (see Rank). Call it from one goroutine at a time.
func (s *Sim) Rank(now time.Time) ([]Verdict, error) {
	return Rank(s.policy, AccountViews(s.Views()), now)
}

// Close stops the simulation's actors.
func (s *Sim) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.Stop(ctx)
}
