package fallback

import (
	"errors"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// This file is the journal of counter increments made during an outage and
// their addition to the primary after it: see "What each family does
// across an outage" in the package documentation.

// countKey names one window of one counter: the primary counts in fixed
// windows aligned on multiples of the window since the epoch (storage.Cache
// Incr), so an increment belongs to the window it was made in.
type countKey struct {
	key    string
	window time.Duration
	end    int64 // Unix ms at which the window ends
}

// windowEnd is the end, in Unix ms, of the window of length w (rounded up
// to whole milliseconds, as the caches count it) that holds now.
func windowEnd(now time.Time, w time.Duration) int64 {
	ms := int64((w + time.Millisecond - 1) / time.Millisecond)
	t := now.UnixMilli()
	return t - t%ms + ms
}

// journalCount records an increment of n made locally during an outage,
// for the primary: the outage's increments of a counter's window are
// summed, at most MaxPending windows in all (beyond it an increment stays
// local: Stats.CountsDropped). If the cache has meanwhile turned healthy
// (the increment raced a recovery), it adds the increment to the primary
// itself, so it is added once either way.
func (c *Cache) journalCount(key string, n int64, window time.Duration) {
	if n == 0 || window <= 0 {
		return
	}
	k := countKey{key: key, window: window, end: windowEnd(time.Now(), window)}
	c.mu.Lock()
	if c.degraded.Load() {
		if _, ok := c.counts[k]; ok || len(c.counts) < c.opts.MaxPending {
			c.counts[k] += n
		} else {
			c.countsDropped.Add(1)
		}
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.addCount(k, n)
}

// addCount adds the outage's sum n of counter window k to the primary,
// unless the window has ended (the primary's counter of it is gone, and
// the next window starts from zero anyway). An error is not retried: an
// increment whose answer was lost may have been applied, and adding it
// again would count it twice. It reports whether the primary was found
// unavailable.
func (c *Cache) addCount(k countKey, n int64) (down bool) {
	if time.Now().UnixMilli() >= k.end {
		return false // its window ended during the outage
	}
	_, err := c.primary.Incr(c.ctx, k.key, n, k.window)
	switch {
	case err == nil:
		c.countsAdded.Add(1)
		return false
	case errors.Is(err, storage.ErrCacheUnavailable):
		c.failed(err)
		c.countsDropped.Add(1)
		return true
	default:
		c.countsDropped.Add(1)
		return false
	}
}

// replayCounts adds the increments journalled during the outage that just
// ended to the primary, once each, in one pass: recover moved them out of
// the journal under its lock, so no increment of the outage is added twice
// and none made after it is journalled. If the primary fails again during
// the pass, the increments not yet tried go back to the journal (summed
// with the new outage's) for the next recovery.
func (c *Cache) replayCounts(counts map[countKey]int64) {
	for k, n := range counts {
		if c.ctx.Err() != nil {
			return
		}
		delete(counts, k)
		if c.addCount(k, n) {
			break
		}
	}
	if len(counts) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.degraded.Load() {
		// Not degraded by our own failure (the ctx ended, or another call
		// recovered it meanwhile): nothing to keep them for.
		c.countsDropped.Add(uint64(len(counts)))
		return
	}
	for k, n := range counts {
		c.counts[k] += n
	}
}
