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
	s := startFenced(t)
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
	// Counted when indexed, readable once stored: wait for both.
	waitFor(t, func() bool { _, ok := s.View("b1"); return s.RemoteAccounts() == 1 && ok })
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

// Local first: of two accounts the policy judges alike, the one run here is
// picked while it has room, and the one another instance owns only when the
// local one is full; the owner is asked once.
func TestRemoteLocalFirst(t *testing.T) {
	s := startFenced(t)
	ctx := t.Context()
	fr := &fakeRemote{}
	s.SetRemote(fr)
	remote := storage.Account{ID: "r1", Name: "remote", Provider: storage.ProviderOpenAI, BaseURL: "http://127.0.0.1:1/v1",
		Credentials: storage.Credentials{APIKey: "sk-r"}, Models: []string{"m"}, MaxConcurrency: 1}
	rview := View{ID: "r1", Name: "remote", Provider: storage.ProviderOpenAI, Models: []string{"m"}, MaxInFlight: 1,
		Version: 1, ConfigGen: 1, EWMASuccess: 1}
	// The remote account joins first, so join order alone would pick it.
	s.RemoteViews("gw-b", []View{rview})
	waitFor(t, func() bool { return s.RemoteAccounts() == 1 })
	local := storage.Account{ID: "l1", Name: "local", Provider: storage.ProviderOpenAI, BaseURL: "http://127.0.0.1:1/v1",
		Credentials: storage.Credentials{APIKey: "sk-l"}, Models: []string{"m"}, MaxConcurrency: 1}
	s.PutAccount(local)
	fence := new(Fence)
	fence.Extend(time.Now().Add(time.Hour), 1)
	s.Own("l1", fence)
	waitFor(t, func() bool { // the scheduler has judged both
		sc, err := s.Scores(ctx)
		_, l := sc["l1"]
		_, r := sc["r1"]
		return err == nil && l && r
	})
	fr.answer = func(RemoteRequest) (RemoteGrant, error) {
		v := rview
		v.InFlight, v.Version = 1, 2
		return RemoteGrant{Granted: true, Handle: "h1", Account: remote, View: v}, nil
	}
	acquire := func() *Lease {
		l, err := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// Released before the next: the local account always has room.
	for range 5 {
		l := acquire()
		if l.AccountID != "l1" || l.remote != nil {
			t.Fatalf("picked %s (remote %v) while the local account had room", l.AccountID, l.remote != nil)
		}
		s.Release(l, Outcome{Status: 200})
		// The release reached the scheduler (a view readers see was
		// queued to it first: account.publish).
		waitFor(t, func() bool { v, _ := s.View("l1"); return v.InFlight == 0 })
	}
	if asked, _ := fr.counts(); asked != 0 {
		t.Fatalf("the owner was asked %d times while the local account had room", asked)
	}
	// The local account full: the remote one serves.
	held := acquire()
	second := acquire()
	if held.AccountID != "l1" || second.AccountID != "r1" || second.remote == nil {
		t.Fatalf("picked %s then %s, want l1 then the remote r1", held.AccountID, second.AccountID)
	}
	s.Release(second, Outcome{Status: 200})
	s.Release(held, Outcome{Status: 200})
}
