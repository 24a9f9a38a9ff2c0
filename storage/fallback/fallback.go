// Package fallback makes a shared cache's outage a degradation instead of an
// outage: Cache wraps a primary storage.Cache (Redis, shared by every
// instance) and a local one (memcache, this process), serves from the
// primary while it works, and from the local one while the primary fails
// with storage.ErrCacheUnavailable; it probes the primary in the background
// and returns to it by itself.
//
// # States
//
// Healthy: every call goes to the primary. The first call (or background
// probe) that fails with storage.ErrCacheUnavailable turns the cache
// degraded — that call is answered by the local cache, so callers see no
// error — and logs one warning. Errors that are not unavailability (an
// invalid ttl, the caller's context ending) are returned as they are.
//
// Degraded: every call goes to the local cache, without touching the
// primary (a dead Redis costs nothing per request). A probe (Pinger.Ping,
// or a Get when the primary has no Ping) runs every ProbeInterval; the
// first that succeeds turns the cache healthy at once (logging one line)
// and then copies the entry writes made during the outage to the primary in
// the background (see below), so recovery does not wait for the copy.
//
// # What each family does across an outage
//
//   - Entries (affinity): while healthy, Set and Delete are mirrored into the
//     local cache, so that during an outage this instance still finds the
//     entries it wrote before it. Sets and Deletes made during the outage
//     are journalled (the latest per key, at most MaxPending keys) and
//     copied to the primary, with their remaining TTL, after it recovers;
//     until a key is copied, Get answers it from the journal, and a newer
//     Set or Delete of the key supersedes its copy (a write racing the copy
//     of the same key may still lose to it). Lost: entries other instances
//     wrote, which this one cannot see during the outage; entries the
//     primary lost if Redis restarted empty, except those written during
//     the outage (journalled). A Delete made by another instance is not
//     seen by this instance's mirror, so during an outage it may still
//     serve a deleted entry until its TTL ends.
//   - Counters (rate limits): while healthy, Incr is mirrored into the local
//     cache too, so a degraded instance keeps counting from its own share of
//     the window instead of from zero. During an outage limits are per
//     instance (N instances admit up to N times a shared limit); the
//     increments made during it are not added to Redis afterwards.
//   - Leases: during an outage they are exclusive within this instance
//     only; after recovery a lease taken locally is not in Redis, so another
//     instance may take the same lease until the local one's TTL ends.
//     ReleaseLease always also releases the local lease.
//   - Pub/sub: while healthy, Publish goes to the primary only; while
//     degraded, to the local cache only (so this instance's own subscribers
//     still hear its broadcasts, and nobody hears them twice). Other
//     instances miss broadcasts published during the outage: subscribers
//     should treat a recovery (OnChange(false)) as "anything may have
//     changed" and reload what they cache. A Subscribe listens to both
//     caches: its primary subscription survives outages (go-redis redials
//     and resubscribes), and one that could not be made because the primary
//     was down is retried every ProbeInterval once the primary is back. In
//     a rare case — a Publish whose reply timed out although Redis had
//     taken it — a message is delivered twice.
package fallback

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// Defaults for the zero Options.
const (
	DefaultProbeInterval    = time.Second
	DefaultProbeTimeout     = 500 * time.Millisecond
	DefaultMaxPending       = 100_000
	DefaultSubscriberBuffer = 64
)

// replayWorkers is how many journalled writes are copied to the primary at
// once on recovery.
const replayWorkers = 16

// probeKey is the key a probe reads from a primary that has no Ping.
const probeKey = "troupe:fallback:probe"

// Pinger is implemented by primaries that can check their connection
// cheaply (rediscache.Cache: PING). Ping returns an error wrapping
// storage.ErrCacheUnavailable when the backend cannot serve.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Options configure a Cache. The zero value is valid.
type Options struct {
	// ProbeInterval is the period of the background probe of the primary,
	// in both states. Default DefaultProbeInterval.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe. Default DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// MaxPending bounds the journal of entry writes made during an outage
	// (distinct keys); writes beyond it stay local only (Stats.ReplayDropped).
	// Default DefaultMaxPending.
	MaxPending int
	// SubscriberBuffer is the capacity of each subscription's channel.
	// Default DefaultSubscriberBuffer.
	SubscriberBuffer int
	// Logger receives one warning per outage and one line per recovery.
	// Default slog.Default().
	Logger *slog.Logger
	// OnChange, if set, is called with true when the cache turns degraded
	// and with false when it turns healthy again, from the goroutine that
	// noticed (a caller's or the prober's). It must be quick and must not
	// call the Cache's cache methods; Degraded and Stats are fine.
	OnChange func(degraded bool)
}

