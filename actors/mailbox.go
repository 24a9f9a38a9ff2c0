package actors

import (
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anthdm/hollywood/actor"
)

// A mailbox is an actor.Processer whose messages are handled by one
// long-lived goroutine. hollywood's own inbox starts a goroutine each time a
// message reaches an idle actor; for an actor that every request passes
// through (the scheduler) that goroutine is started twice per request, and
// the Go runtime's run-queue order delays it behind the sender
// (docs/benchmarks.md). The mailbox's goroutine instead waits for a few
// scheduler turns after its queue empties (yielding, so the goroutines it
// has readied run first) and then parks on a channel until the next send.
//
// It keeps the hollywood semantics the actors rely on: it is registered
// under its PID through Engine.SpawnProc, so Engine.Send, Request replies
// and SendRepeat reach it; Initialized and Started are delivered
// synchronously at spawn, Stopped at the end; Engine.Poison and Engine.Stop
// stop it (graceful or not) and their contexts are done once it has
// stopped and left the registry; a panic in a handler stops the handler
// (Stopped), broadcasts actor.ActorRestartedEvent and restarts it from its
// producer after restartDelay, skipping the message that panicked, up to
// maxRestarts times, after which the mailbox stops
// (actor.ActorMaxRestartsExceededEvent), as hollywood's process does.
//
// A sender may take the turn of a loop that is parked with nothing queued
// (sendInline): it marks the mailbox borrowed (the loop stays parked, and
// Sends meanwhile only queue, waking nobody), handles its message on its
// own goroutine, then the messages queued meanwhile, as they were when it
// finished its own (one batch, so that under load one caller does not
// serve everyone), and gives the turn back: to the loop, by waking it,
// when more were queued, else by marking the loop parked again. One
// goroutine holds the turn at a time, and the mutex orders one holder's
// handling before the next's, so the actor's messages are handled in order
// by one goroutine at a time as before. A handler running on a borrowed
// turn that sends to its own mailbox, directly or through an actor it runs
// inline (runHere), only queues: it never recurses. A panic while borrowed
// follows the loop's restart policy, but the restart (its delay and the new
// handler) is the loop's, woken for it: the borrower does not sleep. A
// stop while borrowed (Poison, Engine.Stop, Shutdown queued behind the
// borrower's message) stops the mailbox on the borrower, which then wakes
// the loop to exit. At 1,000 requests a second the scheduler's loop parks
// between requests, and waking it cost a futex call and a thread's turn on
// both sides per hand-off (docs/benchmarks.md).
//
// A pooled mailbox (spawnPooled) has no goroutine of its own: a Send to an
// idle one puts it on a mailPool's run queue, whose fixed workers take it,
// handle what it holds and put it back while more is queued; it is on the
// queue or run by one worker at a time, so its messages are handled in
// order by one goroutine at a time. Its restart delay is a timer, not a
// worker's sleep.
type mailbox struct {
	ctx     mailCtx
	produce mailProducer
	h       mailHandler
	pool    *mailPool // nil: the mailbox runs its own goroutine (loop)

	mu     sync.Mutex
	in     []actor.Envelope // queued by Send, taken whole by the loop or a worker
	spare  []actor.Envelope // pooled: the last batch's buffer, reused for in
	parked bool             // the loop waits on wake; the next Send signals it
	// borrowed: a sender holds the loop's turn (sendInline); the loop stays
	// parked and parked is false, so Sends only queue.
	borrowed bool
	restart  bool          // the handler panicked while borrowed: the loop restarts it (recovered)
	ended    bool          // the handler has stopped: the loop exits when it wakes
	queued   bool          // pooled: on the run queue or being run (or starting, restarting)
	closed   bool          // stopped: Send drops
	left     bool          // pooled: stopped and out of the registry (leave); done is closed once made
	wake     chan struct{} // capacity 1; nil when pooled
	// deferUpTo is how many queued messages sendDeferred leaves for the
	// parked loop's next wake-up rather than waking it (mailCtx.deferWake);
	// 0: every send wakes it.
	deferUpTo int

	// retired is set by the pool when it removes the account the mailbox
	// runs (pool.stop): the views its handler still publishes before its
	// stop are not the account's any more, and the scheduler drops them
	// (onView), so a removed account is not indexed again.
	retired atomic.Bool

	// restarts and maxRestarts are int32, as hollywood's restart count is:
	// two ints took the mailbox to the 208-byte size class.
	restarts     int32
	maxRestarts  int32
	restartDelay time.Duration
	log          *slog.Logger

	// done is closed when the mailbox has stopped (and its loop exited):
	// read it through doneChan. A pooled mailbox makes it under mu when
	// first asked for (nobody waits for an account's but tests): at 10,000
	// accounts a channel each was 1 MB of live heap.
	done chan struct{}
}

