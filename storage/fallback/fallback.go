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
// A batch (storage.Batcher) goes to the primary in one round trip and
// follows the same rules as the calls it holds; when the primary fails it,
// the whole batch runs locally.
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
//     instance (N instances admit up to N times a shared limit). The
//     increments made during it are journalled, summed per counter and
//     window (at most MaxPending windows), and added to the primary once
//     after it recovers, each to the window it was made in, so the shared
//     count of a window that spans the outage includes them; a window
//     that ended during the outage is not added to (its counter is gone).
//     An addition the primary does not answer is not retried (it may have
//     been applied; counting it twice would be worse), and those not yet
//     tried when the primary fails again wait for the next recovery. Until
//     the additions land (one round trip each, right after recovery),
//     Count reads the primary without them.
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

// Options configure a Cache. The zero value is valid.
type Options struct {
	// ProbeInterval is the period of the background probe of the primary,
	// in both states. Default DefaultProbeInterval.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe. Default DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// MaxPending bounds the journal of entry writes made during an outage
	// (distinct keys), and separately the counter windows incremented
	// during one; writes beyond it stay local only (Stats.ReplayDropped).
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
	// PendingCounts is the counter windows incremented during the current
	// outage, waiting to be added to the primary.
	PendingCounts int
	CountsAdded   uint64 // outage counter windows added to the primary after recovery
	CountsDropped uint64 // outage counter windows not added: journal full, or refused or unanswered by the primary
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
	counts    map[countKey]int64       // counter increments of the current outage, summed per window
	replaying map[string]pendingWrite  // writes of the last outage not yet copied to the primary
	copying   map[string]chan struct{} // keys whose copy is being written to the primary; closed when done
	replayOn  atomic.Bool              // replaying is not empty: healthy Get/Set/Delete consult it

	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	prober sync.WaitGroup
	closed sync.Once

	outages, recoveries, primaryErrors, localCalls atomic.Uint64
	replayed, replayDropped, dropped               atomic.Uint64
	countsAdded, countsDropped                     atomic.Uint64
}

var _ storage.Cache = (*Cache)(nil)

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
		counts:    make(map[countKey]int64),
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
	counts := len(c.counts)
	c.mu.Unlock()
	return Stats{
		Degraded:      c.degraded.Load(),
		Outages:       c.outages.Load(),
		Recoveries:    c.recoveries.Load(),
		PrimaryErrors: c.primaryErrors.Load(),
		LocalCalls:    c.localCalls.Load(),
		Pending:       pending,
		PendingCounts: counts,
		CountsAdded:   c.countsAdded.Load(),
		CountsDropped: c.countsDropped.Load(),
		Replayed:      c.replayed.Load(),
		ReplayDropped: c.replayDropped.Load(),
		Dropped:       c.dropped.Load(),
	}
}

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
	v, err := c.local.Incr(ctx, key, n, window)
	if err == nil {
		c.journalCount(key, n, window)
	}
	return v, err
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
