package load

import (
	"context"
	"sync"
	"time"
)

// Clock is the time source of the drivers; RealClock in use, a fake one in
// tests.
type Clock interface {
	Now() time.Time
	// SleepUntil returns at t or later, or early when ctx is done.
	SleepUntil(ctx context.Context, t time.Time)
}

// RealClock is the system clock.
type RealClock struct{}

// Now is time.Now.
func (RealClock) Now() time.Time { return time.Now() }

// SleepUntil sleeps until t or until ctx is done.
func (RealClock) SleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}

// Schedule is an open-loop arrival schedule: request i is due at
// Start + i/Rate, whatever happened to the requests before it.
type Schedule struct {
	Start time.Time
	Rate  float64 // requests per second, > 0
}

// At returns the intended send time of request i (i ≥ 0).
func (s Schedule) At(i int64) time.Time {
	return s.Start.Add(time.Duration(float64(i) * float64(time.Second) / s.Rate))
}

// Count returns how many requests are due in [Start, Start+d).
func (s Schedule) Count(d time.Duration) int64 {
	n := int64(d.Seconds() * s.Rate)
	for n > 0 && !s.At(n-1).Before(s.Start.Add(d)) {
		n--
	}
	for s.At(n).Before(s.Start.Add(d)) {
		n++
	}
	return n
}

// Do sends one request whose latency counts from start and returns its
// result.
type Do func(start time.Time) Result

// Open is an open-loop run.
type Open struct {
	Rate     float64       // requests per second
	Warmup   time.Duration // sent on schedule, not recorded
	Duration time.Duration // the measured window, after Warmup
	// MaxInFlight caps requests outstanding at once (default 20,000);
	// requests due while it is reached are not sent and count as errors
	// of class "generator_saturated".
	MaxInFlight int
	// Wait bounds how long Run waits for outstanding requests after the
	// schedule ends (default 30s).
	Wait  time.Duration
	Clock Clock // nil: RealClock
}

// Run sends requests on schedule until the window ends and returns the
// measured window's recorder. Every request runs in its own goroutine so a
// slow answer never delays the next send; each latency is measured from the
// request's intended time, not from when it actually left.
func (o Open) Run(ctx context.Context, do Do) *Recorder {
	clk := o.Clock
	if clk == nil {
		clk = RealClock{}
	}
	maxIn := o.MaxInFlight
	if maxIn <= 0 {
		maxIn = 20000
	}
	wait := o.Wait
	if wait <= 0 {
		wait = 30 * time.Second
	}
	sched := Schedule{Start: clk.Now(), Rate: o.Rate}
	measureFrom := sched.Start.Add(o.Warmup)
	end := measureFrom.Add(o.Duration)
	rec := NewRecorder(measureFrom)
	sem := make(chan struct{}, maxIn)
	var wg sync.WaitGroup
	for i := int64(0); ; i++ {
		at := sched.At(i)
		if !at.Before(end) || ctx.Err() != nil {
			break
		}
		clk.SleepUntil(ctx, at)
		measured := !at.Before(measureFrom)
		select {
		case sem <- struct{}{}:
		default:
			if measured {
				rec.addErr("generator_saturated")
			}
			continue
		}
		if measured {
			rec.addLag(clk.Now().Sub(at))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := do(at)
			<-sem
			if measured {
				rec.Add(res, clk.Now())
			}
		}()
	}
	waitGroup(&wg, wait)
	return rec
}

// Closed is a closed-loop run: Concurrency workers send back to back.
type Closed struct {
	Concurrency int
	Warmup      time.Duration
	Duration    time.Duration
	Clock       Clock // nil: RealClock
}

// Run runs the workers until the window ends and returns the recorder of
// the requests that started and finished inside the measured window.
func (c Closed) Run(ctx context.Context, do Do) *Recorder {
	clk := c.Clock
	if clk == nil {
		clk = RealClock{}
	}
	start := clk.Now()
	measureFrom := start.Add(c.Warmup)
	end := measureFrom.Add(c.Duration)
	rec := NewRecorder(measureFrom)
	var wg sync.WaitGroup
	for range c.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t := clk.Now()
				if !t.Before(end) {
					return
				}
				res := do(t)
				if done := clk.Now(); !t.Before(measureFrom) && !done.After(end) {
					rec.Add(res, done)
				}
			}
		}()
	}
	wg.Wait()
	return rec
}

// waitGroup waits for wg, at most d.
func waitGroup(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}
