// Package rediscache is the production storage.Cache: Redis through
// go-redis v9, shared by every Troupe instance of a deployment.
//
// # Keys
//
// Every key and pub/sub channel is namespaced by Options.Prefix, so that
// deployments and tests can share one Redis (pub/sub channels are global to
// a Redis server, not per database). Under the prefix:
//
//	<prefix>e:<key>            entry (string, PX ttl)
//	<prefix>c:<window ms>:<key> counter: hash {e: window end (Unix ms), n: total}, PEXPIREAT e
//	<prefix>l:<key>            lease (string owner, PX ttl)
//	<prefix>f:live, f:info     the live members of a fleet (fleet.go, storage.Membership)
//	<prefix><channel>          pub/sub channel
//
// # Counters
//
// Incr and Count are Lua scripts that place "now" in a window with the Redis
// server's clock (TIME), so windows are aligned to the Unix epoch by one
// clock for every instance and counts are exact across instances. A counter
// remembers its window's end: an increment in a later window starts it
// again from n. Windows are whole milliseconds (rounded up).
//
// # Leases
//
// AcquireLease is one Lua script (SET NX PX, or PEXPIRE when the holder is
// the same owner: a renewal); ReleaseLease is a compare-and-delete script.
// TTLs are whole milliseconds (rounded up).
//
// # Failure
//
// Timeouts are short by default (Default*Timeout) so that a dead Redis costs
// little per call, and commands are not retried. Every error that means
// Redis cannot serve — dial refused, timeouts, pool timeouts, io.EOF, a
// closed client, and server replies such as LOADING, BUSY, READONLY, OOM,
// MASTERDOWN, NOAUTH — wraps storage.ErrCacheUnavailable. The caller's own
// context ending is reported as its context error, not as unavailability.
//
// go-redis logs failed dials through its package logger, about one line per
// second during an outage; UseLogger sends them to slog.
package rediscache

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/troupe-gw/troupe/internal/sock"
	"github.com/troupe-gw/troupe/storage"
)

// Defaults for the zero Options.
const (
	DefaultDialTimeout         = 200 * time.Millisecond
	DefaultReadTimeout         = 200 * time.Millisecond
	DefaultWriteTimeout        = 200 * time.Millisecond
	DefaultPoolTimeout         = 200 * time.Millisecond
	DefaultSubscriberBuffer    = 64
	DefaultHealthCheckInterval = time.Second
)

// Options configure a Cache. Timeouts and the pool size come from the first
// of: the Options field when non-zero, the URL's query parameter
// (dial_timeout, read_timeout, write_timeout, pool_timeout, pool_size,
// max_retries, as go-redis parses them), the default.
type Options struct {
	// Prefix namespaces every key and channel, e.g. "troupe:". Empty is
	// allowed but then the deployment owns the whole Redis server's channels.
	Prefix string

	DialTimeout  time.Duration // per connection attempt; default DefaultDialTimeout
	ReadTimeout  time.Duration // per reply; default DefaultReadTimeout
	WriteTimeout time.Duration // per command write; default DefaultWriteTimeout
	PoolTimeout  time.Duration // waiting for a free pooled connection; default DefaultPoolTimeout
	PoolSize     int           // pooled connections; default go-redis's (10 per GOMAXPROCS)

	// SubscriberBuffer is the capacity of each subscription's channel;
	// a subscriber that lets it fill loses messages (Stats.Dropped).
	// Default DefaultSubscriberBuffer.
	SubscriberBuffer int
	// HealthCheckInterval is how often an idle subscription PINGs Redis to
	// detect a silently dead connection and resubscribe. Default
	// DefaultHealthCheckInterval.
	HealthCheckInterval time.Duration

	// Lazy makes New skip its PING, so that New succeeds while Redis is
	// down; unavailability then shows in the first calls. Use it under
	// storage/fallback, so that an instance can start during an outage.
	Lazy bool
}

// Stats counts a Cache's pub/sub activity.
type Stats struct {
	Subscribers int    // open subscriptions
	Dropped     uint64 // messages not delivered because a subscriber's buffer was full
}

// Cache is the Redis storage.Cache. It is safe for concurrent use. Close
// ends its subscriptions and closes its connections; afterwards every
// method returns an error wrapping storage.ErrCacheUnavailable.
type Cache struct {
	rdb     *redis.Client
	prefix  string
	opts    Options
	confirm time.Duration // bound on a subscription's confirmation: dial + read timeouts

	mu      sync.Mutex
	subs    map[*redis.PubSub]struct{}
	closed  bool
	dropped atomic.Uint64
}

