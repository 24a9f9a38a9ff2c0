// Package cachetest is the conformance suite of storage.Cache: every cache
// backend (memcache, rediscache, and the fallback wrapper over them) runs the
// same tests, so that the embedded and the production caches cannot drift
// apart.
//
// A backend's test calls Run with a function that opens an empty cache:
//
//	func TestContract(t *testing.T) {
//		cachetest.Run(t, func(t *testing.T) storage.Cache {
//			c := memcache.New(memcache.Options{})
//			t.Cleanup(func() { c.Close() })
//			return c
//		})
//	}
//
// The suite runs on the real clock with short TTLs and windows (tens to
// hundreds of milliseconds), so it works unchanged against Redis; its
// subtests run in parallel. Redis helpers (RedisURL, RedisPrefix,
// StartRedis) live in redis.go.
package cachetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// Run runs the conformance suite as parallel subtests of t. open is called
// once per subtest and must return a new, empty cache (for a shared Redis:
// one with a key prefix of its own), closing it itself through t.Cleanup.
func Run(t *testing.T, open func(t *testing.T) storage.Cache) {
	tests := []struct {
		name string
		fn   func(t *testing.T, c storage.Cache)
	}{
		{"Entries/RoundTrip", testEntriesRoundTrip},
		{"Entries/Overwrite", testEntriesOverwrite},
		{"Entries/Expiry", testEntriesExpiry},
		{"Entries/InvalidTTL", testEntriesInvalidTTL},
		{"Namespaces", testNamespaces},
		{"Counters/Incr", testCountersIncr},
		{"Counters/Rollover", testCountersRollover},
		{"Counters/Concurrent", testCountersConcurrent},
		{"Counters/InvalidWindow", testCountersInvalidWindow},
		{"Counters/NeverBelowZero", testCountersNeverBelowZero},
		{"Leases/Exclusive", testLeasesExclusive},
		{"Leases/Expiry", testLeasesExpiry},
		{"Leases/Renew", testLeasesRenew},
		{"Leases/Race", testLeasesRace},
		{"Leases/InvalidTTL", testLeasesInvalidTTL},
		{"Ownership/Clean", testOwnershipClean},
		{"PubSub/TwoSubscribers", testPubSubTwoSubscribers},
		{"PubSub/EndsWithContext", testPubSubEndsWithContext},
		{"PubSub/SlowSubscriber", testPubSubSlowSubscriber},
		{"PubSub/NoSubscribers", testPubSubNoSubscribers},
		{"Concurrent/Mixed", testConcurrentMixed},
		{"Batch/Mixed", testBatchMixed},
		{"Batch/LimitChain", testBatchLimitChain},
		{"Batch/LimitConcurrent", testBatchLimitConcurrent},
		{"Batch/Invalid", testBatchInvalid},
		{"Batch/Guard", testBatchGuard},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}

// long is a TTL or window no test outlives.
const long = time.Hour

// eventually polls cond every 10 ms until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustGet(t *testing.T, c storage.Cache, key string) (string, bool) {
	t.Helper()
	v, ok, err := c.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return v, ok
}

func wantValue(t *testing.T, c storage.Cache, key, want string) {
	t.Helper()
	v, ok := mustGet(t, c, key)
	if !ok || v != want {
		t.Fatalf("Get(%q) = %q, %v; want %q, true", key, v, ok, want)
	}
}

func wantAbsent(t *testing.T, c storage.Cache, key string) {
	t.Helper()
	if v, ok := mustGet(t, c, key); ok {
		t.Fatalf("Get(%q) = %q, true; want absent", key, v)
	}
}

func mustSet(t *testing.T, c storage.Cache, key, value string, ttl time.Duration) {
	t.Helper()
	if err := c.Set(t.Context(), key, value, ttl); err != nil {
		t.Fatalf("Set(%q): %v", key, err)
	}
}

