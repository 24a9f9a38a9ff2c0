package stats

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/internal/cputime"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/sqlite"
	"github.com/troupe-gw/troupe/upstream"
)

// newStore returns a Store whose long windows are kept in a new in-memory
// SQLite database.
func newStore(t testing.TB) *Store {
	t.Helper()
	return New(openDB(t))
}

func openDB(t testing.TB) *sqlite.Store {
	t.Helper()
	sealer, err := storage.NewSealer(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sqlite.Open(context.Background(), sqlite.MemoryPath, sealer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// account and provider read a summary, failing t on an error.
func account(t testing.TB, s *Store, id string, w Window, now time.Time) Summary {
	t.Helper()
	got, err := s.Account(context.Background(), id, w, now)
	if err != nil {
		t.Fatalf("Account(%s, %s): %v", id, w.Name, err)
	}
	return got
}

func provider(t testing.TB, s *Store, p string, w Window, now time.Time) Summary {
	t.Helper()
	got, err := s.Provider(context.Background(), p, w, now)
	if err != nil {
		t.Fatalf("Provider(%s, %s): %v", p, w.Name, err)
	}
	return got
}

// t0 is a synthetic clock's start, on a 14-hour boundary so every ring's
// buckets start at t0.
var t0 = time.Unix(0, 0).Add(14 * time.Hour * 100000).UTC()

func ok(lat time.Duration) Attempt {
	return Attempt{Status: 200, Latency: lat, TTFT: lat / 2}
}

func TestWindowsSlideWithTheClock(t *testing.T) {
	s := newStore(t)
	// One attempt a minute for 8 days: minute k has latency k+1 ms.
	const minutes = 8 * 24 * 60
	for k := 0; k < minutes; k++ {
		s.Record(t0.Add(time.Duration(k)*time.Minute), "a", "openai", ok(time.Duration(k+1)*time.Millisecond))
	}
	now := t0.Add(minutes*time.Minute - time.Second) // within the last minute
	for _, tc := range []struct {
		w    string
		want uint64 // complete buckets plus the current one
	}{
		{"5m", 5 + 1},
		{"1h", 60 + 5},   // 12 five-minute buckets + the current (full by now)
		{"6h", 360 + 60}, // 6 one-hour buckets + the current (stored)
		{"24h", 24*60 + 120},
		{"7d", 7*24*60 + 10*60}, // 8 days = 13 × 14 h + 10 h: 12 complete buckets and 10 h of the current
	} {
		w, _ := WindowNamed(tc.w)
		got := account(t, s, "a", w, now)
		if got.Requests != tc.want || got.Succeeded != tc.want || got.SuccessRate != 1 {
			t.Errorf("%s: %d requests, %d succeeded, rate %v; want %d, all succeeded", tc.w, got.Requests, got.Succeeded, got.SuccessRate, tc.want)
		}
		if got.Statuses["200"] != tc.want || got.LatencyMs.Count != tc.want || got.TTFTms.Count != tc.want {
			t.Errorf("%s: statuses %v, %d latencies, %d TTFTs; want %d each", tc.w, got.Statuses, got.LatencyMs.Count, got.TTFTms.Count, tc.want)
		}
		// The newest attempts are the slowest: p50 is the median minute's,
		// within the bins' 12.5 %.
		wantP50 := float64(minutes - int(tc.want)/2)
		if d := got.LatencyMs.P50/wantP50 - 1; d > 0.125 || d < -0.125 {
			t.Errorf("%s: latency p50 %v ms, want about %v", tc.w, got.LatencyMs.P50, wantP50)
		}
		// p95 and p99: the ceil(q·n)-th smallest of the window's latencies.
		for _, q := range []struct {
			q   float64
			got float64
		}{{0.95, got.LatencyMs.P95}, {0.99, got.LatencyMs.P99}, {0.95, 2 * got.TTFTms.P95}, {0.99, 2 * got.TTFTms.P99}} {
			want := float64(minutes) - float64(tc.want) + math.Ceil(q.q*float64(tc.want))
			if d := q.got/want - 1; d > 0.125 || d < -0.125 {
				t.Errorf("%s: p%v %v ms (TTFTs doubled), want about %v", tc.w, q.q*100, q.got, want)
			}
		}
		if p := provider(t, s, "openai", w, now); p.Requests != tc.want {
			t.Errorf("%s: provider has %d requests, want %d", tc.w, p.Requests, tc.want)
		}
	}
	// Far in the future every window is empty again.
	later := now.Add(8 * 24 * time.Hour)
	for _, w := range Windows {
		if got := account(t, s, "a", w, later); got.Requests != 0 {
			t.Errorf("%s after 8 idle days: %d requests, want 0", w.Name, got.Requests)
		}
	}
}

func TestFiveMinuteWindowEdges(t *testing.T) {
	s := newStore(t)
	s.Record(t0.Add(30*time.Second), "a", "p", ok(time.Second))
	w, _ := WindowNamed("5m")
	for _, tc := range []struct {
		after time.Duration
		want  uint64
	}{
		{time.Minute - time.Nanosecond, 1}, // same minute
		{5*time.Minute + 59*time.Second, 1},
		{6 * time.Minute, 0}, // the bucket is now six minutes old
	} {
		if got := account(t, s, "a", w, t0.Add(tc.after)).Requests; got != tc.want {
			t.Errorf("at +%v: %d requests, want %d", tc.after, got, tc.want)
		}
	}
	if got := account(t, s, "a", w, t0.Add(6*time.Minute)).From; !got.Equal(t0.Add(time.Minute)) {
		t.Errorf("From = %v, want %v", got, t0.Add(time.Minute))
	}
}

func TestLateRecordIsDroppedNotMisfiled(t *testing.T) {
	s := newStore(t)
	s.Record(t0.Add(10*time.Minute), "a", "p", ok(time.Second))
	// Ten minutes late: the 5m ring's slot for it now holds a newer minute.
	s.Record(t0.Add(4*time.Minute), "a", "p", Attempt{Status: 500, Class: upstream.ClassTransient})
	w, _ := WindowNamed("5m")
	if got := account(t, s, "a", w, t0.Add(10*time.Minute)); got.Requests != 1 || len(got.Errors) != 0 {
		t.Fatalf("5m: %d requests, errors %v; want the one success", got.Requests, got.Errors)
	}
	w, _ = WindowNamed("1h")
	if got := account(t, s, "a", w, t0.Add(10*time.Minute)); got.Requests != 2 || got.Errors["transient"] != 1 || got.Statuses["500"] != 1 {
		t.Fatalf("1h: %d requests, errors %v, statuses %v; want both", got.Requests, got.Errors, got.Statuses)
	}
}

func TestClassesStatusesTokensAndPoints(t *testing.T) {
	s := newStore(t)
	at := t0.Add(time.Hour)
	s.Record(at, "a", "anthropic", ok(100*time.Millisecond))
	s.AddTokens(at, "a", "anthropic", Tokens{Input: 10, Output: 5, CacheRead: 3, CacheWrite: 2})
	s.Record(at, "a", "anthropic", Attempt{Status: 429, Class: upstream.ClassRate, Latency: time.Millisecond})
	s.Record(at.Add(10*time.Minute), "a", "anthropic", Attempt{Class: upstream.ClassTransient, Latency: 3 * time.Second})
	s.Record(at, "b", "anthropic", ok(time.Millisecond))
	w, _ := WindowNamed("1h")
	now := at.Add(15 * time.Minute)
	got := account(t, s, "a", w, now)
	if got.Requests != 3 || got.Succeeded != 1 || got.Errors["rate"] != 1 || got.Errors["transient"] != 1 {
		t.Errorf("summary %+v: want 3 requests, 1 ok, 1 rate, 1 transient", got)
	}
	if got.Statuses["200"] != 1 || got.Statuses["429"] != 1 || got.Statuses["0"] != 1 {
		t.Errorf("statuses %v, want 200, 429 and 0 once each", got.Statuses)
	}
	if got.Tokens != (Tokens{Input: 10, Output: 5, CacheRead: 3, CacheWrite: 2}) {
		t.Errorf("tokens %+v", got.Tokens)
	}
	if got.TTFTms.Count != 1 || got.LatencyMs.Count != 3 {
		t.Errorf("%d TTFTs and %d latencies, want 1 and 3", got.TTFTms.Count, got.LatencyMs.Count)
	}
	if p := provider(t, s, "anthropic", w, now); p.Requests != 4 || p.Tokens.Input != 10 {
		t.Errorf("provider: %d requests, %d input tokens; want 4 and 10", p.Requests, p.Tokens.Input)
	}
	pts, err := s.AccountPoints(context.Background(), "a", w, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != 13 {
		t.Fatalf("%d points, want 13", len(pts))
	}
	if !pts[12].At.Equal(at.Add(15*time.Minute)) || pts[12].Requests != 0 {
		t.Errorf("last point %+v, want the empty current bucket at %v", pts[12], at.Add(15*time.Minute))
	}
	if p := pts[9]; !p.At.Equal(at) || p.Requests != 2 || p.Errors != 1 {
		t.Errorf("point at %v: %+v, want 2 requests, 1 error", at, p)
	}
	if p := pts[11]; p.Requests != 1 || p.Errors != 1 || p.P95ms < 2800 {
		t.Errorf("point at +10m: %+v, want the 3 s failure", p)
	}
	for _, bw := range []Window{w, Windows[3]} { // in memory, stored
		b, err := s.Briefs(context.Background(), bw, now)
		if err != nil || len(b) != 2 || b["a"].Requests != 3 || b["b"].SuccessRate != 1 || b["a"].P95ms < 2800 {
			t.Errorf("%s briefs %+v, %v", bw.Name, b, err)
		}
	}
	if b, ok := s.HourBrief("a", now); !ok || b.Requests != 3 {
		t.Errorf("HourBrief = %+v, %v", b, ok)
	}
	// The stored windows count the same, in their own buckets.
	day := account(t, s, "a", Windows[3], now)
	if day.Requests != 3 || day.Errors["rate"] != 1 || day.Statuses["0"] != 1 || day.Tokens != got.Tokens || day.TTFTms.Count != 1 || day.LatencyMs.P95 != got.LatencyMs.P95 {
		t.Errorf("24h summary %+v, want the 1h one's counts", day)
	}
	if pts, err = s.AccountPoints(context.Background(), "a", Windows[3], now); err != nil || len(pts) != 13 {
		t.Fatalf("24h points: %d, %v; want 13", len(pts), err)
	}
	// at is t0 + 1 h: the last 2-hour bucket, from t0.
	if p := pts[12]; !p.At.Equal(t0) || p.Requests != 3 || p.Errors != 2 || p.P95ms < 2800 {
		t.Errorf("24h last point %+v, want the three attempts from %v", p, t0)
	}
	if e := account(t, s, "nobody", w, now); e.Requests != 0 || e.Errors == nil {
		t.Errorf("unknown account: %+v, want an empty summary", e)
	}
}

// sink is a storage that keeps nothing: the benchmarks measure the Store,
// not a database.
type sink struct{ rows int }

func (k *sink) AddAttemptCounts(_ context.Context, cs []storage.AttemptCount) error {
	k.rows += len(cs)
	return nil
}
func (*sink) AttemptCounts(context.Context, storage.StatsScope, string, time.Time, time.Time) ([]storage.AttemptCount, error) {
	return nil, nil
}
func (*sink) AttemptTotals(context.Context, storage.StatsScope, string, time.Time, time.Time) ([]storage.AttemptCount, error) {
	return nil, nil
}
func (*sink) AttemptSubjects(context.Context, storage.StatsScope, time.Time, time.Time) ([]string, error) {
	return nil, nil
}
func (*sink) PruneAttemptCounts(context.Context, time.Time) (int64, error) { return 0, nil }

// flushEvery is how many records the benchmarks make between Flushes:
// about what Run's FlushEvery sees at 10,000 accounts of 60 attempts an hour.
const flushEvery = 1000

// BenchmarkRecord is one served attempt (Record and AddTokens, as the
// gateway does) into a store of 10,000 accounts at steady state: each
// account holds eight days of one attempt an hour and the benchmark goes on
// at that rate (the clock advances 360 ms an op, the accounts in turn), so
// every ring's arena already has its size; the pending counts are flushed
// (to a sink) every flushEvery ops, as Run would.
func BenchmarkRecord(b *testing.B) {
	s, ids := filled(b, 10000, &sink{})
	at := t0.Add(8 * 24 * time.Hour)
	step := time.Hour / time.Duration(len(ids))
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		now := at.Add(time.Duration(i) * step)
		s.Record(now, ids[i%len(ids)], "openai", ok(time.Duration(200+i*7919%20000)*time.Millisecond))
		s.AddTokens(now, ids[i%len(ids)], "openai", Tokens{Input: int64(1000 + i*7919%40000), Output: 300, CacheRead: 4000})
		if i%flushEvery == flushEvery-1 {
			if err := s.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkRecordParallel is Record from every CPU at once (each goroutine
// its own clock at the rate of BenchmarkRecord), flushed as there.
func BenchmarkRecordParallel(b *testing.B) {
	s, ids := filled(b, 10000, &sink{})
	at := t0.Add(8 * 24 * time.Hour)
	step := time.Hour / time.Duration(len(ids))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			s.Record(at.Add(time.Duration(i)*step), ids[i%len(ids)], "openai", ok(time.Duration(200+i*7919%20000)*time.Millisecond))
			if i%flushEvery == 0 {
				if err := s.Flush(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
}

// BenchmarkRecordServedParallel is the gateway's release path from every
// CPU at once (run it with -cpu 1,2,4): one served attempt, Record and, for
// a success, AddTokens, over 10,000 accounts drawn at random with
// newSpread's outcomes, each goroutine its own stream and its own clock at
// 1,000 attempts a second; the store flushes (to a sink) every
// gatewayFlush attempts of a goroutine, as Run would at 1,000 req/s. It
// is the benchmark of the pending batch's and the series' locks: its mutex
// profile (-mutexprofile) shows what the goroutines wait for.
func BenchmarkRecordServedParallel(b *testing.B) { benchRecordServed(b, false) }

// BenchmarkRecordServedOnceParallel is BenchmarkRecordServedParallel with
// each served attempt counted by one RecordServed, as the gateway counts
// the attempt that served the client.
func BenchmarkRecordServedOnceParallel(b *testing.B) { benchRecordServed(b, true) }

// benchRecordServed runs BenchmarkRecordServedParallel, a success counted
// by RecordServed when once is set, by Record and AddTokens otherwise.
func benchRecordServed(b *testing.B, once bool) {
	s := New(&sink{})
	at := t0.Add(8 * 24 * time.Hour)
	g := newSpread(10000)
	for range gatewayFlush { // every account's series and rows exist
		id, a, tk := g.next()
		s.Record(at, id, "openai", a)
		s.AddTokens(at, id, "openai", tk)
	}
	if err := s.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	var seeds atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		g := &spread{ids: g.ids, rnd: seeds.Add(1) * 0x9e3779b97f4a7c15}
		for i := 0; pb.Next(); i++ {
			now := at.Add(time.Duration(i) * time.Millisecond)
			id, a, tk := g.next()
			switch {
			case tk == (Tokens{}):
				s.Record(now, id, "openai", a)
			case once:
				s.RecordServed(now, id, "openai", a, tk)
			default:
				s.Record(now, id, "openai", a)
				s.AddTokens(now, id, "openai", tk)
			}
			if i%gatewayFlush == gatewayFlush-1 {
				if err := s.Flush(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
}

// BenchmarkSummary is one account's 7d summary (the admin account page)
// read from SQLite: 100 accounts of eight days at one attempt an hour.
func BenchmarkSummary(b *testing.B) {
	s, ids := filled(b, 100, openDB(b))
	now := t0.Add(8 * 24 * time.Hour)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Account(context.Background(), ids[i%len(ids)], Windows[4], now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBriefs10k is the accounts table's column: every account's 1h brief.
func BenchmarkBriefs10k(b *testing.B) {
	s, _ := filled(b, 10000, &sink{})
	now := t0.Add(8 * 24 * time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Briefs(context.Background(), Windows[1], now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemory reports the heap a store holds per account (after a GC,
// the map and its keys included, the pending counts flushed) after eight
// days in which every account had perHour attempts an hour with latencies
// spread over 0.2–20 s and the tokens of each success: 10,000 accounts at
// 1 and 12 attempts an hour, 1,000 at 60 (as measured before the long
// windows moved to storage), and over the last day only (the heap holds
// the last hour; eight days of it take many minutes to fill on a loaded
// machine) 10,000 at 60 and 10,000 whose 12 an hour stopped two hours
// before the end (idle: swept). The long windows' counts go to a sink: they
// are the database's, not the heap's.
func BenchmarkMemory(b *testing.B) {
	for _, c := range []struct {
		accounts, perHour int
		idle, days        time.Duration
	}{{10000, 12, 2 * time.Hour, 1}, {10000, 1, 0, 8}, {10000, 12, 0, 8}, {1000, 60, 0, 8}, {10000, 60, 0, 1}} {
		name := fmt.Sprintf("accounts=%d/per_hour=%d", c.accounts, c.perHour)
		if c.idle > 0 {
			name += "/idle=" + c.idle.String()
		}
		if c.days != 8 {
			name += fmt.Sprintf("/days=%d", c.days)
		}
		b.Run(name, func(b *testing.B) {
			var before, after runtime.MemStats
			var s *Store
			for b.Loop() {
				runtime.GC()
				runtime.ReadMemStats(&before)
				s = fillDays(b, c.accounts, c.perHour, c.idle, c.days, &sink{})
				runtime.GC()
				runtime.ReadMemStats(&after)
			}
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(c.accounts), "B/account")
			runtime.KeepAlive(s)
		})
	}
}

func filled(tb testing.TB, n int, b storage.AttemptStats) (*Store, []string) {
	s := fill(tb, n, 1, 0, b)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("acct-%05d", i)
	}
	return s, ids
}

// fill records a week (plus a day) of perHour attempts an hour for n
// accounts into a Store over b, flushing every flushEvery records; the
// attempts stop idle before the end, when a sweep runs.
func fill(tb testing.TB, n, perHour int, idle time.Duration, b storage.AttemptStats) *Store {
	return fillDays(tb, n, perHour, idle, 8, b)
}

// fillDays is fill over the last days of the eight (the same end).
func fillDays(tb testing.TB, n, perHour int, idle, days time.Duration, b storage.AttemptStats) *Store {
	s := New(b)
	end := t0.Add(8 * 24 * time.Hour)
	var k int
	flush := func() {
		if err := s.Flush(context.Background()); err != nil {
			tb.Fatal(err)
		}
	}
	for i := 0; i < n && perHour > 0; i++ {
		id := fmt.Sprintf("acct-%05d", i)
		for at := end.Add(-days * 24 * time.Hour); at.Before(end.Add(-idle)); at = at.Add(time.Hour / time.Duration(perHour)) {
			k++
			lat := time.Duration(200+k*7919%20000) * time.Millisecond
			a := ok(lat)
			if k%50 == 0 {
				a = Attempt{Status: 429, Class: upstream.ClassRate, Latency: lat / 10}
			}
			s.Record(at, id, "openai", a)
			if a.Class == upstream.ClassNone {
				tk := Tokens{Input: int64(1000 + k*7919%40000), Output: int64(100 + k*104729%2000)}
				if k%3 != 0 {
					tk.CacheRead = int64(k * 15485863 % 30000)
				}
				s.AddTokens(at, id, "openai", tk)
			}
			if k%flushEvery == 0 {
				flush()
			}
		}
	}
	flush()
	s.sweeps.Wait()
	if idle > 0 {
		s.Sweep(end)
	}
	return s
}

func TestForgetDropsTheAccountOnly(t *testing.T) {
	s := newStore(t)
	s.Record(t0, "a", "p", ok(time.Second))
	s.Record(t0, "b", "p", ok(time.Second))
	s.Forget("a")
	w, _ := WindowNamed("1h")
	if got := account(t, s, "a", w, t0); got.Requests != 0 {
		t.Errorf("forgotten account: %d requests, want 0", got.Requests)
	}
	if got := account(t, s, "b", w, t0).Requests; got != 1 {
		t.Errorf("other account: %d requests, want 1", got)
	}
	if got := provider(t, s, "p", w, t0).Requests; got != 2 {
		t.Errorf("provider: %d requests, want 2 (it keeps what the account did)", got)
	}
	var nilStore *Store
	nilStore.Forget("a")
	nilStore.Record(t0, "a", "p", ok(time.Second))
	nilStore.Sweep(t0)
	// A series dropped while a Record holds it is not written to: the
	// attempt goes into a new one.
	r := s.get("b")
	s.Forget("b")
	if r.record(t0, ok(time.Second), nil) {
		t.Fatal("a dropped series took a record")
	}
	s.Record(t0, "b", "p", ok(time.Second))
	if got := account(t, s, "b", w, t0).Requests; got != 1 {
		t.Errorf("account recorded after Forget: %d requests, want 1", got)
	}
}

func TestSweepFreesIdleRingsAndAccounts(t *testing.T) {
	s := newStore(t)
	for i := range 30 { // 30 latency bins: the rings' arenas are over 64 bytes
		s.Record(t0, "idle", "p", ok(time.Duration(100<<(i/4))*time.Microsecond+time.Duration(i%4)*time.Duration(25<<(i/4))*time.Microsecond))
	}
	s.AddTokens(t0, "idle", "p", Tokens{Input: 5})
	s.Record(t0, "quiet", "p", ok(time.Second))
	s.Record(t0, "busy", "p", ok(time.Second))
	// Half an hour on, the 5m rings hold nothing in their window: the idle
	// account's arena goes, the 1h ring stays. The quiet account's small
	// arena is emptied but kept, for its next attempt.
	at := t0.Add(30 * time.Minute)
	s.Record(at, "busy", "p", ok(time.Second))
	s.sweeps.Wait() // the one that Record started
	s.Sweep(at)
	r := s.find("idle")
	if r == nil || r.rings[0].t != nil || r.rings[1].t == nil {
		t.Fatalf("idle account after 30 min: %+v, want the 5m arena freed, the 1h one kept", r)
	}
	if q := s.find("quiet"); len(q.rings[0].t) != 0 || cap(q.rings[0].t) == 0 || len(q.rings[1].t) == 0 {
		t.Fatalf("quiet account after 30 min: %+v, want its 5m arena emptied and kept, its 1h one as it was", q)
	}
	// Past the 1h window's reach (an hour and its 5-minute bucket) the idle
	// and quiet accounts hold no memory at all; the busy one and the
	// provider stay, and the long windows still have every attempt.
	end := t0.Add(66 * time.Minute)
	s.Record(end, "busy", "p", ok(time.Second))
	s.sweeps.Wait()
	s.Sweep(end)
	if s.find("idle") != nil || s.find("quiet") != nil || s.find("busy") == nil {
		t.Fatalf("after 66 minutes: accounts %v, want only busy", s.accounts)
	}
	if got := account(t, s, "idle", Windows[2], end); got.Requests != 30 || got.Tokens.Input != 5 || got.LatencyMs.Count != 30 {
		t.Errorf("6h window of the swept account: %+v, want its attempts and tokens", got)
	}
	if got := account(t, s, "idle", Windows[1], end); got.Requests != 0 {
		t.Errorf("1h window of the swept account: %d requests, want 0", got.Requests)
	}
	// A late record of a swept account lands in a new series.
	s.Record(t0.Add(time.Hour), "idle", "p", Attempt{Status: 503, Class: upstream.ClassTransient})
	if got := account(t, s, "idle", Windows[1], end); got.Requests != 1 || got.Errors["transient"] != 1 {
		t.Errorf("1h window with the late record: %+v, want the late attempt", got)
	}
	ps, err := s.Providers(context.Background(), Windows[4], end)
	if got := provider(t, s, "p", Windows[4], end).Requests; got != 35 || err != nil || len(ps) != 1 {
		t.Errorf("provider's 7d window: %d requests (providers %v, %v), want all 35", got, ps, err)
	}
}

func TestRecordStartsSweeps(t *testing.T) {
	s := newStore(t)
	s.Record(t0, "gone", "p", ok(time.Second))
	// Each Record that passes the next sweep time starts one; the one eight
	// days on drops the account idle since t0.
	for at := t0; !at.After(t0.Add(8 * 24 * time.Hour)); at = at.Add(SweepEvery) {
		s.Record(at, "busy", "p", ok(time.Second))
	}
	s.sweeps.Wait()
	if s.find("gone") != nil {
		t.Fatal("no sweep dropped the idle account")
	}
}

// TestLongWindowsAreTheDeployments: two instances (Stores) over one
// database each count their own attempts in the short windows and read
// both's in the long ones.
func TestLongWindowsAreTheDeployments(t *testing.T) {
	db := openDB(t)
	a, b := New(db), New(db)
	at := t0.Add(3 * time.Hour)
	a.Record(at, "acct", "openai", ok(time.Second))
	a.AddTokens(at, "acct", "openai", Tokens{Input: 7})
	b.Record(at.Add(time.Minute), "acct", "openai", Attempt{Status: 429, Class: upstream.ClassRate, Latency: time.Millisecond})
	b.AddTokens(at, "acct", "openai", Tokens{Input: 3, CacheWrite: 2})
	now := at.Add(2 * time.Minute)
	// Each read flushes its own instance's counts; the other's come with
	// its next Flush (Run's, every FlushEvery).
	if got := account(t, a, "acct", Windows[2], now); got.Requests != 1 {
		t.Errorf("6h before b flushed: %d requests, want a's one", got.Requests)
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Store{a, b} {
		if got := account(t, s, "acct", Windows[1], now); got.Requests != 1 {
			t.Errorf("1h: %d requests, want this instance's one", got.Requests)
		}
		for _, w := range Windows[2:] {
			got := account(t, s, "acct", w, now)
			if got.Requests != 2 || got.Succeeded != 1 || got.Errors["rate"] != 1 || got.Tokens != (Tokens{Input: 10, CacheWrite: 2}) {
				t.Errorf("%s: %+v, want both instances' attempts and tokens", w.Name, got)
			}
			if p := provider(t, s, "openai", w, now); p.Requests != 2 {
				t.Errorf("%s provider: %d requests, want 2", w.Name, p.Requests)
			}
		}
	}
}

// failing is a storage that refuses writes while down.
type failing struct {
	storage.AttemptStats
	down bool
}

func (f *failing) AddAttemptCounts(ctx context.Context, cs []storage.AttemptCount) error {
	if f.down {
		return fmt.Errorf("storage is down: %w", context.DeadlineExceeded)
	}
	return f.AttemptStats.AddAttemptCounts(ctx, cs)
}

// TestFlushKeepsWhatStorageRefused: counts a failed Flush could not store
// stay pending and are stored by the next one; reads of a long window
// fail meanwhile, and those of a short one do not.
func TestFlushKeepsWhatStorageRefused(t *testing.T) {
	f := &failing{AttemptStats: openDB(t), down: true}
	s := New(f)
	s.Record(t0, "acct", "p", ok(time.Second))
	if err := s.Flush(context.Background()); err == nil {
		t.Fatal("Flush with storage down: no error")
	}
	if _, err := s.Account(context.Background(), "acct", Windows[3], t0); err == nil {
		t.Fatal("24h read with storage down: no error")
	}
	if got := account(t, s, "acct", Windows[0], t0); got.Requests != 1 {
		t.Fatalf("5m with storage down: %d requests, want 1", got.Requests)
	}
	s.Record(t0, "acct", "p", ok(time.Second))
	f.down = false
	if got := account(t, s, "acct", Windows[3], t0); got.Requests != 2 || got.LatencyMs.Count != 2 {
		t.Fatalf("24h after storage came back: %+v, want both attempts", got)
	}
	if s.Dropped() != 0 {
		t.Fatalf("%d counts dropped", s.Dropped())
	}
}

// TestWithoutStorage: a Store without storage answers its long windows
// empty, without an error, and keeps no pending counts.
func TestWithoutStorage(t *testing.T) {
	s := New(nil)
	s.Record(t0, "acct", "p", ok(time.Second))
	ctx := context.Background()
	if got := account(t, s, "acct", Windows[4], t0); got.Requests != 0 || got.Errors == nil {
		t.Errorf("7d without storage: %+v, want empty", got)
	}
	if got := account(t, s, "acct", Windows[1], t0); got.Requests != 1 {
		t.Errorf("1h without storage: %d requests, want 1", got.Requests)
	}
	if pts, err := s.AccountPoints(ctx, "acct", Windows[4], t0); err != nil || len(pts) != 13 || pts[12].Requests != 0 {
		t.Errorf("7d points without storage: %v, %v", pts, err)
	}
	if b, err := s.Briefs(ctx, Windows[3], t0); err != nil || len(b) != 0 {
		t.Errorf("24h briefs without storage: %v, %v", b, err)
	}
	if ps, err := s.Providers(ctx, Windows[3], t0); err != nil || len(ps) != 0 {
		t.Errorf("24h providers without storage: %v, %v", ps, err)
	}
	if s.Pending() != 0 || s.pending.used.Load() != 0 || !errors.Is(s.Flush(ctx), ErrNoStorage) {
		t.Errorf("pending without storage: %d cells", s.Pending())
	}
}

// BenchmarkFlushInterval is what the attempt statistics cost the storage
// at 1,000 attempts a second over 10,000 accounts (the 1k req/s phase of
// the 10k-accounts bench), by how often they are flushed: an op is one
// minute of attempts, each to an account drawn at random, with latencies
// over a few bins and two token kinds, flushed to a SQLite file every
// flush of their time. cpu-ns/attempt is the process's CPU time in Flush
// per attempt (Record's own cost is BenchmarkRecord's); rows/flush the
// rows a flush upserts. The hour's rows exist after the first op, as they
// do an hour into a run.
func BenchmarkFlushInterval(b *testing.B) {
	const (
		accounts = 10000
		rate     = 1000 // attempts a second
		minute   = 60 * rate
	)
	ids := make([]string, accounts)
	for i := range ids {
		ids[i] = fmt.Sprintf("acct-%05d", i)
	}
	rnd := uint64(1)
	next := func() uint64 { // xorshift: the same attempts for every interval
		rnd ^= rnd << 13
		rnd ^= rnd >> 7
		rnd ^= rnd << 17
		return rnd
	}
	type attempt struct {
		account int
		latency time.Duration
	}
	attempts := make([]attempt, minute)
	for i := range attempts {
		r := next()
		attempts[i] = attempt{int(r % accounts), time.Duration(300+(r>>32)%1500) * time.Microsecond}
	}
	for _, every := range []time.Duration{5 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute} {
		b.Run(every.String(), func(b *testing.B) {
			sealer, err := storage.NewSealer(bytes.Repeat([]byte{7}, 32))
			if err != nil {
				b.Fatal(err)
			}
			db, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "troupe.db"), sealer)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { db.Close() })
			s := New(db)
			perFlush := int(every.Seconds()) * rate
			at := t0
			var cpu time.Duration
			flushes, rows := 0, 0
			run := func() {
				for i, a := range attempts {
					now := at.Add(time.Duration(i) * time.Second / rate)
					s.Record(now, ids[a.account], "openai", Attempt{Status: 200, Latency: a.latency})
					s.AddTokens(now, ids[a.account], "openai", Tokens{Input: 20, Output: 12})
					if (i+1)%perFlush == 0 {
						rows += s.Pending()
						cpu0 := cputime.Process()
						if err := s.Flush(b.Context()); err != nil {
							b.Fatal(err)
						}
						cpu += cputime.Process() - cpu0
						flushes++
					}
				}
				at = at.Add(time.Minute)
			}
			run() // the hour's rows exist
			cpu, flushes, rows = 0, 0, 0
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				run()
				n += minute
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/attempt")
			b.ReportMetric(float64(rows)/float64(flushes), "rows/flush")
		})
	}
}

// TestRecordServedMatches: RecordServed counts what Record and AddTokens
// count, in the in-memory windows and in the pending batch, over a spread
// of accounts, outcomes and tokens (failures with none) across an hour.
func TestRecordServedMatches(t *testing.T) {
	two, one := New(&sink{}), New(&sink{})
	g := newSpread(300)
	at := t0.Add(30 * time.Minute)
	for i := range 3000 {
		now := at.Add(time.Duration(i) * 1500 * time.Millisecond) // 75 minutes
		id, a, tk := g.next()
		prov := []string{"openai", "anthropic"}[i%2]
		two.Record(now, id, prov, a)
		two.AddTokens(now, id, prov, tk)
		one.RecordServed(now, id, prov, a, tk)
	}
	end := at.Add(3000 * 1500 * time.Millisecond)
	ctx := context.Background()
	for _, w := range Windows[:numRings] {
		for _, id := range g.ids {
			a, err := two.Account(ctx, id, w, end)
			if err != nil {
				t.Fatal(err)
			}
			b, err := one.Account(ctx, id, w, end)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("%s %s: Record and AddTokens %+v, RecordServed %+v", id, w.Name, a, b)
			}
		}
		for _, p := range []string{"openai", "anthropic"} {
			a, _ := two.Provider(ctx, p, w, end)
			b, _ := one.Provider(ctx, p, w, end)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("%s %s: Record and AddTokens %+v, RecordServed %+v", p, w.Name, a, b)
			}
		}
	}
	a, b := two.pending.take(), one.pending.take()
	if len(a) == 0 || !reflect.DeepEqual(a, b) {
		t.Fatalf("pending: Record and AddTokens %d rows, RecordServed %d rows (or different)", len(a), len(b))
	}
}

// BenchmarkRecordServed is BenchmarkRecord through RecordServed: the same
// served attempts, counted with their tokens in one call.
func BenchmarkRecordServed(b *testing.B) {
	s, ids := filled(b, 10000, &sink{})
	at := t0.Add(8 * 24 * time.Hour)
	step := time.Hour / time.Duration(len(ids))
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		now := at.Add(time.Duration(i) * step)
		s.RecordServed(now, ids[i%len(ids)], "openai", ok(time.Duration(200+i*7919%20000)*time.Millisecond),
			Tokens{Input: int64(1000 + i*7919%40000), Output: 300, CacheRead: 4000})
		if i%flushEvery == flushEvery-1 {
			if err := s.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}