var _ storage.Cache = (*Cache)(nil)

// New connects to the Redis at url (redis://[user:password@]host:port/db or
// rediss:// for TLS) and, unless opts.Lazy, checks it with a PING bounded by
// ctx and the dial and read timeouts. A malformed URL is an error wrapping
// storage.ErrInvalid; an unreachable Redis one wrapping
// storage.ErrCacheUnavailable.
func New(ctx context.Context, url string, opts Options) (*Cache, error) {
	ro, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: rediscache: cache url: %v", storage.ErrInvalid, err)
	}
	pick := func(opt, fromURL, def time.Duration) time.Duration {
		switch {
		case opt != 0:
			return opt
		case fromURL != 0:
			return fromURL
		}
		return def
	}
	ro.DialTimeout = pick(opts.DialTimeout, ro.DialTimeout, DefaultDialTimeout)
	ro.ReadTimeout = pick(opts.ReadTimeout, ro.ReadTimeout, DefaultReadTimeout)
	ro.WriteTimeout = pick(opts.WriteTimeout, ro.WriteTimeout, DefaultWriteTimeout)
	ro.PoolTimeout = pick(opts.PoolTimeout, ro.PoolTimeout, DefaultPoolTimeout)
	if opts.PoolSize > 0 {
		ro.PoolSize = opts.PoolSize
	}
	if ro.MaxRetries == 0 {
		ro.MaxRetries = -1 // no retries: a dead Redis costs one timeout, and Incr is not idempotent
	}
	ro.DialerRetries = 1 // go-redis's default is 5 attempts 100 ms apart
	ro.DisableIdentity = true
	if ro.TLSConfig == nil {
		// go-redis's own dialer, its connections' reads and writes made raw (internal/sock).
		ro.Dialer = sock.Dial(&net.Dialer{Timeout: ro.DialTimeout, KeepAlive: 5 * time.Minute})
	}
	if opts.SubscriberBuffer <= 0 {
		opts.SubscriberBuffer = DefaultSubscriberBuffer
	}
	if opts.HealthCheckInterval <= 0 {
		opts.HealthCheckInterval = DefaultHealthCheckInterval
	}
	c := &Cache{
		rdb:    redis.NewClient(ro),
		prefix: opts.Prefix,
		opts:   opts,
		subs:   make(map[*redis.PubSub]struct{}),
		// ReadTimeout -1 means none: bound the confirmation anyway.
		confirm: ro.DialTimeout + max(ro.ReadTimeout, DefaultReadTimeout),
	}
	if !opts.Lazy {
		if err := c.Ping(ctx); err != nil {
			c.rdb.Close()
			return nil, err
		}
	}
	return c, nil
}

// Ping checks that Redis answers. It makes *Cache a fallback.Pinger.
func (c *Cache) Ping(ctx context.Context) error {
	return c.wrap(ctx, "ping", c.rdb.Ping(ctx).Err())
}

// Stats returns the cache's pub/sub counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	n := len(c.subs)
	c.mu.Unlock()
	return Stats{Subscribers: n, Dropped: c.dropped.Load()}
}

// unavailableReplies are the prefixes of Redis error replies that mean the
// server cannot serve now rather than that the command was wrong.
var unavailableReplies = []string{
	"LOADING", "BUSY", "MASTERDOWN", "READONLY", "TRYAGAIN", "CLUSTERDOWN",
	"OOM", "MISCONF", "NOAUTH", "WRONGPASS", "NOREPLICAS", "ERR max number of clients",
}

// unavailable reports whether err (not redis.Nil) means Redis cannot serve:
// every transport error (dial, timeout, EOF, closed client, pool timeout)
// and the error replies in unavailableReplies.
func unavailable(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true
	}
	msg := rerr.Error()
	for _, p := range unavailableReplies {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// wrap classifies err from an operation op: nil stays nil; the caller's own
// context ending is returned as is; unavailability wraps
// storage.ErrCacheUnavailable; anything else is returned with op for context.
func (c *Cache) wrap(ctx context.Context, op string, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		// The caller's deadline or cancellation cut the call short, whatever
		// error go-redis saw (a read deadline taken from ctx is an i/o
		// timeout): not evidence that Redis is down.
		if errors.Is(err, ctx.Err()) {
			return fmt.Errorf("rediscache: %s: %w", op, err)
		}
		return fmt.Errorf("rediscache: %s: %w (%v)", op, ctx.Err(), err)
	case unavailable(err):
		return fmt.Errorf("rediscache: %s: %w: %w", op, storage.ErrCacheUnavailable, err)
	}
	return fmt.Errorf("rediscache: %s: %w", op, err)
}

