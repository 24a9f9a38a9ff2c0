package scripts

import (
	"fmt"
	"github.com/troupe-gw/troupe/internal/poll"
	"testing"
	"time"
)

func TestBudgetQuickCallsNeverFire(t *testing.T) {
	b := newBudget()
	fired := 0
	start := time.Now()
	for i := 0; i < 200_000 && time.Since(start) < 2*time.Second; i++ {
		b.start(1000, 20*time.Millisecond)
		if b.stop() != nil {
			fired++
		}
	}
	if fired > 0 {
		t.Fatalf("%d quick calls reported over budget", fired)
	}
}

// TestBudgetStaleTimers alternates calls that outlive a 1 ms wall budget
// with quick calls of an hour's budget: a timer callback left over from a
// long call must never stop a quick one. Odd rounds end the long call as
// soon as it has overrun, usually before its callback has run, so the
// callback is still to come when the quick calls start.
func TestBudgetStaleTimers(t *testing.T) {
	b := newBudget()
	for i := range 100 {
		b.start(1e9, time.Millisecond)
		time.Sleep(2 * time.Millisecond)
		if i%2 == 0 {
			// The callback runs on its own goroutine.
			poll.Until(t, 30*time.Second, fmt.Sprintf("round %d: the long call stopped", i), func() bool { return b.Done() != nil })
			if err := b.stop(); err == nil {
				t.Fatalf("round %d: stop after expiry returned nil", i)
			}
		} else {
			b.stop()
		}
		for j := range 5 {
			b.start(1e9, time.Hour)
			if j == 0 {
				time.Sleep(200 * time.Microsecond) // let a pending callback run now
			}
			if b.Done() != nil {
				t.Fatalf("round %d: a quick call was stopped by a stale timer", i)
			}
			if err := b.stop(); err != nil {
				t.Fatalf("round %d: quick call: %v", i, err)
			}
		}
	}
}

// TestBudgetLateCallback drives the race TestBudgetStaleTimers can only
// hope to hit: a call ends after its timer fired but before the callback
// took the lock; the callback then arrives during the next call and must do
// nothing, while a callback of the running call still stops it.
func TestBudgetLateCallback(t *testing.T) {
	b := newBudget()
	b.start(1e9, time.Hour)
	b.timer.Stop() // as if it had fired: Stop in stop() now reports false
	if err := b.stop(); err != nil {
		t.Fatalf("first call: %v", err)
	}
	b.start(1e9, time.Hour)
	b.expire() // the first call's callback, late
	if b.Done() != nil {
		t.Fatal("a late callback stopped the next call")
	}
	if err := b.stop(); err != nil {
		t.Fatalf("second call: %v", err)
	}
	b.start(1e9, time.Hour)
	b.expire() // this call's own callbacks: it turns slow,
	if b.Done() != nil {
		t.Fatal("turning slow stopped a call that allocates nothing")
	}
	b.expire() // then its time is up
	if b.Done() == nil {
		t.Fatal("the call's own expiry did not stop it")
	}
	if err := b.stop(); err == nil || err.Error() != "budget exceeded: ran longer than 1h0m0s" {
		t.Fatalf("third call: %v", err)
	}
}

// TestBudgetInstructions: Done is nil for exactly limit instructions.
func TestBudgetInstructions(t *testing.T) {
	b := newBudget()
	b.start(100, time.Hour)
	for i := range 100 {
		if b.Done() != nil {
			t.Fatalf("stopped at instruction %d of 100", i+1)
		}
	}
	if b.Done() == nil || b.Err() == nil {
		t.Fatal("instruction 101 ran")
	}
	if err := b.stop(); err == nil || err.Error() != "budget exceeded: more than 100 instructions" {
		t.Fatalf("stop() = %v", err)
	}
	b.start(100, time.Hour)
	if b.Done() != nil || b.stop() != nil {
		t.Fatal("the next call inherited the stop")
	}
}

// TestBudgetStopTwice: stopping a disarmed budget leaves no stale count, so
// the next call's expiry still stops it.
func TestBudgetStopTwice(t *testing.T) {
	b := newBudget()
	b.start(1e9, time.Hour)
	b.stop()
	b.stop()
	b.start(1e9, time.Hour)
	b.expire() // slow
	b.expire() // time up
	if b.Done() == nil {
		t.Fatal("a second stop left a stale count behind")
	}
	b.stop()
}

// TestBudgetSlowAllocations: once slow, a call is stopped when the process
// has allocated slowAllocLimit more, and not before.
func TestBudgetSlowAllocations(t *testing.T) {
	b := newBudget()
	b.start(1e9, time.Hour)
	b.expire() // slow
	if b.Done() != nil {
		t.Fatal("stopped before allocating")
	}
	sink = make([]byte, slowAllocLimit+1<<20)
	if b.Done() == nil {
		t.Fatal("not stopped after allocating more than the limit")
	}
	if err := b.stop(); err == nil || err.Error() != "budget exceeded: allocated more than 16 MiB" {
		t.Fatalf("stop() = %v", err)
	}
	sink = nil
}

var sink []byte
