package actors

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/troupe-gw/troupe/internal/cputime"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

func luaPolicy(t testing.TB, name, src string) *LuaPolicy {
	t.Helper()
	if src == "" {
		var ok bool
		if src, ok = scripts.Builtin(name); !ok {
			t.Fatalf("no builtin %s", name)
		}
	}
	p, err := scripts.Compile(name, src, scripts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return NewLuaPolicy(p)
}

// setPolicyAndWait swaps the policy and waits until the pool is rescored.
func setPolicyAndWait(t testing.TB, s *System, p Policy) {
	t.Helper()
	s.SetPolicy(p)
	waitWithin(t, time.Minute, func() bool { // a full rescore of 100k accounts on a loaded machine
		st, err := s.PolicyStatus(context.Background())
		return err == nil && st.Policy == p.Name() && st.Rescoring == 0
	})
}

func acquireRelease(t testing.TB, s *System, req AcquireRequest, out Outcome) string {
	t.Helper()
	l, err := s.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	s.Release(l, out)
	return l.AccountID
}

var chatM = AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: time.Second}

// Under smart, an account that just failed with a 5xx ranks below healthy ones.
func TestSmartPrefersHealthy(t *testing.T) {
	s, _ := startSystem(t, 3, 4)
	setPolicyAndWait(t, s, luaPolicy(t, "smart", ""))
	// Fail id-0000 twice: two transient failures (no cooldown yet, score drops).
	for range 2 {
		l, err := s.Acquire(context.Background(), AcquireRequest{Endpoint: translate.Chat, Model: "m", Exclude: []string{"id-0001", "id-0002"}})
		if err != nil {
			t.Fatal(err)
		}
		s.Release(l, Outcome{Status: 500, Verdict: upstream.Verdict{Class: upstream.ClassTransient}})
	}
	waitFor(t, func() bool { v, _ := s.View("id-0000"); return v.FailureStreak == 2 && v.InFlight == 0 })
	s.SchedulerStats(context.Background()) // the view was enqueued first: now it is applied
	// id-0000 keeps failing whenever it is picked, so it stays two bands
	// below the others: smart spreads over the best band and jitters among
	// the top 3 15 % of the time, so it only ever gets jitter picks (a
	// success would win its score back and make it equal again).
	counts := map[string]int{}
	for range 60 {
		l, err := s.Acquire(context.Background(), chatM)
		if err != nil {
			t.Fatal(err)
		}
		out := Outcome{Status: 200}
		if l.AccountID == "id-0000" {
			out = Outcome{Status: 500, Verdict: upstream.Verdict{Class: upstream.ClassTransient}}
		}
		s.Release(l, out)
		counts[l.AccountID]++
	}
	if counts["id-0000"] > 15 || counts["id-0001"]+counts["id-0002"] < 45 {
		t.Fatalf("the failed account was not ranked last: %v", counts)
	}
}

// A nil score excludes the account; recheck_after brings it back without an
// event. The system runs in a synctest bubble, so the policy's clock is the
// bubble's: the account is excluded for its first 1.5 s, and the recheck due
// at 2 s (the one at 1 s still excludes it) brings it back on the scheduler's
// next tick, with no request or view in between.
func TestNilScoreAndRecheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := startSystem(t, 2, 4)
		src := `
local start = nil
function score(a, now)
  start = start or now
  if a.id == "id-0000" and now - start < 1.5 then return nil, nil, 1 end
  return 1
end`
		setPolicyAndWait(t, s, luaPolicy(t, "gate", src))
		for range 10 {
			if id := acquireRelease(t, s, chatM, Outcome{Status: 200}); id == "id-0000" {
				t.Fatal("excluded account picked")
			}
		}
		if st, _ := s.SchedulerStats(context.Background()); st.Excluded != 1 {
			t.Fatalf("%d accounts excluded, want 1", st.Excluded)
		}
		time.Sleep(2*time.Second + 250*time.Millisecond) // past the second recheck and a scheduler tick
		synctest.Wait()
		if st, _ := s.SchedulerStats(context.Background()); st.Excluded != 0 {
			t.Fatalf("%d accounts excluded after the recheck, want 0", st.Excluded)
		}
		l, err := s.Acquire(context.Background(), AcquireRequest{Endpoint: translate.Chat, Model: "m", Exclude: []string{"id-0001"}})
		if err != nil {
			t.Fatalf("recheck_after did not bring the account back: %v", err)
		}
		s.Release(l, Outcome{Status: 200})
	})
}