func mustIncr(t *testing.T, c storage.Cache, key string, n int64, w time.Duration) int64 {
	t.Helper()
	v, err := c.Incr(t.Context(), key, n, w)
	if err != nil {
		t.Fatalf("Incr(%q, %d, %v): %v", key, n, w, err)
	}
	return v
}

func mustCount(t *testing.T, c storage.Cache, key string, w time.Duration) int64 {
	t.Helper()
	v, err := c.Count(t.Context(), key, w)
	if err != nil {
		t.Fatalf("Count(%q, %v): %v", key, w, err)
	}
	return v
}

func mustAcquire(t *testing.T, c storage.Cache, key, owner string, ttl time.Duration) bool {
	t.Helper()
	ok, err := c.AcquireLease(t.Context(), key, owner, ttl)
	if err != nil {
		t.Fatalf("AcquireLease(%q, %q): %v", key, owner, err)
	}
	return ok
}

func mustRelease(t *testing.T, c storage.Cache, key, owner string) {
	t.Helper()
	if err := c.ReleaseLease(t.Context(), key, owner); err != nil {
		t.Fatalf("ReleaseLease(%q, %q): %v", key, owner, err)
	}
}

func wantInvalid(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("%s: err = %v, want one wrapping storage.ErrInvalid", what, err)
	}
}

func testEntriesRoundTrip(t *testing.T, c storage.Cache) {
	wantAbsent(t, c, "resp_1")
	mustSet(t, c, "resp_1", "acct-a", long)
	mustSet(t, c, "resp_2", "", long) // the empty value is a value
	wantValue(t, c, "resp_1", "acct-a")
	wantValue(t, c, "resp_2", "")
	wantAbsent(t, c, "resp_3")

	if err := c.Delete(t.Context(), "resp_1"); err != nil {
		t.Fatal(err)
	}
	wantAbsent(t, c, "resp_1")
	wantValue(t, c, "resp_2", "")
	if err := c.Delete(t.Context(), "resp_1"); err != nil {
		t.Fatalf("Delete of an absent key: %v", err)
	}
	if err := c.Delete(t.Context(), "never-set"); err != nil {
		t.Fatalf("Delete of a never-set key: %v", err)
	}

	// Keys and values are opaque bytes.
	odd := "sess:ü:\x00:*?[]{}"
	mustSet(t, c, odd, "v\r\n\x00", long)
	wantValue(t, c, odd, "v\r\n\x00")
}

func testEntriesOverwrite(t *testing.T, c storage.Cache) {
	mustSet(t, c, "k", "v1", 100*time.Millisecond)
	mustSet(t, c, "k", "v2", long) // replaces both the value and the TTL
	wantValue(t, c, "k", "v2")
	time.Sleep(250 * time.Millisecond)
	wantValue(t, c, "k", "v2")

	mustSet(t, c, "short", "v1", long)
	mustSet(t, c, "short", "v2", 100*time.Millisecond) // a shorter TTL also replaces
	eventually(t, 3*time.Second, "overwritten entry with a shorter TTL expires", func() bool {
		_, ok := mustGet(t, c, "short")
		return !ok
	})
}

func testEntriesExpiry(t *testing.T, c storage.Cache) {
	const ttl = 150 * time.Millisecond
	set := time.Now()
	mustSet(t, c, "k", "v", ttl)
	mustSet(t, c, "keep", "v", long)
	if v, ok := mustGet(t, c, "k"); !ok && time.Since(set) < ttl/2 {
		t.Fatalf("Get right after Set = %q, %v; want present", v, ok)
	}
	eventually(t, 3*time.Second, "entry expires", func() bool {
		_, ok := mustGet(t, c, "k")
		return !ok
	})
	if d := time.Since(set); d < ttl-5*time.Millisecond {
		t.Fatalf("entry with TTL %v gone after %v", ttl, d)
	}
	wantValue(t, c, "keep", "v")

	// An expired key can be set again.
	mustSet(t, c, "k", "again", long)
	wantValue(t, c, "k", "again")
}