func invalid(what string, d time.Duration) error {
	return fmt.Errorf("%w: rediscache: %s must be positive, got %v", storage.ErrInvalid, what, d)
}

// ceilMs rounds d up to whole milliseconds (d > 0).
func ceilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func (c *Cache) entryKey(key string) string { return c.prefix + "e:" + key }
func (c *Cache) leaseKey(key string) string { return c.prefix + "l:" + key }

func (c *Cache) counterKey(key string, windowMs int64) string {
	var b strings.Builder
	b.Grow(len(c.prefix) + 24 + len(key))
	b.WriteString(c.prefix)
	b.WriteString("c:")
	var num [20]byte
	b.Write(strconv.AppendInt(num[:0], windowMs, 10))
	b.WriteByte(':')
	b.WriteString(key)
	return b.String()
}

// Get returns the value of key; ok is false when it is absent or expired.
func (c *Cache) Get(ctx context.Context, key string) (string, bool, error) {
	v, err := c.rdb.Get(ctx, c.entryKey(key)).Result()
	switch {
	case err == redis.Nil:
		return "", false, nil
	case err != nil:
		return "", false, c.wrap(ctx, "get", err)
	}
	return v, true, nil
}

// Set stores key=value for ttl (rounded up to whole milliseconds), replacing
// any previous value and TTL. A ttl that is not positive is refused with an
// error wrapping storage.ErrInvalid.
func (c *Cache) Set(ctx context.Context, key, value string, ttl time.Duration) error {
	if ttl <= 0 {
		return invalid("ttl", ttl)
	}
	err := c.rdb.Do(ctx, "SET", c.entryKey(key), value, "PX", ceilMs(ttl)).Err()
	return c.wrap(ctx, "set", err)
}

// Delete removes key; an absent key is not an error.
func (c *Cache) Delete(ctx context.Context, key string) error {
	return c.wrap(ctx, "delete", c.rdb.Del(ctx, c.entryKey(key)).Err())
}

// incrScript adds ARGV[1] to the counter KEYS[1] in the ARGV[2]-millisecond
// window, aligned to the Unix epoch, that contains the server's clock, never
// taking it below 0 (storage.Cache.Incr). The
// counter is a hash: e is its window's end (Unix ms), n its total. The window
// is decided by comparing e, not by the key's expiry, because Redis keeps a
// key alive through the very millisecond of its expiry time (and a script's
// key-expiry clock is a snapshot taken when it starts); PEXPIREAT at the
// window's end only collects it. Times fit a Lua double exactly (< 2^53 ms).
var incrScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local w = tonumber(ARGV[2])
local e = string.format('%.0f', now - now % w + w)
if redis.call('HGET', KEYS[1], 'e') == e then
  local v = redis.call('HINCRBY', KEYS[1], 'n', ARGV[1])
  if v < 0 then
    redis.call('HSET', KEYS[1], 'n', 0)
    v = 0
  end
  return v
end
local n = ARGV[1]
if tonumber(n) < 0 then n = '0' end
redis.call('HSET', KEYS[1], 'e', e, 'n', n)
redis.call('PEXPIREAT', KEYS[1], e)
return tonumber(n)
`)

// countScript returns the total of the counter KEYS[1] when it belongs to
// the current ARGV[1]-millisecond window, and 0 otherwise.
var countScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local w = tonumber(ARGV[1])
local e = string.format('%.0f', now - now % w + w)
local v = redis.call('HMGET', KEYS[1], 'e', 'n')
if v[1] == e then
  return tonumber(v[2])
end
return 0
`)

// Incr adds n to key's counter in the current fixed window of length window
// (rounded up to whole milliseconds) on the Redis server's clock, and
// returns the window's new total, exact across every instance sharing the
// Redis. The total is never below 0: a take-back larger than the counter
// (Redis restarted empty meanwhile) leaves it at 0. A window that is not positive is refused with an error wrapping
// storage.ErrInvalid.
func (c *Cache) Incr(ctx context.Context, key string, n int64, window time.Duration) (int64, error) {
	if window <= 0 {
		return 0, invalid("window", window)
	}
	w := ceilMs(window)
	v, err := incrScript.Run(ctx, c.rdb, []string{c.counterKey(key, w)}, n, w).Int64()
	if err != nil {
		return 0, c.wrap(ctx, "incr", err)
	}
	return v, nil
}

