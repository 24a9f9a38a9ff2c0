package actors

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/troupe-gw/troupe/translate"
)

// TestOnlyWaitsForItsAccount: a request that only one account may serve
// waits for that account while it is busy, without holding up requests any
// account can serve, and gets it when its lease is released. (In a synctest
// bubble: once every goroutine waits, the Only request is parked.)
func TestOnlyWaitsForItsAccount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := startSystem(t, 2, 1)
		ctx := context.Background()
		first, err := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		owner := first.AccountID
		got := make(chan *Lease, 1)
		go func() {
			l, err := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m", Only: owner, MaxWait: 5 * time.Second})
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		synctest.Wait() // the Only request is parked
		other, err := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: time.Second})
		if err != nil || other.AccountID == owner {
			t.Fatalf("a free account was not granted past the waiting Only request: %v %v", other, err)
		}
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("the Only request was granted while its account was busy")
		default:
		}
		s.Release(first, Outcome{})
		select {
		case l := <-got:
			if l == nil || l.AccountID != owner {
				t.Fatalf("granted %v, want %s", l, owner)
			}
			s.Release(l, Outcome{})
		case <-time.After(5 * time.Second):
			t.Fatal("the Only request was not woken")
		}
		s.Release(other, Outcome{})
		if _, err := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m", Only: "nobody", MaxWait: time.Second}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Only an unknown account: %v", err)
		}
	})
}