func testEntriesInvalidTTL(t *testing.T, c storage.Cache) {
	wantInvalid(t, "Set with ttl 0", c.Set(t.Context(), "k", "v", 0))
	wantInvalid(t, "Set with a negative ttl", c.Set(t.Context(), "k", "v", -time.Second))
	wantAbsent(t, c, "k")
}

func testNamespaces(t *testing.T, c storage.Cache) {
	mustSet(t, c, "k", "entry", long)
	if got := mustIncr(t, c, "k", 5, long); got != 5 {
		t.Fatalf("Incr of a key that names an entry = %d, want 5", got)
	}
	if !mustAcquire(t, c, "k", "owner", long) {
		t.Fatal("AcquireLease of a key that names an entry and a counter: not acquired")
	}
	wantValue(t, c, "k", "entry")
	if err := c.Delete(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	if got := mustCount(t, c, "k", long); got != 5 {
		t.Fatalf("Count after Delete of the same-named entry = %d, want 5", got)
	}
	if mustAcquire(t, c, "k", "other", long) {
		t.Fatal("lease lost by Delete of the same-named entry")
	}
}

func testCountersIncr(t *testing.T, c storage.Cache) {
	const w = long
	if got := mustCount(t, c, "key-a", w); got != 0 {
		t.Fatalf("Count of a new counter = %d, want 0", got)
	}
	for i, want := range []int64{1, 3, 13, 12} {
		n := []int64{1, 2, 10, -1}[i]
		if got := mustIncr(t, c, "key-a", n, w); got != want {
			t.Fatalf("Incr #%d (n=%d) = %d, want %d", i, n, got, want)
		}
	}
	if got := mustCount(t, c, "key-a", w); got != 12 {
		t.Fatalf("Count = %d, want 12", got)
	}
	if got := mustIncr(t, c, "key-a", 0, w); got != 12 {
		t.Fatalf("Incr by 0 = %d, want 12", got)
	}
	// Another key, and the same key with another window, are other counters.
	if got := mustIncr(t, c, "key-b", 7, w); got != 7 {
		t.Fatalf("Incr of another key = %d, want 7", got)
	}
	if got := mustCount(t, c, "key-a", 2*w); got != 0 {
		t.Fatalf("Count with another window = %d, want 0", got)
	}
	if got := mustIncr(t, c, "key-a", 4, 2*w); got != 4 {
		t.Fatalf("Incr with another window = %d, want 4", got)
	}
	if got := mustCount(t, c, "key-a", w); got != 12 {
		t.Fatalf("Count after other counters moved = %d, want 12", got)
	}
}

// testCountersRollover increments one counter every few milliseconds across
// several windows: within a window the totals grow by one, and at each
// window's end the counter starts again from the first increment. It does
// not compare the backend's clock with the test's, so it also holds for a
// Redis server on another machine.
// A take-back never leaves a counter below zero: callers add what a
// request holds and take it back when it ends, and a counter that lost its
// additions meanwhile (Redis restarted empty, or the request was counted in
// the fallback's local cache during an outage) must not go negative, or a
// user's concurrency and balance holds would be undercounted for the rest
// of the window (tester's finding).
func testCountersNeverBelowZero(t *testing.T, c storage.Cache) {
	const w = long
	if got := mustIncr(t, c, "gone", -3, w); got != 0 {
		t.Fatalf("Incr(-3) of a new counter = %d, want 0", got)
	}
	if got := mustIncr(t, c, "gone", 2, w); got != 2 {
		t.Fatalf("Incr(2) after it = %d, want 2", got)
	}
	if got := mustIncr(t, c, "gone", -5, w); got != 0 {
		t.Fatalf("Incr(-5) of a counter at 2 = %d, want 0", got)
	}
	if got := mustCount(t, c, "gone", w); got != 0 {
		t.Fatalf("Count = %d, want 0", got)
	}
	if got := mustIncr(t, c, "gone", 1, w); got != 1 {
		t.Fatalf("Incr(1) after it = %d, want 1", got)
	}
	ops := []storage.CacheOp{
		{Kind: storage.CacheIncr, Key: "gone-b", N: -1, TTL: w},
		{Kind: storage.CacheIncr, Key: "gone-b", N: 1, TTL: w, Limit: 1},
	}
	mustBatch(t, c, ops)
	if ops[0].Total != 0 || ops[1].Total != 1 || ops[1].Over {
		t.Fatalf("batch totals %d, %d (over %v); want 0, 1 and not over", ops[0].Total, ops[1].Total, ops[1].Over)
	}
}

func testCountersRollover(t *testing.T, c storage.Cache) {
	const w = 250 * time.Millisecond
	var totals []int64
	start := time.Now()
	for time.Since(start) < 4*w+w/2 {
		totals = append(totals, mustIncr(t, c, "rpm", 1, w))
		time.Sleep(10 * time.Millisecond)
	}
	resets := 0
	for i := 1; i < len(totals); i++ {
		switch totals[i] {
		case totals[i-1] + 1:
		case 1:
			resets++
		default:
			t.Fatalf("totals %v: step %d from %d to %d", totals, i, totals[i-1], totals[i])
		}
	}
	// 4.5 windows of time cross 4 or 5 window boundaries; a stalled machine
	// may skip a window without any increment in it, never add one.
	if resets < 2 || resets > 5 {
		t.Fatalf("%d rollovers in %v with a %v window; want 4 or 5 (totals %v)", resets, time.Since(start), w, totals)
	}
	// The totals of every complete window cover about w of increments.
	if m := slices.Max(totals); m > int64(w/(10*time.Millisecond))+2 {
		t.Fatalf("a window counted %d increments made 10 ms apart; want at most %d (totals %v)", m, int64(w/(10*time.Millisecond))+2, totals)
	}
	// A window without increments counts 0.
	time.Sleep(2*w + 50*time.Millisecond)
	if got := mustCount(t, c, "rpm", w); got != 0 {
		t.Fatalf("Count after an idle window = %d, want 0", got)
	}
}

func testCountersConcurrent(t *testing.T, c storage.Cache) {
	// A window this long is aligned to the epoch in steps of 1000 hours: the
	// test would have to straddle such an instant to see a rollover.
	const w, workers, per = 1000 * time.Hour, 8, 100
	var (
		mu   sync.Mutex
		seen = make(map[int64]bool)
		wg   sync.WaitGroup
	)
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range per {
				v, err := c.Incr(t.Context(), "shared", 1, w)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				seen[v] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := mustCount(t, c, "shared", w); got != workers*per {
		t.Fatalf("Count after %d concurrent increments = %d", workers*per, got)
	}
	// Every increment saw its own total: each of 1..N exactly once.
	for i := int64(1); i <= workers*per; i++ {
		if !seen[i] {
			t.Fatalf("no Incr returned the total %d: increments are not atomic", i)
		}
	}
}

func testCountersInvalidWindow(t *testing.T, c storage.Cache) {
	_, err := c.Incr(t.Context(), "k", 1, 0)
	wantInvalid(t, "Incr with window 0", err)
	_, err = c.Incr(t.Context(), "k", 1, -time.Minute)
	wantInvalid(t, "Incr with a negative window", err)
	_, err = c.Count(t.Context(), "k", 0)
	wantInvalid(t, "Count with window 0", err)
}

func testLeasesExclusive(t *testing.T, c storage.Cache) {
	if !mustAcquire(t, c, "refresh:acct-1", "a", long) {
		t.Fatal("a: free lease not acquired")
	}
	if mustAcquire(t, c, "refresh:acct-1", "b", long) {
		t.Fatal("b acquired a lease a holds")
	}
	if !mustAcquire(t, c, "refresh:acct-1", "a", long) {
		t.Fatal("a: re-acquiring its own lease failed")
	}
	if !mustAcquire(t, c, "refresh:acct-2", "b", long) {
		t.Fatal("b: another free lease not acquired")
	}
	mustRelease(t, c, "refresh:acct-1", "b") // not b's: no effect
	if mustAcquire(t, c, "refresh:acct-1", "b", long) {
		t.Fatal("b acquired a's lease after releasing it as b")
	}
	mustRelease(t, c, "refresh:acct-1", "a")
	if !mustAcquire(t, c, "refresh:acct-1", "b", long) {
		t.Fatal("b: lease released by a not acquired")
	}
	if mustAcquire(t, c, "refresh:acct-1", "a", long) {
		t.Fatal("a acquired the lease b now holds")
	}
	mustRelease(t, c, "refresh:acct-1", "b")
	mustRelease(t, c, "refresh:acct-1", "b") // releasing a free lease is fine
	mustRelease(t, c, "never-taken", "x")
}

func testLeasesExpiry(t *testing.T, c storage.Cache) {
	const ttl = 150 * time.Millisecond
	taken := time.Now()
	if !mustAcquire(t, c, "l", "a", ttl) {
		t.Fatal("a: free lease not acquired")
	}
	if mustAcquire(t, c, "l", "b", long) && time.Since(taken) < ttl/2 {
		t.Fatal("b acquired a's lease before it expired")
	}
	eventually(t, 3*time.Second, "b acquires the lease after a's TTL", func() bool {
		return mustAcquire(t, c, "l", "b", long)
	})
	if d := time.Since(taken); d < ttl-5*time.Millisecond {
		t.Fatalf("lease with TTL %v taken over after %v", ttl, d)
	}
	if mustAcquire(t, c, "l", "a", long) {
		t.Fatal("a took the lease back from b")
	}
}

func testLeasesRenew(t *testing.T, c storage.Cache) {
	const ttl = 200 * time.Millisecond
	taken := time.Now()
	if !mustAcquire(t, c, "l", "a", ttl) {
		t.Fatal("a: free lease not acquired")
	}
	time.Sleep(ttl / 2)
	if !mustAcquire(t, c, "l", "a", long) { // renew for long
		t.Fatal("a: renewing its lease failed")
	}
	time.Sleep(time.Until(taken.Add(ttl + 100*time.Millisecond)))
	if mustAcquire(t, c, "l", "b", long) {
		t.Fatal("b acquired a lease a renewed, after the first TTL")
	}
}

func testLeasesRace(t *testing.T, c storage.Cache) {
	const contenders = 16
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  []string
		errs []error
	)
	start := make(chan struct{})
	for i := range contenders {
		owner := "owner-" + strconv.Itoa(i)
		wg.Go(func() {
			<-start
			ok, err := c.AcquireLease(t.Context(), "single-flight", owner, long)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if ok {
				won = append(won, owner)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	if len(won) != 1 {
		t.Fatalf("%d of %d contenders hold the lease: %v; want exactly 1", len(won), contenders, won)
	}
}

func testLeasesInvalidTTL(t *testing.T, c storage.Cache) {
	_, err := c.AcquireLease(t.Context(), "l", "a", 0)
	wantInvalid(t, "AcquireLease with ttl 0", err)
	if !mustAcquire(t, c, "l", "b", long) {
		t.Fatal("a refused acquisition took the lease")
	}
}

// receive returns the next message of ch, failing the test after within.
func receive(t *testing.T, ch <-chan string, within time.Duration) string {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("subscription closed while a message was expected")
		}
		return m
	case <-time.After(within):
		t.Fatalf("no message within %v", within)
		return ""
	}
}

func subscribe(t *testing.T, c storage.Cache, ctx context.Context, channel string) <-chan string {
	t.Helper()
	ch, err := c.Subscribe(ctx, channel)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", channel, err)
	}
	return ch
}

func mustPublish(t *testing.T, c storage.Cache, channel, msg string) {
	t.Helper()
	if err := c.Publish(t.Context(), channel, msg); err != nil {
		t.Fatalf("Publish(%q): %v", channel, err)
	}
}

func testPubSubTwoSubscribers(t *testing.T, c storage.Cache) {
	s1 := subscribe(t, c, t.Context(), "policy")
	s2 := subscribe(t, c, t.Context(), "policy")
	other := subscribe(t, c, t.Context(), "keys")
	msgs := []string{"saved:smart", "saved:sticky", "", "x\r\n\x00"}
	for _, m := range msgs {
		mustPublish(t, c, "policy", m)
	}
	for i, s := range []<-chan string{s1, s2} {
		for _, want := range msgs {
			if got := receive(t, s, 3*time.Second); got != want {
				t.Fatalf("subscriber %d got %q, want %q (in publish order)", i+1, got, want)
			}
		}
	}
	mustPublish(t, c, "keys", "changed:k1")
	if got := receive(t, other, 3*time.Second); got != "changed:k1" {
		t.Fatalf("subscriber of another channel got %q, want only its own channel's messages", got)
	}
}

func testPubSubEndsWithContext(t *testing.T, c storage.Cache) {
	ctx, cancel := context.WithCancel(t.Context())
	ch := subscribe(t, c, ctx, "bye")
	mustPublish(t, c, "bye", "before")
	if got := receive(t, ch, 3*time.Second); got != "before" {
		t.Fatalf("got %q, want %q", got, "before")
	}
	cancel()
	deadline := time.After(3 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				goto closed
			}
		case <-deadline:
			t.Fatal("subscription channel not closed within 3s of its context ending")
		}
	}
closed:
	// Publishing to a channel whose only subscriber left is fine.
	mustPublish(t, c, "bye", "after")

	// A context that has already ended gives an error or a closed channel.
	ch, err := c.Subscribe(ctx, "bye")
	if err == nil {
		select {
		case _, ok := <-ch:
			if ok {
				t.Fatal("Subscribe with an ended context delivered a message")
			}
		case <-time.After(3 * time.Second):
			t.Fatal("Subscribe with an ended context: channel neither closed nor an error")
		}
	}
}