// Count returns the current window's total for key (0 when it has none)
// without changing it.
func (c *Cache) Count(ctx context.Context, key string, window time.Duration) (int64, error) {
	if window <= 0 {
		return 0, invalid("window", window)
	}
	w := ceilMs(window)
	v, err := countScript.Run(ctx, c.rdb, []string{c.counterKey(key, w)}, w).Int64()
	if err != nil {
		return 0, c.wrap(ctx, "count", err)
	}
	return v, nil
}

// acquireScript takes KEYS[1] for owner ARGV[1] for ARGV[2] ms when it is
// free (SET NX PX) or renews it when ARGV[1] already holds it.
var acquireScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// releaseScript deletes KEYS[1] if owner ARGV[1] holds it.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// AcquireLease takes the lease key for owner for ttl (rounded up to whole
// milliseconds) when it is free or expired, or renews it to now+ttl when
// owner already holds it, and reports whether owner holds it. It is one
// atomic script. A ttl that is not positive is refused with an error
// wrapping storage.ErrInvalid.
func (c *Cache) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if ttl <= 0 {
		return false, invalid("ttl", ttl)
	}
	v, err := acquireScript.Run(ctx, c.rdb, []string{c.leaseKey(key)}, owner, ceilMs(ttl)).Int64()
	if err != nil {
		return false, c.wrap(ctx, "acquire lease", err)
	}
	return v == 1, nil
}

// ReleaseLease frees key if owner holds it (compare-and-delete); otherwise
// it does nothing.
func (c *Cache) ReleaseLease(ctx context.Context, key, owner string) error {
	err := releaseScript.Run(ctx, c.rdb, []string{c.leaseKey(key)}, owner).Err()
	return c.wrap(ctx, "release lease", err)
}

// Publish sends msg to every current subscriber of channel in every
// instance connected to this Redis (PUBLISH). Nobody subscribing is not an
// error.
func (c *Cache) Publish(ctx context.Context, channel, msg string) error {
	return c.wrap(ctx, "publish", c.rdb.Publish(ctx, c.prefix+channel, msg).Err())
}

// Subscribe subscribes to channel on a connection of its own and returns
// once Redis has confirmed the subscription, so every message published
// after Subscribe returns is delivered. Delivery lasts until ctx ends or
// the Cache is closed; the channel is closed then.
//
// The subscription survives Redis outages: when its connection breaks,
// go-redis redials and resubscribes (retrying every 100 ms or so, and
// PINGing an idle connection every HealthCheckInterval to notice a silent
// break); messages published while it is disconnected are lost. A
// subscriber that does not keep up loses messages instead of blocking
// anything (Stats.Dropped).
//
// It fails with an error wrapping storage.ErrCacheUnavailable when Redis
// cannot be reached now, and with ctx's error when ctx has ended.
func (c *Cache) Subscribe(ctx context.Context, channel string) (<-chan string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, c.wrap(ctx, "subscribe", redis.ErrClosed)
	}
	ps := c.rdb.Subscribe(ctx, c.prefix+channel)
	// The first reply is the subscription's confirmation (or the dial error).
	if _, err := ps.ReceiveTimeout(ctx, c.confirm); err != nil {
		ps.Close()
		return nil, c.wrap(ctx, "subscribe", err)
	}
	msgs := ps.Channel(
		redis.WithChannelSize(c.opts.SubscriberBuffer),
		redis.WithChannelHealthCheckInterval(c.opts.HealthCheckInterval),
		redis.WithChannelPingTimeout(c.opts.HealthCheckInterval),
	)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		ps.Close()
		return nil, c.wrap(ctx, "subscribe", redis.ErrClosed)
	}
	c.subs[ps] = struct{}{}
	c.mu.Unlock()

	out := make(chan string, c.opts.SubscriberBuffer)
	go func() {
		defer close(out)
		defer func() {
			c.mu.Lock()
			delete(c.subs, ps)
			c.mu.Unlock()
		}()
		for {
			select {
			case m, ok := <-msgs:
				if !ok { // closed by Cache.Close
					return
				}
				select {
				case out <- m.Payload:
				default:
					c.dropped.Add(1)
				}
			case <-ctx.Done():
				ps.Close()
				return
			}
		}
	}()
	return out, nil
}

// Close ends every subscription and closes the connection pool. Calls
// after Close fail with an error wrapping storage.ErrCacheUnavailable.
// Close is idempotent.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	subs := make([]*redis.PubSub, 0, len(c.subs))
	for ps := range c.subs {
		subs = append(subs, ps)
	}
	c.mu.Unlock()
	for _, ps := range subs {
		ps.Close()
	}
	return c.rdb.Close()
}
