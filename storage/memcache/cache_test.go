package memcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/cachetest"
)

func TestContract(t *testing.T) {
	cachetest.Run(t, func(t *testing.T) storage.Cache {
		c := New(Options{SweepInterval: 20 * time.Millisecond})
		t.Cleanup(func() { c.Close() })
		return c
	})
}

// TestContractOneShard runs the suite with every key in one shard and a
// tight bound, so that the heap and eviction paths see real traffic.
func TestContractOneShard(t *testing.T) {
	cachetest.Run(t, func(t *testing.T) storage.Cache {
		c := New(Options{Shards: 1, MaxEntries: 64, SweepInterval: 20 * time.Millisecond})
		t.Cleanup(func() { c.Close() })
		return c
	})
}

// clock is a fake clock, safe for concurrent use.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock(t time.Time) *clock { return &clock{now: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newFake(t *testing.T, opts Options) (*Cache, *clock) {
	clk := newClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	opts.Now = clk.Now
	if opts.SweepInterval == 0 {
		opts.SweepInterval = -1 // the tests sweep by hand
	}
	c := New(opts)
	t.Cleanup(func() { c.Close() })
	return c, clk
}

func TestExpiryFakeClock(t *testing.T) {
	ctx := t.Context()
	c, clk := newFake(t, Options{})
	c.Set(ctx, "k", "v", time.Minute)
	clk.Advance(time.Minute - time.Nanosecond)
	if _, ok, _ := c.Get(ctx, "k"); !ok {
		t.Fatal("entry gone before its TTL")
	}
	clk.Advance(time.Nanosecond)
	if _, ok, _ := c.Get(ctx, "k"); ok {
		t.Fatal("entry visible at its TTL")
	}
	if st := c.Stats(); st.Entries != 1 {
		t.Fatalf("Entries before a sweep = %d, want 1 (expired, not yet dropped)", st.Entries)
	}
	c.sweepOnce()
	if st := c.Stats(); st.Entries != 0 || st.Expired != 1 {
		t.Fatalf("after a sweep: %+v, want no entries and 1 expired", st)
	}
}

func TestWindowsAlignedToEpoch(t *testing.T) {
	ctx := t.Context()
	c, clk := newFake(t, Options{})
	// 12:00:00 plus 59.9 s: the minute window ends at 12:01:00.
	clk.Advance(59*time.Second + 900*time.Millisecond)
	if n, _ := c.Incr(ctx, "k", 1, time.Minute); n != 1 {
		t.Fatalf("Incr = %d, want 1", n)
	}
	if n, _ := c.Incr(ctx, "k", 1, time.Minute); n != 2 {
		t.Fatalf("Incr = %d, want 2", n)
	}
	// An hour window, and a 7-day window, which is aligned to the epoch (a
	// Thursday), not to the zero time.Time.
	c.Incr(ctx, "k", 10, time.Hour)
	week := 7 * 24 * time.Hour
	c.Incr(ctx, "k", 100, week)
	clk.Advance(100 * time.Millisecond) // 12:01:00.000: a new minute
	if n, _ := c.Count(ctx, "k", time.Minute); n != 0 {
		t.Fatalf("Count in the next minute = %d, want 0", n)
	}
	if n, _ := c.Count(ctx, "k", time.Hour); n != 10 {
		t.Fatalf("hour Count = %d, want 10", n)
	}
	if n, _ := c.Incr(ctx, "k", 1, time.Minute); n != 1 {
		t.Fatalf("Incr in the next minute = %d, want 1", n)
	}
	// 2026-03-01 is a Sunday; epoch weeks start on Thursdays: the window
	// ends on Thursday 2026-03-05 00:00 UTC.
	end := time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC)
	clk.Advance(end.Sub(clk.Now()) - time.Nanosecond)
	if n, _ := c.Count(ctx, "k", week); n != 100 {
		t.Fatalf("week Count just before the epoch-aligned boundary = %d, want 100", n)
	}
	clk.Advance(time.Nanosecond)
	if n, _ := c.Count(ctx, "k", week); n != 0 {
		t.Fatalf("week Count at the epoch-aligned boundary = %d, want 0", n)
	}
}

func TestWindowEnd(t *testing.T) {
	for _, tc := range []struct{ now, w, want int64 }{
		{0, 10, 10},
		{9, 10, 10},
		{10, 10, 20},
		{-1, 10, 0},
		{-10, 10, 0},
		{-11, 10, -10},
	} {
		if got := windowEnd(tc.now, tc.w); got != tc.want {
			t.Errorf("windowEnd(%d, %d) = %d, want %d", tc.now, tc.w, got, tc.want)
		}
	}
}