// Stats is a snapshot of a Cache's state and lifetime counters, meant for
// metrics: export Degraded as a gauge and the rest as counters.
type Stats struct {
	Degraded      bool   // serving from the local cache now
	Outages       uint64 // times the cache turned degraded
	Recoveries    uint64 // times it turned healthy again
	PrimaryErrors uint64 // calls and probes that found the primary unavailable
	LocalCalls    uint64 // calls answered by the local cache because the primary was unavailable
	Pending       int    // entry writes of outages waiting to be copied to the primary
	Replayed      uint64 // outage writes copied to the primary after recovery
	ReplayDropped uint64 // outage writes not copied: journal full, expired, or refused by the primary
	Dropped       uint64 // subscription messages lost because a subscriber did not keep up
}

// Cache is a storage.Cache over a primary and a local cache; see the
// package documentation. It is safe for concurrent use. It owns both caches:
// Close closes them.
type Cache struct {
	primary, local storage.Cache
	opts           Options
	log            *slog.Logger

	degraded atomic.Bool
	since    atomic.Int64 // Unix ns when the current outage began

	mu        sync.Mutex               // guards pending and replaying, and turning healthy against journalling
	pending   map[string]pendingWrite  // entry writes of the current outage
	replaying map[string]pendingWrite  // writes of the last outage not yet copied to the primary
	copying   map[string]chan struct{} // keys whose copy is being written to the primary; closed when done
	replayOn  atomic.Bool              // replaying is not empty: healthy Get/Set/Delete consult it

	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	prober sync.WaitGroup
	closed sync.Once

	outages, recoveries, primaryErrors, localCalls atomic.Uint64
	replayed, replayDropped, dropped               atomic.Uint64
}

var _ storage.Cache = (*Cache)(nil)

// pendingWrite is the latest write to one entry during an outage.
type pendingWrite struct {
	value  string
	expire time.Time // zero for a Delete
}

