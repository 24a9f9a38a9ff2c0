package fallback

import (
	"context"
	"sync"
	"time"
)

// This file is pub/sub across outages: a subscription listens to both
// caches, and a primary subscription that could not be made is retried.

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
