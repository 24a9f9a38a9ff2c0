package gateway

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/troupe-gw/troupe/translate"
)

// fakeClock is a settable clock shared by the server and its cache.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// limitServer is a test server whose limit counters live in a memory cache
// on clock.
func limitServer(t *testing.T, clock *fakeClock, body string) (*Server, *memStore) {
	t.Helper()
	s, _, _ := testServer(t, 1, cannedTransport{200, "application/json", []byte(body)})
	c := memcache.New(memcache.Options{Now: clock.now, SweepInterval: -1})
	t.Cleanup(func() { c.Close() })
	s.cache, s.now = c, clock.now
	return s, s.store.(*memStore)
}

func limitedKey(t *testing.T, m *memStore, l storage.KeyLimits, models ...string) (string, *storage.APIKey) {
	t.Helper()
	secret, k, err := NewKey("limited-" + strconv.FormatInt(time.Now().UnixNano(), 10))
	if err != nil {
		t.Fatal(err)
	}
	k.ID, k.Limits, k.Models = "id-"+k.Name, l, models
	m.CreateAPIKey(context.Background(), k)
	return secret, &k
}

func wantAdmitted(t *testing.T, s *Server, k *storage.APIKey, what string) {
	t.Helper()
	if _, e := s.admit(context.Background(), k, ""); e != nil {
		t.Fatalf("%s: refused: %d %s", what, e.Status, e.Message)
	}
}

func wantRefused(t *testing.T, s *Server, k *storage.APIKey, what, typ string, retry time.Duration) {
	t.Helper()
	_, e := s.admit(context.Background(), k, "")
	switch {
	case e == nil:
		t.Fatalf("%s: admitted, want 429", what)
	case e.Status != 429 || e.Type != typ || e.Code != "rate_limit_exceeded" || e.RetryAfter != retry:
		t.Errorf("%s: %d %s %s Retry-After %v, want 429 %s rate_limit_exceeded %v", what, e.Status, e.Type, e.Code, e.RetryAfter, typ, retry)
	}
}

// TestLimitsWindows checks RPM, RPD and tokens per day against fixed,
// epoch-aligned windows, with Retry-After the time left in the window.
func TestLimitsWindows(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 11, 30, 23, 59, 50, 0, time.UTC)}
	s, m := limitServer(t, clock, `{}`)

	_, rpm := limitedKey(t, m, storage.KeyLimits{RPM: 2})
	wantAdmitted(t, s, rpm, "rpm 1")
	wantAdmitted(t, s, rpm, "rpm 2")
	wantRefused(t, s, rpm, "rpm 3", "requests", 10*time.Second)
	wantRefused(t, s, rpm, "rpm 4", "requests", 10*time.Second)

	_, rpd := limitedKey(t, m, storage.KeyLimits{RPM: 100, RPD: 1})
	wantAdmitted(t, s, rpd, "rpd 1")
	wantRefused(t, s, rpd, "rpd 2", "requests", 10*time.Second) // the day ends in 10 s too

	_, tpd := limitedKey(t, m, storage.KeyLimits{TokensPerDay: 100})
	wantAdmitted(t, s, tpd, "tokens 0 of 100")
	charge(s, tpd, 60)
	wantAdmitted(t, s, tpd, "tokens 60 of 100")
	charge(s, tpd, 60)
	wantRefused(t, s, tpd, "tokens 120 of 100", "tokens", 10*time.Second)

	// The next minute and day start afresh.
	clock.set(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	wantAdmitted(t, s, rpm, "rpm in the next minute")
	wantAdmitted(t, s, rpd, "rpd on the next day")
	wantAdmitted(t, s, tpd, "tokens on the next day")
	clock.set(time.Date(2026, 12, 1, 0, 0, 30, 0, time.UTC))
	wantAdmitted(t, s, rpm, "rpm 2 in the next minute")
	wantRefused(t, s, rpm, "rpm 3 in the next minute", "requests", 30*time.Second)
	wantRefused(t, s, rpd, "rpd 2 on the next day", "requests", 24*time.Hour-30*time.Second)
}

// charge settles a request of k that was served tokens.
func charge(s *Server, k *storage.APIKey, tokens int64) {
	s.settle(&call{key: k, usage: translate.Usage{InputTokens: tokens}}, "a0", "", false)
}

// countingCache is a storage.Cache that counts its round trips (a call, or
// a batch) and whose calls fail with err when it is set.
type countingCache struct {
	storage.Cache
	calls atomic.Int64
	err   error
}

func (c *countingCache) Get(ctx context.Context, key string) (string, bool, error) {
	c.calls.Add(1)
	if c.err != nil {
		return "", false, c.err
	}
	return c.Cache.Get(ctx, key)
}

func (c *countingCache) Set(ctx context.Context, key, value string, ttl time.Duration) error {
	c.calls.Add(1)
	if c.err != nil {
		return c.err
	}
	return c.Cache.Set(ctx, key, value, ttl)
}

func (c *countingCache) Incr(ctx context.Context, key string, n int64, w time.Duration) (int64, error) {
	c.calls.Add(1)
	if c.err != nil {
		return 0, c.err
	}
	return c.Cache.Incr(ctx, key, n, w)
}

