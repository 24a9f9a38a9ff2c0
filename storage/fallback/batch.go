package fallback

import (
	"context"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

var _ storage.Batcher = (*Cache)(nil)

// Batch runs ops in the primary in one round trip (storage.Batch) and
// mirrors what they wrote into the local cache, as Set and Incr do: the
// entries set and the counters incremented (limit checks that were skipped
// wrote nothing). While the primary is unavailable, or when the batch finds
// it so, the whole batch runs in the local cache and its entry writes and
// counter increments are journalled for the primary. Right after a recovery, while the outage's
// writes are still being copied, the ops run one call at a time, so that
// each Get and Set consults that copy as it does alone. See
// storage.Batcher.
func (c *Cache) Batch(ctx context.Context, ops []storage.CacheOp) error {
	if c.usePrimary() {
		if c.replayOn.Load() {
			return storage.RunOps(ctx, c, ops)
		}
		err := storage.Batch(ctx, c.primary, ops)
		if !c.failed(unavailable(ops)) {
			c.mirror(ctx, ops)
			return err
		}
		c.fellBack()
	}
	err := storage.Batch(ctx, c.local, ops)
	now := time.Now()
	for i := range ops {
		op := &ops[i]
		switch {
		case op.Err != nil || op.Skipped:
		case op.Kind == storage.CacheSet:
			c.journal(op.Key, pendingWrite{value: op.Value, expire: now.Add(op.TTL)})
		case op.Kind == storage.CacheIncr:
			c.journalCount(op.Key, op.N, op.TTL)
		}
	}
	return err
}

// unavailable returns the first error among ops that says the cache could
// not serve (storage.ErrCacheUnavailable), or nil.
func unavailable(ops []storage.CacheOp) error {
	for i := range ops {
		if err := ops[i].Err; err != nil && isUnavailable(err) {
			return err
		}
	}
	return nil
}

// mirror writes into the local cache what ops wrote in the primary.
func (c *Cache) mirror(ctx context.Context, ops []storage.CacheOp) {
	for i := range ops {
		op := &ops[i]
		if op.Err != nil || op.Skipped {
			continue
		}
		switch op.Kind {
		case storage.CacheSet:
			_ = c.local.Set(ctx, op.Key, op.Value, op.TTL)
		case storage.CacheIncr:
			_, _ = c.local.Incr(ctx, op.Key, op.N, op.TTL)
		}
	}
}
