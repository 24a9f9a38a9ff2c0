package gateway

import (
	"testing"
	"testing/synctest"
)

// TestLoopWorkersReuse: a loop started while a worker waits runs on that
// worker (no goroutine started for it), at most maxIdle wait, close ends the
// waiting ones, and loops still run after close and on a nil
// *loopWorkers.
func TestLoopWorkersReuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newLoopWorkers(2)
		done := make(chan struct{})
		idle := func(want int32) {
			t.Helper()
			synctest.Wait() // every worker has returned from its loop and waits, or ended
			if n := w.idle.Load(); n != want {
				t.Fatalf("%d workers waiting, want %d", n, want)
			}
		}
		w.start(func() { done <- struct{}{} })
		<-done
		idle(1)
		// The waiting worker takes the next loop: while it runs, none waits
		// (a new goroutine would have left the worker waiting).
		release := make(chan struct{})
		w.start(func() { done <- struct{}{}; <-release })
		<-done
		if n := w.idle.Load(); n != 0 {
			t.Errorf("%d workers waiting while the loop runs, want 0: it did not run on the waiting one", n)
		}
		release <- struct{}{}
		idle(1)

		// Three loops at once: three workers, of which two stay.
		for range 3 {
			w.start(func() { done <- struct{}{}; <-release })
		}
		for range 3 {
			<-done
		}
		close(release)
		idle(2)

		w.close()
		w.close() // idempotent
		idle(0)
		w.start(func() { done <- struct{}{} })
		<-done
		idle(0)

		var nilW *loopWorkers
		nilW.start(func() { done <- struct{}{} })
		<-done
		nilW.close()
	})
}
