package gateway

import (
	"sync"
	"sync/atomic"
)

// loopWorkers runs streamed requests' failover loops (serveStream) on
// goroutines kept between requests. A new goroutine starts on a 2 KiB
// stack, and a loop's calls (runWatched, run, attempt, hold, observe)
// need about 4 KiB: each stream's loop grew its stack twice, and each
// growth copies the stack and walks every frame's tables, about 10,000
// instructions (docs/benchmarks.md, issue 21, cpu3). A kept goroutine
// starts its next loop on the stack its last one grew (the collector
// halves an idle goroutine's stack at most once a cycle).
//
// At most maxIdle goroutines wait for a loop; one finishing its loop when
// that many wait ends. close ends the waiting ones, and each running one
// when its loop ends (Server.Shutdown). A nil *loopWorkers starts a
// goroutine for every loop. Safe for concurrent use.
type loopWorkers struct {
	loops   chan func() // unbuffered: a send succeeds only when a goroutine waits
	stop    chan struct{}
	stopped sync.Once
	idle    atomic.Int32 // goroutines waiting, or about to, for a loop
	maxIdle int32
}

// loopWorkersIdle is how many goroutines wait for a loop at most: each
// holds its stack (a few KiB) while it waits.
const loopWorkersIdle = 64

// newLoopWorkers returns workers that keep at most maxIdle goroutines
// waiting.
func newLoopWorkers(maxIdle int32) *loopWorkers {
	return &loopWorkers{loops: make(chan func()), stop: make(chan struct{}), maxIdle: maxIdle}
}

// start runs f on a waiting goroutine, or on a new one when none waits.
// f must recover its own panics: one that escapes ends the process, as
// from any goroutine.
func (w *loopWorkers) start(f func()) {
	if w == nil {
		go f()
		return
	}
	select {
	case w.loops <- f:
	default:
		go w.work(f)
	}
}

// work runs f, then the loops start hands it while it waits, until more
// than maxIdle would wait or the workers are closed.
func (w *loopWorkers) work(f func()) {
	for {
		f()
		f = nil // nothing of the loop's kept while waiting
		if w.idle.Add(1) > w.maxIdle {
			w.idle.Add(-1)
			return
		}
		select {
		case f = <-w.loops:
			w.idle.Add(-1)
		case <-w.stop:
			w.idle.Add(-1)
			return
		}
	}
}

// close ends the waiting goroutines; a loop started later runs on a new
// goroutine, which ends soon after it. Idempotent.
func (w *loopWorkers) close() {
	if w == nil {
		return
	}
	w.stopped.Do(func() { close(w.stop) })
}
