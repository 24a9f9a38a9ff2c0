package rediscache

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/cachetest"
)

// open returns a Cache on the test Redis with a key prefix of its own.
func open(t testing.TB, opts Options) (*Cache, string) {
	t.Helper()
	url := cachetest.RedisURL(t)
	if opts.Prefix == "" {
		opts.Prefix = cachetest.RedisPrefix(t, url)
	}
	if opts.ReadTimeout == 0 {
		opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = cachetest.SlackTimeout, cachetest.SlackTimeout, cachetest.SlackTimeout, cachetest.SlackTimeout
	}
	c, err := New(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, url
}

func rawClient(t testing.TB, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	t.Cleanup(func() { rc.Close() })
	return rc
}

func TestContract(t *testing.T) {
	cachetest.RedisURL(t) // skip the whole suite at once when Redis is absent
	cachetest.Run(t, func(t *testing.T) storage.Cache {
		c, _ := open(t, Options{})
		return c
	})
}

// deadAddr returns a 127.0.0.1 address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// A dead Redis fails on the cache's own short timeouts, never on the
// caller's deadline (here a generous one that only keeps the test from
// hanging): the error is ErrCacheUnavailable, not the context's.
func TestNewUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := New(ctx, "redis://"+deadAddr(t)+"/0", Options{})
	if !errors.Is(err, storage.ErrCacheUnavailable) || ctx.Err() != nil {
		t.Fatalf("New on a dead port: err = %v (caller's context: %v), want ErrCacheUnavailable on the cache's own timeout", err, ctx.Err())
	}
}

func TestNewInvalidURL(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:6379", "redis://127.0.0.1:6379/notadb", "::"} {
		if _, err := New(t.Context(), u, Options{Lazy: true}); !errors.Is(err, storage.ErrInvalid) {
			t.Errorf("New(%q): err = %v, want ErrInvalid", u, err)
		}
	}
}

