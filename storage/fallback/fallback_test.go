package fallback

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/troupe-gw/troupe/internal/poll"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/cachetest"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/troupe-gw/troupe/storage/rediscache"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// TestMain silences go-redis's package logger: the tests kill Redis on
// purpose, and every refused dial would print a line.
func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	os.Exit(m.Run())
}

func newMem() *memcache.Cache {
	return memcache.New(memcache.Options{SweepInterval: 20 * time.Millisecond})
}

// TestContractOverMemory runs the suite with a healthy in-memory primary.
func TestContractOverMemory(t *testing.T) {
	cachetest.Run(t, func(t *testing.T) storage.Cache {
		c := New(newMem(), newMem(), Options{ProbeInterval: 50 * time.Millisecond})
		t.Cleanup(func() { c.Close() })
		return c
	})
}

// TestContractOverRedis runs the suite with the shared test Redis as primary.
func TestContractOverRedis(t *testing.T) {
	url := cachetest.RedisURL(t)
	cachetest.Run(t, func(t *testing.T) storage.Cache {
		sl := cachetest.SlackTimeout
		r, err := rediscache.New(t.Context(), url, rediscache.Options{Prefix: cachetest.RedisPrefix(t, url),
			DialTimeout: sl, ReadTimeout: sl, WriteTimeout: sl, PoolTimeout: sl})
		if err != nil {
			t.Fatal(err)
		}
		c := New(r, newMem(), Options{ProbeInterval: 50 * time.Millisecond})
		t.Cleanup(func() { c.Close() })
		return c
	})
}

// TestContractDegraded runs the suite with a primary Redis that is down for
// good: the degraded cache alone must satisfy the contract.
func TestContractDegraded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "redis://" + l.Addr().String() + "/0"
	l.Close()
	cachetest.Run(t, func(t *testing.T) storage.Cache {
		r, err := rediscache.New(t.Context(), dead, rediscache.Options{Lazy: true})
		if err != nil {
			t.Fatal(err)
		}
		c := New(r, newMem(), Options{ProbeInterval: 50 * time.Millisecond, Logger: discard()})
		t.Cleanup(func() {
			waitFor(t, 3*time.Second, "degraded over a dead primary", c.Degraded)
			c.Close()
		})
		return c
	})
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)) }

// flaky is a primary that can be switched off: while down, every call fails
// with ErrCacheUnavailable (subscriptions made before keep delivering, as a
// go-redis subscription that reconnects would).
type flaky struct {
	*memcache.Cache
	down   atomic.Bool
	calls  atomic.Int64
	budget atomic.Int64 // when >= 0, calls left before the primary goes down
	delay  atomic.Int64 // added to every Set and Delete, in nanoseconds
}

func newFlaky() *flaky {
	f := &flaky{Cache: newMem()}
	f.budget.Store(-1)
	return f
}

func (f *flaky) err() error {
	f.calls.Add(1)
	if f.budget.Load() >= 0 && f.budget.Add(-1) < 0 {
		f.down.Store(true)
	}
	if f.down.Load() {
		return fmt.Errorf("flaky: %w", storage.ErrCacheUnavailable)
	}
	return nil
}

func (f *flaky) slow() { time.Sleep(time.Duration(f.delay.Load())) }

func (f *flaky) Ping(context.Context) error { return f.err() }

func (f *flaky) Get(ctx context.Context, key string) (string, bool, error) {
	if err := f.err(); err != nil {
		return "", false, err
	}
	return f.Cache.Get(ctx, key)
}

func (f *flaky) Set(ctx context.Context, key, value string, ttl time.Duration) error {
	f.slow()
	if err := f.err(); err != nil {
		return err
	}
	return f.Cache.Set(ctx, key, value, ttl)
}

func (f *flaky) Delete(ctx context.Context, key string) error {
	f.slow()
	if err := f.err(); err != nil {
		return err
	}
	return f.Cache.Delete(ctx, key)
}

func (f *flaky) Incr(ctx context.Context, key string, n int64, w time.Duration) (int64, error) {
	if err := f.err(); err != nil {
		return 0, err
	}
	return f.Cache.Incr(ctx, key, n, w)
}

func (f *flaky) Count(ctx context.Context, key string, w time.Duration) (int64, error) {
	if err := f.err(); err != nil {
		return 0, err
	}
	return f.Cache.Count(ctx, key, w)
}

func (f *flaky) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := f.err(); err != nil {
		return false, err
	}
	return f.Cache.AcquireLease(ctx, key, owner, ttl)
}

