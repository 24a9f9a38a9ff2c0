package actors

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// startFenced starts a System with Config.Fenced on a test store and
// transport, stopped when t ends (inside a synctest bubble, within it).
func startFenced(t testing.TB) *System {
	t.Helper()
	s, err := Start(Config{Store: &memUsage{}, Logger: quiet, Fenced: true,
		Transport: func(storage.Account) (upstream.Transport, error) { return nopTransport{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.Stop(ctx)
	})
	return s
}

// With Config.Fenced an account runs only while owned: put alone spawns
// nothing; Own spawns it under its fence; a fence that has passed refuses
// grants (the view says Moving); Own again after a renewal grants again;
// Disown drains — no new grant, done once the lease in flight is released
// — and stops the actor.
func TestFencedOwnership(t *testing.T) {
	s := startFenced(t)
	ctx := t.Context()
	s.PutAccount(storage.Account{ID: "a1", Name: "one", Provider: storage.ProviderOpenAI, Models: []string{"m"}, MaxConcurrency: 2})
	waitFor(t, func() bool { ids, _ := s.Accounts(ctx); return len(ids) == 1 })
	if _, ok := s.View("a1"); ok {
		t.Fatal("an account not owned has an actor")
	}
	acquire := func() (*Lease, error) {
		return s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m"})
	}

	fence := new(Fence)
	fence.Extend(time.Now().Add(time.Hour), 7)
	s.Own("a1", fence)
	waitFor(t, func() bool { v, ok := s.View("a1"); return ok && v.Available(time.Now()) })
	l, err := acquire()
	if err != nil {
		t.Fatalf("owned account: %v", err)
	}
	s.Release(l, Outcome{Status: 200})

	// The lease could not be renewed: the fence passes, grants stop.
	fence.Extend(time.Now().Add(-time.Millisecond), 7)
	if l, err := acquire(); err == nil {
		s.Release(l, Outcome{})
		t.Fatal("granted past the fence")
	}
	waitFor(t, func() bool { v, _ := s.View("a1"); return v.Moving })
	// Renewed again.
	fence.Extend(time.Now().Add(time.Hour), 7)
	s.Own("a1", fence)
	waitFor(t, func() bool { v, _ := s.View("a1"); return !v.Moving })
	held, err := acquire()
	if err != nil {
		t.Fatalf("after the renewal: %v", err)
	}

	// Moving away: no new grant, done once the lease in flight ends.
	done := make(chan struct{})
	s.Disown("a1", func() { close(done) })
	waitFor(t, func() bool { v, _ := s.View("a1"); return v.Moving })
	if l, err := acquire(); err == nil || !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrNoAccount) {
		if l != nil {
			s.Release(l, Outcome{})
		}
		t.Fatalf("draining account: %v, want no grant", err)
	}
	select {
	case <-done:
		t.Fatal("drained with a lease in flight")
	default:
	}
	s.Release(held, Outcome{Status: 200})
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("not drained after its last lease ended")
	}
	waitFor(t, func() bool { _, ok := s.View("a1"); return !ok })
	if ids, _ := s.Accounts(ctx); len(ids) != 1 {
		t.Fatalf("a drained account is still known (for its return): %v", ids)
	}
}
