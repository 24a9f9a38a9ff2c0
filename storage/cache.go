package storage

import (
	"context"
	"errors"
	"time"
)

// ErrCacheUnavailable wraps every error of a cache backend that could not be
// reached or cannot serve right now (Redis down, timed out, loading its data
// set, closed). Test with errors.Is. Callers degrade to local behaviour on it;
// the fallback package (storage/fallback) does so for every method.
var ErrCacheUnavailable = errors.New("cache: unavailable")

// Cache is the shared, short-lived state of a Troupe deployment: affinity
// entries with TTL, rate-limit counters, short leases and pub/sub for
// invalidation broadcasts. The embedded backend is in memory (one process,
// storage/memcache); the production backend is Redis (shared by every
// instance, storage/rediscache). Methods are safe for concurrent use.
//
// Entries (Get/Set/Delete), counters (Incr/Count), leases and pub/sub
// channels are separate namespaces: the same key names unrelated things in
// each. A ttl or window that is not positive is refused with an error that
// wraps ErrInvalid. Times are resolved to the millisecond or better.
//
// Backends that can run several operations in one round trip implement
// Batcher too; callers use Batch, which works with any Cache.
type Cache interface {
	// Get returns the value of key; ok is false when absent or expired.
	Get(ctx context.Context, key string) (value string, ok bool, err error)
	// Set stores key=value for ttl (ttl > 0).
	Set(ctx context.Context, key, value string, ttl time.Duration) error
	// Delete removes key; absent keys are not an error.
	Delete(ctx context.Context, key string) error

	// Incr adds n to the counter of key in the fixed window of length window
	// that contains now, and returns the window's new total. Windows are
	// aligned to the Unix epoch (a one-minute window starts at :00), and a
	// counter expires when its window ends. A counter is never below 0: a
	// negative n takes it at most to 0, and one on a counter that does not
	// exist creates it at 0. Callers count what they hold and take it back
	// when done; a take-back of something the counter lost (Redis restarted
	// empty, or an outage counted it in the fallback's local cache) must not
	// leave the counter below what is really held for the rest of the window.
	Incr(ctx context.Context, key string, n int64, window time.Duration) (int64, error)
	// Count returns the current window's total for key without changing it.
	Count(ctx context.Context, key string, window time.Duration) (int64, error)

	// AcquireLease takes the lease named key for owner for ttl, if it is free
	// or already held by owner (which renews it); it reports whether owner holds it.
	AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	// ReleaseLease frees key if owner holds it.
	ReleaseLease(ctx context.Context, key, owner string) error

	// Publish sends msg to every current subscriber of channel, in every instance.
	Publish(ctx context.Context, channel, msg string) error
	// Subscribe delivers channel's messages until ctx ends; the returned
	// channel is closed then. Messages published before Subscribe returns
	// may be missed. A slow subscriber loses messages rather than blocking publishers.
	Subscribe(ctx context.Context, channel string) (<-chan string, error)

	// Close releases the backend's resources.
	Close() error
}
