package actors

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// fakeRemote answers grants as the test says and records releases.
type fakeRemote struct {
	mu       sync.Mutex
	answer   func(req RemoteRequest) (RemoteGrant, error)
	asked    int
	released []Outcome
}

func (f *fakeRemote) Grant(_ context.Context, owner string, req RemoteRequest) (RemoteGrant, error) {
	f.mu.Lock()
	f.asked++
	answer := f.answer
	f.mu.Unlock()
	return answer(req)
}

func (f *fakeRemote) Release(owner, handle string, out Outcome, _ *upstream.RateLimits) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, out)
}

func (f *fakeRemote) counts() (asked, released int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked, len(f.released)
}

// The scheduler's remote entries: another instance's view makes its
// account a candidate; a pick of it asks the owner; a refusal's view is
// believed (no loop of asks against a full account); an owner that cannot
// be asked leaves its account aside until its next view; a grant is a
// lease whose release goes to the owner; and once the account runs here,
// its own actor replaces the remote entry.
func TestRemoteEntries(t *testing.T) {
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
	ctx := t.Context()
	fr := &fakeRemote{}
	s.SetRemote(fr)
	acc := storage.Account{ID: "b1", Name: "bee", Provider: storage.ProviderOpenAI, BaseURL: "http://127.0.0.1:1/v1",
		Credentials: storage.Credentials{APIKey: "sk-b"}, Models: []string{"m"}, MaxConcurrency: 1}
	s.PutAccount(acc)
	view := func(inFlight int, version uint64) View {
		return View{ID: "b1", Name: "bee", Provider: storage.ProviderOpenAI, Models: []string{"m"}, MaxInFlight: 1,
			InFlight: inFlight, Version: version, ConfigGen: 1, EWMASuccess: 1}
	}
	acquire := func() (*Lease, error) {
		return s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m"})
	}

	s.RemoteViews("gw-b", []View{view(0, 1)})
	waitFor(t, func() bool { return s.RemoteAccounts() == 1 })
	if v, ok := s.View("b1"); !ok || v.Name != "bee" {
		t.Fatalf("View of a remote account: %+v %v", v, ok)
	}

	// Refused, with the owner's view: full. One ask, not a loop.
	fr.answer = func(RemoteRequest) (RemoteGrant, error) { return RemoteGrant{View: view(1, 2)}, nil }
	if l, err := acquire(); err == nil {
		t.Fatalf("granted %s on a refusal", l.AccountID)
	}
	if asked, _ := fr.counts(); asked != 1 {
		t.Errorf("%d asks of the owner for a full account, want 1", asked)
	}

	// Unreachable: aside until the owner's next view.
	s.RemoteViews("gw-b", []View{view(0, 3)})
	fr.answer = func(RemoteRequest) (RemoteGrant, error) { return RemoteGrant{}, errors.New("connection refused") }
	if _, err := acquire(); err == nil {
		t.Fatal("granted by an unreachable owner")
	}
	if asked, _ := fr.counts(); asked != 2 {
		t.Errorf("%d asks after an unreachable owner, want 2", asked)
	}
	if _, err := acquire(); err == nil {
		t.Fatal("granted by an unreachable owner")
	}
	if asked, _ := fr.counts(); asked != 2 {
		t.Errorf("an unreachable owner asked again before its next view (%d asks)", asked)
	}

	// Granted: a lease on the owner's credential, released to the owner.
	s.RemoteViews("gw-b", []View{view(0, 4)})
	fr.answer = func(req RemoteRequest) (RemoteGrant, error) {
		return RemoteGrant{Granted: true, Handle: "h1", Account: acc, View: view(1, 5)}, nil
	}
	l, err := acquire()
	if err != nil {
		t.Fatalf("remote grant: %v", err)
	}
	if l.AccountID != "b1" || l.Transport == nil || l.remote == nil {
		t.Fatalf("remote lease %+v", l)
	}
	s.Release(l, Outcome{Status: 200})
	s.Release(l, Outcome{Status: 200}) // twice is harmless
	if _, released := fr.counts(); released != 1 {
		t.Errorf("%d releases sent to the owner, want 1", released)
	}

	// It runs here now: the local actor replaces the remote entry.
	fence := new(Fence)
	fence.Extend(time.Now().Add(time.Hour), 9)
	s.Own("b1", fence)
	waitFor(t, func() bool { return s.RemoteAccounts() == 0 })
	s.RemoteViews("gw-b", []View{view(0, 99)}) // a late view of the old owner's is ignored
	before, _ := fr.counts()
	l, err = acquire()
	if err != nil {
		t.Fatalf("local grant: %v", err)
	}
	if l.remote != nil {
		t.Fatal("a lease of an account run here went to its old owner")
	}
	s.Release(l, Outcome{Status: 200})
	if asked, _ := fr.counts(); asked != before {
		t.Error("the old owner was asked for an account run here")
	}
	if n := s.RemoteAccounts(); n != 0 {
		t.Errorf("%d remote accounts after a late view of one run here", n)
	}
}
