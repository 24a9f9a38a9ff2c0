package routing

import (
	"context"
	"sync"
	"testing"

	"github.com/troupe-gw/troupe/storage"
)

// storedPolicies is a Policies of one stored activation, safe for
// concurrent use.
type storedPolicies struct {
	mu     sync.Mutex
	active storage.PolicyVersion
}

func (s *storedPolicies) GetPolicy(_ context.Context, name string, v int) (storage.PolicyVersion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active.Name == name && (v == 0 || v == s.active.Version) {
		return s.active, nil
	}
	return storage.PolicyVersion{}, storage.ErrNotFound
}

func (s *storedPolicies) ActivePolicy(context.Context) (storage.PolicyVersion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active.Name == "" {
		return storage.PolicyVersion{}, storage.ErrNotFound
	}
	return s.active, nil
}

func (s *storedPolicies) activate(p storage.PolicyVersion) {
	s.mu.Lock()
	s.active = p
	s.mu.Unlock()
}

// TestSyncPolicyCatchesMissedActivation: a policy activated on another
// instance while the shared cache was down (its broadcast lost) is loaded
// by SyncPolicy, which Follow runs every policyResync: before, an instance
// kept serving round_robin for good after least_inflight was activated on
// its peer during a Redis outage (tester's finding). An activation already
// serving is not loaded again.
func TestSyncPolicyCatchesMissedActivation(t *testing.T) {
	sys := startSystem(t)
	store := &storedPolicies{}
	r := New(sys, Options{Store: store})
	ctx := t.Context()
	if err := r.SyncPolicy(ctx); err != nil {
		t.Fatalf("SyncPolicy without a stored activation: %v", err)
	}
	store.activate(storage.PolicyVersion{Name: "first", Version: 1, Source: routeSrc})
	if err := r.Load(ctx); err != nil {
		t.Fatal(err)
	}
	loads := r.Status().Loads
	if err := r.SyncPolicy(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.Status().Loads; got != loads {
		t.Fatalf("SyncPolicy reloaded the policy already serving: loads %d -> %d", loads, got)
	}
	store.activate(storage.PolicyVersion{Name: "second", Version: 3, Source: routeSrc})
	if err := r.SyncPolicy(ctx); err != nil {
		t.Fatal(err)
	}
	if a := r.Active(); a == nil || a.Name() != "second" || a.Version() != 3 {
		t.Fatalf("after SyncPolicy the active policy is %v, want second@3", a)
	}
	if st := scheduler(t, sys); st.Policy != "second" || st.PolicyVersion != 3 {
		t.Errorf("the scheduler runs %s@%d, want second@3", st.Policy, st.PolicyVersion)
	}
}
