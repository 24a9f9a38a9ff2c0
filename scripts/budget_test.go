package scripts

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/internal/poll"
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
// long call must never stop a quick one. Odd rounds end the long call at
// once, often while its callback is still to come when the quick calls
// start.
func TestBudgetStaleTimers(t *testing.T) {
	b := newBudget()
	for i := range 100 {
		b.start(1e9, time.Millisecond)
		if i%2 == 0 {
			// The callbacks run on the timer's goroutine: slow, then killed.
			poll.Until(t, 30*time.Second, fmt.Sprintf("round %d: the long call stopped", i), func() bool { return b.Done() != nil })
			if err := b.stop(); err == nil {
				t.Fatalf("round %d: stop after expiry returned nil", i)
			}
		} else {
			b.stop()
		}
		for range 5 {
			b.start(1e9, time.Hour)
			runtime.Gosched() // let a pending callback run now
			if b.Done() != nil {
				t.Fatalf("round %d: a quick call was stopped by a stale timer", i)
			}
			if err := b.stop(); err != nil {
				t.Fatalf("round %d: quick call: %v", i, err)
			}
		}
	}
}

// fakeClock is a budget's clock that moves only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// TestBudgetLateCallback drives the races TestBudgetStaleTimers can only
// hope to hit, on a clock of its own (expire called by hand is a callback
// arriving then): a call ends after its timer fired but before the callback
// took the lock, and the callback arrives during the next call; a callback
// that turned a call slow and re-armed the timer just before the call
// ended. Late callbacks must do nothing, and every call's own callbacks
// must still stop it.
func TestBudgetLateCallback(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	b := newBudget()
	b.now = clk.now
	const wall = time.Hour
	slow := wall / slowFraction

	b.start(1e9, wall)
	if err := b.stop(); err != nil {
		t.Fatalf("first call: %v", err)
	}
	b.start(1e9, wall)
	b.expire() // the first call's callback, late: before this call is due
	if b.Done() != nil {
		t.Fatal("a late callback stopped the next call")
	}
	if err := b.stop(); err != nil {
		t.Fatalf("second call: %v", err)
	}

	// A call turns slow (its callback re-arms the timer) and ends; the
	// next call must still turn slow and be stopped by its own callbacks
	// (a count of stale callbacks once swallowed the first of them).
	b.start(1e9, wall)
	clk.advance(slow)
	b.expire()
	if b.phase.Load() != phaseSlow {
		t.Fatal("the call's own callback did not turn it slow")
	}
	if err := b.stop(); err != nil {
		t.Fatalf("third call: %v", err)
	}
	b.start(1e9, wall)
	b.expire() // the re-armed timer of the third call, late
	if b.phase.Load() != phaseNormal || b.Done() != nil {
		t.Fatal("a late callback acted on the next call")
	}
	clk.advance(slow)
	b.expire() // this call's own callbacks: it turns slow,
	if b.Done() != nil {
		t.Fatal("turning slow stopped a call that allocates nothing")
	}
	b.expire() // a second callback at once is early for the rest of the wall time
	if b.Done() != nil {
		t.Fatal("a callback before the call's time was up stopped it")
	}
	clk.advance(wall - slow)
	b.expire() // then its time is up
	if b.Done() == nil {
		t.Fatal("the call's own expiry did not stop it")
	}
	if err := b.stop(); err == nil || err.Error() != "budget exceeded: ran longer than 1h0m0s" {
		t.Fatalf("fourth call: %v", err)
	}
	b.expire() // with no call running
	b.start(1e9, wall)
	if b.Done() != nil {
		t.Fatal("a callback with no call running armed the next one")
	}
	b.stop()
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

// TestBudgetStopTwice: stopping a disarmed budget leaves nothing behind, so
// the next call's expiry still stops it.
func TestBudgetStopTwice(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	b := newBudget()
	b.now = clk.now
	b.start(1e9, time.Hour)
	b.stop()
	b.stop()
	b.start(1e9, time.Hour)
	clk.advance(time.Hour / slowFraction)
	b.expire() // slow
	clk.advance(time.Hour)
	b.expire() // time up
	if b.Done() == nil {
		t.Fatal("after a second stop, the next call's expiry did not stop it")
	}
	b.stop()
}

// TestBudgetSlowAllocations: once slow, a call is stopped when the process
// has allocated slowAllocLimit more, and not before.
func TestBudgetSlowAllocations(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	b := newBudget()
	b.now = clk.now
	b.start(1e9, time.Hour)
	clk.advance(time.Hour / slowFraction)
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

// TestBudgetSlowReadsSparse: a slow call's cheap instructions read the
// allocation counter at most once every allocReadEvery (a read costs
// tens of instructions; before each instruction, a loop of them on a
// loaded host ran ten times slower and met the wall clock before its
// instruction budget), and an allocation of more than slowAllocLimit is
// still seen at the first read after it.
func TestBudgetSlowReadsSparse(t *testing.T) {
	b := newBudget()
	b.start(1e9, time.Hour)
	defer b.stop()
	b.allocBase.Store(allocated(b.allocs))
	b.phase.Store(phaseSlow) // as expire does after wall/slowFraction
	const n = 200_000
	began := time.Now()
	for range n {
		if b.Done() != nil {
			t.Fatalf("a slow call allocating nothing was stopped: %v", b.Err())
		}
	}
	elapsed := time.Since(began)
	if max := int(elapsed/allocReadEvery) + 1; b.reads > max {
		t.Fatalf("%d allocation reads in %v for %d instructions, want at most %d (one every %v)", b.reads, elapsed, n, max, allocReadEvery)
	}
	if b.reads == 0 {
		t.Fatal("no allocation read at all in a slow call")
	}
	sink := make([]byte, 2*slowAllocLimit) // more than the call may allocate
	_ = sink[len(sink)-1]
	b.lastRead = time.Time{} // a read is due, as allocReadEvery after the last
	if b.Done() == nil || !errors.Is(b.Err(), ErrBudget) || !strings.Contains(b.Err().Error(), "allocated more than") {
		t.Fatalf("an allocation of %d MiB not seen: %v", 2*slowAllocLimit>>20, b.Err())
	}
}

// BenchmarkBudgetDone is Done, the check gopher-lua makes before every VM
// instruction, in a call's normal phase and once it has turned slow.
func BenchmarkBudgetDone(b *testing.B) {
	for _, slow := range []bool{false, true} {
		b.Run(map[bool]string{false: "normal", true: "slow"}[slow], func(b *testing.B) {
			bu := newBudget()
			bu.start(math.MaxInt64, time.Hour)
			defer bu.stop()
			if slow {
				bu.allocBase.Store(allocated(bu.allocs))
				bu.phase.Store(phaseSlow)
			}
			b.ReportAllocs()
			for b.Loop() {
				if bu.Done() != nil {
					b.Fatal(bu.Err())
				}
			}
		})
	}
}
