package fallback

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage/memcache"
)

// BenchmarkIncr measures what the wrapper adds to the per-request
// rate-limit increment: over an in-memory primary (healthy: the primary's
// Incr plus the local mirror) and degraded (the local cache only).
func BenchmarkIncr(b *testing.B) {
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = "key_" + strconv.Itoa(i)
	}
	for _, degraded := range []bool{false, true} {
		name := "healthy"
		if degraded {
			name = "degraded"
		}
		b.Run(name, func(b *testing.B) {
			p := newFlaky()
			c := New(p, memcache.New(memcache.Options{}), Options{ProbeInterval: time.Hour, Logger: discard()})
			defer c.Close()
			if degraded {
				p.down.Store(true)
				c.Get(b.Context(), "x")
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1) * 97)
				for pb.Next() {
					if _, err := c.Incr(b.Context(), keys[i%len(keys)], 1, time.Minute); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		})
	}
}