func testPubSubSlowSubscriber(t *testing.T, c storage.Cache) {
	const n = 2000
	slow := subscribe(t, c, t.Context(), "flood") // never read until the end
	start := time.Now()
	for i := range n {
		mustPublish(t, c, "flood", strconv.Itoa(i))
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("%d publishes to a subscriber that does not read took %v", n, d)
	}
	// The cache still delivers to a new subscriber...
	fresh := subscribe(t, c, t.Context(), "flood")
	mustPublish(t, c, "flood", "last")
	for {
		if m := receive(t, fresh, 3*time.Second); m == "last" {
			break
		}
	}
	// ...and the slow one got a prefix-ordered subset: messages are dropped,
	// never reordered.
	prev := -1
	for {
		select {
		case m := <-slow:
			if m == "last" {
				return
			}
			i, err := strconv.Atoi(m)
			if err != nil || i <= prev {
				t.Fatalf("slow subscriber got %q after %d", m, prev)
			}
			prev = i
		case <-time.After(500 * time.Millisecond):
			if prev < 0 {
				t.Fatal("slow subscriber got nothing at all")
			}
			return
		}
	}
}

func testPubSubNoSubscribers(t *testing.T, c storage.Cache) {
	mustPublish(t, c, "nobody-listens", "hello")
}