// TestUnavailable checks that every method on a dead Redis fails with
// ErrCacheUnavailable on the cache's own timeouts (the caller's deadline,
// generous, only keeps the test from hanging), and that argument errors
// still come first.
func TestUnavailable(t *testing.T) {
	c, err := New(t.Context(), "redis://"+deadAddr(t)+"/0", Options{Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	calls := map[string]func() error{
		"Ping":   func() error { return c.Ping(ctx) },
		"Get":    func() error { _, _, err := c.Get(ctx, "k"); return err },
		"Set":    func() error { return c.Set(ctx, "k", "v", time.Second) },
		"Delete": func() error { return c.Delete(ctx, "k") },
		"Incr":   func() error { _, err := c.Incr(ctx, "k", 1, time.Second); return err },
		"Count":  func() error { _, err := c.Count(ctx, "k", time.Second); return err },
		"AcquireLease": func() error {
			_, err := c.AcquireLease(ctx, "k", "o", time.Second)
			return err
		},
		"ReleaseLease": func() error { return c.ReleaseLease(ctx, "k", "o") },
		"Publish":      func() error { return c.Publish(ctx, "ch", "m") },
		"Subscribe":    func() error { _, err := c.Subscribe(ctx, "ch"); return err },
	}
	for name, call := range calls {
		for range 3 { // the first dials, later ones may fail from the pool's memory of it
			if err := call(); !errors.Is(err, storage.ErrCacheUnavailable) || ctx.Err() != nil {
				t.Fatalf("%s: err = %v (caller's context: %v), want ErrCacheUnavailable on the cache's own timeout", name, err, ctx.Err())
			}
		}
	}
	if err := c.Set(ctx, "k", "v", 0); !errors.Is(err, storage.ErrInvalid) {
		t.Errorf("Set with ttl 0 on a dead Redis: err = %v, want ErrInvalid", err)
	}
}

func TestUnavailableAfterClose(t *testing.T) {
	c, _ := open(t, Options{})
	sub, err := c.Subscribe(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-sub:
		if ok {
			t.Fatal("message after Close")
		}
	case <-time.After(3 * time.Second):
		t.Fatal("subscription open 3s after Close")
	}
	if _, _, err := c.Get(t.Context(), "k"); !errors.Is(err, storage.ErrCacheUnavailable) {
		t.Fatalf("Get after Close: err = %v, want ErrCacheUnavailable", err)
	}
	if _, err := c.Subscribe(t.Context(), "x"); !errors.Is(err, storage.ErrCacheUnavailable) {
		t.Fatalf("Subscribe after Close: err = %v, want ErrCacheUnavailable", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestCallerContextIsNotUnavailability(t *testing.T) {
	c, _ := open(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, _, err := c.Get(ctx, "k")
	if !errors.Is(err, context.Canceled) || errors.Is(err, storage.ErrCacheUnavailable) {
		t.Fatalf("Get with a canceled context: err = %v, want context.Canceled only", err)
	}
}

func TestUnavailableClassification(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), true},
		{redis.ErrClosed, true},
		{redis.ErrPoolTimeout, true},
		{&net.OpError{Op: "read", Err: errors.New("i/o timeout")}, true},
		{redisError("LOADING Redis is loading the dataset in memory"), true},
		{redisError("READONLY You can't write against a read only replica."), true},
		{redisError("OOM command not allowed when used memory > 'maxmemory'."), true},
		{redisError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{redisError("ERR value is not an integer or out of range"), false},
	} {
		if got := unavailable(tc.err); got != tc.want {
			t.Errorf("unavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// TestKeyLayout pins the documented key names, which operators may inspect.
func TestKeyLayout(t *testing.T) {
	c, url := open(t, Options{})
	rc := rawClient(t, url)
	ctx := t.Context()
	c.Set(ctx, "resp_1", "acct", time.Minute)
	c.Incr(ctx, "key_1", 1, time.Minute)
	c.AcquireLease(ctx, "refresh:a", "me", time.Minute)
	if n, err := rc.HGet(ctx, c.prefix+"c:60000:key_1", "n").Result(); err != nil || n != "1" {
		t.Errorf("HGET %sc:60000:key_1 n = %q, %v; want 1", c.prefix, n, err)
	}
	for key, want := range map[string]string{
		c.prefix + "e:resp_1":          "acct",
		c.prefix + "l:refresh:a":       "me",
		c.prefix + "e:does-not-exist-": "",
	} {
		got, err := rc.Get(ctx, key).Result()
		if err == redis.Nil {
			got = ""
		} else if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("GET %s = %q, want %q", key, got, want)
		}
	}
}

// TestCounterWindowAlignment checks that a counter records, and expires at,
// the end of its epoch-aligned window on the server's clock.
func TestCounterWindowAlignment(t *testing.T) {
	c, url := open(t, Options{})
	rc := rawClient(t, url)
	ctx := t.Context()
	for _, w := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, 1500 * time.Microsecond} {
		if _, err := c.Incr(ctx, "k", 1, w); err != nil {
			t.Fatal(err)
		}
		ms := ceilMs(w)
		at, err := rc.PExpireTime(ctx, c.counterKey("k", ms)).Result()
		if err != nil {
			if w < time.Second {
				continue // may have expired already
			}
			t.Fatal(err)
		}
		if at < 0 {
			if w < time.Second {
				continue
			}
			t.Fatalf("window %v: counter has no expiry (%v)", w, at)
		}
		if at%time.Duration(ms) != 0 {
			t.Errorf("window %v: counter expires at %d ms, not a multiple of %d", w, at/time.Millisecond, ms)
		}
		e, err := rc.HGet(ctx, c.counterKey("k", ms), "e").Int64()
		if err != nil || e != int64(at/time.Millisecond) {
			t.Errorf("window %v: counter's end e = %d, %v; want its expiry %d", w, e, err, at/time.Millisecond)
		}
	}
}

// TestIncrExactAcrossInstances has two Caches (two instances) share one
// prefix and count concurrently.
func TestIncrExactAcrossInstances(t *testing.T) {
	a, url := open(t, Options{})
	b, _ := open(t, Options{Prefix: a.prefix})
	_ = url
	const per = 300
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[int64]int{}
	)
	for _, c := range []*Cache{a, b, a, b} {
		wg.Go(func() {
			for range per {
				v, err := c.Incr(t.Context(), "shared", 1, 1000*time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seen[v]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n, _ := b.Count(t.Context(), "shared", 1000*time.Hour); n != 4*per {
		t.Fatalf("Count = %d, want %d", n, 4*per)
	}
	for i := int64(1); i <= 4*per; i++ {
		if seen[i] != 1 {
			t.Fatalf("total %d returned %d times, want once", i, seen[i])
		}
	}
}

func TestPrefixIsolation(t *testing.T) {
	a, _ := open(t, Options{})
	b, _ := open(t, Options{})
	ctx := t.Context()
	a.Set(ctx, "k", "a", time.Minute)
	a.Incr(ctx, "k", 5, time.Minute)
	a.AcquireLease(ctx, "k", "a", time.Minute)
	if _, ok, _ := b.Get(ctx, "k"); ok {
		t.Fatal("entry visible under another prefix")
	}
	if n, _ := b.Count(ctx, "k", time.Minute); n != 0 {
		t.Fatal("counter visible under another prefix")
	}
	if ok, _ := b.AcquireLease(ctx, "k", "b", time.Minute); !ok {
		t.Fatal("lease shared across prefixes")
	}
	sub, err := b.Subscribe(ctx, "ch")
	if err != nil {
		t.Fatal(err)
	}
	a.Publish(ctx, "ch", "from-a")
	b.Publish(ctx, "ch", "from-b")
	select {
	case m := <-sub:
		if m != "from-b" {
			t.Fatalf("subscriber under prefix b got %q", m)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no message")
	}
}

// TestSubscriptionSurvivesRestart kills a private Redis under a subscriber
// and starts it again: the subscriber keeps receiving without resubscribing.
func TestSubscriptionSurvivesRestart(t *testing.T) {
	srv := cachetest.StartRedis(t)
	sl := cachetest.SlackTimeout
	c, err := New(t.Context(), srv.URL(), Options{Prefix: "t:", HealthCheckInterval: 200 * time.Millisecond,
		DialTimeout: sl, ReadTimeout: sl, WriteTimeout: sl, PoolTimeout: sl})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	sub, err := c.Subscribe(ctx, "policy")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, "policy", "before"); err != nil {
		t.Fatal(err)
	}
	if m := <-sub; m != "before" {
		t.Fatalf("got %q", m)
	}

	srv.Kill()
	if err := c.Publish(ctx, "policy", "during"); !errors.Is(err, storage.ErrCacheUnavailable) {
		t.Fatalf("Publish with Redis down: err = %v, want ErrCacheUnavailable", err)
	}
	// The kill broke the subscription's connection: whenever its reader
	// notices, it must redial and resubscribe to the new server.
	srv.Start()
	restarted := time.Now()

	deadline := restarted.Add(10 * time.Second)
	for i := 0; ; i++ {
		if time.Now().After(deadline) {
			t.Fatal("subscriber received nothing within 10s of Redis coming back")
		}
		_ = c.Publish(ctx, "policy", "after-"+strconv.Itoa(i))
		select {
		case m, ok := <-sub:
			if !ok {
				t.Fatal("subscription closed by the outage")
			}
			t.Logf("received %q %v after Redis answered again", m, time.Since(restarted))
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}
