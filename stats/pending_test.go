package stats

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
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
		p.attempt(at, shardOf(id), id, "openai", a, nil)
		if tk != (Tokens{}) {
			p.tokens(at, shardOf(id), id, "openai", tk)
		}
		if i%gatewayFlush == gatewayFlush-1 {
			p.take()
		}
	}
}

// BenchmarkTake is what a Flush does with a batch before storage writes
// it: take it and coalesce it (storage.CoalesceAttemptCounts, which both
// backends call first: validate, sort, sum). An op is one batch of
// gatewayFlush attempts over 10,000 accounts (newSpread's), made outside
// the timer.
func BenchmarkTake(b *testing.B) {
	g := newSpread(10000)
	at := t0.Add(8 * 24 * time.Hour)
	var p pending
	b.ReportAllocs()
	for range b.N {
		b.StopTimer()
		for range gatewayFlush {
			id, a, tk := g.next()
			p.attempt(at, shardOf(id), id, "openai", a, nil)
			p.tokens(at, shardOf(id), id, "openai", tk)
		}
		b.StartTimer()
		if _, err := storage.CoalesceAttemptCounts(p.take()); err != nil {
			b.Fatal(err)
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
						p.attempt(at, shardOf(id), id, "openai", a, nil)
						if tk != (Tokens{}) {
							p.tokens(at, shardOf(id), id, "openai", tk)
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

// oneShard returns n account IDs of one shard: prefix, then a number.
func oneShard(prefix string, n int) []string {
	var ids []string
	for i := 0; len(ids) < n; i++ {
		id := prefix + strconv.Itoa(i)
		if len(ids) == 0 || shardOf(id) == shardOf(ids[0]) {
			ids = append(ids, id)
		}
	}
	return ids
}

// rows is the number of rows of scope in every shard (a provider's row
// once for each shard that holds a part of it).
func (p *pending) rows(scope storage.StatsScope) int {
	n := 0
	for i := range p.shards {
		for r := range p.shards[i].rows {
			if r.scope == scope {
				n++
			}
		}
	}
	return n
}

// distinctCells is the number of (row, key) pairs with a count in the
// shards: the counts take hands out when none is past cellMax.
func (p *pending) distinctCells() int {
	type cell struct {
		rowKey
		key uint64
	}
	seen := map[cell]bool{}
	for i := range p.shards {
		sh := &p.shards[i]
		for r, b := range sh.rows {
			for ; ; b = sh.blocks[b].next {
				for _, c := range sh.blocks[b].c {
					if c != 0 {
						seen[cell{r, c >> cellBits}] = true
					}
				}
				if sh.blocks[b].next == 0 {
					break
				}
			}
		}
	}
	return len(seen)
}

// counts returns cs summed by row and ordered (storage.CoalesceAttemptCounts),
// failing t on an error.
func counts(t *testing.T, cs []storage.AttemptCount) []storage.AttemptCount {
	t.Helper()
	out, err := storage.CoalesceAttemptCounts(cs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// want is the counts of one subject and hour: key → N.
type want map[int]int64

// check fails t unless cs (coalesced) are exactly the counts of rows.
func check(t *testing.T, cs []storage.AttemptCount, rows map[rowKey]want) {
	t.Helper()
	got := map[rowKey]want{}
	for _, c := range counts(t, cs) {
		r := rowKey{c.Subject, c.Hour.Unix(), c.Scope}
		if got[r] == nil {
			got[r] = want{}
		}
		got[r][c.Key] += c.N
	}
	if !reflect.DeepEqual(got, rows) {
		t.Fatalf("counts %v, want %v", got, rows)
	}
}

func TestPendingCountsByRow(t *testing.T) {
	var p pending
	ids := oneShard("acct", 2) // one shard: the provider's row is one row
	h := hourOf(t0)
	lat := keyLatency + int(bin(time.Second))
	ttft := keyTTFT + int(bin(time.Second/2))
	p.attempt(t0, shardOf(ids[0]), ids[0], "openai", ok(time.Second), nil)
	p.attempt(t0.Add(time.Minute), shardOf(ids[0]), ids[0], "openai", ok(time.Second), nil)
	p.attempt(t0, shardOf(ids[0]), ids[0], "openai", Attempt{Status: 429, Class: upstream.ClassRate}, nil)
	p.tokens(t0, shardOf(ids[0]), ids[0], "openai", Tokens{Input: 10, CacheWrite: 3})
	p.tokens(t0, shardOf(ids[0]), ids[0], "openai", Tokens{Input: 5})
	p.attempt(t0, shardOf(ids[1]), ids[1], "openai", Attempt{Status: 200, Latency: time.Second}, nil)
	p.tokens(t0, shardOf(ids[1]), ids[1], "openai", Tokens{}) // nothing
	a := want{keyClass: 3, keyStatus + int(statusKey(200)): 2, keyStatus + int(statusKey(429)): 1,
		int(keyClass + upstream.ClassRate): 1, lat: 2, ttft: 2, storedTokens: 15, storedTokens + 3: 3}
	a[keyClass] = 2 // the 429's class is rate, not success
	b := want{keyClass: 1, keyStatus + int(statusKey(200)): 1, lat: 1}
	prov := want{keyClass: 3, keyStatus + int(statusKey(200)): 3, keyStatus + int(statusKey(429)): 1,
		int(keyClass + upstream.ClassRate): 1, lat: 3, ttft: 2, storedTokens: 15, storedTokens + 3: 3}
	sh := &p.shards[shardOf(ids[0])]
	if len(sh.rows) != 3 || p.cells() != len(a)+len(b)+len(prov) {
		t.Fatalf("%d rows, %d cells; want 3 rows and %d cells", len(sh.rows), p.cells(), len(a)+len(b)+len(prov))
	}
	cs := p.take()
	if len(cs) != len(a)+len(b)+len(prov) {
		t.Errorf("take: %d counts, want one a cell", len(cs))
	}
	check(t, cs, map[rowKey]want{{ids[0], h, storage.StatsAccount}: a, {ids[1], h, storage.StatsAccount}: b, {"openai", h, storage.StatsProvider}: prov})
	if sh.rows != nil || sh.blocks != nil || sh.cells != 0 || sh.lastRows != 3 || sh.lastBlocks != 5 || p.used.Load() != 0 {
		t.Fatalf("after take: rows %v, %d blocks, %d cells, sizes %d, %d, %d blocks in use; want an empty batch sized 3, 5 (nine cells in two blocks, twice, and one)", sh.rows, len(sh.blocks), sh.cells, sh.lastRows, sh.lastBlocks, p.used.Load())
	}
	if cs := p.take(); len(cs) != 0 {
		t.Fatalf("second take: %v, want nothing", cs)
	}
}

// TestPendingRowGrowsAndCellsSplit: a row of many keys chains blocks, and
// a count past a cell's range continues in another cell of the key.
func TestPendingRowGrowsAndCellsSplit(t *testing.T) {
	var p pending
	a := want{}
	for i := range 40 { // 40 latency bins and a TTFT's: six blocks
		d := time.Duration(1+i) * 137 * time.Millisecond
		p.attempt(t0, shardOf("a"), "a", "p", Attempt{Status: 200, Latency: d}, nil)
		a[keyLatency+int(bin(d))]++
	}
	a[keyClass] = 40
	a[keyStatus+int(statusKey(200))] = 40
	sh := &p.shards[shardOf("a")]
	b := sh.rows[rowKey{"a", hourOf(t0), storage.StatsAccount}]
	chain := 1
	for ; sh.blocks[b].next != 0; b = sh.blocks[b].next {
		chain++
	}
	if want := (len(a) + blockCells - 1) / blockCells; chain != want {
		t.Errorf("the row has %d blocks for %d cells, want %d", chain, len(a), want)
	}
	// Three tokens counts of 2^62: past a cell's 2^54−1, so each takes
	// several cells of the key.
	for range 3 {
		p.tokens(t0, shardOf("a"), "a", "p", Tokens{Output: 1 << 62})
	}
	// Their sum is past an int64's range: summed here, by subject.
	sum := map[string]uint64{}
	var rest []storage.AttemptCount
	for _, c := range p.take() {
		if c.Key == storedTokens+1 {
			if c.N <= 0 || c.N > cellMax {
				t.Fatalf("a token cell of %d, want 1..%d", c.N, int64(cellMax))
			}
			sum[c.Subject] += uint64(c.N)
			continue
		}
		rest = append(rest, c)
	}
	if sum["a"] != 3<<62 || sum["p"] != 3<<62 {
		t.Errorf("output tokens sum to %v, want %d each", sum, uint64(3<<62))
	}
	h := hourOf(t0)
	check(t, rest, map[rowKey]want{{"a", h, storage.StatsAccount}: a, {"p", h, storage.StatsProvider}: a})
}

// TestPendingPutBack: the counts a failed flush hands back join the counts
// recorded since, in the same rows, and come out of the next take summed.
func TestPendingPutBack(t *testing.T) {
	var p pending
	h := hourOf(t0)
	p.attempt(t0, shardOf("a"), "a", "p", ok(time.Second), nil)
	p.tokens(t0, shardOf("a"), "a", "p", Tokens{Input: 7})
	failed := p.take()
	// Recorded while the flush was failing: the same account and hour, a
	// new account, the next hour.
	p.attempt(t0, shardOf("a"), "a", "p", ok(time.Second), nil)
	p.attempt(t0, shardOf("b"), "b", "p", Attempt{Status: 500, Class: upstream.ClassTransient}, nil)
	p.tokens(t0.Add(time.Hour), shardOf("a"), "a", "p", Tokens{Input: 3})
	p.putBack(failed)
	lat, ttft := keyLatency+int(bin(time.Second)), keyTTFT+int(bin(time.Second/2))
	a := want{keyClass: 2, keyStatus + int(statusKey(200)): 2, lat: 2, ttft: 2, storedTokens: 7}
	b := want{int(keyClass + upstream.ClassTransient): 1, keyStatus + int(statusKey(500)): 1}
	prov := want{keyClass: 2, keyStatus + int(statusKey(200)): 2, lat: 2, ttft: 2, storedTokens: 7,
		int(keyClass + upstream.ClassTransient): 1, keyStatus + int(statusKey(500)): 1}
	rows := map[rowKey]want{
		{"a", h, storage.StatsAccount}: a, {"b", h, storage.StatsAccount}: b, {"p", h, storage.StatsProvider}: prov,
		{"a", h + 3600, storage.StatsAccount}: {storedTokens: 3}, {"p", h + 3600, storage.StatsProvider}: {storedTokens: 3},
	}
	if n := p.rows(storage.StatsAccount); n != 3 {
		t.Errorf("%d account rows after putBack, want 3 (the failed counts joined their rows)", n)
	}
	check(t, p.take(), rows)
	// Handed back twice (two failed flushes), the counts are still there once.
	p.attempt(t0, shardOf("a"), "a", "p", ok(time.Second), nil)
	again := p.take()
	p.putBack(again)
	again = p.take()
	p.putBack(again)
	check(t, p.take(), map[rowKey]want{
		{"a", h, storage.StatsAccount}:  {keyClass: 1, keyStatus + int(statusKey(200)): 1, lat: 1, ttft: 1},
		{"p", h, storage.StatsProvider}: {keyClass: 1, keyStatus + int(statusKey(200)): 1, lat: 1, ttft: 1},
	})
	if d := p.dropped.Load(); d != 0 {
		t.Fatalf("%d counts dropped", d)
	}
}

// TestPendingBound: at maxPending blocks, counts that need a new block (a
// new row's or a full row's) are dropped and counted; counts into a free
// cell of a known row still count; a take makes room again.
func TestPendingBound(t *testing.T) {
	var p pending
	ids := oneShard("x", 2) // "a0" and "new": the provider's row in their shard is one row
	a0, nw := ids[0], ids[1]
	// One provider row (one block; one a shard, soon), then account rows
	// of one block each.
	p.attempt(t0, shardOf(a0), a0, "p", Attempt{Status: 200}, nil)
	for i := 1; p.used.Load() < maxPending; i++ {
		p.tokens(t0, shardOf("a"+strconv.Itoa(i)), "a"+strconv.Itoa(i), "p", Tokens{Input: 1})
	}
	if p.dropped.Load() != 0 || p.used.Load() != maxPending {
		t.Fatalf("%d blocks, %d dropped; want %d blocks, none dropped", p.used.Load(), p.dropped.Load(), maxPending)
	}
	cells := p.cells()
	// A known row with room: counted. "a0" holds class and status.
	p.attempt(t0, shardOf(a0), a0, "p", Attempt{Status: 200, Latency: time.Second}, nil)
	if p.dropped.Load() != 0 || p.cells() != cells+2 {
		t.Fatalf("into known rows' free cells: %d dropped, %d new cells; want 0 and 2", p.dropped.Load(), p.cells()-cells)
	}
	// A new row: its four counts dropped (the provider's counted).
	p.attempt(t0, shardOf(nw), nw, "p", ok(time.Second), nil)
	if d := p.dropped.Load(); d != 4 {
		t.Fatalf("a new account at the bound: %d dropped, want 4", d)
	}
	// Full rows: "a0" holds three cells and "p" five; five latency bins
	// more fill a0's block with four and p's with two, and the rest need
	// new blocks: one of a0's dropped, three of p's.
	for i := range 5 {
		p.attempt(t0, shardOf(a0), a0, "p", Attempt{Status: 200, Latency: time.Duration(2+i) * time.Second}, nil)
	}
	if d := p.dropped.Load(); d != 8 {
		t.Fatalf("full rows at the bound: %d dropped, want 8", d)
	}
	// A putBack at the bound drops what finds no room too.
	p.putBack([]storage.AttemptCount{{Scope: storage.StatsAccount, Subject: "back", Hour: time.Unix(hourOf(t0), 0), Key: 1, N: 3}})
	if d := p.dropped.Load(); d != 9 {
		t.Fatalf("a putBack at the bound: %d dropped, want 9", d)
	}
	n := p.distinctCells()
	if cs := p.take(); len(cs) != n {
		t.Fatalf("take at the bound: %d counts, want its %d cells (a provider's parts added up)", len(cs), n)
	}
	p.attempt(t0, shardOf(nw), nw, "p", ok(time.Second), nil)
	if d := p.dropped.Load(); d != 9 || p.cells() != 8 {
		t.Fatalf("after a take: %d dropped, %d cells; want 9 and 8", d, p.cells())
	}
}

// TestPendingHours: an hour's attempts share a row and the next hour's
// take another, at the boundary to the nanosecond and before 1970 too.
func TestPendingHours(t *testing.T) {
	for _, at := range []time.Time{t0, t0.Add(-time.Nanosecond), t0.Add(59*time.Minute + 59*time.Second), time.Unix(-1, 0), time.Unix(-3600, 0), time.Unix(-3601, 5), time.Unix(0, 0),
		time.Date(2026, 12, 6, 17, 59, 59, 999999999, time.FixedZone("X", 5*3600+1800))} {
		if got, want := hourOf(at), at.Truncate(time.Hour).Unix(); got != want {
			t.Errorf("hourOf(%v) = %d, want %d", at, got, want)
		}
	}
	var p pending
	end := t0.Add(time.Hour)
	p.attempt(end.Add(-time.Nanosecond), shardOf("a"), "a", "p", Attempt{Status: 200}, nil)
	p.attempt(end, shardOf("a"), "a", "p", Attempt{Status: 200}, nil)
	p.attempt(end.Add(time.Hour-time.Nanosecond), shardOf("a"), "a", "p", Attempt{Status: 200}, nil)
	p.attempt(t0, shardOf("a"), "a", "p", Attempt{Status: 200}, nil) // late: its hour's row is still there
	one := want{keyClass: 1, keyStatus + int(statusKey(200)): 1}
	two := want{keyClass: 2, keyStatus + int(statusKey(200)): 2}
	cs := p.take()
	check(t, cs, map[rowKey]want{
		{"a", t0.Unix(), storage.StatsAccount}: two, {"a", end.Unix(), storage.StatsAccount}: two,
		{"p", t0.Unix(), storage.StatsProvider}: two, {"p", end.Unix(), storage.StatsProvider}: two,
	})
	for _, c := range cs {
		if c.Hour.Location() != time.UTC || c.Hour.Truncate(time.Hour) != c.Hour {
			t.Fatalf("count of hour %v, want the start of a UTC hour", c.Hour)
		}
	}
	p.attempt(end.Add(time.Hour), shardOf("a"), "a", "p", Attempt{Status: 200}, nil)
	check(t, p.take(), map[rowKey]want{{"a", end.Unix() + 3600, storage.StatsAccount}: one, {"p", end.Unix() + 3600, storage.StatsProvider}: one})
}

// TestPendingOrderIndependent: the same attempts recorded in another
// order, and from concurrent goroutines, store the same counts.
func TestPendingOrderIndependent(t *testing.T) {
	type rec struct {
		at  time.Time
		id  string
		a   Attempt
		tks Tokens
	}
	g := newSpread(50)
	recs := make([]rec, 3000)
	for i := range recs {
		id, a, tk := g.next()
		recs[i] = rec{t0.Add(time.Duration(i) * 5 * time.Second), id, a, tk} // over four hours
	}
	run := func(order []int, workers int) []storage.AttemptCount {
		var p pending
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for j := w; j < len(order); j += workers {
					r := recs[order[j]]
					p.attempt(r.at, shardOf(r.id), r.id, "openai", r.a, nil)
					p.tokens(r.at, shardOf(r.id), r.id, "openai", r.tks)
				}
			})
		}
		wg.Wait()
		return counts(t, p.take())
	}
	order := make([]int, len(recs))
	for i := range order {
		order[i] = i
	}
	want := run(order, 1)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for _, workers := range []int{1, 4} {
		if got := run(order, workers); !reflect.DeepEqual(got, want) {
			t.Fatalf("shuffled, %d goroutines: %d counts differ from the ordered %d", workers, len(got), len(want))
		}
	}
}

// TestPendingTakeSorted: take hands out its counts in the order storage
// writes them (CoalesceAttemptCounts'), each row's once (no count here
// is past a cell's range).
func TestPendingTakeSorted(t *testing.T) {
	var p pending
	g := newSpread(300)
	for i := range 5000 {
		id, a, tk := g.next()
		at := t0.Add(time.Duration(i) * 3 * time.Second) // over four hours
		p.attempt(at, shardOf(id), id, "openai", a, nil)
		p.attempt(at, shardOf(id), id, "anthropic", a, nil)
		p.tokens(at, shardOf(id), id, "openai", tk)
	}
	cs := p.take()
	if want := counts(t, cs); !reflect.DeepEqual(cs, want) {
		t.Fatalf("take's %d counts are not in storage's order (or repeat a row): coalesced, %d", len(cs), len(want))
	}
}

// summing is a storage that adds up the counts it takes, refusing every
// third batch (a failing flush, whose counts the Store puts back).
type summing struct {
	sink
	mu    sync.Mutex
	calls int
	got   map[storage.AttemptCount]int64 // N zero: by row and key
}

func (k *summing) AddAttemptCounts(_ context.Context, cs []storage.AttemptCount) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.calls++; k.calls%3 == 0 {
		return fmt.Errorf("refused: %w", context.DeadlineExceeded)
	}
	for _, c := range cs {
		n := c.N
		c.N = 0
		k.got[c] += n
	}
	return nil
}

// TestRecordFlushConcurrent: attempts recorded from several goroutines
// while another flushes without pause (every third flush failing) are
// all stored once the recorders are done and a last Flush ran: no count
// is lost or counted twice between the shards, take and putBack; and the
// in-memory windows count them all.
func TestRecordFlushConcurrent(t *testing.T) {
	const workers, each = 4, 2000
	type rec struct {
		at       time.Time
		id, prov string
		a        Attempt
		tk       Tokens
	}
	g := newSpread(100)
	recs := make([]rec, workers*each)
	end := t0.Add(2 * time.Hour)
	for i := range recs {
		id, a, tk := g.next()
		prov := [2]string{"openai", "anthropic"}[i%2]
		recs[i] = rec{end.Add(-time.Duration(len(recs)-i) * 100 * time.Millisecond), id, prov, a, tk} // across an hour's end
	}
	// What storage must hold: the same attempts, in one goroutine's order.
	var serial pending
	for _, r := range recs {
		serial.attempt(r.at, shardOf(r.id), r.id, r.prov, r.a, nil)
		serial.tokens(r.at, shardOf(r.id), r.id, r.prov, r.tk)
	}
	want := map[storage.AttemptCount]int64{}
	for _, c := range counts(t, serial.take()) {
		n := c.N
		c.N = 0
		want[c] += n
	}

	k := &summing{got: map[storage.AttemptCount]int64{}}
	s := New(k)
	ctx := context.Background()
	done := make(chan struct{})
	var flushes sync.WaitGroup
	flushes.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			_ = s.Flush(ctx) // every third fails; its counts stay pending
		}
	})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for _, r := range recs[w*each : (w+1)*each] {
				s.Record(r.at, r.id, r.prov, r.a)
				s.AddTokens(r.at, r.id, r.prov, r.tk)
			}
		})
	}
	wg.Wait()
	close(done)
	flushes.Wait()
	for s.Pending() > 0 { // a failing Flush leaves its counts for the next
		if err := s.Flush(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
	}
	s.sweeps.Wait()
	if !reflect.DeepEqual(k.got, want) {
		t.Fatalf("stored %d row keys, want %d: counts lost or doubled", len(k.got), len(want))
	}
	if d := s.Dropped(); d != 0 {
		t.Fatalf("%d counts dropped", d)
	}
	var mem uint64
	for _, p := range []string{"openai", "anthropic"} {
		mem += provider(t, s, p, Windows[1], end).Requests
	}
	if mem != uint64(len(recs)) {
		t.Fatalf("the providers' 1h windows hold %d attempts, want %d", mem, len(recs))
	}
}
