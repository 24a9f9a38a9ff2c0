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

// floorActor spins for work, then forwards the ping (or replies, last).
type floorActor struct {
	next *actor.PID
	work time.Duration
}

func (f *floorActor) Receive(c *actor.Context) {
	m, ok := c.Message().(*floorPing)
	if !ok {
		return
	}
	for t := time.Now(); time.Since(t) < f.work; {
	}
	if f.next != nil {
		c.Send(f.next, m)
		return
	}
	m.reply <- struct{}{}
}

// BenchmarkHollywoodFloor is the floor under BenchmarkAcquireLatency: the
// same shape (a caller sends to one actor, which sends to a second, which
// answers on a channel) with nothing of Troupe's, each actor spinning for
// work (0 or 4 µs, about what an acquire does). It reports p50 and p99 in
// µs, so the machine's own tail can be told from the scheduler's
// (docs/benchmarks.md).
func BenchmarkHollywoodFloor(b *testing.B) {
	for _, work := range []time.Duration{0, 4 * time.Microsecond} {
		b.Run(fmt.Sprintf("work=%v", work), func(b *testing.B) {
			e, err := actor.NewEngine(actor.NewEngineConfig())
			if err != nil {
				b.Fatal(err)
			}
			second := e.Spawn(func() actor.Receiver { return &floorActor{work: work} }, "floor", actor.WithID("2"))
			first := e.Spawn(func() actor.Receiver { return &floorActor{next: second, work: work} }, "floor", actor.WithID("1"))
			reply := make(chan struct{}, 1)
			samples := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				e.Send(first, &floorPing{reply: reply})
				<-reply
				samples = append(samples, time.Since(t0))
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