// mailHandler is an actor run by a mailbox: receive handles one message
// (actor.Initialized, actor.Started and actor.Stopped included), with sender
// the PID it came from (nil when sent without one).
type mailHandler interface {
	receive(c *mailCtx, msg any)
}

// mailProducer makes a mailbox's handler: at its start, and again after
// each panic (a restart).
type mailProducer interface {
	produce() mailHandler
}

// produceFunc is a mailProducer that is a function.
type produceFunc func() mailHandler

func (f produceFunc) produce() mailHandler { return f() }

// mailCtx is what a mailHandler sees of its actor: its engine and PID, and
// the sender of the message being handled.
type mailCtx struct {
	engine *actor.Engine
	pid    *actor.PID
	sender *actor.PID
	box    *mailbox // the actor's own mailbox
}

// Engine returns the actor's engine.
func (c *mailCtx) Engine() *actor.Engine { return c.engine }

// Send sends msg to pid with this actor as the sender.
func (c *mailCtx) Send(pid *actor.PID, msg any) { c.engine.SendWithSender(pid, msg, c.pid) }

// PID returns the actor's PID.
func (c *mailCtx) PID() *actor.PID { return c.pid }

// Sender returns the PID the current message came from, nil when none.
func (c *mailCtx) Sender() *actor.PID { return c.sender }

// SendRepeat sends msg to pid every interval until the result is stopped.
func (c *mailCtx) SendRepeat(pid *actor.PID, msg any, interval time.Duration) actor.SendRepeater {
	return c.engine.SendRepeat(pid, msg, interval)
}

// mailSpins is how many scheduler turns the loop waits with an empty queue
// before it parks. Each turn is a runtime.Gosched, which runs what the last
// message readied (an account actor's goroutine, a caller) before the loop
// looks again, so a message sent meanwhile is taken without a wake-up. More
// turns cost CPU when requests do not overlap: at 1,000 acquires and
// releases a second (BenchmarkAcquirePaced) 16 turns cost about 7 µs of
// process CPU per request more than 4, and 64 about 25 µs more, while 4
// keep the back-to-back acquire's median of 16 (0 adds about 1 µs to it;
// docs/benchmarks.md).
const mailSpins = 4

// Default restart policy, hollywood's (actor.DefaultOpts).
const (
	mailMaxRestarts  = 3
	mailRestartDelay = 500 * time.Millisecond
)

// spawnMailbox registers a mailbox running produce's handler as kind/id.
// Initialized and Started have been handled when it returns.
func spawnMailbox(e *actor.Engine, produce func() mailHandler, kind, id string, log *slog.Logger) *actor.PID {
	return e.SpawnProc(newMailbox(e, produce, kind, id, log))
}

// newMailbox makes a mailbox for kind/id, to be registered with SpawnProc.
func newMailbox(e *actor.Engine, produce func() mailHandler, kind, id string, log *slog.Logger) *mailbox {
	m := &mailbox{
		ctx:          mailCtx{engine: e, pid: actor.NewPID(e.Address(), kind+"/"+id)},
		produce:      produceFunc(produce),
		wake:         make(chan struct{}, 1),
		maxRestarts:  mailMaxRestarts,
		restartDelay: mailRestartDelay,
		log:          log,
		done:         make(chan struct{}),
	}
	m.ctx.box = m
	return m
}

