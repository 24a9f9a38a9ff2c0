package actors

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/troupe-gw/troupe/internal/cputime"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// BenchmarkFullRescore measures the scheduler's own work for a full rescore
// of the pool after a policy swap under smart — every chunk's score calls
// and heap updates — without the mailbox hops between chunks, so the figure
// is the scheduler's CPU time, not the machine's queueing. The pool's views
// differ (success rate, streaks, latency), so scores spread as in a real pool.
func BenchmarkFullRescore(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("accounts=%d", n), func(b *testing.B) {
			s := newScheduler(schedulerConfig{policy: LeastInFlight{}, maxWaiter: 10, log: quiet, now: time.Now})().(*scheduler)
			pid := &actor.PID{}
			for i := range n {
				s.onView(nil, &View{ID: fmt.Sprintf("id-%06d", i), Name: fmt.Sprintf("acct-%06d", i), Provider: storage.ProviderOpenAI,
					Models: []string{"m"}, MaxInFlight: 4, Status: StatusActive, EWMASuccess: 0.4 + 0.6*float64(i%11)/10,
					SuccessStreak: i % 7, FailureStreak: i % 3, EWMALatency: time.Duration(i%29) * time.Second, Version: 1, ConfigGen: 1}, pid, nil, 0)
			}
			smart := luaPolicy(b, "smart", "")
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				s.policy = smart
				s.policyGen++
				s.rescore = s.rescore[:0]
				for _, e := range s.byID {
					s.rescore = append(s.rescore, e)
				}
				for !s.rescoreNext(time.Now()) {
				}
			}
			b.StopTimer()
			if cs := s.sets[slotPolicy][routeKey{"", "m"}]; cs == nil || cs.len() != n {
				b.Fatalf("after the rescore the set of model m holds %v accounts, want %d", cs, n)
			}
		})
	}
}

