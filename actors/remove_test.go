package actors

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/internal/poll"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// Regression tests found by breaking the actors under load (2026-12-06):
// a view an account published just before its removal indexed it again,
// and an account put back before its last actor had stopped never started.

func putAccount(s *System, id string, limit int) {
	s.PutAccount(storage.Account{ID: id, Name: "acct-" + id, Provider: storage.ProviderOpenAI, Models: []string{"m"}, MaxConcurrency: limit})
}

// indexed waits until the scheduler indexes exactly n accounts and the
// readers see n views.
func indexed(t *testing.T, s *System, n int, what string) {
	t.Helper()
	poll.UntilState(t, 10*time.Second, what, func() (bool, string) {
		st, _ := s.SchedulerStats(context.Background())
		return st.Accounts == n && len(s.Views()) == n, fmt.Sprintf("%d indexed, %d views", st.Accounts, len(s.Views()))
	})
}

// TestRemoveWhileLeasedLeavesNoGhost: releases handled by an account's actor
// while it is being removed publish views the scheduler must drop (the
// mailbox is retired), or the removed account is indexed again and grants
// go to a stopped actor.
func TestRemoveWhileLeasedLeavesNoGhost(t *testing.T) {
	const n = 4
	s, _ := startSystem(t, n, 4)
	for round := range 100 {
		id := fmt.Sprintf("id-%04d", round%n)
		var ls []*Lease
		for range 8 {
			l, err := s.Acquire(context.Background(), AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: 2 * time.Second})
			if err != nil {
				t.Fatalf("round %d: acquire: %v", round, err)
			}
			ls = append(ls, l)
		}
		// Its own leases are released while the removal goes on, the
		// others' after.
		done := make(chan struct{})
		go func() {
			defer close(done)
			for _, l := range ls {
				if l.AccountID == id {
					s.Release(l, Outcome{Status: 200})
				}
			}
		}()
		s.RemoveAccount(id)
		<-done
		for _, l := range ls {
			if l.AccountID != id {
				s.Release(l, Outcome{Status: 200})
			}
		}
		indexed(t, s, n-1, fmt.Sprintf("round %d: %s removed", round, id))
		putAccount(s, id, 4)
		indexed(t, s, n, fmt.Sprintf("round %d: %s back", round, id))
	}
}

// TestAccountPutBackAtOnce: an account removed and put back at once (fleet
// ownership moves do this) serves again: its new actor starts although the
// old one may still be registered, and it takes its share of the pool's
// capacity.
func TestAccountPutBackAtOnce(t *testing.T) {
	const n, limit = 3, 2
	s, _ := startSystem(t, n, limit)
	for round := range 50 {
		id := fmt.Sprintf("id-%04d", round%n)
		s.RemoveAccount(id)
		putAccount(s, id, limit)
		indexed(t, s, n, fmt.Sprintf("round %d: %s put back", round, id))
		// The whole capacity is grantable: the put-back account's included.
		var ls []*Lease
		for i := range n * limit {
			l, err := s.Acquire(context.Background(), AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: 2 * time.Second})
			if err != nil {
				st, _ := s.SchedulerStats(context.Background())
				t.Fatalf("round %d: acquire %d of %d: %v; stats %+v", round, i+1, n*limit, err, st)
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			s.Release(l, Outcome{Status: 200})
		}
	}
}

// TestSchedulerRestartReindexes: a scheduler restarted after a panic asks
// every account for its view, so the pool serves again without waiting for
// each account to change, and keeps the policy last set.
func TestSchedulerRestartReindexes(t *testing.T) {
	const n, limit = 4, 2
	s, _ := startSystem(t, n, limit)
	s.SetPolicy(luaPolicy(t, "round_robin", ""))
	s.SetCanary(luaPolicy(t, "least_inflight", ""))
	poll.UntilState(t, 10*time.Second, "round_robin active, least_loaded the canary", func() (bool, string) {
		st, _ := s.SchedulerStats(context.Background())
		return st.Policy == "round_robin" && st.Canary == "least_inflight", st.Policy + " " + st.Canary
	})
	closed := make(chan SchedulerStats)
	close(closed)
	s.engine.Send(s.sched, schedStats{reply: closed}) // the reply panics: a send on a closed channel
	indexed(t, s, n, "the restarted scheduler's index")
	st, _ := s.SchedulerStats(context.Background())
	if st.Policy != "round_robin" || st.Canary != "least_inflight" {
		t.Errorf("policy and canary after the restart %q and %q, want the ones set last", st.Policy, st.Canary)
	}
	var ls []*Lease
	for i := range n * limit {
		// Every other request is the canary's: it is served from the
		// canary's sets, which the republished views filled.
		l, err := s.Acquire(context.Background(), AcquireRequest{Endpoint: translate.Chat, Model: "m", Canary: i%2 == 1, MaxWait: 2 * time.Second})
		if err != nil {
			t.Fatalf("acquire %d of %d after the restart: %v", i+1, n*limit, err)
		}
		ls = append(ls, l)
	}
	for _, l := range ls {
		s.Release(l, Outcome{Status: 200})
	}
}

// TestAccountRestartServes: an account actor restarted after a panic takes
// over its predecessor's leases and counters, so a lease held across the
// restart is released as usual and the account is granted again up to its
// limit.
func TestAccountRestartServes(t *testing.T) {
	const limit = 2
	s, _ := startSystem(t, 1, limit)
	held, err := s.Acquire(context.Background(), AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan storage.Account)
	close(closed)
	held.box.send(accountConfigAsk{reply: closed}, nil) // the reply panics: a send on a closed channel
	s.Release(held, Outcome{Status: 200})
	for round := range 3 {
		var ls []*Lease
		for i := range limit {
			l, err := s.Acquire(context.Background(), AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: 3 * time.Second})
			if err != nil {
				st, _ := s.SchedulerStats(context.Background())
				t.Fatalf("round %d: acquire %d of %d after the restart: %v; stats %+v", round, i+1, limit, err, st)
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			s.Release(l, Outcome{Status: 200})
		}
	}
	poll.UntilState(t, 10*time.Second, "nothing in flight", func() (bool, string) {
		v, _ := s.View("id-0000")
		return v.InFlight == 0, fmt.Sprint(v.InFlight)
	})
}
