package actors

import (
	"sync/atomic"
	"time"
)

// stallClock is a coarse clock shared by every waiting caller: tick returns
// a channel that is closed within stallTick. System.Acquire waits on it,
// rather than on a timer of its own, until the scheduler has answered (which
// it does in microseconds unless it is stalled), so a grant costs no timer.
type stallClock struct {
	cur  atomic.Pointer[chan struct{}]
	stop chan struct{}
	done chan struct{}
}

// stallTick is the stall clock's period.
const stallTick = 250 * time.Millisecond

func newStallClock() *stallClock {
	c := &stallClock{stop: make(chan struct{}), done: make(chan struct{})}
	ch := make(chan struct{})
	c.cur.Store(&ch)
	go c.run()
	return c
}

// tick returns the current period's channel, closed when the period ends.
func (c *stallClock) tick() <-chan struct{} { return *c.cur.Load() }

func (c *stallClock) run() {
	t := time.NewTicker(stallTick)
	defer t.Stop()
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			close(*c.cur.Load())
			return
		case <-t.C:
			ch := make(chan struct{})
			close(*c.cur.Swap(&ch))
		}
	}
}

// close stops the clock, its last channel staying closed: waiters wake for
// good (System.Acquire checks System.stopped then). Call it once.
func (c *stallClock) close() {
	close(c.stop)
	<-c.done
}