func testConcurrentMixed(t *testing.T, c storage.Cache) {
	const workers, ops = 8, 200
	var (
		wg    sync.WaitGroup
		incrs atomic.Int64
	)
	errs := make(chan error, workers)
	sub := subscribe(t, c, t.Context(), "mixed")
	for w := range workers {
		wg.Go(func() {
			ctx := t.Context()
			for i := range ops {
				key := fmt.Sprintf("k%d", i%10)
				var err error
				switch i % 6 {
				case 0:
					err = c.Set(ctx, key, strconv.Itoa(w), long)
				case 1:
					_, _, err = c.Get(ctx, key)
				case 2:
					_, err = c.Incr(ctx, key, 1, long)
					incrs.Add(1)
				case 3:
					var ok bool
					if ok, err = c.AcquireLease(ctx, key, strconv.Itoa(w), long); ok && err == nil {
						err = c.ReleaseLease(ctx, key, strconv.Itoa(w))
					}
				case 4:
					err = c.Publish(ctx, "mixed", key)
				case 5:
					err = c.Delete(ctx, key)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var total int64
	for i := range 10 {
		total += mustCount(t, c, fmt.Sprintf("k%d", i), long)
	}
	if want := incrs.Load(); total != want {
		t.Fatalf("sum of counters = %d, want %d", total, want)
	}
	receive(t, sub, 3*time.Second)
}

// testOwnershipClean: a take of an ownership lease (storage.Ownership,
// when the cache has it) is Clean when the account had no holder before
// or its holder released it Drained; not after a release without Drained
// nor after an expiry; a renewal is never Clean.
func testOwnershipClean(t *testing.T, c storage.Cache) {
	o, ok := c.(storage.Ownership)
	if !ok {
		t.Skip("no storage.Ownership")
	}
	renew := func(owner string, cl storage.OwnershipClaim, ttl time.Duration) storage.OwnershipClaim {
		t.Helper()
		claims := []storage.OwnershipClaim{cl}
		if err := o.Renew(t.Context(), owner, claims, ttl); err != nil {
			t.Fatal(err)
		}
		return claims[0]
	}
	take := func(owner string, ttl time.Duration) storage.OwnershipClaim {
		t.Helper()
		return renew(owner, storage.OwnershipClaim{Account: "acc", Want: true}, ttl)
	}
	if cl := take("a", long); cl.Holder != "a" || !cl.Clean {
		t.Fatalf("first take: %+v, want held by a, clean", cl)
	}
	if cl := take("a", long); cl.Holder != "a" || cl.Clean {
		t.Fatalf("renewal: %+v, want held by a, not a clean take", cl)
	}
	if cl := take("b", long); cl.Holder != "a" || cl.Clean {
		t.Fatalf("b's take of a's lease: %+v, want held by a, not clean", cl)
	}
	renew("a", storage.OwnershipClaim{Account: "acc", Drained: true}, long)
	if cl := take("b", long); cl.Holder != "b" || !cl.Clean {
		t.Fatalf("take after a drained release: %+v, want held by b, clean", cl)
	}
	renew("b", storage.OwnershipClaim{Account: "acc"}, long)
	if cl := take("a", 100*time.Millisecond); cl.Holder != "a" || cl.Clean {
		t.Fatalf("take after a release without Drained: %+v, want held by a, not clean", cl)
	}
	var cl storage.OwnershipClaim
	eventually(t, 3*time.Second, "b takes a's lease once it expired", func() bool {
		cl = take("b", long)
		return cl.Holder == "b"
	})
	if cl.Clean {
		t.Fatalf("take after an expiry: %+v, want not clean", cl)
	}
	// A drained release recorded, then an expiry of the next holder's lease:
	// the take after the expiry is not clean.
	renew("b", storage.OwnershipClaim{Account: "acc", Drained: true}, long)
	take("a", 100*time.Millisecond)
	eventually(t, 3*time.Second, "b takes a's lease once it expired", func() bool {
		cl = take("b", long)
		return cl.Holder == "b"
	})
	if cl.Clean {
		t.Fatalf("take after an expiry following a drained release: %+v, want not clean", cl)
	}
}