func (c *countingCache) Count(ctx context.Context, key string, w time.Duration) (int64, error) {
	c.calls.Add(1)
	if c.err != nil {
		return 0, c.err
	}
	return c.Cache.Count(ctx, key, w)
}

func (c *countingCache) Batch(ctx context.Context, ops []storage.CacheOp) error {
	c.calls.Add(1)
	if c.err != nil {
		for i := range ops {
			ops[i].Err = c.err
		}
		return c.err
	}
	return storage.Batch(ctx, c.Cache, ops)
}

// TestLimitsCache checks that a key without limits never touches the cache,
// that a key with every limit costs one round trip, and that a cache that
// cannot serve admits the request (limits are a guard, not a dependency).
func TestLimitsCache(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	s, m := limitServer(t, clock, `{}`)
	cc := &countingCache{Cache: s.cache}
	s.cache = cc

	_, free := limitedKey(t, m, storage.KeyLimits{})
	wantAdmitted(t, s, free, "no limits")
	charge(s, free, 1000)
	if n := cc.calls.Load(); n != 0 {
		t.Errorf("a key without limits made %d cache calls", n)
	}
	_, all := limitedKey(t, m, storage.KeyLimits{RPM: 1, RPD: 1, TokensPerDay: 1})
	wantAdmitted(t, s, all, "every limit")
	if n := cc.calls.Load(); n != 1 {
		t.Errorf("a key with RPM, RPD and tokens per day made %d cache round trips, want 1", n)
	}

	cc.err = storage.ErrCacheUnavailable
	for i := range 5 {
		wantAdmitted(t, s, all, "cache unavailable #"+strconv.Itoa(i))
	}
	charge(s, all, 10) // logged, not fatal
}

// A request refused per minute is not charged to its day: after the
// refusals, the day still admits as many requests as its limit allows.
func TestLimitsRefusedMinuteNotChargedToDay(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	s, m := limitServer(t, clock, `{}`)
	_, k := limitedKey(t, m, storage.KeyLimits{RPM: 2, RPD: 4})
	wantAdmitted(t, s, k, "minute 1, request 1")
	wantAdmitted(t, s, k, "minute 1, request 2")
	for i := range 5 {
		wantRefused(t, s, k, "minute 1, refused request "+strconv.Itoa(i), "requests", time.Minute)
	}
	if n, err := s.cache.Count(context.Background(), "rl:rpd:"+k.ID, day); err != nil || n != 2 {
		t.Fatalf("requests counted for the day: %d, %v; want 2 (refused ones are not)", n, err)
	}
	clock.set(clock.now().Add(time.Minute))
	wantAdmitted(t, s, k, "minute 2, request 1 (day 3 of 4)")
	wantAdmitted(t, s, k, "minute 2, request 2 (day 4 of 4)")
	clock.set(clock.now().Add(time.Minute))
	wantRefused(t, s, k, "minute 3: the day is used up", "requests", 24*time.Hour-12*time.Hour-2*time.Minute)
}

// TestLimitsHTTP checks the answers a client gets: 429 in OpenAI's error
// shape with Retry-After, a token budget charged from the answers' usage,
// and 403 for a model outside the allowlist (which is not charged).
func TestLimitsHTTP(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 11, 30, 12, 0, 15, 0, time.UTC)}
	s, m := limitServer(t, clock, `{"id":"x","choices":[],"usage":{"prompt_tokens":30,"completion_tokens":20}}`)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)

	rpm, _ := limitedKey(t, m, storage.KeyLimits{RPM: 1}, "m")
	if r := do(s, "POST", "/v1/chat/completions", rpm, []byte(`{"model":"other","messages":[{"role":"user","content":"hi"}]}`)); r.StatusCode() != 403 || !isOpenAIError(r.Body()) {
		t.Errorf("model outside the allowlist: %d %s", r.StatusCode(), r.Body())
	}
	if r := do(s, "POST", "/v1/chat/completions", rpm, body); r.StatusCode() != 200 {
		t.Fatalf("first request: %d %s (the refused one must not count)", r.StatusCode(), r.Body())
	}
	r := do(s, "POST", "/v1/chat/completions", rpm, body)
	if r.StatusCode() != 429 || !isOpenAIError(r.Body()) || string(r.Header.Peek("Retry-After")) != "45" {
		t.Errorf("second request in the minute: %d Retry-After %q %s", r.StatusCode(), r.Header.Peek("Retry-After"), r.Body())
	}

	tpd, _ := limitedKey(t, m, storage.KeyLimits{TokensPerDay: 100})
	for i := range 2 {
		if r := do(s, "POST", "/v1/chat/completions", tpd, body); r.StatusCode() != 200 {
			t.Fatalf("token budget request %d: %d", i+1, r.StatusCode())
		}
	}
	r = do(s, "POST", "/v1/chat/completions", tpd, body)
	if r.StatusCode() != 429 || !isOpenAIError(r.Body()) || r.Header.Peek("Retry-After") == nil {
		t.Errorf("after 100 of 100 tokens: %d Retry-After %q %s", r.StatusCode(), r.Header.Peek("Retry-After"), r.Body())
	}
}
