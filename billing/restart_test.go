package billing_test

import (
	"context"
	"testing"

	"github.com/troupe-gw/troupe/billing"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
)

// TestCacheRestartKeepsLimits: requests in flight while the shared cache
// restarts empty (Redis without persistence, or a failover) end after it,
// and their take-backs must not leave the user's concurrency and hold
// counters below zero for the rest of the hour: a user with
// max_concurrency 2 was then served 4 requests at once, and its balance
// was checked against fewer holds than its requests in flight (tester's
// finding, two `troupe serve` on one Redis restarted mid-stream).
func TestCacheRestartKeepsLimits(t *testing.T) {
	ctx := context.Background()
	u := storage.User{ID: "u-1", Name: "bob", MaxConcurrency: 2}
	price := storage.Price{Model: "m", Currency: "USD", Input: 1_000_000, Output: 10_000_000}
	// The balance covers exactly two requests' estimates (1,024 output
	// tokens at 10 per token, and 10 input tokens).
	store := &fakeStore{user: u, balance: 2 * (10 + 10_240), price: price}
	before := memcache.New(memcache.Options{SweepInterval: -1})
	defer before.Close()
	g := billing.New(store, before, billing.Options{})
	if err := g.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	admit := func(id string) (*billing.Ticket, *billing.Refusal) {
		return g.Admit(ctx, billing.Request{ID: id, UserID: u.ID, Model: "m", Input: 10})
	}
	var inflight []*billing.Ticket
	for _, id := range []string{"a", "b"} {
		tk, ref := admit(id)
		if ref != nil {
			t.Fatalf("request %s refused before the restart: %v", id, ref)
		}
		inflight = append(inflight, tk)
	}
	// The cache restarts empty; the two requests end after it, costing
	// nothing (refused upstream), so their holds are released at once.
	after := memcache.New(memcache.Options{SweepInterval: -1})
	defer after.Close()
	g.SetCache(after)
	for i, tk := range inflight {
		g.Finish(tk, &storage.UsageRecord{RequestID: []string{"a", "b"}[i], Model: "m"})
	}
	// Two new requests fit the limit and the balance; a third fits neither.
	for _, id := range []string{"c", "d"} {
		if _, ref := admit(id); ref != nil {
			t.Fatalf("request %s refused after the restart: %v", id, ref)
		}
	}
	if tk, ref := admit("e"); ref == nil {
		t.Fatalf("a third request in flight admitted past max_concurrency 2 (ticket %v)", tk.Estimate())
	}
	u.MaxConcurrency = 0
	store.user = u
	g2 := billing.New(store, after, billing.Options{})
	if err := g2.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if tk, ref := g2.Admit(ctx, billing.Request{ID: "f", UserID: u.ID, Model: "m", Input: 10}); ref == nil || ref.Kind != billing.RefusedBalance {
		t.Fatalf("a third request's estimate admitted past the balance (ticket %v, refusal %v)", tk, ref)
	}
}
