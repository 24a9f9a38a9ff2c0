package actors

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// A per-model limit family that runs out cools only its models on the
// account: the scheduler stops offering the account for them (the limit
// name, a dated variant, a model the backend answered under the family)
// while it goes on serving every other model, its status active; a quota
// refusal of one of those models is not charged to the account; and a
// report showing the family usable again ends its rest.
func TestLimitFamilyCoolsOnlyItsModels(t *testing.T) {
	s, err := Start(Config{Store: &memUsage{}, Logger: quiet, Transport: func(storage.Account) (upstream.Transport, error) { return nopTransport{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Stop(ctx)
	})
	const id = "codex-1"
	s.PutAccount(storage.Account{ID: id, Name: id, Provider: storage.ProviderCodex, MaxConcurrency: 8}) // any model
	view := func() View { v, _ := s.View(id); return v }
	waitFor(t, func() bool { _, ok := s.View(id); return ok })
	ctx := context.Background()
	acquire := func(model string) (*Lease, error) {
		return s.Acquire(ctx, AcquireRequest{Endpoint: translate.Responses, Model: model, MaxWait: 50 * time.Millisecond})
	}
	held, err := acquire("gpt-5.2-codex-sonic") // in flight when the limit runs out
	if err != nil {
		t.Fatal(err)
	}

	now := time.Now().Truncate(time.Second)
	reset := now.Add(2 * time.Hour)
	fam := func(used float64) upstream.RateLimits {
		return upstream.RateLimits{Plan: "pro", ActiveLimit: "codex", Credits: &upstream.Credits{HasCredits: true, Balance: "12"},
			Windows: []upstream.RateWindow{{Name: "7d", UsedPercent: 20, WindowMinutes: 10080, ResetsAt: now.Add(48 * time.Hour)}},
			Families: []upstream.LimitFamily{{ID: "bengalfox", LimitName: "gpt-5.2-codex-sonic",
				Windows: []upstream.RateWindow{{Name: "7d", UsedPercent: used, WindowMinutes: 10080, ResetsAt: reset}}}}}
	}
	s.ReportRateLimits(id, "gpt-5.5", fam(100), now)
	waitFor(t, func() bool { v := view(); return len(v.Families) == 1 && !v.Families[0].CoolingUntil.IsZero() })
	v := view()
	if f := v.Families[0]; f.ID != "bengalfox" || !f.CoolingUntil.Equal(reset) || len(f.Windows) != 1 || f.Windows[0].UsedPercent != 100 ||
		v.Status != StatusActive || v.ActiveLimit != "codex" || v.Credits == nil || v.Credits.Balance != "12" {
		t.Fatalf("view after the family ran out: %+v", v)
	}
	for _, m := range []string{"gpt-5.2-codex-sonic", "gpt-5.2-codex-sonic-2026-01-01"} {
		if l, err := acquire(m); err == nil {
			s.Release(l, Outcome{})
			t.Fatalf("%s: leased while its family is used up", m)
		}
	}
	other, err := acquire("gpt-5.5")
	if err != nil {
		t.Fatalf("another model: %v", err)
	}
	s.Release(other, Outcome{})

	// The request that was in flight comes back with the quota refusal.
	s.Release(held, Outcome{Status: 429, Verdict: upstream.Verdict{Class: upstream.ClassQuota, RetryAfter: time.Hour}})
	waitFor(t, func() bool { return view().InFlight == 0 })
	if v := view(); v.Status != StatusActive || v.Failures != 0 {
		t.Fatalf("the account was charged for its family's limit: %s failures %d", v.Status, v.Failures)
	}

	// The family's window resets: its models are served again.
	s.ReportRateLimits(id, "gpt-5.5", fam(3), now.Add(time.Minute))
	waitFor(t, func() bool { v := view(); return len(v.Families) == 1 && v.Families[0].CoolingUntil.IsZero() })
	l, err := acquire("gpt-5.2-codex-sonic")
	if err != nil {
		t.Fatalf("after the reset: %v", err)
	}
	s.Release(l, Outcome{})

	// A family the backend names as the active limit learns the request's
	// model; its limit reached cools that model only.
	s.ReportRateLimits(id, "alias-of-premium", upstream.RateLimits{ActiveLimit: "premium", LimitReached: true}, now.Add(2*time.Minute))
	waitFor(t, func() bool { return len(view().Families) == 2 })
	if _, err := acquire("alias-of-premium"); err == nil {
		t.Fatal("a model of a family whose limit is reached was leased")
	}
	if l, err := acquire("gpt-5.5"); err != nil {
		t.Fatalf("another model: %v", err)
	} else {
		s.Release(l, Outcome{})
	}
}
