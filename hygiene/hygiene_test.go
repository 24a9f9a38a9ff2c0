package hygiene

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// fakes: a store of accounts and settings, a pool of views that records
// what it was told.
type fakeStore struct {
	mu       sync.Mutex
	accounts map[string]storage.Account
	settings map[string]string
}

func (s *fakeStore) GetAccount(_ context.Context, id string) (storage.Account, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.accounts {
		if a.ID == id || a.Name == id {
			return a, nil
		}
	}
	return storage.Account{}, storage.ErrNotFound
}

func (s *fakeStore) PutAccount(_ context.Context, a storage.Account) (storage.Account, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accounts[a.ID] = a
	return a, nil
}

func (s *fakeStore) GetSetting(_ context.Context, k string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.settings[k]
	if !ok {
		return "", storage.ErrNotFound
	}
	return v, nil
}

func (s *fakeStore) PutSetting(_ context.Context, k, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settings[k] = v
	return nil
}

type fakePool struct {
	views []actors.View
	puts  []storage.Account
}

func (p *fakePool) Views() []actors.View         { return p.views }
func (p *fakePool) PutAccount(a storage.Account) { p.puts = append(p.puts, a) }

// clock is a synthetic clock the test moves.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func setup(t *testing.T, rule Rule, views ...actors.View) (*Keeper, *fakeStore, *fakePool, *clock) {
	t.Helper()
	st := &fakeStore{accounts: map[string]storage.Account{}, settings: map[string]string{}}
	for _, v := range views {
		st.accounts[v.ID] = storage.Account{ID: v.ID, Name: v.Name, Provider: storage.ProviderOpenAI}
	}
	pool := &fakePool{views: views}
	c := &clock{t: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)}
	k, err := New(context.Background(), rule, st, pool, nil, c.now)
	if err != nil {
		t.Fatal(err)
	}
	return k, st, pool, c
}

func unauthorized(id string, since time.Time) actors.View {
	v := actors.View{ID: id, Name: "acct-" + id, Status: actors.StatusUnauthorized}
	v.LastFailures = &actors.LastFailures{}
	v.LastFailure[upstream.ClassAuth] = since
	return v
}

func TestUnauthorizedIsDisabledAfterThreshold(t *testing.T) {
	ctx := context.Background()
	c0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	k, st, pool, c := setup(t, Rule{Action: ActionDisable, Unauthorized: 10 * time.Minute},
		unauthorized("a1", c0), actors.View{ID: "a2", Name: "acct-a2", Status: actors.StatusActive})
	c.advance(9 * time.Minute)
	if err := k.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if len(flagsOf(t, k)) != 0 || st.accounts["a1"].Disabled {
		t.Fatalf("tripped before the threshold: %v", flagsOf(t, k))
	}
	c.advance(time.Minute)
	if err := k.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	flags := flagsOf(t, k)
	if len(flags) != 1 || flags[0].AccountID != "a1" || flags[0].Action != ActionDisable || flags[0].Kind != "unauthorized" || !flags[0].Since.Equal(c0) {
		t.Fatalf("flags %+v, want a1 disabled as unauthorized since %v", flags, c0)
	}
	if k.Flagged("unauthorized") != 1 || k.Flagged("rate_limited") != 0 {
		t.Errorf("Flagged: %d unauthorized, %d rate limited", k.Flagged("unauthorized"), k.Flagged("rate_limited"))
	}
	if !strings.Contains(flags[0].Reason, "unauthorized since 2026-12-07T10:00:00Z") {
		t.Errorf("reason %q", flags[0].Reason)
	}
	if !st.accounts["a1"].Disabled || len(pool.puts) != 1 || !pool.puts[0].Disabled {
		t.Errorf("a1 stored disabled %v, pool told %v", st.accounts["a1"].Disabled, pool.puts)
	}
	if st.accounts["a2"].Disabled {
		t.Errorf("the healthy account was disabled")
	}
	// The flag is stored: a new keeper (a restart) shows it.
	k2, err := New(ctx, k.Rule(), st, pool, nil, c.now)
	if err != nil {
		t.Fatal(err)
	}
	if f, ok, _ := k2.Flag(ctx, "a1"); !ok || f.Reason != flags[0].Reason {
		t.Errorf("after a restart: flag %+v, %v", f, ok)
	}
	// Swept again, an account already flagged is left alone.
	c.advance(time.Hour)
	if err := k.Sweep(ctx); err != nil || len(pool.puts) != 1 {
		t.Errorf("second sweep: %v, %d pool puts", err, len(pool.puts))
	}
}

func TestFlagLeavesTheAccountAlone(t *testing.T) {
	c0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	k, st, pool, _ := setup(t, Rule{Action: ActionFlag}, unauthorized("a1", c0))
	if err := k.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f, ok, _ := k.Flag(context.Background(), "a1"); !ok || f.Action != ActionFlag {
		t.Fatalf("flag %+v, %v", f, ok)
	}
	if st.accounts["a1"].Disabled || len(pool.puts) != 0 {
		t.Errorf("flag action disabled the account")
	}
}

