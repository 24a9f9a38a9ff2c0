package actors

import (
	"fmt"
	"testing"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/troupe-gw/troupe/storage"
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
					SuccessStreak: i % 7, FailureStreak: i % 3, EWMALatency: time.Duration(i%29) * time.Second, Version: 1, ConfigGen: 1}, pid, 0)
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
