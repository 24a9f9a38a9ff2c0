package actors

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// With Config.Fenced, accounts put with sealed credentials (the account
// feed's read without opening) are opened only when this instance runs
// them: putting 3 and owning 1 opens 1, once; an update of the owned one
// opens it again; the transport sees the opened credentials; an account
// whose credentials cannot be opened joins disabled.
func TestSealedOpenedOnlyWhenOwned(t *testing.T) {
	var mu sync.Mutex
	opened := map[string]int{}
	var seen []storage.Credentials
	s, err := Start(Config{Store: &memUsage{}, Logger: quiet, Fenced: true,
		Open: func(sealed string) (storage.Credentials, error) {
			mu.Lock()
			defer mu.Unlock()
			opened[sealed]++
			if sealed == "bad" {
				return storage.Credentials{}, storage.ErrUnseal
			}
			return storage.Credentials{APIKey: "sk-" + sealed}, nil
		},
		Transport: func(a storage.Account) (upstream.Transport, error) {
			mu.Lock()
			seen = append(seen, a.Credentials)
			mu.Unlock()
			if a.Sealed != "" {
				return nil, errors.New("transport built with sealed credentials")
			}
			return nopTransport{}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.Stop(ctx)
	})
	ctx := t.Context()
	for _, id := range []string{"a1", "a2", "a3"} {
		s.PutAccount(storage.Account{ID: id, Name: id, Provider: storage.ProviderOpenAI, MaxConcurrency: 1, Sealed: id})
	}
	waitFor(t, func() bool { ids, _ := s.Accounts(ctx); return len(ids) == 3 })
	fence := new(Fence)
	fence.Extend(time.Now().Add(time.Hour), 1)
	s.Own("a2", fence)
	waitFor(t, func() bool { v, ok := s.View("a2"); return ok && v.Available(time.Now()) })
	mu.Lock()
	if len(opened) != 1 || opened["a2"] != 1 || len(seen) != 1 || seen[0].APIKey != "sk-a2" {
		t.Fatalf("after owning a2: opened %v, transports built with %v", opened, seen)
	}
	mu.Unlock()

	// A change of the owned account opens it again; of the others, never.
	s.PutAccount(storage.Account{ID: "a2", Name: "a2", Provider: storage.ProviderOpenAI, MaxConcurrency: 3, Sealed: "a2"})
	s.PutAccount(storage.Account{ID: "a1", Name: "a1", Provider: storage.ProviderOpenAI, MaxConcurrency: 3, Sealed: "a1"})
	waitFor(t, func() bool { v, _ := s.View("a2"); return v.MaxInFlight == 3 })
	mu.Lock()
	if len(opened) != 1 || opened["a2"] != 2 {
		t.Fatalf("after updates: opened %v, want a2 twice only", opened)
	}
	mu.Unlock()

	// Credentials that cannot be opened: the account runs, disabled.
	s.PutAccount(storage.Account{ID: "a4", Name: "a4", Provider: storage.ProviderOpenAI, MaxConcurrency: 1, Sealed: "bad"})
	s.Own("a4", fence)
	waitFor(t, func() bool { v, ok := s.View("a4"); return ok && v.Status == StatusDisabled })
}
