package stats

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/upstream"
)

// t0 is a synthetic clock's start, on a 14-hour boundary so every ring's
// buckets start at t0.
var t0 = time.Unix(0, 0).Add(14 * time.Hour * 100000).UTC()

func ok(lat time.Duration) Attempt {
	return Attempt{Status: 200, Latency: lat, TTFT: lat / 2}
}

func TestWindowsSlideWithTheClock(t *testing.T) {
	s := New()
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
		{"6h", 360 + 30}, // 12 thirty-minute buckets + the current
		{"24h", 24*60 + 120},
		{"7d", 7*24*60 + 10*60}, // 8 days = 13 × 14 h + 10 h: 12 complete buckets and 10 h of the current
	} {
		w, _ := WindowNamed(tc.w)
		got := s.Account("a", w, now)
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
		if p := s.Provider("openai", w, now); p.Requests != tc.want {
			t.Errorf("%s: provider has %d requests, want %d", tc.w, p.Requests, tc.want)
		}
	}
	// Far in the future every window is empty again.
	later := now.Add(8 * 24 * time.Hour)
	for _, w := range Windows {
		if got := s.Account("a", w, later); got.Requests != 0 {
			t.Errorf("%s after 8 idle days: %d requests, want 0", w.Name, got.Requests)
		}
	}
}

func TestFiveMinuteWindowEdges(t *testing.T) {
	s := New()
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
		if got := s.Account("a", w, t0.Add(tc.after)).Requests; got != tc.want {
			t.Errorf("at +%v: %d requests, want %d", tc.after, got, tc.want)
		}
	}
	if got := s.Account("a", w, t0.Add(6*time.Minute)).From; !got.Equal(t0.Add(time.Minute)) {
		t.Errorf("From = %v, want %v", got, t0.Add(time.Minute))
	}
}

func TestLateRecordIsDroppedNotMisfiled(t *testing.T) {
	s := New()
	s.Record(t0.Add(10*time.Minute), "a", "p", ok(time.Second))
	// Ten minutes late: the 5m ring's slot for it now holds a newer minute.
	s.Record(t0.Add(4*time.Minute), "a", "p", Attempt{Status: 500, Class: upstream.ClassTransient})
	w, _ := WindowNamed("5m")
	if got := s.Account("a", w, t0.Add(10*time.Minute)); got.Requests != 1 || len(got.Errors) != 0 {
		t.Fatalf("5m: %d requests, errors %v; want the one success", got.Requests, got.Errors)
	}
	w, _ = WindowNamed("1h")
	if got := s.Account("a", w, t0.Add(10*time.Minute)); got.Requests != 2 || got.Errors["transient"] != 1 || got.Statuses["500"] != 1 {
		t.Fatalf("1h: %d requests, errors %v, statuses %v; want both", got.Requests, got.Errors, got.Statuses)
	}
}

func TestClassesStatusesTokensAndPoints(t *testing.T) {
	s := New()
	at := t0.Add(time.Hour)
	s.Record(at, "a", "anthropic", ok(100*time.Millisecond))
	s.AddTokens(at, "a", "anthropic", Tokens{Input: 10, Output: 5, CacheRead: 3, CacheWrite: 2})
	s.Record(at, "a", "anthropic", Attempt{Status: 429, Class: upstream.ClassRate, Latency: time.Millisecond})
	s.Record(at.Add(10*time.Minute), "a", "anthropic", Attempt{Class: upstream.ClassTransient, Latency: 3 * time.Second})
	s.Record(at, "b", "anthropic", ok(time.Millisecond))
	w, _ := WindowNamed("1h")
	now := at.Add(15 * time.Minute)
	got := s.Account("a", w, now)
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
	if p := s.Provider("anthropic", w, now); p.Requests != 4 || p.Tokens.Input != 10 {
		t.Errorf("provider: %d requests, %d input tokens; want 4 and 10", p.Requests, p.Tokens.Input)
	}
	pts := s.AccountPoints("a", w, now)
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
	b := s.Briefs(w, now)
	if len(b) != 2 || b["a"].Requests != 3 || b["b"].SuccessRate != 1 {
		t.Errorf("briefs %+v", b)
	}
	if e := s.Account("nobody", w, now); e.Requests != 0 || e.Errors == nil {
		t.Errorf("unknown account: %+v, want an empty summary", e)
	}
}