func TestRateLimitedRunTripsAndBreaks(t *testing.T) {
	ctx := context.Background()
	k, _, pool, c := setup(t, Rule{Action: ActionDisable, RateLimited: 30 * time.Minute},
		actors.View{ID: "a1", Name: "acct-a1"}, actors.View{ID: "a2", Name: "acct-a2"})
	cool := func(i int, until time.Time) {
		pool.views[i].Status, pool.views[i].CooldownReason, pool.views[i].CooldownUntil = actors.StatusCooling, "rate", until
	}
	active := func(i int) { pool.views[i].Status, pool.views[i].CooldownReason = actors.StatusActive, "" }
	// Both rate limited at every sweep, but a2 is active at one of them
	// with no rate failure since the sweep before: its run starts over.
	for minute := 0; minute <= 30; minute += 5 {
		cool(0, c.t.Add(time.Minute))
		if minute == 15 {
			active(1)
		} else {
			cool(1, c.t.Add(time.Minute))
		}
		if minute == 20 {
			// a1 was active between sweeps and refused again: still limited.
			active(0)
			lf := actors.LastFailures{} // a view's are shared: set new ones
			if p := pool.views[0].LastFailures; p != nil {
				lf = *p
			}
			lf.LastFailure[upstream.ClassRate] = c.t.Add(-time.Minute)
			pool.views[0].LastFailures = &lf
		}
		if err := k.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		c.advance(5 * time.Minute)
	}
	f, ok, _ := k.Flag(ctx, "a1")
	if !ok || f.Kind != "rate_limited" || f.Action != ActionDisable {
		t.Fatalf("a1: flag %+v, %v; want disabled for being rate limited 30 min", f, ok)
	}
	if !strings.Contains(f.Reason, "threshold 30m0s") {
		t.Errorf("reason %q", f.Reason)
	}
	if _, ok, _ := k.Flag(ctx, "a2"); ok {
		t.Errorf("a2 tripped although its run broke at minute 15")
	}
}

func TestRestore(t *testing.T) {
	ctx := context.Background()
	c0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	k, st, pool, _ := setup(t, Rule{Action: ActionDisable}, unauthorized("a1", c0))
	if err := k.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	pool.puts = nil
	f, ok, err := k.Restore(ctx, "acct-a1")
	if err != nil || !ok || f.AccountID != "a1" {
		t.Fatalf("Restore = %+v, %v, %v", f, ok, err)
	}
	if st.accounts["a1"].Disabled || len(pool.puts) != 1 || pool.puts[0].Disabled {
		t.Errorf("restored account: stored disabled %v, pool told %v", st.accounts["a1"].Disabled, pool.puts)
	}
	if len(flagsOf(t, k)) != 0 || st.settings[SettingKey] != "[]" {
		t.Errorf("flags after restore: %v, stored %q", flagsOf(t, k), st.settings[SettingKey])
	}
	// An account that was never disabled (flagged, unauthorized) is reset
	// by a disable and enable, in that order.
	pool.puts = nil
	if _, ok, err := k.Restore(ctx, "a1"); err != nil || ok {
		t.Fatalf("second Restore: ok %v, %v", ok, err)
	}
	if len(pool.puts) != 2 || !pool.puts[0].Disabled || pool.puts[1].Disabled {
		t.Errorf("reset of a live account: pool told %v, want disabled then enabled", pool.puts)
	}
	if _, _, err := k.Restore(ctx, "ghost"); err != ErrNotFound {
		t.Errorf("Restore of a missing account: %v", err)
	}
}

func TestRuleValidate(t *testing.T) {
	for _, r := range []Rule{{Action: "ban"}, {Action: ActionFlag, RateLimited: -time.Second}, {Interval: -time.Second}} {
		if err := r.Validate(); err == nil {
			t.Errorf("%+v: no error", r)
		}
	}
	k, _, _, _ := setup(t, Rule{}, unauthorized("a1", time.Time{}))
	if err := k.Sweep(context.Background()); err != nil || len(flagsOf(t, k)) != 0 {
		t.Errorf("the zero rule (off) flagged %v", flagsOf(t, k))
	}
}

// flagsOf is k.Flags, failing the test on a storage error.
func flagsOf(t *testing.T, k *Keeper) []Flag {
	t.Helper()
	f, err := k.Flags(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestInstancesKeepEachOthersFlags: two keepers on one store (two
// instances), each flagging the account it sees failing, and one
// restoring the other's.
func TestInstancesKeepEachOthersFlags(t *testing.T) {
	ctx := context.Background()
	c0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	k1, st, _, c := setup(t, Rule{Action: ActionFlag}, unauthorized("a1", c0))
	st.accounts["a2"] = storage.Account{ID: "a2", Name: "acct-a2"}
	k2, err := New(ctx, Rule{Action: ActionFlag}, st, &fakePool{views: []actors.View{unauthorized("a2", c0)}}, nil, c.now)
	if err != nil {
		t.Fatal(err)
	}
	if err := k1.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if err := k2.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range []*Keeper{k1, k2} {
		if f := flagsOf(t, k); len(f) != 2 {
			t.Errorf("a keeper sees %d flags, want both instances' 2: %v", len(f), f)
		}
	}
	if _, ok, err := k1.Restore(ctx, "a2"); err != nil || !ok {
		t.Fatalf("restore of the other instance's flag: %v, %v", ok, err)
	}
	if f := flagsOf(t, k2); len(f) != 1 || f[0].AccountID != "a1" {
		t.Errorf("after the restore the other instance sees %v", f)
	}
}