// send hands msg to the mailbox directly, as Engine.Send to its PID would
// without the registry's lookup (a lock and a map of every actor): for
// actors of the same process that hold each other's mailbox, on the hot
// path. A stopped mailbox drops msg (Engine.Send would hand it to the dead
// letters).
func (m *mailbox) send(msg any, sender *actor.PID) { m.Send(m.ctx.pid, msg, sender) }

// spawnPooled registers a mailbox running produce's handler as kind/id on
// pool's workers, and returns its PID and the mailbox. Initialized and
// Started have been handled when it returns. The account actors are
// spawned this way, with their accountConfig as the producer: no closure
// per account.
func spawnPooled(e *actor.Engine, pool *mailPool, produce mailProducer, kind, id string, log *slog.Logger) (*actor.PID, *mailbox) {
	m := newMailbox(e, nil, kind, id, log)
	m.produce = produce
	m.wake, m.done = nil, nil
	m.pool = pool
	m.queued = true // until Start has run: a Send meanwhile only queues
	return e.SpawnProc(m), m
}

// PID returns the mailbox's PID (actor.Processer).
func (m *mailbox) PID() *actor.PID { return m.ctx.pid }

// Start delivers Initialized and Started and starts the loop. The engine
// calls it when the mailbox is registered (actor.Processer).
func (m *mailbox) Start() {
	m.begin()
	if m.pool != nil {
		m.release()
		return
	}
	go m.loop()
}

// begin makes a fresh handler and delivers Initialized and Started to it,
// with the events hollywood broadcasts for them.
func (m *mailbox) begin() {
	m.h = m.produce.produce()
	m.ctx.sender = nil
	m.h.receive(&m.ctx, actor.Initialized{})
	m.ctx.engine.BroadcastEvent(actor.ActorInitializedEvent{PID: m.ctx.pid, Timestamp: time.Now()})
	m.h.receive(&m.ctx, actor.Started{})
	m.ctx.engine.BroadcastEvent(actor.ActorStartedEvent{PID: m.ctx.pid, Timestamp: time.Now()})
}

// Send queues msg (actor.Processer). It never blocks on the handler.
func (m *mailbox) Send(_ *actor.PID, msg any, sender *actor.PID) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.in = append(m.in, actor.Envelope{Msg: msg, Sender: sender})
	if m.pool != nil {
		run := !m.queued
		m.queued = true
		m.mu.Unlock()
		if run {
			m.pool.ready(m)
		}
		return
	}
	wake := m.parked
	m.parked = false
	m.mu.Unlock()
	if wake {
		m.wake <- struct{}{} // only the Send that cleared parked sends: never blocks
	}
}

// sendInline is send for a message whose handler never blocks on the
// sender (no unbuffered reply the caller reads, no waiting on another
// actor): to a loop mailbox that is parked with nothing queued it is
// handled on the caller's goroutine, the loop's turn borrowed (see
// mailbox), together with what is queued meanwhile (one batch); the rest is
// handed to the loop by waking it. Otherwise, and for a pooled or stopped
// mailbox, it is Send. The scheduler takes acquires and released accounts'
// views this way: no wake-up of its loop, and none of the caller.
func (m *mailbox) sendInline(msg any, sender *actor.PID) {
	m.mu.Lock()
	if m.pool != nil || !m.parked || len(m.in) > 0 || m.closed {
		m.mu.Unlock()
		m.Send(m.ctx.pid, msg, sender)
		return
	}
	m.parked = false
	m.borrowed = true
	m.mu.Unlock()
	one := [1]actor.Envelope{{Msg: msg, Sender: sender}}
	if m.invoke(one[:], 0) >= 0 {
		m.mu.Lock()
		batch := m.in
		m.in = nil
		m.mu.Unlock()
		for i := 0; 0 <= i && i < len(batch); {
			i = m.invoke(batch, i)
		}
	}
	m.mu.Lock()
	m.borrowed = false
	wake := len(m.in) > 0 || m.restart || m.ended
	m.parked = !wake
	m.mu.Unlock()
	if wake {
		m.wake <- struct{}{} // the loop is parked (this borrow cleared parked): never blocks
	}
}

