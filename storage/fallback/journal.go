package fallback

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// This file is the journal of entry writes made during an outage and their
// replay to the primary after it: see "What each family does across an
// outage" in the package documentation.

// replayWorkers is how many journalled writes are copied to the primary at
// once on recovery.
const replayWorkers = 16

// pendingWrite is the latest write to one entry during an outage.
type pendingWrite struct {
	value  string
	expire time.Time // zero for a Delete
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
	counts := c.counts
	c.counts = make(map[countKey]int64)
	c.replayOn.Store(len(c.replaying) > 0)
	c.degraded.Store(false)
	n := len(c.replaying)
	c.mu.Unlock()

	c.recoveries.Add(1)
	outage := time.Duration(time.Now().UnixNano() - c.since.Load())
	c.log.Info("cache: primary recovered, serving from it again",
		"outage", outage.Round(time.Millisecond).String(), "to_copy", n, "counters_to_add", len(counts))
	if c.opts.OnChange != nil {
		c.opts.OnChange(false)
	}
	c.replay()
	c.replayCounts(counts)
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