// New returns a Cache over primary and local and starts its prober. It
// starts healthy; the first probe or call finds out otherwise.
func New(primary, local storage.Cache, opts Options) *Cache {
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = DefaultProbeInterval
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.SubscriberBuffer <= 0 {
		opts.SubscriberBuffer = DefaultSubscriberBuffer
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	c := &Cache{
		primary:   primary,
		local:     local,
		opts:      opts,
		log:       log,
		pending:   make(map[string]pendingWrite),
		replaying: make(map[string]pendingWrite),
		copying:   make(map[string]chan struct{}),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.prober.Add(1)
	go c.probe()
	return c
}

// Degraded reports whether the cache is serving from the local cache.
func (c *Cache) Degraded() bool { return c.degraded.Load() }

// Stats returns a snapshot of the cache's state and counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	pending := len(c.pending) + len(c.replaying)
	c.mu.Unlock()
	return Stats{
		Degraded:      c.degraded.Load(),
		Outages:       c.outages.Load(),
		Recoveries:    c.recoveries.Load(),
		PrimaryErrors: c.primaryErrors.Load(),
		LocalCalls:    c.localCalls.Load(),
		Pending:       pending,
		Replayed:      c.replayed.Load(),
		ReplayDropped: c.replayDropped.Load(),
		Dropped:       c.dropped.Load(),
	}
}

// failed reports whether err from the primary is unavailability, turning
// the cache degraded if so.
func (c *Cache) failed(err error) bool {
	if err == nil || !errors.Is(err, storage.ErrCacheUnavailable) {
		return false
	}
	c.primaryErrors.Add(1)
	if c.degraded.CompareAndSwap(false, true) {
		c.since.Store(time.Now().UnixNano())
		c.outages.Add(1)
		c.log.Warn("cache: primary unavailable, serving from the local cache until it recovers",
			"err", err.Error())
		if c.opts.OnChange != nil {
			c.opts.OnChange(true)
		}
	}
	return true
}

// usePrimary reports whether a call should try the primary; when it should
// not, it counts the call as served locally.
func (c *Cache) usePrimary() bool {
	if c.degraded.Load() {
		c.localCalls.Add(1)
		return false
	}
	return true
}

// fellBack counts a call that tried the primary and is served locally.
func (c *Cache) fellBack() { c.localCalls.Add(1) }

// Get returns the value of key from the primary, or from the local cache
// while the primary is unavailable.
func (c *Cache) Get(ctx context.Context, key string) (string, bool, error) {
	if c.usePrimary() {
		if c.replayOn.Load() {
			if v, ok, found := c.fromReplay(key); found {
				return v, ok, nil
			}
		}
		v, ok, err := c.primary.Get(ctx, key)
		if !c.failed(err) {
			return v, ok, err
		}
		c.fellBack()
	}
	return c.local.Get(ctx, key)
}

// Set stores key=value for ttl in the primary and mirrors it locally; while
// the primary is unavailable it stores it locally and journals it for the
// primary.
func (c *Cache) Set(ctx context.Context, key, value string, ttl time.Duration) error {
	if c.usePrimary() {
		c.supersede(key)
		err := c.primary.Set(ctx, key, value, ttl)
		if !c.failed(err) {
			if err == nil {
				_ = c.local.Set(ctx, key, value, ttl)
			}
			return err
		}
		c.fellBack()
	}
	if err := c.local.Set(ctx, key, value, ttl); err != nil {
		return err
	}
	c.journal(key, pendingWrite{value: value, expire: time.Now().Add(ttl)})
	return nil
}

// Delete removes key from the primary and the local mirror; while the
// primary is unavailable it removes it locally and journals the delete.
func (c *Cache) Delete(ctx context.Context, key string) error {
	if c.usePrimary() {
		c.supersede(key)
		err := c.primary.Delete(ctx, key)
		if !c.failed(err) {
			if err == nil {
				_ = c.local.Delete(ctx, key)
			}
			return err
		}
		c.fellBack()
	}
	if err := c.local.Delete(ctx, key); err != nil {
		return err
	}
	c.journal(key, pendingWrite{})
	return nil
}

// Incr counts in the primary and mirrors the increment locally; while the
// primary is unavailable it counts locally only.
func (c *Cache) Incr(ctx context.Context, key string, n int64, window time.Duration) (int64, error) {
	if c.usePrimary() {
		v, err := c.primary.Incr(ctx, key, n, window)
		if !c.failed(err) {
			if err == nil {
				_, _ = c.local.Incr(ctx, key, n, window)
			}
			return v, err
		}
		c.fellBack()
	}
	return c.local.Incr(ctx, key, n, window)
}

// Count reads the primary's counter, or the local one while the primary is
// unavailable.
func (c *Cache) Count(ctx context.Context, key string, window time.Duration) (int64, error) {
	if c.usePrimary() {
		v, err := c.primary.Count(ctx, key, window)
		if !c.failed(err) {
			return v, err
		}
		c.fellBack()
	}
	return c.local.Count(ctx, key, window)
}

// AcquireLease takes the lease in the primary, or in the local cache while
// the primary is unavailable (exclusive within this instance only).
func (c *Cache) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if c.usePrimary() {
		ok, err := c.primary.AcquireLease(ctx, key, owner, ttl)
		if !c.failed(err) {
			return ok, err
		}
		c.fellBack()
	}
	return c.local.AcquireLease(ctx, key, owner, ttl)
}

// ReleaseLease frees the lease in the primary (unless it is unavailable)
// and in the local cache, where an outage may have left it.
func (c *Cache) ReleaseLease(ctx context.Context, key, owner string) error {
	if c.usePrimary() {
		err := c.primary.ReleaseLease(ctx, key, owner)
		if !c.failed(err) && err != nil {
			return err
		}
	}
	return c.local.ReleaseLease(ctx, key, owner)
}

// Publish sends msg through the primary, or through the local cache (this
// instance's subscribers only) while the primary is unavailable.
func (c *Cache) Publish(ctx context.Context, channel, msg string) error {
	if c.usePrimary() {
		err := c.primary.Publish(ctx, channel, msg)
		if !c.failed(err) {
			return err
		}
		c.fellBack()
	}
	return c.local.Publish(ctx, channel, msg)
}

