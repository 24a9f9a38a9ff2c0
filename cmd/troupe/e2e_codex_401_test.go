package main

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/bench/codexmock"
	"github.com/troupe-gw/troupe/storage"
)

// TestCodex401MidTraffic: the backend starts refusing a codex account's
// access token while the gateway still believes it valid (the mock's clock
// jumps past its exp; the gateway's does not, so no refresh is due). Ten
// requests at once meet the 401: the account refreshes exactly once,
// comes back active, and later requests are served with the new token;
// the ten requests wait for the refresh and are served (none gets a 503).
// No refresh token or access token appears in the gateway's log.
func TestCodex401MidTraffic(t *testing.T) {
	f := startCodex401(t, "44444444-0000-4000-8000-000000000004")
	a, m, skew, secret, logs := f.a, f.m, f.skew, f.secret, f.logs
	if st, b := gatewayDo(t, a, "POST", "/v1/responses", secret, `{"model":"gpt-5.4","input":"hi"}`); st != 200 {
		t.Fatalf("first request: %d %s", st, b)
	}
	skew.Store(int64(2 * time.Hour)) // the access token is now expired, for the backend only
	var wg sync.WaitGroup
	statuses := make([]int, 10)
	for i := range statuses {
		wg.Go(func() {
			statuses[i], _ = gatewayDo(t, a, "POST", "/v1/responses", secret, `{"model":"gpt-5.4","input":"hi `+strconv.Itoa(i)+`"}`)
		})
	}
	wg.Wait()
	t.Logf("statuses during the 401s: %v", statuses)
	for i, st := range statuses {
		// The refresh takes RefreshDelay: a request that met the 401, or
		// came while the account rested for it, waits for it, never a 503.
		if st != 200 {
			t.Errorf("request %d during the refresh: status %d, want 200", i, st)
		}
	}
	eventually(t, 15*time.Second, "the account active again and serving", func() (bool, string) {
		st, b := gatewayDo(t, a, "POST", "/v1/responses", secret, `{"model":"gpt-5.4","input":"again"}`)
		return st == 200, strconv.Itoa(st) + " " + string(b)
	})
	if g, refused := m.Grants(); g != 1 || refused != 0 {
		t.Fatalf("refresh grants %d, refused %d: want exactly one refresh", g, refused)
	}
	for _, v := range a.sys.Views() {
		if v.Status != actors.StatusActive {
			t.Fatalf("account %s status %s", v.Name, v.Status)
		}
	}
	if l := logs.String(); strings.Contains(l, f.rt) || strings.Contains(l, f.access) {
		t.Fatal("the gateway log holds a token")
	}
}

// TestCodex401PreviousResponse: a request bound by previous_response_id to
// a codex account (affinity: only that account holds its state) that meets
// the account's 401 gets the one wait-for-refresh retry on that account
// that other requests get (TestCodex401MidTraffic), and is served; before,
// it ended at its first attempt, with a 503.
func TestCodex401PreviousResponse(t *testing.T) {
	f := startCodex401(t, "44444444-0000-4000-8000-000000000005")
	a, m, skew, secret := f.a, f.m, f.skew, f.secret
	st, b := gatewayDo(t, a, "POST", "/v1/responses", secret, `{"model":"gpt-5.4","input":"hi"}`)
	if st != 200 {
		t.Fatalf("first request: %d %s", st, b)
	}
	prev := gjson.GetBytes(b, "id").Str
	if prev == "" {
		t.Fatalf("first request: no response id in %s", b)
	}
	skew.Store(int64(2 * time.Hour)) // the access token is now expired, for the backend only
	st, b = gatewayDo(t, a, "POST", "/v1/responses", secret, `{"model":"gpt-5.4","previous_response_id":"`+prev+`","input":"more"}`)
	if st != 200 {
		t.Fatalf("the bound request during the refresh: %d %s, want 200", st, b)
	}
	if g, refused := m.Grants(); g != 1 || refused != 0 {
		t.Fatalf("refresh grants %d, refused %d: want exactly one refresh", g, refused)
	}
}

// codex401 is a gateway with one codex account ("cx", model gpt-5.4) on a
// codexmock whose clock runs skew ahead of the gateway's, so that a test
// can expire the access token for the backend only; the mock's refresh
// takes 200 ms. The gateway's log is printed when the test fails.
type codex401 struct {
	a          *app
	m          *codexmock.Server
	skew       *atomic.Int64 // the mock's clock offset, in nanoseconds
	secret     string        // an API key of the gateway
	rt, access string        // the account's refresh and access tokens
	logs       *syncBuffer
}

// startCodex401 starts a codex401 whose account has the ChatGPT account id id.
func startCodex401(t *testing.T, id string) *codex401 {
	clearTroupeEnv(t)
	f := &codex401{skew: new(atomic.Int64), logs: &syncBuffer{}}
	m, err := codexmock.Start(codexmock.Config{
		AccessTTL:    time.Hour,
		RefreshDelay: 200 * time.Millisecond,
		Now:          func() time.Time { return time.Now().Add(time.Duration(f.skew.Load())) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	f.m = m
	f.rt = m.AddAccount(codexmock.Account{ID: id, Plan: "plus"})
	f.access, _ = m.IssueAccess(id, time.Hour)
	cfg := testConfig(t)
	cfg.Codex.OAuthTokenURL = m.TokenURL()
	putAccounts(t, cfg, storage.Account{Name: "cx", Provider: storage.ProviderCodex, BaseURL: m.BaseURL(), Models: []string{"gpt-5.4"},
		MaxConcurrency: 16, Credentials: storage.Credentials{RefreshToken: f.rt, AccessToken: f.access, AccountID: id}})
	a, err := startApp(t.Context(), cfg, newLogger(cfg, f.logs))
	if err != nil {
		t.Fatal(err)
	}
	a.serve()
	t.Cleanup(func() {
		if err := a.shutdown(10 * time.Second); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", f.logs.String())
		}
	})
	waitHealthy(t, a)
	f.a = a
	f.secret, _ = createKey(t, a.store, "k", nil)
	return f
}