func (f *flaky) ReleaseLease(ctx context.Context, key, owner string) error {
	if err := f.err(); err != nil {
		return err
	}
	return f.Cache.ReleaseLease(ctx, key, owner)
}

func (f *flaky) Publish(ctx context.Context, channel, msg string) error {
	if err := f.err(); err != nil {
		return err
	}
	return f.Cache.Publish(ctx, channel, msg)
}

func (f *flaky) Subscribe(ctx context.Context, channel string) (<-chan string, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	return f.Cache.Subscribe(ctx, channel)
}

// logRecorder collects log records.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	r.mu.Unlock()
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }
func (r *logRecorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, within, what, cond)
}

type harness struct {
	primary *flaky
	local   *memcache.Cache
	c       *Cache
	logs    *logRecorder
	changes chan bool
}

func newHarness(t *testing.T, opts Options) *harness {
	h := &harness{primary: newFlaky(), local: newMem(), logs: &logRecorder{}, changes: make(chan bool, 16)}
	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = 20 * time.Millisecond
	}
	opts.Logger = slog.New(h.logs)
	opts.OnChange = func(d bool) { h.changes <- d }
	h.c = New(h.primary, h.local, opts)
	t.Cleanup(func() { h.c.Close() })
	return h
}

func (h *harness) wantChange(t *testing.T, want bool) {
	t.Helper()
	select {
	case got := <-h.changes:
		if got != want {
			t.Fatalf("OnChange(%v), want OnChange(%v)", got, want)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("no OnChange(%v) within 3s", want)
	}
}

// The harness runs in a synctest bubble in the tests that wait for probes:
// the probe interval passes on the bubble's clock, so "five probes failed"
// is a fact, not a hope.
func TestOutageAndRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{})
		c, ctx := h.c, t.Context()

		// Healthy: writes reach the primary and are mirrored locally.
		must(t, c.Set(ctx, "before", "acct-1", time.Hour))
		if _, err := c.Incr(ctx, "rpm", 3, time.Hour); err != nil {
			t.Fatal(err)
		}
		if v, ok, _ := h.primary.Cache.Get(ctx, "before"); !ok || v != "acct-1" {
			t.Fatal("healthy Set did not reach the primary")
		}
		if v, ok, _ := h.local.Get(ctx, "before"); !ok || v != "acct-1" {
			t.Fatal("healthy Set not mirrored locally")
		}

		// Outage: no errors, served locally, one warning, OnChange(true).
		h.primary.down.Store(true)
		if v, ok, err := c.Get(ctx, "before"); err != nil || !ok || v != "acct-1" {
			t.Fatalf("Get during outage of an entry written before = %q, %v, %v", v, ok, err)
		}
		h.wantChange(t, true)
		if !c.Degraded() {
			t.Fatal("not degraded after an unavailable primary")
		}
		if n, err := c.Incr(ctx, "rpm", 1, time.Hour); err != nil || n != 4 {
			t.Fatalf("Incr during outage = %d, %v; want 4 (continuing the mirrored count)", n, err)
		}
		must(t, c.Set(ctx, "during", "acct-2", time.Hour))
		must(t, c.Set(ctx, "short", "x", 30*time.Millisecond))
		must(t, c.Delete(ctx, "before"))
		if ok, err := c.AcquireLease(ctx, "l", "me", time.Hour); err != nil || !ok {
			t.Fatalf("AcquireLease during outage = %v, %v", ok, err)
		}
		must(t, c.Publish(ctx, "ch", "m"))
		calls := h.primary.calls.Load()
		for range 100 {
			c.Get(ctx, "during")
		}
		if d := h.primary.calls.Load() - calls; d > 10 { // probes only
			t.Fatalf("%d primary calls for 100 degraded Gets: degraded calls must not touch the primary", d)
		}
		if st := c.Stats(); st.Pending != 3 || st.Outages != 1 || st.LocalCalls == 0 {
			t.Fatalf("stats during outage %+v: want 3 pending writes, 1 outage, local calls", st)
		}
		probed := h.primary.calls.Load()
		time.Sleep(100 * time.Millisecond) // on the bubble's clock: five probes, all failing
		synctest.Wait()
		if n := h.primary.calls.Load() - probed; n != 5 {
			t.Fatalf("%d probes in 100 ms of outage, want 5 (one per 20 ms ProbeInterval)", n)
		}

		// Recovery: the journal is copied, then OnChange(false), one info line.
		h.primary.down.Store(false)
		h.wantChange(t, false)
		if c.Degraded() {
			t.Fatal("still degraded after OnChange(false)")
		}
		waitFor(t, 3*time.Second, "outage writes copied", func() bool { return c.Stats().Pending == 0 })
		if v, ok, _ := h.primary.Cache.Get(ctx, "during"); !ok || v != "acct-2" {
			t.Fatalf("outage Set not copied to the primary: %q, %v", v, ok)
		}
		if _, ok, _ := h.primary.Cache.Get(ctx, "before"); ok {
			t.Fatal("outage Delete not copied to the primary")
		}
		if _, ok, _ := h.primary.Cache.Get(ctx, "short"); ok {
			t.Fatal("an outage Set whose TTL ran out was copied")
		}
		if v, ok, _ := c.Get(ctx, "during"); !ok || v != "acct-2" {
			t.Fatal("entry written during the outage lost after recovery")
		}
		st := c.Stats()
		if st.Degraded || st.Recoveries != 1 || st.Pending != 0 || st.Replayed < 2 {
			t.Fatalf("stats after recovery %+v", st)
		}
		logs := h.logs.lines()
		if len(logs) != 2 || !strings.HasPrefix(logs[0], "WARN") || !strings.HasPrefix(logs[1], "INFO") {
			t.Fatalf("logs %q: want one warning and one recovery line", logs)
		}

		// A second outage is logged again.
		h.primary.down.Store(true)
		c.Get(ctx, "x")
		h.wantChange(t, true)
		h.primary.down.Store(false)
		h.wantChange(t, false)
		if n := len(h.logs.lines()); n != 4 {
			t.Fatalf("%d log lines after two outages, want 4", n)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestProbeDetectsOutage: with no traffic, the prober notices the outage.
func TestProbeDetectsOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{})
		h.primary.down.Store(true)
		h.wantChange(t, true)
		h.primary.down.Store(false)
		h.wantChange(t, false)
	})
}

