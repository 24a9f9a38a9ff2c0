package scripts

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// closedChan is returned by budget.Done once a call is over its budget.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// budget is the context.Context a sandboxed Lua state runs under. gopher-lua
// calls ctx.Done() before every VM instruction and raises ctx.Err() when the
// channel is ready, so Done is where a call's budget is enforced:
//
//   - it counts instructions and, past the call's instruction limit, returns a
//     closed channel: the primary budget, deterministic and independent of
//     machine load;
//   - it returns a closed channel once a reusable wall-clock timer has
//     expired: the backstop for the few instructions that are slow on their
//     own (concatenating huge strings).
//
// Until then Done returns a nil channel, which the VM's select skips at the
// least cost. Arming the timer costs a Reset/Stop and two uncontended lock
// pairs, and nothing allocates.
//
// start, stop and Done are called by the goroutine that runs the Lua state;
// only the timer's callback (expire) runs elsewhere.
type budget struct {
	n, limit int64 // instructions run and allowed in this call (Lua goroutine only)
	over     error // why the call was stopped, nil while within budget (Lua goroutine only)
	wall     time.Duration

	killed atomic.Bool // the timer expired during this call
	mu     sync.Mutex  // guards armed, stale and the writes of killed
	armed  bool        // a call is running
	stale  int         // callbacks of finished calls that are still to run and must do nothing
	timer  *time.Timer
}

var _ context.Context = (*budget)(nil)

func newBudget() *budget {
	b := &budget{}
	b.timer = time.AfterFunc(time.Hour, b.expire)
	b.timer.Stop()
	return b
}

// Deadline reports no deadline: the budget is enforced through Done.
func (b *budget) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done counts one instruction and is ready once the call is over budget.
func (b *budget) Done() <-chan struct{} {
	b.n++
	if b.n > b.limit || b.killed.Load() {
		if b.over == nil {
			if b.n > b.limit {
				b.over = fmt.Errorf("%w: more than %d instructions", ErrBudget, b.limit)
			} else {
				b.over = fmt.Errorf("%w: ran longer than %v", ErrBudget, b.wall)
			}
		}
		return closedChan
	}
	return nil
}

// Err says why the call was stopped, nil while it is within budget.
func (b *budget) Err() error { return b.over }

// Value carries no values.
func (b *budget) Value(any) any { return nil }

// start arms the budget for one call of at most limit instructions and wall
// of wall-clock time.
func (b *budget) start(limit int64, wall time.Duration) {
	b.n, b.limit, b.over, b.wall = 0, limit, nil, wall
	b.mu.Lock()
	b.armed = true
	b.mu.Unlock()
	b.timer.Reset(wall)
}

// stop disarms the budget and returns why the call was stopped, or nil.
// Stopping a disarmed budget does nothing.
//
// If Stop finds the timer expired, this call's callback has started but,
// unless it has set killed, has not yet taken the lock (it would have found
// the call armed); it is counted stale so that it does nothing. The stale
// count is fungible: if a later call's own callback consumes it, that call's
// time is up, and the older callback stops it instead.
func (b *budget) stop() error {
	stopped := b.timer.Stop()
	b.mu.Lock()
	if b.armed && !stopped && !b.killed.Load() {
		b.stale++
	}
	b.armed = false
	b.killed.Store(false)
	b.mu.Unlock()
	over := b.over
	b.over = nil
	return over
}

// expire runs on the timer's goroutine when an armed call's time is up.
func (b *budget) expire() {
	b.mu.Lock()
	switch {
	case b.stale > 0:
		b.stale--
	case b.armed:
		b.killed.Store(true)
	}
	b.mu.Unlock()
}
