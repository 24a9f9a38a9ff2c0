package memcache

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "resp_" + strconv.Itoa(i*7919)
	}
	return keys
}

// BenchmarkGet reads affinity entries that exist (previous_response_id
// lookups) from all procs at once.
func BenchmarkGet(b *testing.B) {
	c := New(Options{})
	defer c.Close()
	keys := benchKeys(1 << 16)
	for _, k := range keys {
		c.Set(b.Context(), k, "acct-0042", time.Hour)
	}
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := b.Context()
		i := int(next.Add(1) * 12345)
		for pb.Next() {
			if _, ok, _ := c.Get(ctx, keys[i&(len(keys)-1)]); !ok {
				b.Fatal("miss")
			}
			i++
		}
	})
}

// BenchmarkSet writes affinity entries (one per response) from all procs.
func BenchmarkSet(b *testing.B) {
	c := New(Options{})
	defer c.Close()
	keys := benchKeys(1 << 16)
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := b.Context()
		i := int(next.Add(1) * 12345)
		for pb.Next() {
			c.Set(ctx, keys[i&(len(keys)-1)], "acct-0042", time.Hour)
			i++
		}
	})
}

// BenchmarkIncr is the per-request rate-limit increment from all procs:
// "keys" spreads them over 10,000 API keys, "hot" sends every request to
// one key (the worst case: one shard lock).
func BenchmarkIncr(b *testing.B) {
	for _, bc := range []struct {
		name string
		keys []string
	}{
		{"keys", benchKeys(10000)},
		{"hot", benchKeys(1)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := New(Options{})
			defer c.Close()
			var next atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := b.Context()
				i := int(next.Add(1) * 12345)
				for pb.Next() {
					if _, err := c.Incr(ctx, bc.keys[i%len(bc.keys)], 1, time.Minute); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		})
	}
}
