package actors

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// memStates is an in-memory StateStore that round-trips through JSON, as
// the shared cache does.
type memStates struct {
	mu    sync.Mutex
	m     map[string][]byte
	saves int
}

func (s *memStates) SaveState(_ context.Context, id string, st State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string][]byte{}
	}
	s.m[id] = b
	s.saves++
	return nil
}

func (s *memStates) LoadState(_ context.Context, id string) (State, bool, error) {
	s.mu.Lock()
	b, ok := s.m[id]
	s.mu.Unlock()
	if !ok {
		return State{}, false, nil
	}
	var st State
	return st, true, json.Unmarshal(b, &st)
}

func fencedSystem(t *testing.T, states StateStore) *System {
	t.Helper()
	s, err := Start(Config{Store: &memUsage{}, Logger: quiet, Fenced: true, States: states,
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

// A cooldown learned on instance A survives the account's move to B: A
// drains it and saves its state before its lease is released, B's actor
// reads it before it grants, and B refuses grants until the cooldown's
// end, with the same reason; health and windows come along.
func TestHandoverCooldown(t *testing.T) {
	store := &memStates{}
	a, b := fencedSystem(t, store), fencedSystem(t, store)
	acc := storage.Account{ID: "h1", Name: "moving", Provider: storage.ProviderOpenAI, Models: []string{"m"}, MaxConcurrency: 2, Version: 7}
	a.PutAccount(acc)
	b.PutAccount(acc)
	ctx := t.Context()
	fence := new(Fence)
	fence.Extend(time.Now().Add(time.Hour), 1)
	a.Own("h1", fence)
	waitFor(t, func() bool { v, ok := a.View("h1"); return ok && v.Available(time.Now()) })
	l, err := a.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	a.Release(l, Outcome{Status: 429, Verdict: upstream.Verdict{Class: upstream.ClassQuota, RetryAfter: time.Hour}})
	waitFor(t, func() bool { v, _ := a.View("h1"); return v.Status == StatusCooling })
	learned, _ := a.View("h1")

	// A leaves: the account drains, its state is saved, then done.
	done := make(chan struct{})
	a.Disown("h1", func() { close(done) })
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the drain did not end")
	}
	if _, ok, _ := store.LoadState(ctx, "h1"); !ok {
		t.Fatal("no state saved when the drain ended")
	}

	// B takes it over: still cooling, to the same instant, for the same reason.
	fb := new(Fence)
	fb.Extend(time.Now().Add(time.Hour), 2)
	b.Own("h1", fb)
	waitFor(t, func() bool { v, ok := b.View("h1"); return ok && !v.Moving })
	v, _ := b.View("h1")
	if v.Status != StatusCooling || !v.CooldownUntil.Equal(learned.CooldownUntil) || v.CooldownReason != learned.CooldownReason {
		t.Fatalf("on B: %s until %v (%s); A learned %s until %v (%s)", v.Status, v.CooldownUntil, v.CooldownReason, learned.Status, learned.CooldownUntil, learned.CooldownReason)
	}
	if v.Failures != 1 || v.EWMASuccess != learned.EWMASuccess || v.FailedAt(upstream.ClassQuota).IsZero() {
		t.Fatalf("health on B: failures %d, ewma %v (A %v), last quota failure %v", v.Failures, v.EWMASuccess, learned.EWMASuccess, v.FailedAt(upstream.ClassQuota))
	}
	if l, err := b.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m"}); err == nil {
		b.Release(l, Outcome{})
		t.Fatal("B granted a lease on an account cooling since A")
	} else if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrNoAccount) {
		t.Fatalf("B: %v", err)
	}
}

// A state saved for an older configuration does not carry unauthorized
// (new credentials clear it), a cooldown already over is dropped, and a
// state store that fails lets the account start afresh.
func TestHandoverStale(t *testing.T) {
	store := &memStates{}
	past := State{Status: StatusCooling, CooldownUntil: time.Now().Add(-time.Minute), CooldownReason: "rate", EWMASuccess: 0.5}
	if err := store.SaveState(t.Context(), "s1", past); err != nil {
		t.Fatal(err)
	}
	if err := store.SaveState(t.Context(), "s2", State{Status: StatusUnauthorized, AccountVersion: 3, EWMASuccess: 1}); err != nil {
		t.Fatal(err)
	}
	s := fencedSystem(t, store)
	f := new(Fence)
	f.Extend(time.Now().Add(time.Hour), 1)
	for _, id := range []string{"s1", "s2"} {
		s.PutAccount(storage.Account{ID: id, Name: id, Provider: storage.ProviderOpenAI, MaxConcurrency: 1, Version: 4})
		s.Own(id, f)
	}
	waitFor(t, func() bool {
		v1, ok1 := s.View("s1")
		v2, ok2 := s.View("s2")
		return ok1 && ok2 && !v1.Moving && !v2.Moving
	})
	if v, _ := s.View("s1"); v.Status != StatusActive || v.EWMASuccess != 0.5 {
		t.Errorf("s1 after a cooldown over: %s, ewma %v", v.Status, v.EWMASuccess)
	}
	if v, _ := s.View("s2"); v.Status != StatusActive {
		t.Errorf("s2 unauthorized under version 3, now version 4: %s", v.Status)
	}

	broken := fencedSystem(t, failingStates{})
	broken.PutAccount(storage.Account{ID: "s3", Name: "s3", Provider: storage.ProviderOpenAI, MaxConcurrency: 1})
	broken.Own("s3", f)
	waitFor(t, func() bool { v, ok := broken.View("s3"); return ok && v.Available(time.Now()) })
}

type failingStates struct{}

func (failingStates) SaveState(context.Context, string, State) error { return errors.New("down") }
func (failingStates) LoadState(context.Context, string) (State, bool, error) {
	return State{}, false, errors.New("down")
}