// BenchmarkRecord is one served attempt (Record and AddTokens, as the
// gateway does) into a store of 10,000 accounts at steady state: each
// account holds eight days of one attempt an hour and the benchmark goes on
// at that rate (the clock advances 360 ms an op, the accounts in turn), so
// every ring's arena already has its size.
func BenchmarkRecord(b *testing.B) {
	s, ids := filled(10000)
	at := t0.Add(8 * 24 * time.Hour)
	step := time.Hour / time.Duration(len(ids))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		now := at.Add(time.Duration(i) * step)
		s.Record(now, ids[i%len(ids)], "openai", ok(time.Duration(200+i*7919%20000)*time.Millisecond))
		s.AddTokens(now, ids[i%len(ids)], "openai", Tokens{Input: int64(1000 + i*7919%40000), Output: 300, CacheRead: 4000})
	}
}

// BenchmarkRecordParallel is Record from every CPU at once (each goroutine
// its own clock at the rate of BenchmarkRecord).
func BenchmarkRecordParallel(b *testing.B) {
	s, ids := filled(10000)
	at := t0.Add(8 * 24 * time.Hour)
	step := time.Hour / time.Duration(len(ids))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			s.Record(at.Add(time.Duration(i)*step), ids[i%len(ids)], "openai", ok(time.Duration(200+i*7919%20000)*time.Millisecond))
		}
	})
}

// BenchmarkSummary is one account's 7d summary (the admin account page).
func BenchmarkSummary(b *testing.B) {
	s, ids := filled(100)
	now := t0.Add(8 * 24 * time.Hour)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Account(ids[i%len(ids)], Windows[4], now)
	}
}

// BenchmarkBriefs10k is the accounts table's column: every account's 1h brief.
func BenchmarkBriefs10k(b *testing.B) {
	s, _ := filled(10000)
	now := t0.Add(8 * 24 * time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		s.Briefs(Windows[1], now)
	}
}

// BenchmarkMemory reports the heap a store holds per account after eight
// days in which every account had perHour attempts an hour with latencies
// spread over 0.2–20 s and the tokens of each success (every bucket of
// every ring in use): 10,000 accounts
// at 1 and 12 attempts an hour, and 1,000 at 60 (the cost is per account;
// filling 10,000 at 60 an hour takes minutes).
func BenchmarkMemory(b *testing.B) {
	for _, c := range []struct{ accounts, perHour int }{{10000, 1}, {10000, 12}, {1000, 60}} {
		b.Run(fmt.Sprintf("accounts=%d/per_hour=%d", c.accounts, c.perHour), func(b *testing.B) {
			var before, after runtime.MemStats
			var s *Store
			for b.Loop() {
				runtime.GC()
				runtime.ReadMemStats(&before)
				s = fill(c.accounts, c.perHour)
				runtime.GC()
				runtime.ReadMemStats(&after)
			}
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(c.accounts), "B/account")
			runtime.KeepAlive(s)
		})
	}
}

func filled(n int) (*Store, []string) {
	s := fill(n, 1)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("acct-%05d", i)
	}
	return s, ids
}

// fill records a week (plus a day) of perHour attempts an hour for n accounts.
func fill(n, perHour int) *Store {
	s := New()
	step := time.Hour / time.Duration(perHour)
	var k int
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("acct-%05d", i)
		for at := t0; at.Before(t0.Add(8 * 24 * time.Hour)); at = at.Add(step) {
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
		}
	}
	return s
}

func TestForgetDropsTheAccountOnly(t *testing.T) {
	s := New()
	s.Record(t0, "a", "p", ok(time.Second))
	s.Record(t0, "b", "p", ok(time.Second))
	s.Forget("a")
	w, _ := WindowNamed("1h")
	if got := s.Account("a", w, t0); got.Requests != 0 {
		t.Errorf("forgotten account: %d requests, want 0", got.Requests)
	}
	if got := s.Account("b", w, t0).Requests; got != 1 {
		t.Errorf("other account: %d requests, want 1", got)
	}
	if got := s.Provider("p", w, t0).Requests; got != 2 {
		t.Errorf("provider: %d requests, want 2 (it keeps what the account did)", got)
	}
	var nilStore *Store
	nilStore.Forget("a")
	nilStore.Record(t0, "a", "p", ok(time.Second))
	nilStore.Sweep(t0)
	// A series dropped while a Record holds it is not written to: the
	// attempt goes into a new one.
	r := s.get(&s.accounts, "b")
	s.Forget("b")
	if r.record(t0, ok(time.Second)) {
		t.Fatal("a dropped series took a record")
	}
	s.Record(t0, "b", "p", ok(time.Second))
	if got := s.Account("b", w, t0).Requests; got != 1 {
		t.Errorf("account recorded after Forget: %d requests, want 1", got)
	}
}