// Subscribe listens to channel on both caches and merges what they deliver,
// until ctx ends or the Cache is closed; the channel is closed then. It
// returns once both subscriptions are made, or the local one is and the
// primary is unavailable (then the primary one is retried every
// ProbeInterval while the primary is healthy). Messages are dropped, and
// counted in Stats.Dropped, when the subscriber does not keep up.
func (c *Cache) Subscribe(ctx context.Context, channel string) (<-chan string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.ctx, cancel) // Close ends every subscription
	fail := func(err error) (<-chan string, error) {
		stop()
		cancel()
		return nil, err
	}
	lch, err := c.local.Subscribe(sctx, channel)
	if err != nil {
		return fail(err)
	}
	var pch <-chan string
	if c.usePrimary() {
		pch, err = c.primary.Subscribe(sctx, channel)
		if err != nil && !c.failed(err) {
			return fail(err)
		}
	}

	out := make(chan string, c.opts.SubscriberBuffer)
	var wg sync.WaitGroup
	wg.Go(func() { c.forward(lch, out) })
	wg.Go(func() {
		if pch == nil {
			pch = c.resubscribe(sctx, channel)
		}
		if pch != nil {
			c.forward(pch, out)
		}
	})
	go func() {
		wg.Wait()
		stop()
		cancel()
		close(out)
	}()
	return out, nil
}

// forward copies messages from in to out until in is closed, dropping what
// out has no room for.
func (c *Cache) forward(in <-chan string, out chan<- string) {
	for m := range in {
		select {
		case out <- m:
		default:
			c.dropped.Add(1)
		}
	}
}

// resubscribe retries a primary subscription every ProbeInterval, while the
// primary is healthy, until it is made (returned) or ctx ends (nil).
func (c *Cache) resubscribe(ctx context.Context, channel string) <-chan string {
	t := time.NewTicker(c.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if c.degraded.Load() {
			continue
		}
		ch, err := c.primary.Subscribe(ctx, channel)
		if err == nil {
			return ch
		}
		if !c.failed(err) && ctx.Err() == nil {
			c.log.Warn("cache: subscribing to the primary failed; will retry", "channel", channel, "err", err.Error())
		}
	}
}

// journal records an entry write made locally during an outage, for the
// primary. If the cache has meanwhile turned healthy (the write raced a
// recovery), it copies the write to the primary itself.
func (c *Cache) journal(key string, w pendingWrite) {
	for range 3 {
		c.mu.Lock()
		if c.degraded.Load() {
			if _, ok := c.pending[key]; ok || len(c.pending) < c.opts.MaxPending {
				c.pending[key] = w
			} else {
				c.replayDropped.Add(1)
			}
			c.mu.Unlock()
			return
		}
		delete(c.replaying, key)
		copied := c.copying[key]
		c.mu.Unlock()
		if copied != nil {
			<-copied // the outage's copy of key must land first
		}
		if !c.failed(c.apply(c.ctx, key, w)) {
			return
		}
	}
	c.replayDropped.Add(1)
}

// supersede drops key's pending copy, if any: a write made after the
// recovery is newer than the outage's. If that copy is being written to the
// primary right now, it waits until it has landed, so the newer write lands
// after it.
func (c *Cache) supersede(key string) {
	if c.replayOn.Load() {
		c.mu.Lock()
		delete(c.replaying, key)
		copied := c.copying[key]
		c.mu.Unlock()
		if copied != nil {
			<-copied
		}
	}
}

// fromReplay answers a Get for a key whose outage write is still waiting to
// be copied to the primary; found is false when there is none.
func (c *Cache) fromReplay(key string) (value string, ok, found bool) {
	c.mu.Lock()
	w, found := c.replaying[key]
	c.mu.Unlock()
	if !found {
		return "", false, false
	}
	if w.expire.IsZero() || !time.Now().Before(w.expire) {
		return "", false, true // deleted or expired during the outage
	}
	return w.value, true, true
}

// apply performs one journalled write on the primary. A Set whose TTL has
// run out meanwhile is skipped.
func (c *Cache) apply(ctx context.Context, key string, w pendingWrite) error {
	if w.expire.IsZero() {
		return c.primary.Delete(ctx, key)
	}
	ttl := time.Until(w.expire)
	if ttl <= 0 {
		return nil
	}
	return c.primary.Set(ctx, key, w.value, ttl)
}