func TestLeaseFakeClock(t *testing.T) {
	ctx := t.Context()
	c, clk := newFake(t, Options{})
	if ok, _ := c.AcquireLease(ctx, "l", "a", time.Second); !ok {
		t.Fatal("a: not acquired")
	}
	clk.Advance(999 * time.Millisecond)
	if ok, _ := c.AcquireLease(ctx, "l", "b", time.Second); ok {
		t.Fatal("b acquired before expiry")
	}
	if ok, _ := c.AcquireLease(ctx, "l", "a", time.Second); !ok { // renew to +1s
		t.Fatal("a: renew failed")
	}
	clk.Advance(999 * time.Millisecond)
	if ok, _ := c.AcquireLease(ctx, "l", "b", time.Second); ok {
		t.Fatal("b acquired a renewed lease")
	}
	clk.Advance(time.Millisecond)
	if ok, _ := c.AcquireLease(ctx, "l", "b", time.Second); !ok {
		t.Fatal("b: expired lease not acquired")
	}
	// a's release of b's lease is a no-op.
	c.ReleaseLease(ctx, "l", "a")
	if ok, _ := c.AcquireLease(ctx, "l", "a", time.Second); ok {
		t.Fatal("a acquired after releasing b's lease")
	}
}

// TestEvictionOrder checks the documented bound: expired entries go first,
// then the live one closest to expiry.
func TestEvictionOrder(t *testing.T) {
	ctx := t.Context()
	c, clk := newFake(t, Options{Shards: 1, MaxEntries: 3})
	c.Set(ctx, "old", "v", 10*time.Minute)
	c.Set(ctx, "short", "v", time.Minute)
	c.Set(ctx, "long", "v", time.Hour)
	c.Set(ctx, "new", "v", 30*time.Minute) // full: drops "short", closest to expiry
	for k, want := range map[string]bool{"old": true, "short": false, "long": true, "new": true} {
		if _, ok, _ := c.Get(ctx, k); ok != want {
			t.Errorf("after the first eviction, %q present = %v, want %v", k, ok, want)
		}
	}
	if st := c.Stats(); st.Evicted != 1 || st.Expired != 0 || st.Entries != 3 {
		t.Fatalf("stats %+v, want 1 evicted, 3 entries", st)
	}
	clk.Advance(15 * time.Minute) // "old" has expired
	c.Set(ctx, "newer", "v", time.Minute)
	if _, ok, _ := c.Get(ctx, "new"); !ok {
		t.Fatal("a live entry was evicted while an expired one was stored")
	}
	if st := c.Stats(); st.Evicted != 1 || st.Expired != 1 || st.Entries != 3 {
		t.Fatalf("stats %+v, want 1 evicted, 1 expired, 3 entries", st)
	}
	// Overwriting an existing key never evicts.
	c.Set(ctx, "long", "v2", time.Hour)
	if st := c.Stats(); st.Evicted != 1 || st.Entries != 3 {
		t.Fatalf("overwrite evicted: %+v", st)
	}
}

func TestBoundPerFamily(t *testing.T) {
	ctx := t.Context()
	c, _ := newFake(t, Options{Shards: 4, MaxEntries: 100})
	for i := range 1000 {
		k := fmt.Sprint(i)
		c.Set(ctx, k, "v", time.Hour)
		c.Incr(ctx, k, 1, time.Hour)
		c.AcquireLease(ctx, k, "o", time.Hour)
	}
	st := c.Stats()
	if st.Entries > 100 || st.Counters > 100 || st.Leases > 100 {
		t.Fatalf("stats %+v exceed MaxEntries=100 per family", st)
	}
	if st.Entries < 50 {
		t.Fatalf("only %d entries kept of a bound of 100", st.Entries)
	}
}

// TestSweeperRuns checks that the background sweeper drops expired items by
// itself (no call touches them): in a synctest bubble, its ticks come as
// soon as every goroutine waits.
func TestSweeperRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(Options{SweepInterval: 5 * time.Millisecond})
		defer c.Close()
		ctx := t.Context()
		for i := range 5000 {
			c.Set(ctx, fmt.Sprint(i), "v", time.Millisecond)
			c.Incr(ctx, fmt.Sprint(i), 1, time.Millisecond)
		}
		if st := c.Stats(); st.Entries != 5000 || st.Counters != 5000 {
			t.Fatalf("before expiry: %+v", st)
		}
		time.Sleep(5 * time.Millisecond) // the first sweep is due now
		synctest.Wait()
		if st := c.Stats(); st.Entries != 0 || st.Counters != 0 {
			t.Fatalf("the sweeper left %+v", st)
		}
	})
}