// BenchmarkSpreadPick measures the scheduler's own work for one back-to-back
// acquire under smart, which spreads (score_band): the pick (the heap top)
// and the grant's bookkeeping (the granted account sinks in its candidate
// heap), then the release's view filed (the account rescored and moved
// back). The grant message goes to a stopped mailbox, which drops it, so no
// actor runs: the figures are the scheduler's CPU time without hops.
// pick-cpu-ns is the pick and grant alone, in the benchmark thread's CPU
// time (Linux), which a loaded machine does not inflate as it does
// wall-clock time (less the clock reads' own cost, measured alongside);
// cpu-ns/op is the process's CPU time per op (user+sys, GC included), the
// view included.
func BenchmarkSpreadPick(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("accounts=%d", n), func(b *testing.B) {
			e, err := actor.NewEngine(actor.NewEngineConfig())
			if err != nil {
				b.Fatal(err)
			}
			sink := newMailbox(e, nil, "sink", "0", quiet)
			sink.closed = true
			s := newScheduler(schedulerConfig{policy: LeastInFlight{}, maxWaiter: 10, log: quiet, now: time.Now})().(*scheduler)
			c := &mailCtx{engine: e, pid: actor.NewPID(e.Address(), "scheduler/0")}
			// Two views an account: the scheduler keeps the one it was
			// given last (published views are never written), so each
			// release's view is written into the other, as an account
			// would publish a fresh one.
			views := make(map[string]*[2]View, n)
			for i := range n {
				vs := new([2]View)
				v := &vs[0]
				*v = View{ID: fmt.Sprintf("id-%06d", i), Name: fmt.Sprintf("acct-%06d", i), Provider: storage.ProviderOpenAI,
					Models: []string{"m"}, MaxInFlight: 4, Status: StatusActive, EWMASuccess: 0.4 + 0.6*float64(i%11)/10,
					SuccessStreak: i % 7, FailureStreak: i % 3, EWMALatency: time.Duration(i%29) * time.Second, Version: 1, ConfigGen: 1}
				views[v.ID] = vs
				s.onView(c, v, sink.ctx.pid, sink, 0)
			}
			useSmart(b, s)
			base := AcquireRequest{Endpoint: translate.Chat, Model: "m"}
			var pick time.Duration
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			t0 := threadCPU()
			for range 1000 {
				threadCPU()
			}
			clockCost := (threadCPU() - t0) / 1001
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cputime.Process()
			for b.Loop() {
				req := &acquireState{AcquireRequest: base, key: routeKey{model: "m"}}
				t0 := threadCPU()
				s.acquire(c, req)
				pick += threadCPU() - t0 - clockCost
				e := s.byID[req.lease.Decision.ChosenAccount().ID]
				if e == nil {
					b.Fatal("no pick")
				}
				// The account granted and released at once: a success, one
				// more request, the grant answered.
				vs := views[e.view.ID]
				v := &vs[0]
				if e.view == v {
					v = &vs[1]
				}
				*v = *e.view // the last view published, without the scheduler's counts
				v.Version += 2
				v.Requests++
				v.Successes++
				v.SuccessStreak++
				s.onView(c, v, nil, nil, e.sent)
			}
			cpu := cputime.Process() - cpu0
			b.StopTimer()
			b.ReportMetric(float64(pick.Nanoseconds())/float64(b.N), "pick-cpu-ns")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkReleaseRescore measures the scheduler's work for the view a
// release publishes (scheduler.onView), the path issue 21's saturation
// profile charges 5 % of the gateway's CPU to: under smart, which reads the
// success counters, streaks and EWMAs, every release is re-judged (a Lua
// score call) and re-filed. One op is one release of the next account in
// turn over a pool of 10,000 whose views differ as a live pool's do (success
// rate, streaks, latency, a 7-day window on every other account, a
// transient failure on every seventh); the release is a success, which
// moves the counters and the EWMAs as an account actor would.
// cpu-ns/op is the process's CPU time per op (user+sys, GC included), which
// a loaded machine inflates less than wall-clock time.
func BenchmarkReleaseRescore(b *testing.B) {
	const n = 10000
	now := time.Now()
	s := newScheduler(schedulerConfig{policy: LeastInFlight{}, maxWaiter: 10, log: quiet, now: time.Now})().(*scheduler)
	pid := &actor.PID{}
	// Two views an account: the scheduler keeps the one it was given last
	// (published views are never written), so each release's view is
	// written into the other, as an account would publish a fresh one.
	views := make([][2]View, n)
	for i := range n {
		v := &views[i][0]
		*v = View{ID: fmt.Sprintf("id-%06d", i), Name: fmt.Sprintf("acct-%06d", i), Provider: storage.ProviderOpenAI,
			Models: []string{"m"}, MaxInFlight: 4, Status: StatusActive, EWMASuccess: 0.4 + 0.6*float64(i%11)/10,
			Requests: uint64(1000 + i), Successes: uint64(900 + i), Failures: uint64(i % 50),
			SuccessStreak: i % 7, FailureStreak: i % 3, EWMALatency: time.Duration(1500+i%9000) * time.Millisecond,
			EWMATTFT: time.Duration(300+i%700) * time.Millisecond, Version: 1, ConfigGen: 1}
		if i%2 == 0 {
			v.Windows = []UsageWindow{{Name: "7d", UsedPercent: float64(i % 110), WindowMinutes: 10080, ResetsAt: now.Add(60 * time.Hour)}}
		}
		if i%7 == 0 {
			v.LastFailures = withFailure(nil, upstream.ClassTransient, now.Add(-time.Duration(i%900)*time.Second), false)
		}
		s.onView(nil, v, pid, nil, 0)
	}
	useSmart(b, s)
	rescores := s.stats.Rescores
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Process()
	i := 0
	for b.Loop() {
		vs := &views[i%n]
		i++
		e := s.byID[vs[0].ID]
		v := &vs[0]
		if e.view == v {
			v = &vs[1]
		}
		*v = *e.view
		v.Version++
		v.Requests++
		v.Successes++
		v.SuccessStreak++
		v.FailureStreak = 0
		v.EWMASuccess = 0.9*v.EWMASuccess + 0.1
		v.EWMALatency = v.EWMALatency*9/10 + 200*time.Millisecond
		s.onView(nil, v, nil, nil, e.sent)
	}
	cpu := cputime.Process() - cpu0
	b.StopTimer()
	if got := s.stats.Rescores - rescores; got != uint64(b.N) {
		b.Fatalf("%d rescores for %d releases, want one each", got, b.N)
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// useSmart makes smart s's policy and scores every account under it, as a
// policy change does, before a benchmark's timed loop.
func useSmart(b *testing.B, s *scheduler) {
	s.policy = luaPolicy(b, "smart", "")
	s.setReads()
	s.policyGen++
	for _, e := range s.byID {
		s.rescore = append(s.rescore, e)
	}
	for !s.rescoreNext(time.Now()) {
	}
}
