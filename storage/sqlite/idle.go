package sqlite

import (
	"context"
	"sync"
	"time"
)

// writerIdleRelease is how long the writer must have stored no usage batch
// before its page cache is given back (releaseWriterCache). The usage
// recorder hands over a batch at least every 250 ms while requests end
// (actors.Config.UsageInterval), so a second without one means no request
// ended in that second: the burst that filled the cache is over. Under a
// steady load, however light, a batch comes within every second and the
// cache is kept; after a burst its up to writerCacheKiB of pages (about
// 8.5 MiB of the process's memory once the usage table is larger than the
// cache) go back to the system instead of staying resident until the
// store closes (docs/benchmarks.md, "Issue 21: RSS after the run").
const writerIdleRelease = time.Second

// releaseTimeout bounds one release: it waits for the writer's connection
// like any write.
const releaseTimeout = 5 * time.Second

// idleRelease calls release once no write has been reported (wrote) for
// after. Its zero value does nothing; it is safe for concurrent use.
type idleRelease struct {
	after   time.Duration
	release func() // nil: never release

	mu     sync.Mutex
	timer  *time.Timer // armed by the first write, pushed back by each one after
	closed bool
}

// wrote reports a write: the release is due after from now.
func (r *idleRelease) wrote() {
	if r.release == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
	case r.timer == nil:
		r.timer = time.AfterFunc(r.after, r.release)
	default:
		r.timer.Reset(r.after)
	}
}

// stop cancels a release not yet started; a release under way finishes.
func (r *idleRelease) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
}

// releaseWriterCache gives the writer connection's page cache back
// (PRAGMA shrink_memory: every page not in use is freed, and the SQLite
// allocator returns whole freed blocks to the system). The next batch reads
// the pages it touches again, from the operating system's file cache. A
// failure (the store closing, a timeout) only leaves the cache as it was.
func (s *Store) releaseWriterCache() {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_, _ = s.w.ExecContext(ctx, "PRAGMA shrink_memory")
	if s.released != nil {
		s.released()
	}
}