func TestHeapInvariant(t *testing.T) {
	tb := newTable(itemKey)
	items := map[string]*item{}
	check := func() {
		t.Helper()
		for i, it := range tb.h {
			if it.idx != i {
				t.Fatalf("item %q at %d has idx %d", it.key, i, it.idx)
			}
			if i > 0 && tb.h[(i-1)/2].exp > it.exp {
				t.Fatalf("heap order broken at %d", i)
			}
		}
		if len(tb.m) != len(tb.h) {
			t.Fatalf("map %d, heap %d", len(tb.m), len(tb.h))
		}
	}
	x := uint64(1)
	rnd := func(n int) int { // xorshift: deterministic
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return int(x % uint64(n))
	}
	for range 20000 {
		k := fmt.Sprint(rnd(300))
		switch it := items[k]; {
		case it == nil:
			it = &item{key: k, exp: int64(rnd(1000))}
			tb.insert(it)
			items[k] = it
		case rnd(2) == 0:
			tb.setExp(it, int64(rnd(1000)))
		default:
			tb.remove(it)
			delete(items, k)
		}
		if rnd(100) == 0 {
			now := int64(rnd(1000))
			tb.expire(now, 1<<30)
			for k, it := range items {
				if it.exp <= now {
					delete(items, k)
				}
			}
		}
		check()
	}
}

func TestPubSubDropsCounted(t *testing.T) {
	c := New(Options{SubscriberBuffer: 4})
	defer c.Close()
	ctx := t.Context()
	ch, _ := c.Subscribe(ctx, "x")
	for i := range 10 {
		c.Publish(ctx, "x", fmt.Sprint(i))
	}
	if st := c.Stats(); st.Dropped != 6 || st.Subscribers != 1 {
		t.Fatalf("stats %+v, want 6 dropped, 1 subscriber", st)
	}
	for i := range 4 {
		if m := <-ch; m != fmt.Sprint(i) {
			t.Fatalf("got %q, want %d", m, i)
		}
	}
}

func TestClose(t *testing.T) {
	c := New(Options{})
	ctx := t.Context()
	ch, _ := c.Subscribe(ctx, "x")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-ch; ok {
		t.Fatal("subscription open after Close")
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	errs := []error{
		c.Set(ctx, "k", "v", time.Second),
		c.Delete(ctx, "k"),
		c.Publish(ctx, "x", "m"),
		c.ReleaseLease(ctx, "k", "o"),
	}
	_, _, err := c.Get(ctx, "k")
	errs = append(errs, err)
	_, err = c.Incr(ctx, "k", 1, time.Second)
	errs = append(errs, err)
	_, err = c.Count(ctx, "k", time.Second)
	errs = append(errs, err)
	_, err = c.AcquireLease(ctx, "k", "o", time.Second)
	errs = append(errs, err)
	_, err = c.Subscribe(ctx, "x")
	errs = append(errs, err)
	for i, err := range errs {
		if !errors.Is(err, storage.ErrCacheUnavailable) {
			t.Errorf("call %d after Close: err = %v, want ErrCacheUnavailable", i, err)
		}
	}
}

func TestSubscribeEndedContext(t *testing.T) {
	c := New(Options{})
	defer c.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.Subscribe(ctx, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := c.Stats().Subscribers; n != 0 {
		t.Fatalf("%d subscribers left", n)
	}
}

// TestCloseRacesContext ends subscriptions by context and by Close at once:
// each channel is closed exactly once (a double close would panic in the
// context's callback), every one is closed when Close returns, and once the
// callbacks have run none is left counted.
func TestCloseRacesContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for round := range 50 {
			c := New(Options{})
			var subs []context.CancelFunc
			var chans []<-chan string
			for range 20 {
				ctx, cancel := context.WithCancel(t.Context())
				ch, err := c.Subscribe(ctx, "x")
				if err != nil {
					t.Fatalf("round %d: Subscribe: %v", round, err)
				}
				subs = append(subs, cancel)
				chans = append(chans, ch)
			}
			go func() {
				for _, cancel := range subs {
					cancel()
				}
			}()
			if err := c.Close(); err != nil {
				t.Fatalf("round %d: Close: %v", round, err)
			}
			for i, ch := range chans {
				if _, ok := <-ch; ok {
					t.Fatalf("round %d: subscription %d delivered a message", round, i)
				}
			}
			synctest.Wait() // the cancels and their callbacks have all run
			if n := c.Stats().Subscribers; n != 0 {
				t.Fatalf("round %d: %d subscribers counted after Close", round, n)
			}
		}
	})
}
