package actors

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/codexmock"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// memAccounts is an in-memory AccountStore that counts writes.
type memAccounts struct {
	mu   sync.Mutex
	accs map[string]storage.Account
	puts int
	read func(storage.Account) // when set, called with every account GetAccount returns
}

func (m *memAccounts) GetAccount(_ context.Context, id string) (storage.Account, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.accs[id]
	if !ok {
		return a, storage.ErrNotFound
	}
	if m.read != nil {
		m.read(a)
	}
	return a, nil
}

func (m *memAccounts) PutAccount(_ context.Context, a storage.Account) (storage.Account, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.puts++
	a.UpdatedAt = time.Now()
	m.accs[a.ID] = a
	return a, nil
}

// staleJWT is an access token with a future exp that the mock never issued:
// the backend answers it with 401.
func staleJWT(accountID string) string {
	p := fmt.Sprintf(`{"exp":%d,"https://api.openai.com/auth":{"chatgpt_account_id":%q}}`, time.Now().Add(24*time.Hour).Unix(), accountID)
	return "eyJhbGciOiJub25lIn0." + base64.RawURLEncoding.EncodeToString([]byte(p)) + ".x"
}

type codexEnv struct {
	mock  *codexmock.Server
	store *memAccounts
	sys   *System
}

// startCodex starts the mock and a System with refresh on, one codex account
// per id (max concurrency 200), whose access token is access(id).
func startCodex(t *testing.T, cfg codexmock.Config, ids []string, access func(m *codexmock.Server, id string) string, lead time.Duration) *codexEnv {
	t.Helper()
	m, err := codexmock.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	store := &memAccounts{accs: map[string]storage.Account{}}
	cache := memcache.New(memcache.Options{})
	t.Cleanup(func() { cache.Close() })
	sys, err := Start(Config{
		Store: &memUsage{}, Logger: quiet,
		Transport: func(a storage.Account) (upstream.Transport, error) { return upstream.New(a, upstream.Options{}) },
		Refresh: &RefreshConfig{
			OAuth: upstream.NewOAuth(upstream.OAuthConfig{TokenURL: m.TokenURL()}), Store: store, Leases: cache, Lead: lead,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sys.Stop(ctx)
	})
	for _, id := range ids {
		rt := m.AddAccount(codexmock.Account{ID: id, Email: id + "@example.com", Plan: "plus"})
		acc := storage.Account{ID: "t-" + id, Name: id, Provider: storage.ProviderCodex, BaseURL: m.BaseURL(), MaxConcurrency: 200,
			Credentials: storage.Credentials{RefreshToken: rt, AccessToken: access(m, id), AccountID: id}}
		store.accs[acc.ID] = acc
		sys.PutAccount(acc)
	}
	waitFor(t, func() bool { return len(sys.Views()) == len(ids) })
	return &codexEnv{mock: m, store: store, sys: sys}
}

// call runs one request the way the gateway does: acquire, send, release
// with the classified outcome, failing over (here: retrying) up to 4 times.
func (e *codexEnv) call(ctx context.Context) (int, error) {
	status := 0
	for range 4 {
		l, err := e.sys.Acquire(ctx, AcquireRequest{Endpoint: translate.Responses, Model: "gpt-5.4", MaxWait: 10 * time.Second})
		if err != nil {
			return status, err
		}
		h := http.Header{}
		h.Set("Session-Id", "s1")
		resp, err := l.Transport.Do(ctx, &upstream.Request{Endpoint: translate.Responses, Stream: true,
			Body: []byte(`{"model":"gpt-5.4","input":"hi"}`), Header: h})
		if err != nil {
			e.sys.Release(l, Outcome{Verdict: upstream.ClassifyError(err)})
			return 0, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		status = resp.Status
		e.sys.Release(l, Outcome{Status: resp.Status, Verdict: upstream.Classify(resp.Status, resp.Header, body)})
		if status == 200 {
			return status, nil
		}
	}
	return status, nil
}

func TestRefreshSingleFlightUnder100Requests(t *testing.T) {
	// Every request starts with a token the backend refuses: 100 concurrent
	// 401s must cause one refresh, after which all of them succeed.
	e := startCodex(t, codexmock.Config{RefreshDelay: 50 * time.Millisecond}, []string{"acc-1"},
		func(_ *codexmock.Server, id string) string { return staleJWT(id) }, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var ok atomic.Int32
	for range 100 {
		wg.Go(func() {
			if st, err := e.call(ctx); err == nil && st == 200 {
				ok.Add(1)
			} else {
				t.Errorf("status %d, err %v", st, err)
			}
		})
	}
	wg.Wait()
	granted, refused := e.mock.Grants()
	if ok.Load() != 100 || granted != 1 || refused != 0 {
		t.Fatalf("%d of 100 succeeded; %d refresh grants, %d refused", ok.Load(), granted, refused)
	}
	stored, _ := e.store.GetAccount(ctx, "t-acc-1")
	if v, _ := e.sys.View("t-acc-1"); v.Status != StatusActive || stored.Credentials.AccessToken == staleJWT("acc-1") {
		t.Fatalf("status %v; new tokens stored: %v", v.Status, stored.Credentials.AccessToken != staleJWT("acc-1"))
	}
}

func TestRefreshAheadOfExpiry(t *testing.T) {
	// Access tokens live 3 s and the lead is 2 s: the actor refreshes on its
	// own about every second, each time with the previous (single-use)
	// refresh token.
	e := startCodex(t, codexmock.Config{AccessTTL: 3 * time.Second}, []string{"acc-1"},
		func(m *codexmock.Server, id string) string { a, _ := m.IssueAccess(id, 3*time.Second); return a }, 2*time.Second)
	waitFor(t, func() bool { g, _ := e.mock.Grants(); return g >= 2 })
	if _, refused := e.mock.Grants(); refused != 0 {
		t.Fatalf("%d grants refused", refused)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := e.call(ctx); err != nil || st != 200 {
		t.Fatalf("status %d err %v", st, err)
	}
	waitFor(t, func() bool { v, _ := e.sys.View("t-acc-1"); return len(v.Windows) > 0 })
	v, _ := e.sys.View("t-acc-1")
	if v.Plan != "plus" || len(v.Windows) != 1 || v.Windows[0].Name != "5h" || v.Windows[0].UsedPercent != 0 {
		t.Fatalf("view after a request: plan %q windows %+v", v.Plan, v.Windows)
	}
}

func TestRefreshRefusedMeansUnauthorized(t *testing.T) {
	e := startCodex(t, codexmock.Config{}, []string{"acc-1"},
		func(_ *codexmock.Server, id string) string { return staleJWT(id) }, time.Millisecond)
	e.mock.Revoke("acc-1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	e.call(ctx)
	waitFor(t, func() bool { v, _ := e.sys.View("t-acc-1"); return v.Status == StatusUnauthorized })
	if g, refused := e.mock.Grants(); g != 0 || refused != 1 {
		t.Fatalf("grants %d refused %d", g, refused)
	}
}

func TestRefreshAcrossInstancesUsesLease(t *testing.T) {
	// Two actor systems (two gateway instances) share the store and the
	// cache; both see the token expire. One refreshes; the other adopts.
	m, err := codexmock.Start(codexmock.Config{RefreshDelay: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	store := &memAccounts{accs: map[string]storage.Account{}}
	cache := memcache.New(memcache.Options{})
	defer cache.Close()
	rt := m.AddAccount(codexmock.Account{ID: "acc-1", Plan: "pro"})
	expired, _ := m.IssueAccess("acc-1", -time.Second)
	acc := storage.Account{ID: "t-acc-1", Name: "acc-1", Provider: storage.ProviderCodex, BaseURL: m.BaseURL(),
		Credentials: storage.Credentials{RefreshToken: rt, AccessToken: expired}}
	store.accs[acc.ID] = acc
	// The instance that waited for the lease adopts by reading the stored
	// account with the rotated refresh token; after that it calls no one.
	adopted := make(chan struct{}, 1)
	store.read = func(a storage.Account) {
		if a.Credentials.RefreshToken != rt {
			select {
			case adopted <- struct{}{}:
			default:
			}
		}
	}
	var systems []*System
	for i := range 2 {
		sys, err := Start(Config{
			Store: &memUsage{}, Logger: quiet,
			Transport: func(a storage.Account) (upstream.Transport, error) { return upstream.New(a, upstream.Options{}) },
			Refresh: &RefreshConfig{OAuth: upstream.NewOAuth(upstream.OAuthConfig{TokenURL: m.TokenURL()}), Store: store, Leases: cache,
				Owner: fmt.Sprint("instance-", i)},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sys.Stop(context.Background())
		sys.PutAccount(acc)
		systems = append(systems, sys)
	}
	waitFor(t, func() bool {
		for _, s := range systems {
			v, ok := s.View("t-acc-1")
			if !ok || v.Version < 2 {
				return false
			}
		}
		g, _ := m.Grants()
		return g >= 1
	})
	select {
	case <-adopted:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting instance never read the refreshed tokens")
	}
	if g, refused := m.Grants(); g != 1 || refused != 0 {
		t.Fatalf("grants %d refused %d: the refresh ran in both instances", g, refused)
	}
}