// sendDeferred is send for a message that may wait for the loop's next
// wake-up: while the handler has said that one is due (mailCtx.deferWake)
// and no more than the bound it gave are queued, a parked loop is left
// parked, and msg is handled, in order, when the next wake-up comes. A
// wake-up (a futex call and a thread's turn) costs more CPU than handling
// a usage record does; at 1,000 req/s each request's record woke the
// recorder (docs/benchmarks.md). For mailboxes with a loop of their own.
func (m *mailbox) sendDeferred(msg any, sender *actor.PID) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.in = append(m.in, actor.Envelope{Msg: msg, Sender: sender})
	wake := m.parked && len(m.in) > m.deferUpTo
	if wake {
		m.parked = false
	}
	m.mu.Unlock()
	if wake {
		m.wake <- struct{}{} // only the send that cleared parked sends: never blocks
	}
}

// deferWake lets sendDeferred leave up to n queued messages for the
// loop's next wake-up (0: none). The handler calls it, from its own
// receive, only while a wake-up is due without those messages (a timer
// armed to send to the actor), and with 0 before that timer is stopped or
// has sent: a message deferred while a wake-up is due is handled at it at
// the latest, and one sent after the bound is back to 0 wakes the loop.
func (c *mailCtx) deferWake(n int) {
	m := c.box
	m.mu.Lock()
	m.deferUpTo = n
	m.mu.Unlock()
}

// Invoke handles msgs on the caller's goroutine (actor.Processer; the engine
// itself never calls it).
func (m *mailbox) Invoke(msgs []actor.Envelope) {
	for i := 0; i < len(msgs); {
		i = m.invoke(msgs, i)
		if i < 0 {
			return
		}
	}
}

// run handles what a pooled mailbox holds, on a pool worker: the queue as
// it is when run starts; what is sent meanwhile puts the mailbox back on
// the run queue (behind the mailboxes already there), so one busy actor
// does not hold a worker.
func (m *mailbox) run() {
	m.mu.Lock()
	batch := m.in
	m.in = m.spare[:0]
	m.spare = nil
	m.mu.Unlock()
	for i := 0; i < len(batch); {
		if i = m.invoke(batch, i); i < 0 {
			return // stopped, or restarting (recovered)
		}
	}
	clear(batch) // do not keep the messages alive until the next batch
	m.mu.Lock()
	m.spare = kept(batch)
	m.mu.Unlock()
	m.release()
}