func TestPassThroughErrors(t *testing.T) {
	h := newHarness(t, Options{})
	err := h.c.Set(t.Context(), "k", "v", 0)
	if !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	if h.c.Degraded() {
		t.Fatal("an invalid argument degraded the cache")
	}
}

func TestJournalBound(t *testing.T) {
	h := newHarness(t, Options{MaxPending: 10, ProbeInterval: time.Hour})
	h.primary.down.Store(true)
	for i := range 25 {
		must(t, h.c.Set(t.Context(), fmt.Sprint(i), "v", time.Hour))
	}
	must(t, h.c.Set(t.Context(), "0", "again", time.Hour)) // a journalled key is updated
	if st := h.c.Stats(); st.Pending != 10 || st.ReplayDropped != 15 {
		t.Fatalf("stats %+v: want 10 pending, 15 dropped", st)
	}
}

// TestRecoveryUnderWrites recovers while writers keep writing: every write
// made during the outage ends up in the primary.
func TestRecoveryUnderWrites(t *testing.T) {
	h := newHarness(t, Options{ProbeInterval: 10 * time.Millisecond})
	c := h.c
	h.primary.down.Store(true)
	c.Get(t.Context(), "x")
	h.wantChange(t, true)

	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		written sync.Map
		writes  atomic.Int64
	)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				k := fmt.Sprintf("w%d-%d", w, i)
				if err := c.Set(t.Context(), k, "v", time.Hour); err != nil {
					t.Error(err)
					return
				}
				written.Store(k, true)
				writes.Add(1)
			}
		})
	}
	moreWrites := func(what string, n int64) {
		from := writes.Load()
		waitFor(t, 30*time.Second, what, func() bool { return writes.Load()-from >= n })
	}
	moreWrites("writes during the outage", 500)
	h.primary.down.Store(false)
	h.wantChange(t, false)
	moreWrites("writes after the recovery", 500)
	stop.Store(true)
	wg.Wait()
	waitFor(t, 5*time.Second, "outage writes copied", func() bool { return c.Stats().Pending == 0 })
	missing := 0
	written.Range(func(k, _ any) bool {
		if _, ok, _ := h.primary.Cache.Get(t.Context(), k.(string)); !ok {
			missing++
		}
		return true
	})
	if missing > 0 {
		t.Fatalf("%d writes made around the recovery are not in the primary", missing)
	}
}

