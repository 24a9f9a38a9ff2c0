package fallback

import (
	"context"
	"errors"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// This file is the breaker: which calls go to the primary, how an
// unavailable primary turns the cache degraded, and the probe that finds
// it back.

// probeKey is the key a probe reads from a primary that has no Ping.
const probeKey = "troupe:fallback:probe"

// Pinger is implemented by primaries that can check their connection
// cheaply (rediscache.Cache: PING). Ping returns an error wrapping
// storage.ErrCacheUnavailable when the backend cannot serve.
type Pinger = storage.Pinger

// failed reports whether err from the primary is unavailability, turning
// the cache degraded if so.
func (c *Cache) failed(err error) bool {
	if !isUnavailable(err) {
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

// isUnavailable reports whether err says the cache could not serve.
func isUnavailable(err error) bool {
	return err != nil && errors.Is(err, storage.ErrCacheUnavailable)
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

// Health reports the shared cache's state for /readyz: degraded during an
// outage (this instance serves from its local cache), never down.
func (c *Cache) Health() storage.Health {
	h := storage.Health{Name: "cache"}
	if c.degraded.Load() {
		h.Degraded, h.Since = true, time.Unix(0, c.since.Load())
		h.Detail = "shared cache unavailable: affinity, per-key limits and leases are this instance's own until it returns"
	}
	return h
}