// Tier caps: a risky account gets at most one lease at a time under smart.
func TestTierCapsConcurrency(t *testing.T) {
	s, _ := startSystem(t, 1, 8)
	src := `
policy = { concurrency = { healthy = "max", warm = "max/2", risky = 1 } }
function score(a, now) return 10, "risky" end`
	setPolicyAndWait(t, s, luaPolicy(t, "risky", src))
	l1, err := s.Acquire(context.Background(), AcquireRequest{Endpoint: translate.Chat, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(context.Background(), AcquireRequest{Endpoint: translate.Chat, Model: "m"}); err == nil {
		t.Fatal("second lease granted to a risky account capped at 1")
	}
	s.Release(l1, Outcome{Status: 200})
}

func TestStickiness(t *testing.T) {
	s, _ := startSystem(t, 5, 4)
	setPolicyAndWait(t, s, luaPolicy(t, "sticky", ""))
	req := chatM
	req.StickyKey = "session-1"
	first := acquireRelease(t, s, req, Outcome{Status: 200})
	for range 20 {
		if id := acquireRelease(t, s, req, Outcome{Status: 200}); id != first {
			t.Fatalf("sticky key moved from %s to %s while available", first, id)
		}
	}
	// When its account is excluded (e.g. it failed), the key moves on.
	req.Exclude = []string{first}
	moved := acquireRelease(t, s, req, Outcome{Status: 200})
	if moved == first {
		t.Fatal("excluded sticky account picked")
	}
	req.Exclude = nil
	if id := acquireRelease(t, s, req, Outcome{Status: 200}); id != moved {
		t.Fatalf("sticky key did not follow the move: %s, want %s", id, moved)
	}
}

func TestTopKJitterSpreads(t *testing.T) {
	s, _ := startSystem(t, 5, 1000)
	src := `
policy = { top_k = 3, jitter = 1 }
local order = { ["id-0000"] = 5, ["id-0001"] = 4, ["id-0002"] = 3, ["id-0003"] = 2, ["id-0004"] = 1 }
function score(a, now) return order[a.id] end`
	setPolicyAndWait(t, s, luaPolicy(t, "topk", src))
	counts := map[string]int{}
	for range 300 {
		counts[acquireRelease(t, s, chatM, Outcome{Status: 200})]++
	}
	if counts["id-0003"]+counts["id-0004"] != 0 {
		t.Fatalf("picked outside the top 3: %v", counts)
	}
	for _, id := range []string{"id-0000", "id-0001", "id-0002"} {
		if counts[id] < 50 {
			t.Fatalf("top-3 jitter uneven: %v", counts)
		}
	}
}

// score_band: scores within one band are equally good, so the accounts of
// the best band take turns (least recently granted first) however their
// exact scores differ; an account a band lower gets nothing while they are
// free. Without the knob the best exact score takes every request.
func TestScoreBandSpreads(t *testing.T) {
	const src = `
local score_of = { ["id-0000"] = 99, ["id-0001"] = 97.5, ["id-0002"] = 95, ["id-0003"] = 91, ["id-0004"] = 85 }
function score(a, now) return score_of[a.id] end`
	for _, c := range []struct {
		knobs string
		want  map[string]int
	}{
		{"policy = { score_band = 10 }", map[string]int{"id-0000": 50, "id-0001": 50, "id-0002": 50, "id-0003": 50}},
		{"", map[string]int{"id-0000": 200}},
	} {
		s, _ := startSystem(t, 5, 4)
		setPolicyAndWait(t, s, luaPolicy(t, "band", c.knobs+src))
		counts := map[string]int{}
		for range 200 {
			counts[acquireRelease(t, s, chatM, Outcome{Status: 200})]++
		}
		if !maps.Equal(counts, c.want) {
			t.Errorf("%q: picks %v, want %v", c.knobs, counts, c.want)
		}
	}
}

// 50 policy switches during a 5,000-request run: zero failed requests.
func TestPolicySwitchesUnderLoad(t *testing.T) {
	s, _ := startSystem(t, 50, 8)
	names := []string{"smart", "round_robin", "least_inflight", "sticky", "quota_reset", "weighted"}
	policies := make([]*LuaPolicy, 0, 50)
	for i := range 50 {
		policies = append(policies, luaPolicy(t, names[i%len(names)], ""))
	}
	var failed, done atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 625 {
				req := chatM
				req.MaxWait = 5 * time.Second
				req.StickyKey = fmt.Sprintf("k%d", (w*625+i)%17)
				l, err := s.Acquire(context.Background(), req)
				if err != nil {
					failed.Add(1)
					continue
				}
				s.Release(l, Outcome{Status: 200})
				done.Add(1)
			}
		})
	}
	// Each switch lands among requests: the next waits for 50 more to be
	// done (5,000 over 50 switches), however fast the machine is.
	for i, p := range policies {
		s.SetPolicy(p)
		waitWithin(t, 30*time.Second, func() bool { return done.Load()+failed.Load() >= int64(50*(i+1)) })
	}
	wg.Wait()
	if failed.Load() != 0 || done.Load() != 5000 {
		t.Fatalf("%d failed, %d done", failed.Load(), done.Load())
	}
}

