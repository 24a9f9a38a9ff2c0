package stats

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/upstream"
)

// gatewayFlush is how many attempts the gateway records between two Flushes
// at 1,000 req/s: one FlushEvery (30 s) of them.
const gatewayFlush = 30000

// spread is a deterministic stream of served attempts over n accounts in
// random order, as the gateway records them: latencies over 0.2–20 s (many
// distinct bins), TTFT a third of it, one attempt in 50 a 429 without
// tokens, the others with input and output tokens and, two in three, cache
// reads.
type spread struct {
	ids []string
	rnd uint64
	k   int
}

func newSpread(n int) *spread {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("acct-%05d", i)
	}
	return &spread{ids: ids, rnd: 1}
}

// next returns the next attempt's account, outcome and tokens (zero
// Tokens for a failure).
func (g *spread) next() (string, Attempt, Tokens) {
	g.rnd ^= g.rnd << 13 // xorshift
	g.rnd ^= g.rnd >> 7
	g.rnd ^= g.rnd << 17
	g.k++
	lat := time.Duration(200+(g.rnd>>20)%19800) * time.Millisecond
	id := g.ids[g.rnd%uint64(len(g.ids))]
	if g.k%50 == 0 {
		return id, Attempt{Status: 429, Class: upstream.ClassRate, Latency: lat / 10}, Tokens{}
	}
	tk := Tokens{Input: int64(1000 + (g.rnd>>8)%40000), Output: int64(100 + (g.rnd>>40)%2000)}
	if g.k%3 != 0 {
		tk.CacheRead = int64((g.rnd >> 30) % 30000)
	}
	return id, Attempt{Status: 200, Latency: lat, TTFT: lat / 3}, tk
}

// BenchmarkPending is the pending batch's share of one served attempt (its
// counts and its tokens, as Record and AddTokens add them) over 10,000
// accounts drawn at random, the batch taken every gatewayFlush attempts
// as a Flush would (the counts are dropped: storage is not measured): an
// account sees three attempts a batch on average, as in the gateway at
// 1,000 req/s.
func BenchmarkPending(b *testing.B) {
	g := newSpread(10000)
	var p pending
	at := t0.Add(8 * 24 * time.Hour)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		id, a, tk := g.next()
		p.attempt(at, id, "openai", a)
		if tk != (Tokens{}) {
			p.tokens(at, id, "openai", tk)
		}
		if i%gatewayFlush == gatewayFlush-1 {
			p.take()
		}
	}
}

// BenchmarkRecordSpread is BenchmarkRecord with the gateway's spread: one
// served attempt (Record, and AddTokens for a success) into a store of
// 10,000 accounts at steady state, to accounts drawn at random, flushed
// (to a sink) every gatewayFlush attempts rather than every flushEvery, so
// an account's attempts share its pending cells as they do in the gateway.
func BenchmarkRecordSpread(b *testing.B) {
	s, _ := filled(b, 10000, &sink{})
	g := newSpread(10000)
	at := t0.Add(8 * 24 * time.Hour)
	step := time.Hour / 10000
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		now := at.Add(time.Duration(i) * step)
		id, a, tk := g.next()
		s.Record(now, id, "openai", a)
		if tk != (Tokens{}) {
			s.AddTokens(now, id, "openai", tk)
		}
		if i%gatewayFlush == gatewayFlush-1 {
			if err := s.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkPendingHeap reports the heap a pending batch holds (after a GC)
// once 10,000 accounts had perAccount attempts each on average in one
// hour, in the random order and spread of newSpread, with their tokens:
// B/account is the batch's bytes (its provider's cells included) over the
// accounts, cells the counts it would store (at most the bound, past which
// counts are dropped). The batch measured is the second one, after a take,
// so that whatever a batch keeps from the last (its size) counts as it
// does in a running gateway.
func BenchmarkPendingHeap(b *testing.B) {
	for _, perAccount := range []int{3, 10, 20} {
		b.Run(fmt.Sprintf("attempts=%d", perAccount), func(b *testing.B) {
			const accounts = 10000
			at := t0.Add(8 * 24 * time.Hour)
			var before, after runtime.MemStats
			var cells int
			g := newSpread(accounts) // its IDs are the accounts', not the batch's
			for b.Loop() {
				p := new(pending)
				fill := func() {
					g.rnd, g.k = 1, 0
					for range accounts * perAccount {
						id, a, tk := g.next()
						p.attempt(at, id, "openai", a)
						if tk != (Tokens{}) {
							p.tokens(at, id, "openai", tk)
						}
					}
				}
				fill()
				p.take()
				runtime.GC()
				runtime.ReadMemStats(&before)
				fill()
				runtime.GC()
				runtime.ReadMemStats(&after)
				cells = len(p.take())
				runtime.KeepAlive(p)
			}
			runtime.KeepAlive(g)
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/accounts, "B/account")
			b.ReportMetric(float64(cells), "cells")
		})
	}
}