func (c *Cache) ping(ctx context.Context) error {
	if p, ok := c.primary.(Pinger); ok {
		return p.Ping(ctx)
	}
	_, _, err := c.primary.Get(ctx, probeKey)
	return err
}

// probe checks the primary every ProbeInterval until Close: a failure turns
// the cache degraded, a success while degraded starts the recovery.
func (c *Cache) probe() {
	defer c.prober.Done()
	t := time.NewTicker(c.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.ProbeTimeout)
		err := c.ping(ctx)
		cancel()
		switch {
		case c.ctx.Err() != nil:
			return
		case err != nil:
			c.failed(err)
		case c.degraded.Load():
			c.recover()
		}
	}
}

// recover turns the cache healthy and copies the outage's journal to the
// primary. The switch happens under the journal's lock, so no write can be
// journalled after it: from then on writes go to the primary, and the
// journal moves to replaying, which Get consults and newer writes
// supersede until each key is copied. If the primary fails again during
// the copy, the cache is degraded anew and what was not copied returns to
// the journal (where a newer write of the same key wins) for the next
// recovery.
func (c *Cache) recover() {
	c.mu.Lock()
	for k, w := range c.pending {
		c.replaying[k] = w // replaying may hold the rest of an interrupted copy
	}
	c.pending = make(map[string]pendingWrite)
	c.replayOn.Store(len(c.replaying) > 0)
	c.degraded.Store(false)
	n := len(c.replaying)
	c.mu.Unlock()

	c.recoveries.Add(1)
	outage := time.Duration(time.Now().UnixNano() - c.since.Load())
	c.log.Info("cache: primary recovered, serving from it again",
		"outage", outage.Round(time.Millisecond).String(), "to_copy", n)
	if c.opts.OnChange != nil {
		c.opts.OnChange(false)
	}
	c.replay()
}

// replay copies the writes in replaying to the primary with replayWorkers
// workers, taking each out of replaying once it is copied (until then Get
// answers it from replaying). It stops when they are all copied, the
// primary fails (then the rest goes back to the journal) or the Cache is
// closed.
func (c *Cache) replay() {
	c.mu.Lock()
	keys := make([]string, 0, len(c.replaying))
	for k := range c.replaying {
		keys = append(keys, k)
	}
	c.mu.Unlock()
	var (
		next atomic.Int64
		down atomic.Bool
		wg   sync.WaitGroup
	)
	for range min(replayWorkers, len(keys)) {
		wg.Go(func() {
			for !down.Load() && c.ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(keys) {
					return
				}
				key := keys[i]
				c.mu.Lock()
				w, ok := c.replaying[key]
				done := make(chan struct{})
				if ok {
					c.copying[key] = done // a newer write of key waits for it (supersede)
				}
				c.mu.Unlock()
				if !ok {
					continue // superseded by a newer write
				}
				err := c.apply(c.ctx, key, w)
				c.mu.Lock()
				delete(c.copying, key)
				c.mu.Unlock()
				close(done)
				if errors.Is(err, storage.ErrCacheUnavailable) || c.ctx.Err() != nil {
					down.Store(true)
					c.failed(err)
					continue // stays in replaying; see below
				}
				if err == nil {
					c.replayed.Add(1)
				} else { // refused by the primary: nothing to retry
					c.replayDropped.Add(1)
				}
				// Done: Get may now read it from the primary. Unless a newer
				// write superseded it meanwhile, which left replaying already.
				c.mu.Lock()
				if cur, ok := c.replaying[key]; ok && cur == w {
					delete(c.replaying, key)
				}
				c.mu.Unlock()
			}
		})
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.replaying) > 0 && c.degraded.Load() {
		// Interrupted by a new outage: the rest waits for the next recovery,
		// behind newer journalled writes of the same keys.
		for k, w := range c.replaying {
			if _, newer := c.pending[k]; !newer {
				c.pending[k] = w
			}
		}
		clear(c.replaying)
	}
	c.replayOn.Store(len(c.replaying) > 0)
}

// Close stops the prober, ends every subscription and closes both caches.
// It is idempotent; later calls return nil.
func (c *Cache) Close() error {
	var err error
	c.closed.Do(func() {
		c.cancel()
		c.prober.Wait()
		err = errors.Join(c.primary.Close(), c.local.Close())
	})
	return err
}
