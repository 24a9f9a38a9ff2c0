package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// reqCtx is the context of one client request, embedded in its call: it
// ends after RequestTimeout (context.DeadlineExceeded), when its end is
// called (the request is over, or the client went away: context.Canceled),
// and when Shutdown cancels what still runs (context.Canceled). Its
// attempts' contexts (attemptCtx) are its children: they end with it, with
// its error, or on their own deadline (NonStreamTimeout) or cancel.
//
// It replaces a context.WithTimeout under Server.life per request and one
// per attempt, with sendFast's context.AfterFunc on top: their contexts,
// timers, Done channels, child maps and closures were 16 allocations a
// request, 14 % of all objects a bench run allocated (docs/benchmarks.md,
// issue 21). Here the request and all its attempts share one timer, armed
// for the earliest deadline pending and re-armed when it fires; the
// request is in Server.live, which Shutdown ends, rather than a child of a
// context; and it has an AfterFunc method, which package context uses for
// a child (WithCancel, AfterFunc) instead of starting a goroutine to watch
// it. Value returns nil for every key, as the contexts it replaces did
// (none carried a value); context.Cause of it is its Err, where it was
// errShuttingDown after Shutdown (nothing read it).
type reqCtx struct {
	mu       sync.Mutex // guards everything below but state, and the attempts' fields
	core     ctxCore
	deadline time.Time   // RequestTimeout after the request began
	timer    *time.Timer // calls fire; nil until first armed
	armed    time.Time   // when timer fires; zero when it is not pending
	attempts *attemptCtx // live attempts, linked through attemptCtx.next
	// beat is called on the timer when beatLeft is due (setBeat): a
	// streamed request's wake-up to commit its head, then its stream's
	// heartbeat, on the request's one timer instead of one of their own.
	// beatLeft is when, as how long before the deadline (as
	// attemptCtx.bound); zero: no beat pending.
	beat     beater
	beatLeft time.Duration

	set        *liveSet // the set rc was put in (start); nil: none
	inSet      bool     // rc is in set; guarded by set.mu, as are the links
	prev, next *reqCtx  // links in set
}

// attemptCtx is the context of one attempt of a request (a child of its
// reqCtx): it ends with the request (with its error), at its own deadline
// when it has one (context.DeadlineExceeded), or when end is called
// (context.Canceled). Its fields are guarded by its request's mu.
type attemptCtx struct {
	rc       *reqCtx
	core     ctxCore
	deadline time.Time // zero: none of its own
	// bound is a stream's first-token bound while it is held (holdBound),
	// as how long before the request's deadline it falls (a duration, not
	// a time.Time: 24 bytes more took call to the next size class): at it
	// the attempt ends (context.Canceled, as the hold's own timer ended it
	// before) and boundHit is set. It is not the attempt's Deadline.
	// Zero: none.
	bound      time.Duration
	boundHit   bool
	prev, next *attemptCtx
}

// Context states (ctxCore.state).
const (
	ctxLive uint32 = iota
	ctxCanceled
	ctxExpired
)

// stateErr is the error of a context in state st (nil while live).
func stateErr(st uint32) error {
	switch st {
	case ctxCanceled:
		return context.Canceled
	case ctxExpired:
		return context.DeadlineExceeded
	}
	return nil
}

// closedDone is the Done channel of a context that ended before anyone
// asked for its channel.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// ctxCore is what reqCtx and attemptCtx share: the state, the Done channel
// and the functions registered by AfterFunc. Its methods run with the
// owner's mutex held, except err.
type ctxCore struct {
	state atomic.Uint32
	done  chan struct{} // made by the first Done; closed at the end
	funcs []afterFunc   // registered by AfterFunc, not yet stopped or run
	buf   [2]afterFunc  // funcs' first backing array
	seq   uint64        // the last registration's id
}

// afterFunc is one AfterFunc registration.
type afterFunc struct {
	id uint64
	f  func()
}

func (c *ctxCore) err() error { return stateErr(c.state.Load()) }

// doneLocked returns the Done channel, made on first use.
func (c *ctxCore) doneLocked() chan struct{} {
	if c.done == nil {
		if c.state.Load() != ctxLive {
			return closedDone
		}
		c.done = make(chan struct{})
	}
	return c.done
}

