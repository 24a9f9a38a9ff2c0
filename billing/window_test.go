package billing_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/billing"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
)

// clock is a settable time for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// windowed is two instances (gates) on one cache under one clock, a user
// with max_concurrency 1 and a balance that covers one estimate.
type windowed struct {
	ctx    context.Context
	clk    *clock
	cache  *swappable
	store  *fakeStore
	g1, g2 *billing.Gate
}

const windowEstimate = 10 + 10_240 // 10 input tokens, 1,024 output tokens at 10 per token

func newWindowed(t *testing.T, opts billing.Options) *windowed {
	t.Helper()
	w := &windowed{ctx: context.Background(), clk: &clock{t: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)}}
	w.cache = &swappable{memcache.New(memcache.Options{SweepInterval: -1})}
	t.Cleanup(func() { w.cache.Close() })
	w.store = &fakeStore{user: storage.User{ID: "u-1", Name: "bob", MaxConcurrency: 1}, balance: windowEstimate,
		price: storage.Price{Model: "m", Currency: "USD", Input: 1_000_000, Output: 10_000_000}}
	opts.Now = w.clk.now
	newGate := func() *billing.Gate {
		g := billing.New(w.store, w.cache, opts)
		if err := g.Reload(w.ctx); err != nil {
			t.Fatal(err)
		}
		return g
	}
	w.g1, w.g2 = newGate(), newGate()
	return w
}