// BenchmarkAcquireSmart measures acquire+release under the smart policy, as
// ns/op, and reports the full-rescore time of the pool after a policy change.
func BenchmarkAcquireSmart(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("accounts=%d", n), func(b *testing.B) {
			s, _ := startSystemSized(b, n, 4)
			start := time.Now()
			setPolicyAndWait(b, s, luaPolicy(b, "smart", ""))
			rescore := time.Since(start)
			ctx := context.Background()
			req := AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: time.Second}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l, err := s.Acquire(ctx, req)
					if err != nil {
						b.Error(err)
						return
					}
					s.Release(l, Outcome{Status: 200})
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(rescore.Milliseconds()), "rescore-ms")
		})
	}
}

// BenchmarkAcquireLatency measures the latency of one acquire (pick + lease,
// the caller waiting) under smart, serially, and reports p50 and p99 in µs,
// and the process's CPU time per op (cpu-ns/op: acquire and release, the
// actors' work and their idle spinning included), which a loaded machine
// inflates less than it does wall-clock time.
// With release=now each lease is released as soon as it is granted, so the
// release (the account filing the outcome, the scheduler rescoring it) runs
// while the next acquire travels; with release=settled the caller waits
// until the release has reached the scheduler before its next acquire, as
// on a gateway whose requests do not overlap (the wait is not timed).
func BenchmarkAcquireLatency(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		for _, settle := range []bool{false, true} {
			name := fmt.Sprintf("accounts=%d/release=now", n)
			if settle {
				name = fmt.Sprintf("accounts=%d/release=settled", n)
			}
			b.Run(name, func(b *testing.B) {
				s, _ := startSystemSized(b, n, 4)
				setPolicyAndWait(b, s, luaPolicy(b, "smart", ""))
				ctx := context.Background()
				req := AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: time.Second}
				samples := make([]time.Duration, 0, b.N)
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := cputime.Process()
				for b.Loop() {
					t0 := time.Now()
					l, err := s.Acquire(ctx, req)
					samples = append(samples, time.Since(t0))
					if err != nil {
						b.Fatal(err)
					}
					s.Release(l, Outcome{Status: 200})
					if settle {
						settleRelease(b, s, l)
					}
				}
				cpu := cputime.Process() - cpu0
				b.StopTimer()
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				slices.Sort(samples)
				b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds())/1e3, "p50-µs")
				b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds())/1e3, "p99-µs")
			})
		}
	}
}

// BenchmarkAcquirePaced is acquire and release at about 1,000 a second,
// the rate of troupe bench's chat phases, under smart at 10,000 accounts:
// each op sleeps 1 ms, then acquires and releases. cpu-ns/op is the
// process's CPU per op (the sleep's own wake-up included), which counts
// what back-to-back loops hide: at this rate the scheduler and the account
// workers park between requests, and each hand-off may wake a thread.
//
//	go test -run '^$' -bench AcquirePaced -benchtime 3000x ./actors/
func BenchmarkAcquirePaced(b *testing.B) {
	s, _ := startSystemSized(b, 10000, 4)
	setPolicyAndWait(b, s, luaPolicy(b, "smart", ""))
	ctx := context.Background()
	req := AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: time.Second}
	b.ReportAllocs()
	cpu0 := cputime.Process()
	for b.Loop() {
		time.Sleep(time.Millisecond)
		l, err := s.Acquire(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		s.Release(l, Outcome{Status: 200})
	}
	b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
}

