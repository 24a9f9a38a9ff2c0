package billing_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/billing"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
)

// swappable is a storage.Cache whose backend a test replaces with an empty
// one: a shared Redis restarted without persistence, as every instance
// using it sees it.
type swappable struct{ storage.Cache }

// TestCacheRestartReassertsInFlight: two instances (gates) share a cache;
// each has one request in flight of a user with max_concurrency 2 and a
// balance covering two requests. The cache restarts empty. Each instance
// re-asserts its own request's hold and slot (its watch, Gate.Check, or
// its next count), so a third request is refused for concurrency and, on
// a user without that limit, for its balance, while the two are in
// flight; once they end, the counters are back to 0, not below what is
// held and not above it (nothing counted twice).
func TestCacheRestartReassertsInFlight(t *testing.T) {
	ctx := context.Background()
	u := storage.User{ID: "u-1", Name: "bob", MaxConcurrency: 2}
	price := storage.Price{Model: "m", Currency: "USD", Input: 1_000_000, Output: 10_000_000}
	const estimate = 10 + 10_240 // 10 input tokens, 1,024 output tokens at 10 per token
	store := &fakeStore{user: u, balance: 2 * estimate, price: price}
	shared := &swappable{memcache.New(memcache.Options{SweepInterval: -1})}
	defer func() { shared.Close() }()
	start := time.Now()
	slot := strconv.FormatInt(start.UnixMilli()/billing.DefaultHoldWindow.Milliseconds(), 10)
	newGate := func() *billing.Gate {
		g := billing.New(store, shared, billing.Options{Now: func() time.Time { return start }})
		if err := g.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		return g
	}
	g1, g2 := newGate(), newGate()
	admit := func(g *billing.Gate, id string) (*billing.Ticket, *billing.Refusal) {
		return g.Admit(ctx, billing.Request{ID: id, UserID: u.ID, Model: "m", Input: 10})
	}
	a, ref := admit(g1, "a")
	if ref != nil {
		t.Fatalf("a refused: %v", ref)
	}
	b, ref := admit(g2, "b")
	if ref != nil {
		t.Fatalf("b refused: %v", ref)
	}

	// Redis restarts empty.
	old := shared.Cache
	shared.Cache = memcache.New(memcache.Options{SweepInterval: -1})
	old.Close()

	// g2 is idle: its watch re-asserts b. g1 re-asserts a on its next count.
	if err := g2.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if tk, ref := admit(g1, "c"); ref == nil || ref.Kind != billing.RefusedConcurrency {
		t.Fatalf("a third request in flight after the restart: ticket %v, refusal %v; want refused for concurrency 2", tk, ref)
	}
	store.user.MaxConcurrency = 0
	g3 := newGate()
	if tk, ref := admit(g3, "d"); ref == nil || ref.Kind != billing.RefusedBalance {
		t.Fatalf("a third request's estimate after the restart: ticket %v, refusal %v; want refused for the balance", tk, ref)
	}
	store.user.MaxConcurrency = 2

	// The two end, costing nothing (refused upstream): their holds and
	// slots are taken back once each.
	g1.Finish(a, &storage.UsageRecord{RequestID: "a", Model: "m"})
	g2.Finish(b, &storage.UsageRecord{RequestID: "b", Model: "m"})
	for _, k := range []string{"conc", "hold"} {
		n, err := shared.Count(ctx, "bill:"+k+":"+u.ID+":"+slot, billing.DefaultHoldWindow)
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s counter %d after both requests ended, want 0", k, n)
		}
	}
	// Two new requests fit; a third does not.
	for _, id := range []string{"e", "f"} {
		if _, ref := admit(g1, id); ref != nil {
			t.Fatalf("%s refused after the restart's requests ended: %v", id, ref)
		}
	}
	if tk, ref := admit(g2, "g"); ref == nil {
		t.Fatalf("a third request admitted past max_concurrency 2 (ticket %v)", tk.Estimate())
	}
}
