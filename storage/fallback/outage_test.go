package fallback

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/cachetest"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/troupe-gw/troupe/storage/rediscache"
)

// TestRedisOutage kills a private redis-server under load and starts it
// again on the same port: callers see no error, the cache degrades and
// recovers by itself, writes after recovery land in the new Redis (and so
// do entries written during the outage), and a subscription made before the
// outage receives again afterwards.
func TestRedisOutage(t *testing.T) {
	srv := cachetest.StartRedis(t)
	ctx := t.Context()
	const prefix = "troupe:"
	// Timeouts well above the defaults (200 ms): on a loaded machine a stall
	// of a few hundred milliseconds must not count as a second outage (it did,
	// with the machine at load 20). The kill itself is seen at once: the dead
	// server's connections are closed and new ones refused.
	sl := cachetest.SlackTimeout
	r, err := rediscache.New(ctx, srv.URL(), rediscache.Options{Prefix: prefix, HealthCheckInterval: 200 * time.Millisecond,
		DialTimeout: sl, ReadTimeout: sl, WriteTimeout: sl, PoolTimeout: sl})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logRecorder{}
	c := New(r, memcache.New(memcache.Options{}), Options{ProbeInterval: 100 * time.Millisecond, Logger: slog.New(logs)})
	defer c.Close()

	sub, err := c.Subscribe(ctx, "policy")
	if err != nil {
		t.Fatal(err)
	}
	must(t, c.Publish(ctx, "policy", "hello"))
	if m := recv(t, sub); m != "hello" {
		t.Fatalf("got %q", m)
	}

	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		ops      atomic.Int64
		errCount atomic.Int64
		firstErr atomic.Value
		slowest  atomic.Int64
	)
	for w := range 8 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				start := time.Now()
				key := fmt.Sprintf("resp_%d_%d", w, i)
				var err error
				if _, err = c.Incr(ctx, fmt.Sprintf("rpm:key%d", i%50), 1, time.Minute); err == nil {
					if err = c.Set(ctx, key, "acct", time.Minute); err == nil {
						var ok bool
						if _, ok, err = c.Get(ctx, key); err == nil && !ok {
							err = fmt.Errorf("Get(%q) right after Set: absent", key)
						}
					}
				}
				if err != nil {
					errCount.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
				ops.Add(1)
				if d := int64(time.Since(start)); d > slowest.Load() {
					slowest.Store(d) // racy max, good enough for a log line
				}
				time.Sleep(time.Millisecond) // ~1,000 requests/s per worker

			}
		})
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	// moreOps waits until the load has made n more operations.
	moreOps := func(what string, n int64) {
		t.Helper()
		from := ops.Load()
		waitFor(t, 30*time.Second, what, func() bool { return ops.Load()-from >= n })
	}

	moreOps("load before the kill", 200)
	srv.Kill()
	killed := time.Now()
	waitFor(t, 3*time.Second, "Degraded() after Redis died", c.Degraded)
	t.Logf("degraded %v after the kill", time.Since(killed).Round(time.Millisecond))
	must(t, c.Set(ctx, "written-during-outage", "acct-7", time.Hour))
	moreOps("load during the outage", 400)
	opsDuringOutage := ops.Load()

	srv.Start()
	restarted := time.Now()
	waitFor(t, 5*time.Second, "Degraded() back to false after Redis returned", func() bool { return !c.Degraded() })
	t.Logf("healthy %v after Redis answered again", time.Since(restarted).Round(time.Millisecond))

	if v, ok, err := c.Get(ctx, "written-during-outage"); err != nil || !ok || v != "acct-7" {
		t.Fatalf("Get right after recovery of a value written during the outage = %q, %v, %v", v, ok, err)
	}
	waitFor(t, 10*time.Second, "the outage's writes copied to the new Redis", func() bool { return c.Stats().Pending == 0 })
	t.Logf("outage's writes copied %v after Redis answered again", time.Since(restarted).Round(time.Millisecond))

	rc := srv.Client()
	must(t, c.Set(ctx, "written-after-recovery", "acct-9", time.Hour))
	if v, err := rc.Get(ctx, prefix+"e:written-after-recovery").Result(); err != nil || v != "acct-9" {
		t.Fatalf("value written after recovery, read from the new Redis: %q, %v", v, err)
	}
	if v, err := rc.Get(ctx, prefix+"e:written-during-outage").Result(); err != nil || v != "acct-7" {
		t.Fatalf("value written during the outage, read from the new Redis: %q, %v", v, err)
	}
	if n, err := c.Incr(ctx, "after", 1, time.Minute); err != nil || n != 1 {
		t.Fatalf("Incr after recovery = %d, %v", n, err)
	}
	if v, err := rc.HGet(ctx, prefix+"c:60000:after", "n").Result(); err != nil || v != "1" {
		t.Fatalf("counter after recovery in the new Redis: %q, %v", v, err)
	}

	// The subscription made before the outage hears another instance that
	// publishes on the new Redis.
	waitFor(t, 5*time.Second, "subscriber receives after the restart", func() bool {
		rc.Publish(ctx, prefix+"policy", "remote")
		for {
			select {
			case m := <-sub:
				if m == "remote" {
					return true
				}
			case <-time.After(50 * time.Millisecond):
				return false
			}
		}
	})
	t.Logf("subscriber receiving %v after Redis answered again", time.Since(restarted).Round(time.Millisecond))

	moreOps("load after the recovery", 200)
	stop.Store(true)
	wg.Wait()
	if n := errCount.Load(); n > 0 {
		t.Fatalf("%d of %d operations returned an error to the caller; first: %v", n, ops.Load(), firstErr.Load())
	}
	st := c.Stats()
	t.Logf("%d operations (%d by the end of the outage), slowest %v; stats %+v; logs %q",
		ops.Load(), opsDuringOutage, time.Duration(slowest.Load()).Round(time.Millisecond), st, logs.lines())
	if st.Outages != 1 || st.Recoveries != 1 || st.Degraded {
		t.Fatalf("stats %+v: want exactly one outage and one recovery", st)
	}
	if lines := logs.lines(); len(lines) != 2 {
		t.Fatalf("logs %q: want one line for the outage and one for the recovery", lines)
	}
}

