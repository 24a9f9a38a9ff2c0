package actors

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// TestAdopt: the takeover path (System.Adopt, docs/fleet.md "A dead
// owner's leases"). An account taken over runs with its fence closed
// (Moving); the leases its previous owner granted are adopted onto it and
// count against max_concurrency whatever the state (three adopted on a
// limit of 2), without counting as requests. Once the fence opens it
// grants nothing until the adopted leases are released below the limit,
// then exactly what the limit leaves; a drain waits for an adopted lease
// too. Adopt on an account that does not run here ends with its context.
// (In a synctest bubble: a refused Acquire's wait and the Adopt's
// deadline pass on the bubble's clock.)
func TestAdopt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startFenced(t)
		ctx := context.Background()
		s.PutAccount(storage.Account{ID: "a1", Name: "one", Provider: storage.ProviderOpenAI, Models: []string{"m"}, MaxConcurrency: 2})
		synctest.Wait()

		// Not run here: the ask is dropped and the context ends it.
		actx, cancel := context.WithTimeout(ctx, time.Second)
		if l, err := s.Adopt(actx, "a1", "m"); err == nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Adopt on an account not owned: %v, %v; want the context's deadline", l, err)
		}
		cancel()

		// Taken over: the actor runs, its fence closed while it adopts.
		fence := new(Fence)
		fence.Extend(time.Time{}, 9)
		s.Own("a1", fence)
		synctest.Wait()
		if v, ok := s.View("a1"); !ok || !v.Moving {
			t.Fatalf("taken over with its fence closed: view %+v (running %v), want Moving", v, ok)
		}
		var adopted []*Lease
		for range 3 {
			l, err := s.Adopt(ctx, "a1", "m")
			if err != nil {
				t.Fatal(err)
			}
			if l.AccountID != "a1" || l.Name != "one" {
				t.Fatalf("adopted lease %+v, want account a1", l)
			}
			adopted = append(adopted, l)
		}
		synctest.Wait()
		v, _ := s.View("a1")
		if v.InFlight != 3 || v.Requests != 0 {
			t.Fatalf("after three adoptions: in flight %d, requests %d; want 3 and 0 (not grants)", v.InFlight, v.Requests)
		}

		// The fence opens (OwnerConfig.Adopt returned): nothing is granted
		// while the adopted leases fill the limit.
		acquire := func() (*Lease, error) {
			return s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: 100 * time.Millisecond})
		}
		fence.Extend(time.Now().Add(time.Hour), 9)
		s.Own("a1", fence)
		synctest.Wait()
		if v, _ := s.View("a1"); v.Moving {
			t.Fatal("the fence opened but the account still says Moving")
		}
		for _, release := range []int{-1, 0} {
			if release >= 0 {
				s.Release(adopted[release], Outcome{Status: 200})
				synctest.Wait()
			}
			if l, err := acquire(); err == nil {
				s.Release(l, Outcome{})
				v, _ := s.View("a1")
				t.Fatalf("granted with %d adopted leases running on a limit of 2 (in flight %d)", 3-release-1, v.InFlight)
			}
		}
		// Two adopted leases ended: one grant fits beside the third.
		s.Release(adopted[1], Outcome{Status: 200})
		synctest.Wait()
		granted, err := acquire()
		if err != nil {
			t.Fatalf("one adopted lease left on a limit of 2: %v", err)
		}
		if l, err := acquire(); err == nil {
			s.Release(l, Outcome{})
			t.Fatal("a second grant beside an adopted lease and a grant, on a limit of 2")
		}
		s.Release(granted, Outcome{Status: 200})

		// A drain waits for the adopted lease still running.
		done := make(chan struct{})
		s.Disown("a1", func() { close(done) })
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("drained with an adopted lease running")
		default:
		}
		s.Release(adopted[2], Outcome{Status: 200})
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("not drained once the adopted lease was released")
		}
		if v, ok := s.View("a1"); ok {
			t.Fatalf("the drained actor still runs: %+v", v)
		}
	})
}

// TestAdoptGivenUpNotCounted: an Adopt whose context ends before the
// account counts the lease leaves nothing counted; one the account
// counted first returns its lease. Either way the account's in-flight
// count is what the caller holds. (Peer.Adopt's context is AdoptTimeout:
// a slow actor used to count a lease nobody would release, the account
// then a slot short for good.)
func TestAdoptGivenUpNotCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startFenced(t)
		s.PutAccount(storage.Account{ID: "a1", Name: "one", Provider: storage.ProviderOpenAI, Models: []string{"m"}, MaxConcurrency: 2})
		fence := new(Fence)
		fence.Extend(time.Time{}, 9)
		s.Own("a1", fence)
		synctest.Wait()
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		gaveUp := 0
		for range 20 {
			l, err := s.Adopt(ended, "a1", "m")
			if err != nil {
				gaveUp++
			} else {
				s.Release(l, Outcome{Status: 200})
			}
			synctest.Wait()
			if v, _ := s.View("a1"); v.InFlight != 0 {
				t.Fatalf("in flight %d after an Adopt given up (%v) or released, want 0", v.InFlight, err)
			}
		}
		t.Logf("%d of 20 adoptions given up before the account counted them", gaveUp)
	})
}