// endLocked ends the context in state st unless it has ended, and appends
// the functions to run for it to fs.
func (c *ctxCore) endLocked(st uint32, fs []func()) []func() {
	if c.state.Load() != ctxLive {
		return fs
	}
	c.state.Store(st)
	if c.done != nil {
		close(c.done)
	}
	for _, a := range c.funcs {
		fs = append(fs, a.f)
	}
	clear(c.funcs)
	c.funcs = nil
	return fs
}

// afterFunc registers f to run in its own goroutine once the context has
// ended (at once when it has), as context.AfterFunc does; mu is the
// owner's mutex.
func (c *ctxCore) afterFunc(mu *sync.Mutex, f func()) (stop func() bool) {
	mu.Lock()
	if c.state.Load() != ctxLive {
		mu.Unlock()
		go f()
		return func() bool { return false }
	}
	if c.funcs == nil {
		c.funcs = c.buf[:0]
	}
	c.seq++
	id := c.seq
	c.funcs = append(c.funcs, afterFunc{id: id, f: f})
	mu.Unlock()
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i, a := range c.funcs {
			if a.id == id {
				last := len(c.funcs) - 1
				c.funcs[i] = c.funcs[last]
				c.funcs[last] = afterFunc{}
				c.funcs = c.funcs[:last]
				return true
			}
		}
		return false
	}
}

// runAll runs each of fs in its own goroutine, as context.AfterFunc does.
func runAll(fs []func()) {
	for _, f := range fs {
		go f()
	}
}

// start makes rc the context of a request that began now and may run for
// d, in live (nil: none). rc must be new (the zero value).
func (rc *reqCtx) start(live *liveSet, d time.Duration) {
	rc.deadline = time.Now().Add(d)
	rc.set = live
	rc.mu.Lock()
	rc.armLocked(rc.deadline)
	rc.mu.Unlock()
	if live != nil && !live.add(rc) {
		rc.end(ctxCanceled) // Shutdown came first
	}
}

// armLocked makes the timer fire at t at the latest.
func (rc *reqCtx) armLocked(t time.Time) {
	switch {
	case rc.timer == nil:
		rc.timer = time.AfterFunc(time.Until(t), rc.fire)
	case rc.armed.IsZero() || t.Before(rc.armed):
		rc.timer.Reset(time.Until(t))
	default:
		return
	}
	rc.armed = t
}

// fire ends what is due: the request at its deadline, or the attempts at
// theirs; it re-arms the timer for the earliest deadline left. A fire that
// finds nothing due (an attempt that ended before its deadline) only
// re-arms.
func (rc *reqCtx) fire() {
	rc.mu.Lock()
	rc.armed = time.Time{}
	if rc.core.state.Load() != ctxLive {
		rc.mu.Unlock()
		return
	}
	now := time.Now()
	if !now.Before(rc.deadline) {
		fs := rc.endLocked(ctxExpired)
		rc.mu.Unlock()
		rc.leave()
		runAll(fs)
		return
	}
	var fs []func()
	next := rc.deadline
	var b beater
	if rc.beatLeft > 0 {
		if at := rc.deadline.Add(-rc.beatLeft); now.Before(at) {
			next = at
		} else {
			b, rc.beatLeft = rc.beat, 0
		}
	}
	for a := rc.attempts; a != nil; {
		an := a.next
		var bound time.Time
		if a.bound > 0 {
			bound = rc.deadline.Add(-a.bound)
		}
		switch {
		case !bound.IsZero() && !now.Before(bound):
			a.boundHit = true
			fs = a.endLocked(ctxCanceled, fs)
		case !a.deadline.IsZero() && !now.Before(a.deadline):
			fs = a.endLocked(ctxExpired, fs)
		default:
			for _, t := range [2]time.Time{a.deadline, bound} {
				if !t.IsZero() && t.Before(next) {
					next = t
				}
			}
		}
		a = an
	}
	rc.armLocked(next)
	rc.mu.Unlock()
	runAll(fs)
	if b != nil {
		if d := b.beat(); d > 0 {
			rc.beatAgain(b, d)
		}
	}
}

// beater is what a request's timer calls when its beat is due (setBeat).
type beater interface {
	// beat runs on the timer's goroutine without the request's lock
	// held; it returns how long until the next beat, 0 for none.
	beat() time.Duration
}