// release ends a pooled mailbox's turn: back on the run queue when
// messages are queued, else idle (the next Send queues it).
func (m *mailbox) release() {
	m.mu.Lock()
	if len(m.in) == 0 || m.closed {
		m.queued = false
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	m.pool.ready(m)
}

// runHere handles msg on the caller's goroutine when the pooled mailbox is
// idle (on no run queue, run by no worker, nothing queued), as a pool
// worker would: it takes the mailbox's turn (queued) for the one message,
// so the actor is still run by one goroutine at a time, in order, and
// gives the turn back as run does (to the run queue when messages arrived
// meanwhile). It reports whether it did; otherwise the caller sends msg.
// The scheduler grants this way (scheduler.grant): the account's turn
// without the hop to a worker, or its wake-up.
func (m *mailbox) runHere(msg any, sender *actor.PID) bool {
	m.mu.Lock()
	if m.pool == nil || m.queued || m.closed {
		m.mu.Unlock()
		return false
	}
	m.queued = true
	m.mu.Unlock()
	one := [1]actor.Envelope{{Msg: msg, Sender: sender}}
	if m.invoke(one[:], 0) < 0 {
		return true // stopped, or restarting (recovered): as run
	}
	m.release()
	return true
}

// Shutdown stops the mailbox without handling what is queued
// (actor.Processer).
func (m *mailbox) Shutdown() {
	m.Send(nil, mailStop{}, nil)
	<-m.doneChan()
}

// doneChan returns a channel closed once the mailbox has stopped (and its
// loop, if it has one, exited).
func (m *mailbox) doneChan() <-chan struct{} {
	if m.pool == nil {
		return m.done
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done == nil {
		m.done = make(chan struct{})
		if m.left {
			close(m.done)
		}
	}
	return m.done
}

// mailStop is Shutdown's request to the loop.
type mailStop struct{}

// loop takes the queue whole and handles it, then waits: mailSpins
// scheduler turns, then parked until a Send (or a borrower's hand-back).
func (m *mailbox) loop() {
	defer close(m.done)
	var batch []actor.Envelope
	for {
		m.mu.Lock()
		for spins := 0; len(m.in) == 0 && !m.restart && !m.ended; spins++ {
			if spins < mailSpins {
				m.mu.Unlock()
				runtime.Gosched()
			} else {
				m.parked = true
				m.mu.Unlock()
				<-m.wake
			}
			m.mu.Lock()
		}
		if m.ended { // stopped on a borrowed turn
			m.mu.Unlock()
			return
		}
		restart := m.restart
		m.restart = false
		batch, m.in = m.in, batch[:0]
		m.mu.Unlock()
		if restart { // the handler panicked on a borrowed turn (recovered)
			time.Sleep(m.restartDelay)
			m.begin()
		}
		for i := 0; i < len(batch); {
			if i = m.invoke(batch, i); i < 0 {
				return
			}
		}
		clear(batch) // do not keep the messages alive until the next batch
		batch = kept(batch)
	}
}

// mailKeep is the most envelopes (24 bytes each) a mailbox's buffer is
// kept at once its batches are small again: a burst (the pool's puts at
// start, one an account) grows the buffers, and without a bound they were
// held at the burst's size for the mailbox's life.
const mailKeep = 256

// kept is the buffer of a batch just handled, for the next: emptied, or
// nil (let go) when it is larger than mailKeep and the batch used less than
// a quarter of it, so a buffer a burst grew goes after a batch or two of
// the usual size.
func kept(batch []actor.Envelope) []actor.Envelope {
	if cap(batch) > mailKeep && len(batch) < cap(batch)/4 {
		return nil
	}
	return batch[:0]
}

// invoke handles msgs from i on until a panic or a stop, and returns the
// index to go on from, or -1 once the mailbox has stopped.
func (m *mailbox) invoke(msgs []actor.Envelope, i int) (next int) {
	defer func() {
		if v := recover(); v != nil {
			next = m.recovered(v, msgs, i+1)
		}
	}()
	for ; i < len(msgs); i++ {
		env := msgs[i]
		if graceful, ok := poisonPill(env.Msg); ok {
			if graceful {
				m.drain(msgs[i+1:])
			}
			m.stop(env.Msg)
			return -1
		}
		if _, ok := env.Msg.(mailStop); ok {
			m.stop(nil)
			return -1
		}
		m.ctx.sender = env.Sender
		m.h.receive(&m.ctx, env.Msg)
	}
	return i
}

// drain handles rest and everything queued behind it, for a graceful stop:
// what was sent before the pill is handled, what is sent after is dropped.
func (m *mailbox) drain(rest []actor.Envelope) {
	m.mu.Lock()
	m.closed = true
	queued := m.in
	m.in = nil
	m.mu.Unlock()
	for _, msgs := range [][]actor.Envelope{rest, queued} {
		for _, env := range msgs {
			if _, ok := poisonPill(env.Msg); ok {
				continue
			}
			if _, ok := env.Msg.(mailStop); ok {
				continue
			}
			m.ctx.sender = env.Sender
			m.h.receive(&m.ctx, env.Msg)
		}
	}
}

// recovered handles a handler's panic v: the handler gets Stopped and is
// restarted from its producer (after restartDelay), or, past maxRestarts,
// the mailbox stops. It returns where in msgs to go on (next) or -1. A
// pooled mailbox returns -1 and restarts on a timer, which then handles
// msgs[next:] and what was sent meanwhile: a worker does not sleep. So does
// a loop mailbox whose turn is borrowed (sendInline), with its loop for the
// timer: the borrower wakes it, and it restarts the handler after
// restartDelay and goes on from msgs[next:].
func (m *mailbox) recovered(v any, msgs []actor.Envelope, next int) int {
	stack := debug.Stack() // hollywood's event stream logs the events below
	m.stopped()
	if m.restarts >= m.maxRestarts {
		m.ctx.engine.BroadcastEvent(actor.ActorMaxRestartsExceededEvent{PID: m.ctx.pid, Timestamp: time.Now()})
		m.leave(nil)
		return -1
	}
	m.restarts++
	m.ctx.engine.BroadcastEvent(actor.ActorRestartedEvent{PID: m.ctx.pid, Timestamp: time.Now(),
		Stacktrace: stack, Reason: v, Restarts: m.restarts})
	if m.pool != nil || m.borrowed {
		m.mu.Lock()
		m.in = append(slices.Clone(msgs[next:]), m.in...)
		m.restart = m.pool == nil
		m.mu.Unlock()
		if m.pool == nil {
			return -1
		}
		time.AfterFunc(m.restartDelay, func() {
			m.begin()
			m.release()
		})
		return -1
	}
	time.Sleep(m.restartDelay)
	m.begin()
	return next
}

// stopped delivers Stopped to the handler; a panic there is logged.
func (m *mailbox) stopped() {
	defer func() {
		if v := recover(); v != nil {
			m.log.Error("actor panicked handling Stopped", "pid", m.ctx.pid.ID, "panic", fmt.Sprint(v))
		}
	}()
	m.ctx.sender = nil
	m.h.receive(&m.ctx, actor.Stopped{})
}

// stop leaves the registry, delivers Stopped and hands pill to the tomb,
// whose hollywood process cancels the pill's context (what Engine.Poison
// returned) and stops. With no pill (Shutdown) there is no tomb.
func (m *mailbox) stop(pill any) {
	m.close()
	m.stopped()
	m.leave(pill)
}

// close makes Send drop and takes the mailbox out of the registry, so later
// sends go to hollywood's dead letters. It may run twice.
func (m *mailbox) close() {
	m.mu.Lock()
	m.closed = true
	m.in = nil
	m.ended = true
	m.mu.Unlock()
	m.ctx.engine.Registry.Remove(m.ctx.pid)
}

// leave closes the mailbox, broadcasts its stop and hands pill, when one
// asked for the stop, to a tomb. The handler has had its Stopped.
func (m *mailbox) leave(pill any) {
	m.close()
	m.ctx.engine.BroadcastEvent(actor.ActorStoppedEvent{PID: m.ctx.pid, Timestamp: time.Now()})
	if m.pool != nil { // a loop closes done when it returns
		m.mu.Lock()
		if !m.left {
			m.left = true
			if m.done != nil {
				close(m.done)
			}
		}
		m.mu.Unlock()
	}
	if pill == nil {
		return
	}
	// The pill's context (what Engine.Poison returned) can only be
	// cancelled by hollywood's own process: a plain one takes the pill, named
	// after the mailbox ("account-<id>" for "account/<id>"). It is spawned
	// only now, so an idle mailbox costs no hollywood process.
	tombID := strings.Replace(m.ctx.pid.ID, "/", "-", 1)
	tomb := m.ctx.engine.SpawnFunc(func(*actor.Context) {}, "mailbox-stop", actor.WithID(tombID), actor.WithInboxSize(4))
	m.ctx.engine.SendLocal(tomb, pill, nil)
}

// pillPkg is the package of hollywood's poison pill (an unexported type,
// sent by Engine.Poison and Engine.Stop). TestMailboxLifecycle fails if a
// hollywood upgrade renames it.
const pillPkg = "github.com/anthdm/hollywood/actor"

// poisonPill reports whether msg is hollywood's poison pill, and whether it
// asks for a graceful stop.
func poisonPill(msg any) (graceful, ok bool) {
	t := reflect.TypeOf(msg)
	if t == nil || t.Kind() != reflect.Struct || t.Name() != "poisonPill" || t.PkgPath() != pillPkg {
		return false, false
	}
	return reflect.ValueOf(msg).FieldByName("graceful").Bool(), true
}
