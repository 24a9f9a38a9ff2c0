package routing

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// startSystem starts an actor system with no accounts, stopped at cleanup.
func startSystem(t testing.TB) *actors.System {
	t.Helper()
	sys, err := actors.Start(actors.Config{Store: discardUsage{},
		Transport: func(storage.Account) (upstream.Transport, error) { return noUpstream{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sys.Stop(ctx)
	})
	return sys
}

// scheduler returns the policies the scheduler runs. The scheduler handles
// its messages in order, so it has handled every change sent before.
func scheduler(t *testing.T, sys *actors.System) actors.PolicyState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := sys.PolicyStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

const routeSrc = `function score(a, now) return 1 end
function route(r) return {provider = "anthropic"} end
`

// A load puts the policy into the host's status, the scheduler and the
// router together.
func TestActivateInstallsEverywhere(t *testing.T) {
	sys := startSystem(t)
	r := New(sys, Options{})
	if r.Router(false) != nil || r.Active() != nil {
		t.Fatal("a router or policy before the first load")
	}
	if err := r.Activate("mine", routeSrc, 4); err != nil {
		t.Fatal(err)
	}
	if st := scheduler(t, sys); st.Policy != "mine" || st.PolicyVersion != 4 {
		t.Errorf("the scheduler runs %s@%d, want mine@4", st.Policy, st.PolicyVersion)
	}
	if rt := r.Router(false); rt == nil || rt.Policy() != r.Active() || r.Status().Active != "mine" || r.Status().Version != 4 {
		t.Errorf("router %v, active %v, status %+v", rt, r.Active(), r.Status())
	}
	if res, err := r.Router(true).Route(&scripts.RequestView{Model: "m"}); err != nil || res.Provider != "anthropic" {
		t.Errorf("route() without a canary: %+v %v", res, err)
	}
}

// When the scheduler cannot take a policy (its copy fails), nothing
// changes: the caller gets the error, the host, the scheduler and the
// router keep the previous policy, and the status counts the failure.
func TestActivateRefusedChangesNothing(t *testing.T) {
	sys := startSystem(t)
	r := New(sys, Options{})
	if err := r.Activate("first", routeSrc, 1); err != nil {
		t.Fatal(err)
	}
	before := r.Router(false)
	cloneErr := errors.New("out of Lua states")
	r.clone = func(*scripts.Policy) (*scripts.Policy, error) { return nil, cloneErr }
	err := r.Activate("second", routeSrc, 2)
	if !errors.Is(err, cloneErr) {
		t.Fatalf("Activate = %v, want the clone's error", err)
	}
	st := r.Status()
	if r.Active().Name() != "first" || st.Active != "first" || st.OK || st.Failures != 1 || r.Router(false) != before {
		t.Errorf("after a refused load: active %s, status %+v, router changed %v", r.Active().Name(), st, r.Router(false) != before)
	}
	if s := scheduler(t, sys); s.Policy != "first" {
		t.Errorf("the scheduler runs %s, want first", s.Policy)
	}
	// A canary the scheduler cannot take does not start either.
	if err := r.StartCanary(CanarySpec{ID: "c1", Name: "calm", Percent: 10}, routeSrc); !errors.Is(err, cloneErr) {
		t.Fatalf("StartCanary = %v, want the clone's error", err)
	}
	if r.Canary() != nil || scheduler(t, sys).Canary != "" {
		t.Error("a canary the scheduler could not take runs")
	}
}

// A canary runs beside the active policy in the router and the scheduler;
// promoting it makes it the active policy and ends the canary in one step.
func TestCanaryStartPromote(t *testing.T) {
	sys := startSystem(t)
	r := New(sys, Options{})
	if _, err := r.SetActive("round_robin"); err != nil {
		t.Fatal(err)
	}
	if err := r.StartCanary(CanarySpec{ID: "c1", Name: "calm", Version: 3, Group: "beta"}, routeSrc); err != nil {
		t.Fatal(err)
	}
	cn := r.Canary()
	if cn == nil || cn.Policy.Version() != 3 || r.Router(true).Policy() != cn.Policy || r.Router(false).Policy().Name() != "round_robin" {
		t.Fatalf("canary %+v; routers %s/%s", cn, r.Router(true).Policy().Name(), r.Router(false).Policy().Name())
	}
	if st := scheduler(t, sys); st.Policy != "round_robin" || st.Canary != "calm" {
		t.Errorf("the scheduler runs %s with canary %q", st.Policy, st.Canary)
	}
	if _, err := r.PromoteCanary("other"); !errors.Is(err, ErrNoCanary) {
		t.Errorf("promoting a canary that does not run: %v", err)
	}
	if got, err := r.PromoteCanary("calm"); err != nil || got != cn {
		t.Fatalf("PromoteCanary = %v, %v", got, err)
	}
	if r.Canary() != nil || r.Active() != cn.Policy || r.Router(true).Policy() != cn.Policy || r.Status().Version != 3 {
		t.Errorf("after promotion: canary %v, active %s@%d", r.Canary(), r.Active().Name(), r.Status().Version)
	}
	if st := scheduler(t, sys); st.Policy != "calm" || st.PolicyVersion != 3 || st.Canary != "" {
		t.Errorf("after promotion the scheduler runs %s@%d with canary %q", st.Policy, st.PolicyVersion, st.Canary)
	}
	if r.StopCanary() != nil {
		t.Error("StopCanary found a canary after the promotion")
	}
}

func TestInCanary(t *testing.T) {
	r := New(startSystem(t), Options{})
	if r.InCanary("beta") {
		t.Fatal("in a canary when none runs")
	}
	r.state.Store(&state{canary: &Canary{Spec: CanarySpec{Group: "beta"}}})
	if !r.InCanary("beta") {
		t.Error("a key of the canary's group is not routed by it")
	}
	if r.InCanary("other") {
		t.Error("another group's key is routed by a group-only canary")
	}
	r.state.Store(&state{canary: &Canary{Spec: CanarySpec{Percent: 30}}})
	n := 0
	for range 10000 {
		if r.InCanary("other") {
			n++
		}
	}
	if n < 2500 || n > 3500 {
		t.Errorf("30 %% canary took %d of 10,000 requests", n)
	}
}