// setBeat makes b the request's beater, its beat due d from now (b nil:
// none). The beater it replaces gets no beat from then on, but for one
// already being called.
func (rc *reqCtx) setBeat(b beater, d time.Duration) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.beat, rc.beatLeft = b, 0
	if b != nil {
		rc.beatInLocked(d)
	}
}

// beatAgain arms b's next beat d from now, unless b is no longer the
// request's beater.
func (rc *reqCtx) beatAgain(b beater, d time.Duration) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.beat == b {
		rc.beatInLocked(d)
	}
}

// beatInLocked arms the beat d from now; one past the request's deadline
// is left out (the request ends first).
func (rc *reqCtx) beatInLocked(d time.Duration) {
	if rc.core.state.Load() != ctxLive {
		return
	}
	if t := time.Now().Add(d); t.Before(rc.deadline) {
		rc.beatLeft = rc.deadline.Sub(t)
		rc.armLocked(t)
	}
}

// endLocked ends rc in state st, with its attempts, and stops the timer;
// it returns the functions to run for them.
func (rc *reqCtx) endLocked(st uint32) []func() {
	fs := rc.core.endLocked(st, nil)
	for a := rc.attempts; a != nil; {
		an := a.next
		fs = a.endLocked(st, fs)
		a = an
	}
	if rc.timer != nil {
		rc.timer.Stop()
		rc.armed = time.Time{}
	}
	return fs
}

// end ends rc in state st (nothing when it has ended).
func (rc *reqCtx) end(st uint32) {
	rc.mu.Lock()
	fs := rc.endLocked(st)
	rc.mu.Unlock()
	rc.leave()
	runAll(fs)
}

// cancel ends the request (context.Canceled): it is over, or its client
// went away.
func (rc *reqCtx) cancel() { rc.end(ctxCanceled) }

// leave takes rc out of its live set.
func (rc *reqCtx) leave() {
	if rc.set != nil {
		rc.set.remove(rc)
	}
}

// Deadline is the request's: RequestTimeout after it began.
func (rc *reqCtx) Deadline() (time.Time, bool) { return rc.deadline, true }

// Done is closed when the request's context ends.
func (rc *reqCtx) Done() <-chan struct{} {
	rc.mu.Lock()
	d := rc.core.doneLocked()
	rc.mu.Unlock()
	return d
}

// Err is nil while the request's context runs, then context.Canceled or
// context.DeadlineExceeded.
func (rc *reqCtx) Err() error { return rc.core.err() }

// Value is nil: a request's context carries no values.
func (rc *reqCtx) Value(any) any { return nil }

// AfterFunc runs f in its own goroutine once the request's context has
// ended, as context.AfterFunc(rc, f) does; stop unregisters it, and
// reports whether that stopped f from running. Package context uses it
// for rc's children (so no goroutine watches rc for them).
func (rc *reqCtx) AfterFunc(f func()) (stop func() bool) { return rc.core.afterFunc(&rc.mu, f) }

// String names the context, as package context's do.
func (rc *reqCtx) String() string { return "gateway.requestContext" }

// startAttempt makes a the context of an attempt of rc that began now;
// d > 0 is its own timeout (else the request's deadline is its only one).
// a must be new (the zero value).
func (rc *reqCtx) startAttempt(a *attemptCtx, d time.Duration) {
	a.rc = rc
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if st := rc.core.state.Load(); st != ctxLive {
		a.core.endLocked(st, nil) // nothing is registered yet
		return
	}
	if d > 0 {
		if dl := time.Now().Add(d); dl.Before(rc.deadline) {
			a.deadline = dl
			rc.armLocked(dl)
		}
	}
	a.next = rc.attempts
	if a.next != nil {
		a.next.prev = a
	}
	rc.attempts = a
}

// endLocked ends a in state st, unlinks it from its request and appends
// the functions to run for it to fs.
func (a *attemptCtx) endLocked(st uint32, fs []func()) []func() {
	if a.core.state.Load() != ctxLive {
		return fs
	}
	fs = a.core.endLocked(st, fs)
	switch {
	case a.prev != nil:
		a.prev.next = a.next
	case a.rc.attempts == a:
		a.rc.attempts = a.next
	}
	if a.next != nil {
		a.next.prev = a.prev
	}
	a.prev, a.next = nil, nil
	return fs
}