// settleRelease waits until l's release has reached the scheduler: the
// account has published it (its snapshot shows the lease gone) and the
// scheduler has answered a message sent after that publish.
func settleRelease(b *testing.B, s *System, l *Lease) {
	for {
		if v, _ := s.View(l.AccountID); v.InFlight == 0 {
			break
		}
		runtime.Gosched()
	}
	if _, err := s.PolicyStatus(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// startSystemSized is startSystem for pools of any size (ids id-%06d above
// 10,000 accounts).
func startSystemSized(t testing.TB, n, limit int) (*System, *memUsage) {
	if n <= 10000 {
		return startSystem(t, n, limit)
	}
	return startPool(t, n, limit, "id-%06d", 60*time.Second)
}

// TestRescoreOnlyOnReadFields checks that a view change touching only
// counters the policy does not read costs no score() call: under
// round_robin (reads none) neither a grant nor a successful release
// rescores; under smart a grant does not (it reads no inflight or
// requests) and a release does (successes, streaks, EWMAs); a failure
// (status, cooldown, last_failure) always does.
func TestRescoreOnlyOnReadFields(t *testing.T) {
	ctx := context.Background()
	req := AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: time.Second}
	rescores := func(s *System) uint64 {
		t.Helper()
		st, err := s.SchedulerStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Rescores
	}
	// A view read from System.View was sent to the scheduler before it
	// became readable, so SchedulerStats asked afterwards sees it applied.
	for _, c := range []struct {
		policy         string
		grant, release uint64
	}{
		{"round_robin", 0, 0},
		{"smart", 0, 1},
	} {
		t.Run(c.policy, func(t *testing.T) {
			s, _ := startSystem(t, 1, 4)
			setPolicyAndWait(t, s, luaPolicy(t, c.policy, ""))
			before := rescores(s)
			l, err := s.Acquire(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { v, _ := s.View(l.AccountID); return v.InFlight == 1 })
			afterGrant := rescores(s)
			s.Release(l, Outcome{Status: 200, Latency: time.Millisecond})
			waitFor(t, func() bool { v, _ := s.View(l.AccountID); return v.InFlight == 0 })
			afterRelease := rescores(s)
			if afterGrant-before != c.grant || afterRelease-afterGrant != c.release {
				t.Errorf("score calls: grant %d (want %d), release %d (want %d)", afterGrant-before, c.grant, afterRelease-afterGrant, c.release)
			}
			l, err = s.Acquire(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			s.Release(l, Outcome{Status: 500, Verdict: upstream.Verdict{Class: upstream.ClassTransient}})
			waitFor(t, func() bool { v, _ := s.View(l.AccountID); return v.FailureStreak == 1 })
			if n := rescores(s); n == afterRelease {
				t.Errorf("a failure did not rescore the account")
			}
		})
	}
}

// A grant is sent before the scheduler re-judges the granted account under a
// policy that reads inflight (grant), yet the next pick sees the new
// verdict: picks alternate between two accounts whose scores drop with each
// lease held, where picks judged on stale verdicts would all go to the
// better one; and a tier cap the grant brings is held at once (the second
// lease of an account that turned risky with its first is refused, not
// granted on the verdict of the first pick).
func TestGrantRejudgedBeforeNextPick(t *testing.T) {
	ctx := context.Background()
	t.Run("order", func(t *testing.T) {
		s, _ := startSystem(t, 2, 4)
		setPolicyAndWait(t, s, luaPolicy(t, "inflight", `
local base = { ["id-0000"] = 100, ["id-0001"] = 95 }
function score(a, now) return base[a.id] - 10 * a.inflight end`))
		var got []string
		for range 6 {
			l, err := s.Acquire(ctx, chatM)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Release(l, Outcome{Status: 200})
			got = append(got, l.AccountID)
		}
		want := []string{"id-0000", "id-0001", "id-0000", "id-0001", "id-0000", "id-0001"}
		if !slices.Equal(got, want) {
			t.Fatalf("picks %v, want %v", got, want)
		}
	})
	t.Run("tier cap", func(t *testing.T) {
		s, _ := startSystem(t, 1, 4)
		setPolicyAndWait(t, s, luaPolicy(t, "risky-when-busy", `
policy = { concurrency = { healthy = "max", risky = 1 } }
function score(a, now)
  if a.inflight >= 1 then return 50, "risky" end
  return 100
end`))
		l, err := s.Acquire(ctx, chatM)
		if err != nil {
			t.Fatal(err)
		}
		req := chatM
		req.MaxWait = 0
		if l2, err := s.Acquire(ctx, req); err == nil {
			s.Release(l2, Outcome{Status: 200})
			t.Fatal("a risky account (concurrency 1) granted a second lease")
		}
		s.Release(l, Outcome{Status: 200})
		l, err = s.Acquire(ctx, chatM) // healthy again once the release is judged
		if err != nil {
			t.Fatal(err)
		}
		s.Release(l, Outcome{Status: 200})
	})
}

// BenchmarkHeapPerAccount reports the live heap one idle account costs
// (its actor, mailbox, view snapshot and scheduler entry), measured after
// starting a pool of 100,000 and collecting garbage.
func BenchmarkHeapPerAccount(b *testing.B) {
	const n = 100000
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()
		s, _ := startSystemSized(b, n, 4)
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/account")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		s.Stop(ctx)
		cancel()
		b.StartTimer()
	}
}

// BenchmarkFreeOSMemory reports what one trim (debug.FreeOSMemory, which
// internal/memtrim calls after a burst) costs beside a pool of 10,000 idle
// accounts, with garbage MiB of freed heap to return: the wall time of the
// call (a forced collection, then the scavenge) and the process's CPU time
// (the collection's workers included). The garbage is made in 64 KiB
// blocks, as a burst's buffers are, and dropped before each trim.
func BenchmarkFreeOSMemory(b *testing.B) {
	startSystemSized(b, 10000, 4) // stopped by its cleanup
	for _, garbage := range []int{0, 128} {
		b.Run(fmt.Sprintf("garbage=%dMiB", garbage), func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				blocks := make([][]byte, garbage*16)
				for i := range blocks {
					blocks[i] = make([]byte, 64<<10)
					blocks[i][0] = 1
				}
				runtime.KeepAlive(blocks) // garbage from here on
				c0 := cputime.Process()
				b.StartTimer()
				debug.FreeOSMemory()
				b.StopTimer()
				cpu += cputime.Process() - c0
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// A policy failing at run time is reported in the log, at most once per
// scoreErrorLogEvery, with the count of errors since the last line.
func TestScoreErrorsLogged(t *testing.T) {
	var buf bytes.Buffer // judge runs here, in the test's goroutine
	lp := luaPolicy(t, "bad", "function score(a, now)\n  if a.name == \"acct-0001\" then error(\"boom\") end\n  return 1\nend\n")
	sc := newScheduler(schedulerConfig{policy: LeastInFlight{}, maxWaiter: 10, log: slog.New(slog.NewTextHandler(&buf, nil)), now: time.Now})().(*scheduler)
	sc.policy = sc.withLog(lp) // as setPolicy installs it
	for i := range 4 {
		name := "acct-0001"
		if i == 0 {
			name = "acct-0000"
		}
		v := View{ID: fmt.Sprintf("id-%d", i), Name: name, Provider: storage.ProviderOpenAI, MaxInFlight: 1, Version: 1, ConfigGen: 1}
		sc.judge(&entry{view: &v}, slotPolicy, sc.policy, time.Now())
	}
	out := buf.String()
	if strings.Count(out, "routing policy score failed") != 1 || !strings.Contains(out, "boom") || !strings.Contains(out, "account=acct-0001") {
		t.Fatalf("log:\n%s", out)
	}
	if lp.Errors() != 3 {
		t.Fatalf("%d errors counted, want 3", lp.Errors())
	}
}