// TestSubscribeAcrossOutage: a subscription made while the primary is down
// hears local broadcasts, then joins the primary after recovery.
func TestSubscribeAcrossOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{})
		c, ctx := h.c, t.Context()
		h.primary.down.Store(true)
		sub, err := c.Subscribe(ctx, "policy")
		if err != nil {
			t.Fatal(err)
		}
		h.wantChange(t, true)
		must(t, c.Publish(ctx, "policy", "local"))
		if m := recv(t, sub); m != "local" {
			t.Fatalf("got %q", m)
		}
		h.primary.down.Store(false)
		h.wantChange(t, false)
		// Another instance publishes on the primary directly.
		waitFor(t, 3*time.Second, "subscription joins the primary", func() bool {
			h.primary.Cache.Publish(ctx, "policy", "remote")
			select {
			case m := <-sub:
				return m == "remote"
			case <-time.After(20 * time.Millisecond):
				return false
			}
		})
	})
}

func recv(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("subscription closed")
		}
		return m
	case <-time.After(3 * time.Second):
		t.Fatal("no message within 3s")
		return ""
	}
}

func TestCloseEndsSubscriptions(t *testing.T) {
	c := New(newMem(), newMem(), Options{})
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
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestGetDuringReplay: right after recovery, before the outage's writes are
// copied, Get answers them from the journal, and a newer write wins over
// the copy.
func TestGetDuringReplay(t *testing.T) {
	h := newHarness(t, Options{})
	c, ctx := h.c, t.Context()
	must(t, c.Set(ctx, "pre", "old", time.Hour))
	h.primary.down.Store(true)
	c.Get(ctx, "x")
	h.wantChange(t, true)
	for i := range 50 {
		must(t, c.Set(ctx, fmt.Sprint("k", i), "outage", time.Hour))
	}
	must(t, c.Delete(ctx, "pre"))

	h.primary.delay.Store(int64(20 * time.Millisecond)) // 50 writes / 16 workers: ~80 ms of copying
	h.primary.down.Store(false)
	h.wantChange(t, false)
	if st := c.Stats(); st.Pending == 0 {
		t.Skip("the copy finished before the test could look; nothing to check")
	}
	if v, ok, err := c.Get(ctx, "k49"); err != nil || !ok || v != "outage" {
		t.Fatalf("Get during the copy of a key written in the outage = %q, %v, %v", v, ok, err)
	}
	if _, ok, _ := c.Get(ctx, "pre"); ok {
		t.Fatal("Get during the copy of a key deleted in the outage: present")
	}
	must(t, c.Set(ctx, "k48", "newer", time.Hour))
	waitFor(t, 3*time.Second, "outage writes copied", func() bool { return c.Stats().Pending == 0 })
	if v, _, _ := h.primary.Cache.Get(ctx, "k48"); v != "newer" {
		t.Fatalf("primary has k48 = %q after the copy; want the newer write", v)
	}
	if v, _, _ := h.primary.Cache.Get(ctx, "k49"); v != "outage" {
		t.Fatalf("primary has k49 = %q after the copy", v)
	}
	if _, ok, _ := h.primary.Cache.Get(ctx, "pre"); ok {
		t.Fatal("the outage's Delete was not copied")
	}
}

// TestReplayInterrupted: the primary fails again while the outage's writes
// are being copied; the rest waits for the next recovery behind newer
// writes of the same keys.
func TestReplayInterrupted(t *testing.T) {
	h := newHarness(t, Options{})
	c, ctx := h.c, t.Context()
	h.primary.down.Store(true)
	c.Get(ctx, "x")
	h.wantChange(t, true)
	const n = 500
	for i := range n {
		must(t, c.Set(ctx, fmt.Sprint("k", i), "first", time.Hour))
	}
	h.primary.budget.Store(100) // fails again after 100 calls
	h.primary.down.Store(false)
	h.wantChange(t, false)
	h.wantChange(t, true)
	st := c.Stats()
	if st.Pending == 0 || st.Pending == n || st.Outages != 2 {
		t.Fatalf("stats after an interrupted copy %+v: want some pending, 2 outages", st)
	}
	must(t, c.Set(ctx, "k0", "second", time.Hour))
	must(t, c.Set(ctx, "k499", "second", time.Hour))
	h.primary.budget.Store(-1)
	h.primary.down.Store(false)
	h.wantChange(t, false)
	waitFor(t, 3*time.Second, "outage writes copied", func() bool { return c.Stats().Pending == 0 })
	for i := range n {
		want := "first"
		if i == 0 || i == n-1 {
			want = "second"
		}
		if v, _, _ := h.primary.Cache.Get(ctx, fmt.Sprint("k", i)); v != want {
			t.Fatalf("primary k%d = %q, want %q", i, v, want)
		}
	}
}