// holdBound bounds the attempt until unbound is called: d from now, it
// ends (context.Canceled) on the request's timer, as a stream's hold needs
// for its first token, without a timer of its own (a time.AfterFunc, its
// closure and flag were three allocations and a timer a stream). A bound
// past the request's deadline is left to that deadline.
func (a *attemptCtx) holdBound(d time.Duration) {
	rc := a.rc
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if a.core.state.Load() != ctxLive {
		return
	}
	if t := time.Now().Add(d); t.Before(rc.deadline) {
		a.bound = rc.deadline.Sub(t)
		rc.armLocked(rc.deadline.Add(-a.bound))
	}
}

// unbound lifts the bound holdBound set; it reports whether the bound was
// reached first (the attempt has ended for it). The request's timer, if
// armed for the bound, finds nothing due when it fires and re-arms.
func (a *attemptCtx) unbound() (hit bool) {
	a.rc.mu.Lock()
	defer a.rc.mu.Unlock()
	a.bound = 0
	return a.boundHit
}

// cancel ends the attempt (context.Canceled).
func (a *attemptCtx) cancel() {
	a.rc.mu.Lock()
	fs := a.endLocked(ctxCanceled, nil)
	a.rc.mu.Unlock()
	runAll(fs)
}

// Deadline is the attempt's own, or the request's when that is earlier
// (or the attempt has none).
func (a *attemptCtx) Deadline() (time.Time, bool) {
	if !a.deadline.IsZero() {
		return a.deadline, true
	}
	return a.rc.deadline, true
}

// Done is closed when the attempt's context ends.
func (a *attemptCtx) Done() <-chan struct{} {
	a.rc.mu.Lock()
	d := a.core.doneLocked()
	a.rc.mu.Unlock()
	return d
}

// Err is nil while the attempt's context runs, then context.Canceled or
// context.DeadlineExceeded (its own deadline's or its request's).
func (a *attemptCtx) Err() error { return a.core.err() }

// Value is nil: an attempt's context carries no values.
func (a *attemptCtx) Value(any) any { return nil }

// AfterFunc is reqCtx.AfterFunc for the attempt's context.
func (a *attemptCtx) AfterFunc(f func()) (stop func() bool) {
	return a.core.afterFunc(&a.rc.mu, f)
}

// String names the context, as package context's do.
func (a *attemptCtx) String() string { return "gateway.attemptContext" }

// liveSet holds the contexts of the requests in flight, so that Shutdown
// can end them (end) as cancelling a parent context would.
type liveSet struct {
	mu    sync.Mutex
	head  *reqCtx
	ended bool
}

// add puts rc in l; false when l has ended (rc is not added).
func (l *liveSet) add(rc *reqCtx) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return false
	}
	rc.inSet = true
	rc.next = l.head
	if rc.next != nil {
		rc.next.prev = rc
	}
	l.head = rc
	return true
}

// remove takes rc out of l (nothing when it is not in it).
func (l *liveSet) remove(rc *reqCtx) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !rc.inSet {
		return
	}
	switch {
	case rc.prev != nil:
		rc.prev.next = rc.next
	case l.head == rc:
		l.head = rc.next
	}
	if rc.next != nil {
		rc.next.prev = rc.prev
	}
	rc.prev, rc.next, rc.inSet = nil, nil, false
}

// end cancels every context in l, and every one added later.
func (l *liveSet) end() {
	l.mu.Lock()
	l.ended = true
	var all []*reqCtx
	for rc := l.head; rc != nil; rc = rc.next {
		all = append(all, rc)
	}
	l.mu.Unlock()
	for _, rc := range all {
		rc.cancel()
	}
}

// detach returns the context a handler gives storage, the cache and
// billing for ctx: ctx itself, unless it is the request's
// *fasthttp.RequestCtx, for which it is the server's life (ended by
// Shutdown, as fasthttp's RequestCtx's Done is). A RequestCtx is reset and
// reused once its handler returns, and a context derived from it can
// outlive the call: database/sql watches a query's context on a goroutine
// of its own when the parent's Done is not package context's, and that
// goroutine reads the RequestCtx's values as it ends, after fasthttp may
// have reset them (a data race, seen under -race in
// TestBillingRefusesNestedDuplicateKeys), besides costing a goroutine a
// query.
func (s *Server) detach(ctx context.Context) context.Context {
	if _, ok := ctx.(*fasthttp.RequestCtx); ok {
		return s.life
	}
	return ctx
}
