package memtrim

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

const mib = 1 << 20

// feed shows g one sample a second, allocating rates[i] MiB in second i
// with free MiB that a trim could return, and returns the seconds at which
// it trimmed.
func feed(g *trigger, start time.Time, free uint64, rates ...uint64) []int {
	var trimmed []int
	allocs := uint64(0)
	g.observe(start, allocs, free*mib)
	for i, r := range rates {
		allocs += r * mib
		if g.observe(start.Add(time.Duration(i+1)*time.Second), allocs, free*mib) {
			trimmed = append(trimmed, i+1)
		}
	}
	return trimmed
}

func newTrigger() *trigger {
	c := Config{}.withDefaults()
	return &trigger{fall: c.Fall, minFree: c.MinFree, minGap: c.MinGap}
}

func repeat(n int, v uint64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestTriggerSteadyLoadNeverTrims(t *testing.T) {
	start := time.Unix(1000, 0)
	if got := feed(newTrigger(), start, 500, repeat(600, 0)...); len(got) > 0 {
		t.Errorf("idle: trimmed at %v s", got)
	}
	for _, rate := range []uint64{2, 8, 30, 200} {
		// The rate wobbles by a factor of two: still no trim.
		rates := repeat(600, rate)
		for i := range rates {
			if i%2 == 1 {
				rates[i] = rate / 2
			}
		}
		if got := feed(newTrigger(), start, 500, rates...); len(got) > 0 {
			t.Errorf("%d MiB/s: trimmed at %v s", rate, got)
		}
	}
}

func TestTriggerTrimsOnceAfterBurst(t *testing.T) {
	start := time.Unix(1000, 0)
	// 20 s at 30 MiB/s, then 60 s nearly idle: one trim, the second after
	// the rate fell, and none after it although the heap stays "free".
	rates := append(repeat(20, 30), repeat(60, 1)...)
	got := feed(newTrigger(), start, 200, rates...)
	if len(got) != 1 || got[0] != 21 {
		t.Fatalf("trims at %v s, want [21]", got)
	}
}

func TestTriggerNeedsFreeMemory(t *testing.T) {
	start := time.Unix(1000, 0)
	rates := append(repeat(20, 30), repeat(60, 0)...)
	if got := feed(newTrigger(), start, 63, rates...); len(got) > 0 {
		t.Fatalf("trimmed at %v s with 63 MiB to return (MinFree 64 MiB)", got)
	}
}

func TestTriggerBurstsAtMostOncePerGap(t *testing.T) {
	start := time.Unix(1000, 0)
	// A burst of 2 s every 4 s for 10 minutes: the rate falls 40-fold
	// after each, but trims are 30 s apart at least.
	var rates []uint64
	for range 150 {
		rates = append(rates, 40, 40, 1, 1)
	}
	got := feed(newTrigger(), start, 500, rates...)
	if len(got) == 0 || len(got) > 600/30+1 {
		t.Fatalf("%d trims in 600 s: %v", len(got), got)
	}
	for i := 1; i < len(got); i++ {
		if got[i]-got[i-1] < 30 {
			t.Fatalf("trims at %d and %d s: closer than MinGap", got[i-1], got[i])
		}
	}
}

func TestTriggerClockOrCounterBackwards(t *testing.T) {
	g := newTrigger()
	start := time.Unix(1000, 0)
	g.observe(start, 100*mib, 500*mib)
	// The same instant, then time going back: no division by zero, no trim.
	if g.observe(start, 200*mib, 500*mib) || g.observe(start.Add(-time.Second), 300*mib, 500*mib) {
		t.Fatal("trimmed on a sample without a rate")
	}
}

// The loop trims when the trigger says so, counts what the trim returned,
// and Stop ends it.
func TestTrimmerLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		s := sample{free: 300 * mib, resident: 400 * mib}
		rate := uint64(30 * mib)
		trimmed := 0
		read := func() sample {
			mu.Lock()
			defer mu.Unlock()
			s.allocs += rate
			return s
		}
		trim := func() {
			mu.Lock()
			defer mu.Unlock()
			trimmed++
			s.free, s.resident = 0, 100*mib
		}
		tr := start(Config{}, read, trim)
		time.Sleep(10*time.Second + time.Millisecond)
		synctest.Wait()
		if st := tr.Stats(); st.Trims != 0 {
			t.Fatalf("trimmed under steady load: %+v", st)
		}
		mu.Lock()
		rate = 0
		mu.Unlock()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		st := tr.Stats()
		if st.Trims != 1 || st.Returned != 300*mib || trimmed != 1 {
			t.Fatalf("after the load fell: %+v (%d trims called), want one trim returning 300 MiB", st, trimmed)
		}
		tr.Stop()
		tr.Stop()
	})
}

// readRuntime reads the real counters: the allocations grow, and what is
// resident covers the live heap.
func TestReadRuntime(t *testing.T) {
	a := readRuntime()
	sink = make([]byte, 4*mib)
	b := readRuntime()
	if b.allocs < a.allocs+4*mib || b.resident < 4*mib {
		t.Fatalf("before %+v, after allocating 4 MiB %+v", a, b)
	}
}

var sink []byte