// reload drops g's cached users, so that a change of the fake store's
// user applies.
func reload(t *testing.T, g *billing.Gate) {
	t.Helper()
	if err := g.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (w *windowed) admit(g *billing.Gate, id string) (*billing.Ticket, *billing.Refusal) {
	return g.Admit(w.ctx, billing.Request{ID: id, UserID: w.store.user.ID, Model: "m", Input: 10})
}

// counter reads the user's hold or concurrency counter ("hold", "conc")
// of the window that holds time at.
func (w *windowed) counter(t *testing.T, kind string, at time.Time) int64 {
	t.Helper()
	slot := at.UnixMilli() / billing.DefaultHoldWindow.Milliseconds()
	n, err := w.cache.Count(w.ctx, "bill:"+kind+":"+w.store.user.ID+":"+strconv.FormatInt(slot, 10), billing.DefaultHoldWindow)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDeadInstanceFreesAtNextWindow: an instance dies with a user's
// request in flight (its ticket never finished). Until the window turns,
// the other instance refuses the user's next request for concurrency and,
// without that limit, for the balance the dead request holds; once it has
// turned, nothing moves the dead request's hold and slot into the new
// window, and the user is served again (a minute at most, not an hour).
func TestDeadInstanceFreesAtNextWindow(t *testing.T) {
	w := newWindowed(t, billing.Options{})
	if _, ref := w.admit(w.g1, "a"); ref != nil {
		t.Fatalf("a refused: %v", ref)
	}
	// g1 dies here: a is never finished.
	if tk, ref := w.admit(w.g2, "b"); ref == nil || ref.Kind != billing.RefusedConcurrency {
		t.Fatalf("b beside a dead instance's request, same window: ticket %v, refusal %v; want refused for concurrency 1", tk, ref)
	}
	w.store.user.MaxConcurrency = 0
	reload(t, w.g2)
	if tk, ref := w.admit(w.g2, "c"); ref == nil || ref.Kind != billing.RefusedBalance {
		t.Fatalf("c beside a dead instance's hold, same window: ticket %v, refusal %v; want refused for the balance", tk, ref)
	}
	w.store.user.MaxConcurrency = 1
	reload(t, w.g2)

	w.clk.add(billing.DefaultHoldWindow)
	if err := w.g2.Check(w.ctx); err != nil {
		t.Fatal(err)
	}
	d, ref := w.admit(w.g2, "d")
	if ref != nil {
		t.Fatalf("d refused in the next window, the dead instance's request no longer held: %v", ref)
	}
	if got := w.counter(t, "conc", w.clk.now()); got != 1 {
		t.Errorf("concurrency counter %d with d in flight, want 1", got)
	}
	w.g2.Finish(d, &storage.UsageRecord{RequestID: "d", Model: "m"})
	for _, k := range []string{"conc", "hold"} {
		if got := w.counter(t, k, w.clk.now()); got != 0 {
			t.Errorf("%s counter %d after d ended, want 0", k, got)
		}
	}
}

// TestInFlightMovesToNextWindow: a request in flight across the turn of
// a window stays held in the new one, whether its instance's watch
// (Check) or its next count moves it; it is taken off the window it
// leaves and, when it ends, off the one it is in: every counter ends at 0.
func TestInFlightMovesToNextWindow(t *testing.T) {
	for _, by := range []string{"check", "count"} {
		t.Run(by, func(t *testing.T) {
			w := newWindowed(t, billing.Options{})
			first := w.clk.now()
			a, ref := w.admit(w.g1, "a")
			if ref != nil {
				t.Fatalf("a refused: %v", ref)
			}
			w.clk.add(billing.DefaultHoldWindow + time.Second)
			switch by {
			case "check":
				if err := w.g1.Check(w.ctx); err != nil {
					t.Fatal(err)
				}
			case "count":
				// g1's next request counts in the new window: a moves first.
				if tk, ref := w.admit(w.g1, "x"); ref == nil || ref.Kind != billing.RefusedConcurrency {
					t.Fatalf("x on a's instance in the next window: ticket %v, refusal %v; want refused for concurrency 1", tk, ref)
				}
			}
			if tk, ref := w.admit(w.g2, "b"); ref == nil || ref.Kind != billing.RefusedConcurrency {
				t.Fatalf("b in the next window, a still in flight: ticket %v, refusal %v; want refused for concurrency 1", tk, ref)
			}
			if got := w.counter(t, "hold", w.clk.now()); got != windowEstimate {
				t.Errorf("hold in the new window %d, want a's estimate %d", got, windowEstimate)
			}
			for _, k := range []string{"conc", "hold"} {
				if got := w.counter(t, k, first); got != 0 {
					t.Errorf("%s counter of the window a left: %d, want 0", k, got)
				}
			}
			// a ends, costing its estimate: held until committed.
			rec := storage.UsageRecord{RequestID: "a", Model: "m", InputTokens: 10, OutputTokens: 1024}
			w.g1.Finish(a, &rec)
			if tk, ref := w.admit(w.g2, "c"); ref == nil || ref.Kind != billing.RefusedBalance {
				t.Fatalf("c while a's cost waits to be stored: ticket %v, refusal %v; want refused for the balance", tk, ref)
			}
			w.g1.Committed([]storage.UsageRecord{rec})
			for _, k := range []string{"conc", "hold"} {
				for _, at := range []time.Time{first, w.clk.now()} {
					if got := w.counter(t, k, at); got != 0 {
						t.Errorf("%s counter %d at %v after a was committed, want 0", k, got, at)
					}
				}
			}
		})
	}
}

// TestHoldLifeEnds: a ticket never finished is moved into new windows
// only until HoldLife (here two and a half windows) has passed since its
// admission; then it is let go and the user is served again.
func TestHoldLifeEnds(t *testing.T) {
	w := newWindowed(t, billing.Options{HoldLife: 5 * billing.DefaultHoldWindow / 2})
	if _, ref := w.admit(w.g1, "a"); ref != nil {
		t.Fatalf("a refused: %v", ref)
	}
	for i := range 3 {
		w.clk.add(billing.DefaultHoldWindow)
		if err := w.g1.Check(w.ctx); err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			if tk, ref := w.admit(w.g2, "b"+strconv.Itoa(i)); ref == nil {
				t.Fatalf("window %d: b admitted while a is within its hold life (ticket %d)", i+1, tk.Estimate())
			}
		}
	}
	if _, ref := w.admit(w.g2, "c"); ref != nil {
		t.Fatalf("c refused after a's hold life: %v", ref)
	}
}

// TestRefusedForConcurrencyHoldsNothing: a request refused for the user's
// concurrency never held its estimate, so when the cache restarts empty
// and the instance counts again what it holds, only the request in
// flight is held (a refused one counted too would keep its estimate held
// for as long as the instance ran: reassert moves what is live).
func TestRefusedForConcurrencyHoldsNothing(t *testing.T) {
	w := newWindowed(t, billing.Options{})
	w.store.balance = 10 * windowEstimate
	if _, ref := w.admit(w.g1, "a"); ref != nil {
		t.Fatalf("a refused: %v", ref)
	}
	if tk, ref := w.admit(w.g1, "b"); ref == nil || ref.Kind != billing.RefusedConcurrency {
		t.Fatalf("b: ticket %v, refusal %v; want refused for concurrency 1", tk, ref)
	}
	// The cache restarts empty; g1's watch counts again what it holds.
	old := w.cache.Cache
	w.cache.Cache = memcache.New(memcache.Options{SweepInterval: -1})
	old.Close()
	if err := w.g1.Check(w.ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.counter(t, "hold", w.clk.now()); got != windowEstimate {
		t.Errorf("hold %d after the restart, want a's estimate alone (%d)", got, windowEstimate)
	}
	if got := w.counter(t, "conc", w.clk.now()); got != 1 {
		t.Errorf("concurrency counter %d after the restart, want 1 (a)", got)
	}
}
