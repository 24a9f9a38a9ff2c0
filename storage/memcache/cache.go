// Package memcache is the in-memory storage.Cache of the embedded backend:
// the shared state of one Troupe process (affinity entries, rate-limit
// counters, leases, pub/sub), with nothing shared between processes.
//
// # Layout and cost
//
// Keys are spread over power-of-two shards by a seeded hash; each shard has
// its own lock, a map and a min-heap by expiry per family (entries,
// counters, leases). Get and Count take a shard's read lock; Set, Incr and
// the leases its write lock. Nothing on the hot path takes a global lock,
// and Get, Count and an Incr of an existing counter do not allocate.
//
// # Expiry and the size bound
//
// An expired item is invisible at once (reads compare its expiry with the
// clock) and is dropped by a background sweeper owned by the cache (every
// Options.SweepInterval, stopped by Close). Each family is bounded:
// a shard holds at most ceil(MaxEntries/Shards) items of a family, so the
// whole cache holds at most about MaxEntries entries, MaxEntries counters
// and MaxEntries leases. When a shard is full, adding an item first drops
// the shard's item of that family that expires soonest: an expired one if
// there is any, otherwise the live one closest to expiry (for entries
// written with the same TTL, the oldest). Stats counts both.
//
// # Pub/sub
//
// Publish hands msg to each subscriber's buffered channel without blocking;
// when a subscriber's buffer (Options.SubscriberBuffer) is full the message
// is dropped for that subscriber and counted in Stats.Dropped.
package memcache

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// Defaults for the zero Options.
const (
	DefaultMaxEntries       = 1 << 20
	DefaultShards           = 64
	DefaultSweepInterval    = time.Second
	DefaultSubscriberBuffer = 64
)

// sweepBatch bounds the items one sweep removes from a table per lock hold,
// so that a sweep after a mass expiry never holds a shard lock for long.
const sweepBatch = 1024

// errClosed is returned by every method after Close.
var errClosed = fmt.Errorf("memcache: closed: %w", storage.ErrCacheUnavailable)

// Options configure a Cache. The zero value is valid: every zero field takes
// its default.
type Options struct {
	// MaxEntries bounds each family (entries, counters, leases) to about this
	// many items; see the package documentation. An affinity entry with a
	// 40-byte key costs about 175 bytes, so the default DefaultMaxEntries
	// allows about 180 MB of entries.
	MaxEntries int
	// Shards is the number of lock shards, rounded up to a power of two.
	// Default DefaultShards.
	Shards int
	// SweepInterval is the period of the background sweeper that drops
	// expired items. Default DefaultSweepInterval; negative disables the
	// sweeper (expired items are then dropped only when a full shard needs
	// room, or when overwritten).
	SweepInterval time.Duration
	// SubscriberBuffer is the capacity of each subscription's channel.
	// Default DefaultSubscriberBuffer.
	SubscriberBuffer int
	// Now is the clock; default time.Now. Tests inject a fake one. Expiry,
	// counter windows and leases all read it; the sweeper's period does not.
	Now func() time.Time
}

// Stats is a snapshot of a Cache's state and lifetime counters.
type Stats struct {
	Entries     int    // entries stored, including expired ones not yet swept
	Counters    int    // counters stored, including those of ended windows not yet swept
	Leases      int    // leases stored, including expired ones not yet swept
	Subscribers int    // open subscriptions
	Expired     uint64 // expired items dropped (by the sweeper or to make room)
	Evicted     uint64 // live items dropped to respect MaxEntries
	Dropped     uint64 // messages not delivered because a subscriber's buffer was full
}

// Cache is the in-memory storage.Cache. Create it with New; the zero value
// is not usable. It is safe for concurrent use. Close stops its sweeper and
// ends its subscriptions; afterwards every method returns an error wrapping
// storage.ErrCacheUnavailable.
type Cache struct {
	shards  []shard
	mask    uint64
	seed    maphash.Seed
	perMax  int // items per family per shard
	nowFn   func() time.Time
	hub     hub
	members members // the live instances (fleet.go)
	owned   owned   // the ownership leases of accounts (fleet.go)
	closed  atomic.Bool
	done    chan struct{}
	sweeper sync.WaitGroup

	expired atomic.Uint64
	evicted atomic.Uint64
}

var _ storage.Cache = (*Cache)(nil)

type shard struct {
	mu       sync.RWMutex
	entries  table[string]
	counters table[ckey]
	leases   table[string]
	_        [64]byte // keep neighbouring shards' locks off one cache line
}

