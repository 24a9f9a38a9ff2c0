package rediscache

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// BenchmarkIncr is the per-request rate-limit increment (one EVALSHA round
// trip) against the test Redis: "serial" is the latency of one caller,
// "parallel" the throughput of many (GOMAXPROCS × 8 goroutines).
func BenchmarkIncr(b *testing.B) {
	c, _ := open(b, Options{})
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "key_" + strconv.Itoa(i)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := c.Incr(b.Context(), keys[i%len(keys)], 1, time.Minute); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(8)
		var next atomic.Int64
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

// BenchmarkGet is the previous_response_id affinity lookup (one GET round
// trip) against the test Redis.
func BenchmarkGet(b *testing.B) {
	c, _ := open(b, Options{})
	if err := c.Set(b.Context(), "resp_1", "acct-0042", time.Hour); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := c.Get(b.Context(), "resp_1"); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkPrelude is what one limited request asks of the cache before
// routing (RPM and RPD charged, the token budget checked, the session's
// affinity read) against the test Redis: "batch" as the gateway makes it,
// one pipeline (Batch); "calls" as it made it before, four round trips in
// sequence.
func BenchmarkPrelude(b *testing.B) {
	c, _ := open(b, Options{})
	const big = 1 << 40
	b.Run("batch", func(b *testing.B) {
		b.ReportAllocs()
		ops := make([]storage.CacheOp, 4)
		for b.Loop() {
			ops[0] = storage.CacheOp{Kind: storage.CacheIncr, Key: "rl:rpm:k", N: 1, TTL: time.Minute, Limit: big}
			ops[1] = storage.CacheOp{Kind: storage.CacheIncr, Key: "rl:rpd:k", N: 1, TTL: 24 * time.Hour, Limit: big}
			ops[2] = storage.CacheOp{Kind: storage.CacheCount, Key: "rl:tpd:k", TTL: 24 * time.Hour, Limit: big}
			ops[3] = storage.CacheOp{Kind: storage.CacheGet, Key: "aff:sess:s"}
			if err := c.Batch(b.Context(), ops); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("calls", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Incr(b.Context(), "rl:rpm:k", 1, time.Minute); err != nil {
				b.Fatal(err)
			}
			if _, err := c.Incr(b.Context(), "rl:rpd:k", 1, 24*time.Hour); err != nil {
				b.Fatal(err)
			}
			if _, err := c.Count(b.Context(), "rl:tpd:k", 24*time.Hour); err != nil {
				b.Fatal(err)
			}
			if _, _, err := c.Get(b.Context(), "aff:sess:s"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
