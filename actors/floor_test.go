package actors

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/anthdm/hollywood/actor"
)

// floorPing travels caller → first actor → second actor → caller.
type floorPing struct{ reply chan struct{} }

// floorRelease goes from the caller to the second actor, which then sends
// floorView to the first: the shape of a release (account actor, then the
// scheduler filing the view it publishes).
type (
	floorRelease struct{}
	floorView    struct{}
)

// floorActor spins for work, then forwards the ping (or replies, last). A
// release costs the second actor 2 µs, a view the first 5 µs (about a
// release and a smart rescore).
type floorActor struct {
	next, first *actor.PID
	work        time.Duration
}

func spin(d time.Duration) {
	for t := time.Now(); time.Since(t) < d; {
	}
}

func (f *floorActor) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case *floorPing:
		spin(f.work)
		if f.next != nil {
			c.Send(f.next, m)
			return
		}
		m.reply <- struct{}{}
	case floorRelease:
		spin(2 * time.Microsecond)
		c.Send(f.first, floorView{})
	case floorView:
		spin(5 * time.Microsecond)
	}
}

// BenchmarkHollywoodFloor is the floor under BenchmarkAcquireLatency: the
// same shape (a caller sends to one actor, which sends to a second, which
// answers on a channel) with nothing of Troupe's, each actor spinning for
// work per hop. With release=true the caller then starts a release-shaped
// chain that runs while the next ping travels, as each acquire's release
// does in BenchmarkAcquireLatency. It reports p50 and p99 in µs, so the
// machine's and the runtime's own tail can be told from the scheduler's
// (docs/benchmarks.md).
func BenchmarkHollywoodFloor(b *testing.B) {
	for _, work := range []time.Duration{0, time.Microsecond, 4 * time.Microsecond} {
		for _, release := range []bool{false, true} {
			b.Run(fmt.Sprintf("work=%v/release=%v", work, release), func(b *testing.B) {
				e, err := actor.NewEngine(actor.NewEngineConfig())
				if err != nil {
					b.Fatal(err)
				}
				firstPID := actor.NewPID(e.Address(), "floor/1")
				second := e.Spawn(func() actor.Receiver { return &floorActor{first: firstPID, work: work} }, "floor", actor.WithID("2"))
				first := e.Spawn(func() actor.Receiver { return &floorActor{next: second, work: work} }, "floor", actor.WithID("1"))
				if first.String() != firstPID.String() {
					b.Fatalf("first actor is %s, not %s", first, firstPID)
				}
				reply := make(chan struct{}, 1)
				samples := make([]time.Duration, 0, b.N)
				for b.Loop() {
					t0 := time.Now()
					e.Send(first, &floorPing{reply: reply})
					<-reply
					samples = append(samples, time.Since(t0))
					if release {
						e.Send(second, floorRelease{})
					}
				}
				b.StopTimer()
				slices.Sort(samples)
				b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds())/1e3, "p50-µs")
				b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds())/1e3, "p99-µs")
				<-e.Poison(first).Done()
				<-e.Poison(second).Done()
			})
		}
	}
}