func TestSweepFreesIdleRingsAndAccounts(t *testing.T) {
	s := New()
	for i := range 30 { // 30 latency bins: the short rings' arenas are over 64 bytes
		s.Record(t0, "idle", "p", ok(time.Duration(100<<(i/4))*time.Microsecond+time.Duration(i%4)*time.Duration(25<<(i/4))*time.Microsecond))
	}
	s.AddTokens(t0, "idle", "p", Tokens{Input: 5})
	s.Record(t0, "quiet", "p", ok(time.Second))
	s.Record(t0, "busy", "p", ok(time.Second))
	// Two hours on, the idle account's 5m and 1h rings hold nothing in
	// their windows: their arenas go, the longer windows stay. The quiet
	// account's small arenas are emptied but kept, for its next attempt.
	at := t0.Add(2 * time.Hour)
	s.Record(at, "busy", "p", ok(time.Second))
	s.sweeps.Wait() // the one that Record started
	s.Sweep(at)
	r := s.lookup(s.accounts, "idle")
	if r == nil || r.rings[0].t != nil || r.rings[1].t != nil || r.rings[2].t == nil {
		t.Fatalf("idle account after 2 h: %+v, want the 5m and 1h arenas freed, the 6h one kept", r)
	}
	if q := s.lookup(s.accounts, "quiet"); len(q.rings[0].t) != 0 || cap(q.rings[0].t) == 0 || len(q.rings[2].t) == 0 {
		t.Fatalf("quiet account after 2 h: %+v, want its 5m arena emptied and kept, its 6h one as it was", q)
	}
	if got := s.Account("idle", Windows[2], at); got.Requests != 30 || got.Tokens.Input != 5 {
		t.Errorf("6h window after the sweep: %+v, want the attempts and their tokens", got)
	}
	if b := s.lookup(s.accounts, "busy"); len(b.rings[0].t) == 0 || len(b.rings[1].t) == 0 {
		t.Error("the busy account's short rings were emptied")
	}
	// A late record into a freed ring still lands in its bucket (the one
	// freed is gone: windows are read as of now, which no longer holds it).
	s.Record(t0.Add(time.Minute), "idle", "p", Attempt{Status: 503, Class: upstream.ClassTransient})
	if got := s.Account("idle", Windows[1], t0.Add(10*time.Minute)); got.Requests != 1 || got.Errors["transient"] != 1 {
		t.Errorf("1h window with the late record: %+v, want the late attempt", got)
	}
	// Past the 7d window's reach (7 days and its 14-hour bucket) the idle
	// account is dropped; the busy one and the provider stay.
	end := t0.Add(7*24*time.Hour + 15*time.Hour)
	s.Record(end, "busy", "p", ok(time.Second))
	s.sweeps.Wait()
	s.Sweep(end)
	if s.lookup(s.accounts, "idle") != nil || s.lookup(s.accounts, "quiet") != nil || s.lookup(s.accounts, "busy") == nil {
		t.Fatalf("after 7 days 15 hours: accounts %v, want only busy", s.accounts)
	}
	if got := s.Provider("p", Windows[4], end).Requests; got != 1 || len(s.Providers()) != 1 {
		t.Errorf("provider's 7d window: %d requests (providers %v), want the one inside it", got, s.Providers())
	}
}

func TestRecordStartsSweeps(t *testing.T) {
	s := New()
	s.Record(t0, "gone", "p", ok(time.Second))
	// Each Record that passes the next sweep time starts one; the one eight
	// days on drops the account idle since t0.
	for at := t0; !at.After(t0.Add(8 * 24 * time.Hour)); at = at.Add(SweepEvery) {
		s.Record(at, "busy", "p", ok(time.Second))
	}
	s.sweeps.Wait()
	if s.lookup(s.accounts, "gone") != nil {
		t.Fatal("no sweep dropped the idle account")
	}
}
