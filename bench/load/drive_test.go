package load

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fakeClock jumps to the time a sleeper asks for: a whole open-loop run
// takes no real time and every instant is exact.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) SleepUntil(_ context.Context, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}

func TestScheduleKeepsItsRate(t *testing.T) {
	start := time.Unix(1000, 0)
	for _, rate := range []float64{1, 3, 1000, 3000, 7777} {
		s := Schedule{Start: start, Rate: rate}
		for _, d := range []time.Duration{time.Second, 2500 * time.Millisecond, 10 * time.Second} {
			want := int64(rate * d.Seconds())
			if float64(want) != rate*d.Seconds() { // a fractional count rounds up: request n is due before the end
				want++
			}
			if got := s.Count(d); got != want {
				t.Errorf("rate %v over %v: %d requests due, want %d", rate, d, got, want)
			}
		}
		// Spacing is exact (to the nanosecond) and never drifts.
		n := int64(rate * 10)
		if got, want := s.At(n).Sub(start), 10*time.Second; got < want-time.Microsecond || got > want+time.Microsecond {
			t.Errorf("rate %v: request %d due at +%v, want +10s", rate, n, got)
		}
	}
}

func TestOpenLoopSendsOnScheduleWhateverTheAnswers(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	start := clk.Now()
	var mu sync.Mutex
	var intended []time.Time
	o := Open{Rate: 1000, Warmup: 200 * time.Millisecond, Duration: time.Second, Clock: clk}
	rec := o.Run(context.Background(), func(at time.Time) Result {
		mu.Lock()
		intended = append(intended, at)
		mu.Unlock()
		// Every answer takes 50 ms more than the schedule allows: a
		// closed-loop generator would slow down; this one must not.
		return Result{Latency: 50*time.Millisecond + clk.Now().Sub(at), TTFT: 10 * time.Millisecond}
	})
	st := rec.Stats(o.Duration)
	if len(intended) != 1200 {
		t.Fatalf("%d requests sent, want 1,200 (1,000/s for 1.2 s)", len(intended))
	}
	seen := map[time.Time]bool{}
	for _, at := range intended {
		seen[at] = true
	}
	for i := range int64(1200) {
		if at := start.Add(time.Duration(i) * time.Millisecond); !seen[at] {
			t.Fatalf("no request intended at +%v", at.Sub(start))
		}
	}
	if st.OK != 1000 || st.ErrorCount() != 0 {
		t.Fatalf("recorded %d ok, %d errors; want the 1,000 after the warm-up", st.OK, st.ErrorCount())
	}
	if st.RPS() != 1000 {
		t.Fatalf("rps %v", st.RPS())
	}
	if got := st.Latency.Quantile(0.5); got < 50*time.Millisecond {
		t.Fatalf("median latency %v, want ≥ 50ms (measured from the intended time)", got)
	}
}

func TestOpenLoopLatencyCountsFromIntendedTime(t *testing.T) {
	// The server stalls for 300 ms once: every request due during the stall
	// waits for it, and its latency must include that wait (no coordinated
	// omission), on a real clock.
	var mu sync.Mutex
	stallUntil := time.Now().Add(300 * time.Millisecond)
	o := Open{Rate: 200, Duration: 500 * time.Millisecond}
	rec := o.Run(context.Background(), func(at time.Time) Result {
		mu.Lock()
		until := stallUntil
		mu.Unlock()
		if d := time.Until(until); d > 0 {
			time.Sleep(d)
		}
		return Result{Latency: time.Since(at), TTFT: time.Since(at)}
	})
	st := rec.Stats(o.Duration)
	if st.OK != 100 {
		t.Fatalf("%d requests recorded, want 100", st.OK)
	}
	// The first request waited the whole stall.
	if got := st.Latency.Max(); got < 290*time.Millisecond {
		t.Fatalf("max latency %v, want ≥ 290ms", got)
	}
	// About 60 requests were due during the stall; all of them waited.
	if got := st.Latency.Quantile(0.4); got < time.Millisecond {
		t.Fatalf("p40 latency %v: requests due during the stall were not charged for it", got)
	}
}

func TestOpenLoopSaturation(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	block := make(chan struct{})
	o := Open{Rate: 100, Duration: time.Second, MaxInFlight: 10, Clock: clk, Wait: 5 * time.Second}
	go func() { time.Sleep(100 * time.Millisecond); close(block) }()
	rec := o.Run(context.Background(), func(time.Time) Result { <-block; return Result{Latency: time.Millisecond} })
	st := rec.Stats(o.Duration)
	if st.OK != 10 || st.Errors["generator_saturated"] != 90 {
		t.Fatalf("ok %d, errors %v; want 10 sent and 90 refused", st.OK, st.Errors)
	}
}

func TestClosedLoopRecordsOnlyTheWindow(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	start := clk.Now()
	var mu sync.Mutex
	c := Closed{Concurrency: 1, Warmup: 100 * time.Millisecond, Duration: time.Second, Clock: clk}
	rec := c.Run(context.Background(), func(at time.Time) Result {
		mu.Lock()
		defer mu.Unlock()
		clk.SleepUntil(context.Background(), at.Add(10*time.Millisecond)) // each answer takes 10 ms
		return Result{Latency: 10 * time.Millisecond}
	})
	st := rec.Stats(c.Duration)
	if st.OK != 100 {
		t.Fatalf("%d recorded, want 100 (1 s / 10 ms)", st.OK)
	}
	if got := clk.Now().Sub(start); got != 1100*time.Millisecond {
		t.Fatalf("ran until +%v", got)
	}
	if st.RPS() != 100 {
		t.Fatalf("rps %v", st.RPS())
	}
}

func TestRecorderTimelineAndErrors(t *testing.T) {
	start := time.Unix(1000, 0)
	r := NewRecorder(start)
	for i := range 10 {
		r.Add(Result{Latency: time.Millisecond}, start.Add(time.Duration(i)*100*time.Millisecond))
	}
	r.Add(Result{Err: "status_502"}, start)
	r.Add(Result{Err: "status_502"}, start)
	st := r.Stats(time.Second)
	if st.OK != 10 || st.Errors["status_502"] != 2 || st.ErrorCount() != 2 || st.Latency.Count() != 10 {
		t.Fatalf("%+v", st)
	}
	// 250 ms bins: completions at 0,100,200 | 300,400 | 500,600,700 | 800,900.
	want := []float64{12, 8, 12, 8}
	if len(st.Timeline) != 4 {
		t.Fatalf("timeline %v", st.Timeline)
	}
	for i := range want {
		if st.Timeline[i] != want[i] {
			t.Fatalf("timeline %v, want %v", st.Timeline, want)
		}
	}
}