// TestRedisOutageCounts: the counter increments made while Redis is down,
// by Incr and in a batch (a limit check as the gateway makes it), are
// added to Redis once it is back, exactly once. A private redis-server is
// killed and started again on the same port; it keeps nothing on disk, so
// after the restart its counter holds exactly what the outage added: 5
// (Incr 1 + 2, a batch's 2), not the 3 counted before the kill, and not
// twice the outage's.
func TestRedisOutageCounts(t *testing.T) {
	srv := cachetest.StartRedis(t)
	ctx := t.Context()
	const prefix = "troupe:"
	sl := cachetest.SlackTimeout
	r, err := rediscache.New(ctx, srv.URL(), rediscache.Options{Prefix: prefix, DialTimeout: sl, ReadTimeout: sl, WriteTimeout: sl, PoolTimeout: sl})
	if err != nil {
		t.Fatal(err)
	}
	c := New(r, memcache.New(memcache.Options{}), Options{ProbeInterval: 50 * time.Millisecond, Logger: slog.New(&logRecorder{})})
	defer c.Close()
	// A window of 1000 hours: its end (a multiple of it since the epoch)
	// does not fall within the test.
	const window = 1000 * time.Hour
	if n, err := c.Incr(ctx, "rl:rpm:k", 3, window); err != nil || n != 3 {
		t.Fatalf("Incr before the outage = %d, %v", n, err)
	}
	srv.Kill()
	waitFor(t, 5*time.Second, "Degraded() after Redis died", func() bool {
		_, _ = c.Count(ctx, "rl:rpm:k", window)
		return c.Degraded()
	})
	if n, err := c.Incr(ctx, "rl:rpm:k", 1, window); err != nil || n != 4 {
		t.Fatalf("Incr during the outage = %d, %v; want 4 (the local mirror counts on)", n, err)
	}
	if _, err := c.Incr(ctx, "rl:rpm:k", 2, window); err != nil {
		t.Fatal(err)
	}
	ops := []storage.CacheOp{{Kind: storage.CacheIncr, Key: "rl:rpm:k", N: 2, TTL: window, Limit: 100}}
	if err := storage.Batch(ctx, c, ops); err != nil || ops[0].Total != 8 {
		t.Fatalf("batch during the outage: total %d, %v", ops[0].Total, err)
	}
	if p := c.Stats().PendingCounts; p != 1 {
		t.Fatalf("pending %d during the outage, want 1 (one counter window)", p)
	}

	srv.Start()
	waitFor(t, 10*time.Second, "recovery and the outage's increments added", func() bool {
		return !c.Degraded() && c.Stats().PendingCounts == 0 && c.Stats().CountsAdded >= 1
	})
	rc := srv.Client()
	key := prefix + "c:" + fmt.Sprint(window.Milliseconds()) + ":rl:rpm:k"
	if v, err := rc.HGet(ctx, key, "n").Result(); err != nil || v != "5" {
		t.Fatalf("the restarted Redis's counter = %q, %v; want 5, the outage's increments once", v, err)
	}
	if n, err := c.Incr(ctx, "rl:rpm:k", 1, window); err != nil || n != 6 {
		t.Fatalf("Incr after the recovery = %d, %v; want 6", n, err)
	}
	if st := c.Stats(); st.CountsAdded != 1 || st.CountsDropped != 0 || st.Outages != 1 || st.Recoveries != 1 {
		t.Fatalf("stats %+v: want one counter window added, none dropped, one outage", st)
	}
}
