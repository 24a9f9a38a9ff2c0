package scripts

import (
	"context"
	"fmt"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// slowAllocLimit is what a slow call may allocate, in bytes, counted from
// the moment it became slow (see budget).
const slowAllocLimit = 16 << 20

// slowFraction: a call turns slow after 1/slowFraction of its wall-clock
// budget (1 ms of score's default 50 ms).
const slowFraction = 50

// allocReadEvery is how long a slow call runs between two reads of the
// allocation counter at most, past one instruction (see budget.overAlloc).
const allocReadEvery = 10 * time.Microsecond

// Call phases of budget.phase.
const (
	phaseNormal int32 = iota // within its first twentieth of wall time
	phaseSlow                // past it: Done watches allocations
	phaseKilled              // wall time is up
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
//     own (concatenating huge strings);
//   - past a fiftieth of the wall-clock budget (a call that slow is
//     abnormal: score takes microseconds) the timer marks the call slow,
//     and from then on Done also watches the process's allocation counter
//     and stops the call once it has allocated slowAllocLimit more: the
//     guard against memory bombs the libraries cannot see, such as
//     doubling a string with `s = s .. s`, one instruction per doubling
//     (overAlloc: a clock read an instruction, the counter read when
//     allocReadEvery has passed).
//
// Until then Done returns a nil channel, which the VM's select skips at the
// least cost. Arming the timer costs a clock read, a Reset/Stop and two uncontended lock
// pairs, and nothing allocates.
//
// start, stop and Done are called by the goroutine that runs the Lua state;
// only the timer's callback (expire) runs elsewhere.
type budget struct {
	n, limit int64 // instructions run and allowed in this call (Lua goroutine only)
	over     error // why the call was stopped, nil while within budget (Lua goroutine only)
	wall     time.Duration

	phase     atomic.Int32  // phaseNormal, phaseSlow or phaseKilled
	allocBase atomic.Uint64 // bytes allocated by the process when the call turned slow
	mu        sync.Mutex    // guards armed, due and the writes of phase
	armed     bool          // a call is running
	due       time.Time     // when the running call's timer is next due (monotonic)
	now       func() time.Time
	timer     *time.Timer
	allocs    []metrics.Sample // /gc/heap/allocs:bytes, read by Done in the slow phase
	lastRead  time.Time        // when Done last read allocs in this call, zero before (Lua goroutine only)
	reads     int              // allocation reads by Done, for tests (Lua goroutine only)
	timerAt   []metrics.Sample // the same, read by expire (another goroutine)
}

var _ context.Context = (*budget)(nil)

func newBudget() *budget {
	b := &budget{allocs: []metrics.Sample{{Name: allocsMetric}}, timerAt: []metrics.Sample{{Name: allocsMetric}}, now: time.Now}
	b.timer = time.AfterFunc(time.Hour, b.expire)
	b.timer.Stop()
	return b
}

// Deadline reports no deadline: the budget is enforced through Done.
func (b *budget) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done counts one instruction and is ready once the call is over budget.
func (b *budget) Done() <-chan struct{} {
	b.n++
	phase := b.phase.Load()
	if b.n <= b.limit && phase == phaseNormal && b.over == nil {
		return nil
	}
	switch {
	case b.over != nil:
	case b.n > b.limit:
		b.over = fmt.Errorf("%w: more than %d instructions", ErrBudget, b.limit)
	case phase == phaseKilled:
		b.over = fmt.Errorf("%w: ran longer than %v", ErrBudget, b.wall)
	case b.overAlloc():
		b.over = fmt.Errorf("%w: allocated more than %d MiB", ErrBudget, slowAllocLimit>>20)
	default:
		return nil // slow, within its memory
	}
	return closedChan
}

const allocsMetric = "/gc/heap/allocs:bytes"

// allocated returns the bytes the process has allocated since it started,
// read into sample (one per goroutine that reads).
func allocated(sample []metrics.Sample) uint64 {
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// overAlloc reports whether a slow call has allocated more than
// slowAllocLimit since it turned slow. Reading the counter is a
// runtime/metrics read (0.25-0.7 µs, ten times a clock read and tens of
// times a simple VM instruction), so it is read only once allocReadEvery
// has passed since the last read; the clock is read at every instruction.
// Between two reads the call has run at most allocReadEvery plus its last
// instruction, so what it allocated unseen is what memory bandwidth allows
// in 10 µs (about 100-200 KiB) plus that one instruction: the bound of
// reading before every instruction, which a loop of cheap instructions no
// longer pays for (a slow call ran about ten times slower than a normal
// one, and so was stopped by the clock instead of by its instruction
// budget on a loaded host). The clock is the real one, never b.now.
func (b *budget) overAlloc() bool {
	now := time.Now()
	if !b.lastRead.IsZero() && now.Sub(b.lastRead) < allocReadEvery {
		return false
	}
	b.lastRead = now
	b.reads++
	return allocated(b.allocs)-b.allocBase.Load() > slowAllocLimit
}

// Err says why the call was stopped, nil while it is within budget.
func (b *budget) Err() error { return b.over }

// Value carries no values.
func (b *budget) Value(any) any { return nil }

// start arms the budget for one call of at most limit instructions and wall
// of wall-clock time.
func (b *budget) start(limit int64, wall time.Duration) {
	b.n, b.limit, b.over = 0, limit, nil
	b.lastRead = time.Time{}
	d := wall / slowFraction
	b.mu.Lock()
	b.wall = wall // read by expire
	b.armed = true
	b.due = b.now().Add(d)
	b.mu.Unlock()
	b.timer.Reset(d)
}

// stop disarms the budget and returns why the call was stopped, or nil.
// Stopping a disarmed budget does nothing.
//
// The timer is shared by every call, so a callback may run late: one that
// had started when stop found the timer fired, or that the previous call's
// callback re-armed. expire tells them apart by time: a timer never fires
// before it is due, so a callback that runs before the running call's due
// time is someone else's and does nothing. (Counting such callbacks instead
// broke when a callback re-armed the timer between its Stop and stop's lock:
// the next call's Reset took that timer over, and the count then swallowed
// the next call's own callback, so its wall-clock limit never fired.)
func (b *budget) stop() error {
	b.timer.Stop()
	b.mu.Lock()
	b.armed = false
	b.phase.Store(phaseNormal)
	b.mu.Unlock()
	over := b.over
	b.over = nil
	return over
}

// expire runs on the timer's goroutine: first when an armed call turns
// slow (it notes the allocation counter and re-arms for the rest of the
// wall time), then when its time is up. A callback before the running
// call's due time, or with no call running, is a late one of an earlier
// call and does nothing.
func (b *budget) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if !b.armed || now.Before(b.due) {
		return
	}
	if b.phase.Load() == phaseNormal {
		b.allocBase.Store(allocated(b.timerAt))
		b.phase.Store(phaseSlow)
		rest := b.wall - b.wall/slowFraction
		b.due = now.Add(rest)
		b.timer.Reset(rest)
		return
	}
	b.phase.Store(phaseKilled)
}
