package actors

import (
	"context"
	"testing"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/troupe-gw/troupe/upstream"
)

// editingOAuth answers a refresh with new tokens after running edit, as
// an operator's change stored while the OAuth server is being asked.
type editingOAuth struct{ edit func() }

func (o editingOAuth) Refresh(context.Context, string) (upstream.Tokens, error) {
	o.edit()
	return upstream.Tokens{AccessToken: "at-2", RefreshToken: "rt-2"}, nil
}

// An account changed in storage while its refresh waited for the OAuth
// server keeps the change: the refresher stored the whole account as it
// had read it before the call, with the new tokens, so an operator's
// disable, models or priority made meanwhile were written back over and
// the account returned to routing (tester's finding). Only the tokens are
// the refresher's to store.
func TestRefreshKeepsEditsMadeDuringTheCall(t *testing.T) {
	store := &memAccounts{accs: map[string]storage.Account{}}
	acc := storage.Account{ID: "a1", Name: "a1", Provider: storage.ProviderCodex, BaseURL: "http://127.0.0.1:1", MaxConcurrency: 1,
		Credentials: storage.Credentials{RefreshToken: "rt-1", AccessToken: "at-1", AccountID: "x"}}
	store.accs[acc.ID] = acc
	cache := memcache.New(memcache.Options{})
	t.Cleanup(func() { cache.Close() })
	edit := func() {
		store.mu.Lock()
		a := store.accs["a1"]
		a.Disabled, a.Priority, a.Models = true, 9, []string{"gpt-5.5"}
		store.accs["a1"] = a
		store.mu.Unlock()
	}
	r := &refresher{cfg: RefreshConfig{OAuth: editingOAuth{edit}, Store: store, Leases: cache, Owner: "i1"}, log: quiet}
	out, adopted, err := r.run(context.Background(), acc)
	if err != nil || adopted {
		t.Fatalf("run: adopted %v, err %v", adopted, err)
	}
	got := store.accs["a1"]
	if !got.Disabled || got.Priority != 9 || len(got.Models) != 1 {
		t.Errorf("stored after the refresh: disabled %v, priority %d, models %v; want the edit kept (true, 9, [gpt-5.5])", got.Disabled, got.Priority, got.Models)
	}
	if got.Credentials.RefreshToken != "rt-2" || got.Credentials.AccessToken != "at-2" {
		t.Errorf("stored tokens %q, %q; want the new ones", got.Credentials.RefreshToken, got.Credentials.AccessToken)
	}
	if !out.Disabled || out.Credentials.RefreshToken != "rt-2" {
		t.Errorf("run returned disabled %v, refresh token %q; want the stored account", out.Disabled, out.Credentials.RefreshToken)
	}
}
