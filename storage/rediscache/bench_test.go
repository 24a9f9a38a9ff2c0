package rediscache

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"
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