// New returns an empty Cache and starts its sweeper.
func New(opts Options) *Cache {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.Shards <= 0 {
		opts.Shards = DefaultShards
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = DefaultSweepInterval
	}
	if opts.SubscriberBuffer <= 0 {
		opts.SubscriberBuffer = DefaultSubscriberBuffer
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	n := 1 << bits.Len(uint(opts.Shards-1))
	c := &Cache{
		shards: make([]shard, n),
		mask:   uint64(n - 1),
		seed:   maphash.MakeSeed(),
		perMax: (opts.MaxEntries + n - 1) / n,
		nowFn:  opts.Now,
		done:   make(chan struct{}),
	}
	c.hub.init(opts.SubscriberBuffer)
	for i := range c.shards {
		s := &c.shards[i]
		s.entries = newTable(itemKey)
		s.counters = newTable(counterKey)
		s.leases = newTable(itemKey)
	}
	if opts.SweepInterval > 0 {
		c.sweeper.Add(1)
		go c.sweep(opts.SweepInterval)
	}
	return c
}

func (c *Cache) now() int64 { return c.nowFn().UnixNano() }

func (c *Cache) shardFor(key string) *shard {
	return &c.shards[maphash.String(c.seed, key)&c.mask]
}

// deadline returns now+d in Unix nanoseconds, saturating instead of overflowing.
func deadline(now int64, d time.Duration) int64 {
	if int64(d) > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + int64(d)
}

func invalid(what string, d time.Duration) error {
	return fmt.Errorf("%w: memcache: %s must be positive, got %v", storage.ErrInvalid, what, d)
}

// add inserts a new item into t, first making room when the shard's share of
// the family is full. The caller holds the shard's write lock.
func add[K comparable](c *Cache, t *table[K], it *item, now int64) {
	for t.len() >= c.perMax {
		victim := t.first()
		if victim.exp <= now {
			c.expired.Add(1)
		} else {
			c.evicted.Add(1)
		}
		t.remove(victim)
	}
	t.insert(it)
}

// Get returns the value of key; ok is false when it is absent or expired.
// It does not allocate.
func (c *Cache) Get(_ context.Context, key string) (string, bool, error) {
	if c.closed.Load() {
		return "", false, errClosed
	}
	now := c.now()
	s := c.shardFor(key)
	s.mu.RLock()
	it := s.entries.m[key]
	if it == nil || it.exp <= now {
		s.mu.RUnlock()
		return "", false, nil
	}
	v := it.val
	s.mu.RUnlock()
	return v, true, nil
}

// Set stores key=value for ttl, replacing any previous value and TTL. A ttl
// that is not positive is refused with an error wrapping storage.ErrInvalid.
func (c *Cache) Set(_ context.Context, key, value string, ttl time.Duration) error {
	if ttl <= 0 {
		return invalid("ttl", ttl)
	}
	if c.closed.Load() {
		return errClosed
	}
	now := c.now()
	exp := deadline(now, ttl)
	s := c.shardFor(key)
	s.mu.Lock()
	if it := s.entries.m[key]; it != nil {
		it.val = value
		s.entries.setExp(it, exp)
	} else {
		add(c, &s.entries, &item{key: key, val: value, exp: exp}, now)
	}
	s.mu.Unlock()
	return nil
}

// Delete removes key; an absent key is not an error.
func (c *Cache) Delete(_ context.Context, key string) error {
	if c.closed.Load() {
		return errClosed
	}
	s := c.shardFor(key)
	s.mu.Lock()
	if it := s.entries.m[key]; it != nil {
		s.entries.remove(it)
	}
	s.mu.Unlock()
	return nil
}

// windowEnd returns the end, in Unix nanoseconds, of the window of length
// w (nanoseconds) that contains now; windows are aligned to the Unix epoch.
func windowEnd(now, w int64) int64 {
	start := now - now%w
	if now%w < 0 { // before 1970: round towards minus infinity
		start -= w
	}
	if start > math.MaxInt64-w {
		return math.MaxInt64
	}
	return start + w
}

// Incr adds n to key's counter in the current fixed window of length window
// and returns the window's new total. A window that is not positive is
// refused with an error wrapping storage.ErrInvalid. Incrementing an
// existing counter does not allocate.
func (c *Cache) Incr(_ context.Context, key string, n int64, window time.Duration) (int64, error) {
	if window <= 0 {
		return 0, invalid("window", window)
	}
	if c.closed.Load() {
		return 0, errClosed
	}
	now := c.now()
	end := windowEnd(now, int64(window))
	s := c.shardFor(key)
	s.mu.Lock()
	it := s.counters.m[ckey{key, int64(window)}]
	switch {
	case it == nil:
		it = &item{key: key, win: int64(window), n: max(n, 0), exp: end}
		add(c, &s.counters, it, now)
	case it.exp != end: // a previous window's counter, not yet swept
		it.n = max(n, 0)
		s.counters.setExp(it, end)
	default:
		it.n = max(it.n+n, 0)
	}
	total := it.n
	s.mu.Unlock()
	return total, nil
}

// Count returns the current window's total for key (0 when it has none)
// without changing it.
func (c *Cache) Count(_ context.Context, key string, window time.Duration) (int64, error) {
	if window <= 0 {
		return 0, invalid("window", window)
	}
	if c.closed.Load() {
		return 0, errClosed
	}
	now := c.now()
	end := windowEnd(now, int64(window))
	s := c.shardFor(key)
	s.mu.RLock()
	var total int64
	if it := s.counters.m[ckey{key, int64(window)}]; it != nil && it.exp == end {
		total = it.n
	}
	s.mu.RUnlock()
	return total, nil
}

// AcquireLease takes the lease key for owner for ttl when it is free,
// expired, or already held by owner (which renews it to now+ttl), and
// reports whether owner holds it. A ttl that is not positive is refused with
// an error wrapping storage.ErrInvalid.
func (c *Cache) AcquireLease(_ context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if ttl <= 0 {
		return false, invalid("ttl", ttl)
	}
	if c.closed.Load() {
		return false, errClosed
	}
	now := c.now()
	exp := deadline(now, ttl)
	s := c.shardFor(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.leases.m[key]
	switch {
	case it == nil:
		add(c, &s.leases, &item{key: key, val: owner, exp: exp}, now)
	case it.exp <= now || it.val == owner:
		it.val = owner
		s.leases.setExp(it, exp)
	default:
		return false, nil
	}
	return true, nil
}

// ReleaseLease frees key if owner holds it; otherwise it does nothing.
func (c *Cache) ReleaseLease(_ context.Context, key, owner string) error {
	if c.closed.Load() {
		return errClosed
	}
	s := c.shardFor(key)
	s.mu.Lock()
	if it := s.leases.m[key]; it != nil && it.val == owner {
		s.leases.remove(it)
	}
	s.mu.Unlock()
	return nil
}

// Publish hands msg to every current subscriber of channel in this process
// without blocking; a subscriber whose buffer is full misses it (counted in
// Stats.Dropped). Publishing to a channel nobody subscribes to is not an error.
func (c *Cache) Publish(_ context.Context, channel, msg string) error {
	if c.closed.Load() {
		return errClosed
	}
	c.hub.publish(channel, msg)
	return nil
}

// Subscribe returns a channel that receives the messages published to
// channel from now on, until ctx ends or the Cache is closed; it is closed
// then. Messages published before Subscribe returns are not delivered. It
// returns ctx's error when ctx has already ended.
func (c *Cache) Subscribe(ctx context.Context, channel string) (<-chan string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.closed.Load() {
		return nil, errClosed
	}
	ch, ok := c.hub.subscribe(ctx, channel)
	if !ok {
		return nil, errClosed
	}
	return ch, nil
}

// Close stops the sweeper and closes every subscription's channel. The
// stored items stay in memory until the Cache is garbage. Close is
// idempotent and always returns nil.
func (c *Cache) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(c.done)
	c.sweeper.Wait()
	c.hub.close()
	return nil
}

// Stats returns a snapshot of the cache's size and counters. It takes every
// shard's read lock in turn: meant for metrics scrapes, not the hot path.
func (c *Cache) Stats() Stats {
	var st Stats
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		st.Entries += s.entries.len()
		st.Counters += s.counters.len()
		st.Leases += s.leases.len()
		s.mu.RUnlock()
	}
	st.Subscribers = c.hub.count()
	st.Expired = c.expired.Load()
	st.Evicted = c.evicted.Load()
	st.Dropped = c.hub.dropped.Load()
	return st
}

func (c *Cache) sweep(every time.Duration) {
	defer c.sweeper.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			c.sweepOnce()
		}
	}
}

// sweepOnce drops every item that has expired by now, shard by shard, never
// holding one lock for more than sweepBatch removals per family.
func (c *Cache) sweepOnce() {
	now := c.now()
	for i := range c.shards {
		s := &c.shards[i]
		for {
			s.mu.Lock()
			n1 := s.entries.expire(now, sweepBatch)
			n2 := s.counters.expire(now, sweepBatch)
			n3 := s.leases.expire(now, sweepBatch)
			s.mu.Unlock()
			c.expired.Add(uint64(n1 + n2 + n3))
			if n1 < sweepBatch && n2 < sweepBatch && n3 < sweepBatch {
				break
			}
		}
	}
}

var _ storage.Batcher = (*Cache)(nil)

// Batch runs ops one after another (storage.RunOps): in memory there is no
// round trip to save, but the fallback cache hands its batches to the local
// cache whole. The limit chain is not atomic against concurrent batches;
// each counter operation is, so limits are still exact. See
// storage.Batcher.
func (c *Cache) Batch(ctx context.Context, ops []storage.CacheOp) error {
	return storage.RunOps(ctx, c, ops)
}
