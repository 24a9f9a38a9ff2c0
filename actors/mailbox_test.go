package actors

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthdm/hollywood/actor"

	"github.com/troupe-gw/troupe/internal/poll"
)

// boxProbe is a mailHandler that reports every message it handles, tagged
// with its incarnation, and answers ping to the sender; it panics on boom.
type boxProbe struct {
	gen  int
	seen chan string
}

type ping struct{ n int }
type pong struct{ n int }
type boom struct{}
type deferTo struct{ n int }

// reenter makes the handler send ping n to its own mailbox inline and ping
// n+1 plainly, as an actor it runs inline would on a borrowed turn.
type reenter struct{ n int }

// hold makes the handler report the goroutine it runs on and wait for
// release.
type hold struct {
	entered chan string
	release chan struct{}
}

// poisonSelf makes the handler poison its own mailbox.
type poisonSelf struct{}

func (r *boxProbe) receive(c *mailCtx, msg any) {
	switch m := msg.(type) {
	case actor.Initialized:
		r.seen <- fmt.Sprintf("%d:initialized", r.gen)
	case actor.Started:
		r.seen <- fmt.Sprintf("%d:started", r.gen)
	case actor.Stopped:
		r.seen <- fmt.Sprintf("%d:stopped", r.gen)
	case ping:
		r.seen <- fmt.Sprintf("%d:ping %d", r.gen, m.n)
		if c.Sender() != nil {
			c.Send(c.Sender(), pong(m))
		}
	case boom:
		panic("boom")
	case deferTo:
		c.deferWake(m.n)
		r.seen <- fmt.Sprintf("%d:defer %d", r.gen, m.n)
	case reenter:
		r.seen <- fmt.Sprintf("%d:reenter %d", r.gen, m.n)
		c.box.sendInline(ping(m), nil)
		c.box.send(ping{n: m.n + 1}, nil)
	case hold:
		m.entered <- goroutineID()
		<-m.release
	case poisonSelf:
		c.Engine().Poison(c.PID())
	}
}

// newProbeBoxOn starts a boxProbe on pool's workers (nil: on a mailbox
// goroutine of its own).
func newProbeBoxOn(t *testing.T, restarts int, pool *mailPool) (*actor.Engine, *mailbox, chan string) {
	t.Helper()
	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 1024)
	gen := 0
	m := newMailbox(e, func() mailHandler { gen++; return &boxProbe{gen: gen, seen: seen} }, "test", "0",
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.restartDelay = 0
	m.maxRestarts = int32(restarts)
	if pool != nil {
		m.wake, m.pool, m.queued = nil, pool, true // as spawnPooled
	}
	e.SpawnProc(m)
	return e, m, seen
}

// eachMailbox runs f as a subtest for a mailbox with its own goroutine and
// for a pooled one (on a pool of two workers, closed after f).
func eachMailbox(t *testing.T, f func(t *testing.T, pool *mailPool)) {
	t.Run("own", func(t *testing.T) { f(t, nil) })
	t.Run("pooled", func(t *testing.T) {
		pool := newMailPool(2)
		defer pool.close()
		f(t, pool)
	})
}

func expectSeen(t *testing.T, seen chan string, want ...string) {
	t.Helper()
	for _, w := range want {
		if got := <-seen; got != w {
			t.Fatalf("handled %q, want %q", got, w)
		}
	}
}

// mailboxLoops counts the goroutines running a mailbox's loop or a pool's
// worker.
func mailboxLoops() int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	return bytes.Count(buf[:n], []byte("actors.(*mailbox).loop")) + bytes.Count(buf[:n], []byte("actors.(*mailPool).work"))
}

// TestMailboxLifecycle: Initialized and Started are handled before the
// spawn returns; messages arrive in order with their sender, so a Request
// gets its reply; a graceful Poison handles everything sent before it, then
// Stopped, and its context is done once the actor has left the registry;
// the loop's goroutine and the tomb are gone.
func TestMailboxLifecycle(t *testing.T) { eachMailbox(t, testMailboxLifecycle) }

func testMailboxLifecycle(t *testing.T, pool *mailPool) {
	e, m, seen := newProbeBoxOn(t, 3, pool)
	if len(seen) != 2 {
		t.Fatalf("%d messages handled at spawn, want Initialized and Started", len(seen))
	}
	expectSeen(t, seen, "1:initialized", "1:started")
	resp := e.Request(m.PID(), ping{n: 7}, time.Minute)
	got, err := resp.Result()
	if err != nil || got != (pong{n: 7}) {
		t.Fatalf("request: %v, %v", got, err)
	}
	expectSeen(t, seen, "1:ping 7")
	for i := range 100 {
		e.Send(m.PID(), ping{n: i})
	}
	<-e.Poison(m.PID()).Done()
	for i := range 100 {
		expectSeen(t, seen, fmt.Sprintf("1:ping %d", i))
	}
	expectSeen(t, seen, "1:stopped")
	if e.Registry.GetPID("test", "0") != nil {
		t.Fatal("stopped mailbox still registered")
	}
	e.Send(m.PID(), ping{n: 1000}) // to the dead letters, not handled
	<-m.doneChan()                 // the loop has returned
	if e.Registry.GetPID("mailbox-stop", "test-0") != nil {
		t.Fatal("the tomb outlived the mailbox")
	}
	if len(seen) != 0 {
		t.Fatalf("handled %q after Stopped", <-seen)
	}
}

// TestMailboxStop: Engine.Stop stops the mailbox without handling what was
// queued behind the pill, and Shutdown stops it too.
func TestMailboxStop(t *testing.T) { eachMailbox(t, testMailboxStop) }

func testMailboxStop(t *testing.T, pool *mailPool) {
	e, m, seen := newProbeBoxOn(t, 3, pool)
	expectSeen(t, seen, "1:initialized", "1:started")
	<-e.Stop(m.PID()).Done()
	expectSeen(t, seen, "1:stopped")
	<-m.doneChan()

	_, m, seen = newProbeBoxOn(t, 3, pool)
	expectSeen(t, seen, "1:initialized", "1:started")
	m.Shutdown()
	expectSeen(t, seen, "1:stopped")
}

// TestMailboxPanic: a panicking handler gets Stopped and is restarted from
// its producer, skipping the message that panicked, as hollywood does; past
// its restarts the mailbox stops and leaves the registry.
func TestMailboxPanic(t *testing.T) { eachMailbox(t, testMailboxPanic) }

func testMailboxPanic(t *testing.T, pool *mailPool) {
	e, m, seen := newProbeBoxOn(t, 1, pool)
	expectSeen(t, seen, "1:initialized", "1:started")
	e.Send(m.PID(), ping{n: 1})
	e.Send(m.PID(), boom{})
	e.Send(m.PID(), ping{n: 2})
	expectSeen(t, seen, "1:ping 1", "1:stopped", "2:initialized", "2:started", "2:ping 2")
	e.Send(m.PID(), boom{})
	expectSeen(t, seen, "2:stopped")
	<-m.doneChan()
	if e.Registry.GetPID("test", "0") != nil {
		t.Fatal("mailbox registered after its last restart")
	}
	if len(seen) != 0 {
		t.Fatalf("handled %q after Stopped", <-seen)
	}
}

// TestSystemStopsMailbox: System.Stop stops the scheduler's and the usage
// recorder's mailboxes and their goroutines, and the account actors' pool
// and its workers. (Loops of earlier tests' systems may still be exiting, so
// the count is only bounded.)
func TestSystemStopsMailbox(t *testing.T) {
	before := mailboxLoops()
	s, _ := startSystem(t, 2, 1)
	if mailboxLoops() < 2+runtime.GOMAXPROCS(0) {
		t.Fatal("the scheduler or the usage recorder runs no mailbox, or the accounts no pool")
	}
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s.engine.Registry.GetPID("scheduler", "0") != nil {
		t.Fatal("scheduler registered after Stop")
	}
	// The loop exits right after it hands the pill on; wait on the runtime's
	// view of it, yielding (no sleeps, no deadline: the test's own bounds it).
	for mailboxLoops() > before {
		runtime.Gosched()
	}
}

// seqProbe checks, for a pooled mailbox, that its handler is never entered
// by two goroutines at once and that each sender's messages arrive in order;
// it records the goroutines it ran on.
type seqProbe struct {
	in    atomic.Bool
	next  map[int]int // sender → next sequence number
	gids  map[string]bool
	fails *atomic.Int64
	done  *sync.WaitGroup
}

type seqMsg struct{ from, n, last int }

func (p *seqProbe) receive(_ *mailCtx, msg any) {
	m, ok := msg.(seqMsg)
	if !ok {
		return
	}
	if !p.in.CompareAndSwap(false, true) {
		p.fails.Add(1) // two workers in one actor
	}
	if p.next[m.from] != m.n {
		p.fails.Add(1)
	}
	p.next[m.from] = m.n + 1
	buf := make([]byte, 32)
	buf = buf[:runtime.Stack(buf, false)]
	p.gids[string(bytes.Fields(buf)[1])] = true
	if m.n == m.last {
		p.done.Done()
	}
	p.in.Store(false)
}

// TestMailPoolOrderAndWorkers: 500 pooled actors, each sent 200 messages by
// each of 4 concurrent senders, handle every message once, in each sender's
// order, one at a time, and all of them on the pool's 2 goroutines: no
// goroutine is started per activation.
func TestMailPoolOrderAndWorkers(t *testing.T) {
	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	pool := newMailPool(2)
	const actors, senders, msgs = 500, 4, 200
	var fails atomic.Int64
	var done sync.WaitGroup
	done.Add(actors * senders)
	probes := make([]*seqProbe, actors)
	pids := make([]*actor.PID, actors)
	for i := range actors {
		probes[i] = &seqProbe{next: map[int]int{}, gids: map[string]bool{}, fails: &fails, done: &done}
		pids[i], _ = spawnPooled(e, pool, produceFunc(func() mailHandler { return probes[i] }), "seq", fmt.Sprint(i), slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	var send sync.WaitGroup
	for s := range senders {
		send.Go(func() {
			for n := range msgs {
				for _, pid := range pids {
					e.Send(pid, seqMsg{from: s, n: n, last: msgs - 1})
				}
			}
		})
	}
	send.Wait()
	done.Wait()
	gids := map[string]bool{}
	for _, p := range probes {
		for g := range p.gids {
			gids[g] = true
		}
	}
	if fails.Load() != 0 || len(gids) > 2 {
		t.Fatalf("%d order or exclusion failures; handled on %d goroutines, want at most 2", fails.Load(), len(gids))
	}
	for _, pid := range pids {
		<-e.Poison(pid).Done()
	}
	pool.close()
}

// TestMailboxRunHere: senders that hand pooled actors some of their
// messages through runHere (handled on the sender's goroutine when the
// mailbox is idle, as the scheduler grants) and the rest through Send keep
// the pool's guarantees: every message handled once, in each sender's
// order, never by two goroutines at once; and runHere on an idle mailbox
// always takes the turn.
func TestMailboxRunHere(t *testing.T) {
	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	pool := newMailPool(2)
	const actors, senders, msgs = 200, 4, 200
	var fails, here atomic.Int64
	var done sync.WaitGroup
	done.Add(actors * senders)
	probes := make([]*seqProbe, actors)
	boxes := make([]*mailbox, actors)
	for i := range actors {
		probes[i] = &seqProbe{next: map[int]int{}, gids: map[string]bool{}, fails: &fails, done: &done}
		boxes[i] = newMailbox(e, func() mailHandler { return probes[i] }, "here", fmt.Sprint(i), slog.New(slog.NewTextHandler(io.Discard, nil)))
		boxes[i].wake, boxes[i].pool, boxes[i].queued = nil, pool, true
		e.SpawnProc(boxes[i])
	}
	var send sync.WaitGroup
	for s := range senders {
		send.Go(func() {
			for n := range msgs {
				for _, m := range boxes {
					msg := seqMsg{from: s, n: n, last: msgs - 1}
					if n%2 == 1 && m.runHere(msg, nil) {
						here.Add(1)
						continue
					}
					m.send(msg, nil)
				}
			}
		})
	}
	send.Wait()
	done.Wait()
	// Whether a send above found its mailbox idle is the machine's timing;
	// once every message is handled each mailbox goes idle, and then
	// runHere must take the turn and handle the message on this goroutine,
	// in order after the rest.
	done.Add(1)
	extra := seqMsg{from: senders, n: 0, last: 0}
	poll.Until(t, 10*time.Second, "runHere on an idle mailbox", func() bool { return boxes[0].runHere(extra, nil) })
	done.Wait()
	if p := probes[0]; p.next[senders] != 1 {
		t.Fatalf("the message runHere took was not handled: next %v", p.next)
	}
	if fails.Load() != 0 {
		t.Fatalf("%d order or exclusion failures", fails.Load())
	}
	t.Logf("%d of %d odd-numbered sends ran on the sender's goroutine", here.Load(), actors*senders*msgs/2)
	for _, m := range boxes {
		<-e.Poison(m.PID()).Done()
	}
	pool.close()
}

// TestMailboxDeferredSend: while the handler allows n deferred messages,
// sendDeferred leaves a parked loop parked with up to n messages queued;
// the next one wakes it, as any plain Send does, and everything queued is
// handled in order. With the bound back at 0 every deferred send wakes it.
func TestMailboxDeferredSend(t *testing.T) {
	_, m, seen := newProbeBoxOn(t, 0, nil)
	expectSeen(t, seen, "1:initialized", "1:started")
	parked := func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.parked
	}
	queued := func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.in)
	}

	m.Send(nil, deferTo{2}, nil)
	expectSeen(t, seen, "1:defer 2")
	poll.Until(t, 10*time.Second, "the loop parks", parked)
	m.sendDeferred(ping{1}, nil)
	m.sendDeferred(ping{2}, nil)
	if n, p := queued(), parked(); n != 2 || !p {
		t.Fatalf("after 2 deferred sends: %d queued, parked %v; want 2 queued and the loop parked", n, p)
	}
	m.sendDeferred(ping{3}, nil) // past the bound
	expectSeen(t, seen, "1:ping 1", "1:ping 2", "1:ping 3")

	poll.Until(t, 10*time.Second, "the loop parks", parked)
	m.sendDeferred(ping{4}, nil)
	if n, p := queued(), parked(); n != 1 || !p {
		t.Fatalf("after a deferred send: %d queued, parked %v; want 1 queued and the loop parked", n, p)
	}
	m.Send(nil, ping{5}, nil) // a plain send wakes the loop for both
	expectSeen(t, seen, "1:ping 4", "1:ping 5")

	m.Send(nil, deferTo{0}, nil)
	expectSeen(t, seen, "1:defer 0")
	poll.Until(t, 10*time.Second, "the loop parks", parked)
	m.sendDeferred(ping{6}, nil)
	expectSeen(t, seen, "1:ping 6")
}

// goroutineID returns the calling goroutine's id, from its stack header.
func goroutineID() string {
	buf := make([]byte, 32)
	buf = buf[:runtime.Stack(buf, false)]
	return string(bytes.Fields(buf)[1])
}

// parkedLoop starts a boxProbe on a mailbox of its own and waits until its
// loop has parked, so the next sendInline borrows its turn.
func parkedLoop(t *testing.T, restarts int) (*actor.Engine, *mailbox, chan string) {
	t.Helper()
	e, m, seen := newProbeBoxOn(t, restarts, nil)
	expectSeen(t, seen, "1:initialized", "1:started")
	waitParked(t, m)
	return e, m, seen
}

func waitParked(t *testing.T, m *mailbox) {
	t.Helper()
	poll.Until(t, 10*time.Second, "the loop parks", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.parked
	})
}

// TestMailboxBorrow: sendInline to a parked loop handles the message on the
// caller's goroutine, before it returns, and leaves the loop parked; what
// the handler sends to its own mailbox meanwhile (inline or not) is queued,
// not handled recursively, and the borrower handles it next, in order.
// Sends from elsewhere while the turn is borrowed only queue, and are
// handled by the borrower (the batch present when its own message is done)
// or by the loop it wakes; a busy loop's sendInline only queues.
func TestMailboxBorrow(t *testing.T) {
	_, m, seen := parkedLoop(t, 0)
	me := goroutineID()
	h := hold{entered: make(chan string, 1), release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		m.sendInline(h, nil)
		close(done)
	}()
	gid := <-h.entered
	if gid == me {
		t.Fatal("the borrower ran on the test's goroutine")
	}
	m.Send(nil, ping{n: 1}, nil) // the turn is borrowed: only queued
	m.sendInline(ping{n: 2}, nil)
	m.mu.Lock()
	queued, parked := len(m.in), m.parked
	m.mu.Unlock()
	if queued != 2 || parked {
		t.Fatalf("while borrowed: %d queued, parked %v; want 2 queued and parked false", queued, parked)
	}
	close(h.release)
	<-done
	if len(seen) != 2 {
		t.Fatalf("%d messages handled when the borrower returned, want the 2 queued behind it", len(seen))
	}
	expectSeen(t, seen, "1:ping 1", "1:ping 2")
	waitParked(t, m)

	m.sendInline(reenter{n: 10}, nil)
	if len(seen) != 3 {
		t.Fatalf("%d messages handled when sendInline returned, want 3", len(seen))
	}
	expectSeen(t, seen, "1:reenter 10", "1:ping 10", "1:ping 11")

	waitParked(t, m)
	h = hold{entered: make(chan string, 1), release: make(chan struct{})}
	close(h.release)
	m.sendInline(h, nil)
	if gid := <-h.entered; gid != me {
		t.Fatalf("sendInline to a parked loop ran on goroutine %s, want the caller's %s", gid, me)
	}
	m.mu.Lock()
	parked = m.parked
	m.mu.Unlock()
	if !parked {
		t.Fatal("the loop was woken for a borrow that left nothing queued")
	}
}

// TestMailboxBorrowOrder: concurrent senders that send some messages
// inline (sendInline) and the rest plainly keep the mailbox's guarantees:
// every message handled once, in each sender's order, never by two
// goroutines at once.
func TestMailboxBorrowOrder(t *testing.T) {
	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	const senders, msgs = 4, 2000
	var fails atomic.Int64
	var done sync.WaitGroup
	done.Add(senders)
	p := &seqProbe{next: map[int]int{}, gids: map[string]bool{}, fails: &fails, done: &done}
	m := newMailbox(e, func() mailHandler { return p }, "borrow", "0", slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.SpawnProc(m)
	var send sync.WaitGroup
	for s := range senders {
		send.Go(func() {
			for n := range msgs {
				msg := seqMsg{from: s, n: n, last: msgs - 1}
				if n%3 == 0 {
					m.send(msg, nil)
					continue
				}
				m.sendInline(msg, nil)
				if n%64 == 0 {
					waitParked(t, m) // let the loop park, so that borrows happen
				}
			}
		})
	}
	send.Wait()
	done.Wait()
	if fails.Load() != 0 {
		t.Fatalf("%d order or exclusion failures", fails.Load())
	}
	t.Logf("handled on %d goroutines", len(p.gids))
	<-e.Poison(m.PID()).Done()
	<-m.doneChan()
}

// TestMailboxBorrowPanic: a handler that panics on a borrowed turn is
// stopped and restarted as on the loop (Stopped, a new handler's
// Initialized and Started, the message that panicked skipped, the ones
// queued behind it handled in order), by the loop, which the borrower
// wakes; past its restarts the mailbox stops, leaves the registry and its
// loop exits.
func TestMailboxBorrowPanic(t *testing.T) {
	e, m, seen := parkedLoop(t, 1)
	h := hold{entered: make(chan string, 1), release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		m.sendInline(h, nil)
		close(done)
	}()
	<-h.entered
	m.Send(nil, boom{}, nil)
	m.Send(nil, ping{n: 1}, nil)
	close(h.release)
	<-done
	expectSeen(t, seen, "1:stopped", "2:initialized", "2:started", "2:ping 1")

	waitParked(t, m)
	m.sendInline(boom{}, nil) // the last restart used: the mailbox stops
	expectSeen(t, seen, "2:stopped")
	<-m.doneChan()
	if e.Registry.GetPID("test", "0") != nil {
		t.Fatal("mailbox registered after its last restart")
	}
	if len(seen) != 0 {
		t.Fatalf("handled %q after Stopped", <-seen)
	}
}

// TestMailboxBorrowStop: a stop queued while the turn is borrowed (a
// graceful Poison, Engine.Stop, Shutdown) stops the mailbox: what was sent
// before a graceful pill is handled, the handler gets Stopped, the mailbox
// leaves the registry, the pill's context is done and the loop exits.
func TestMailboxBorrowStop(t *testing.T) {
	t.Run("poison", func(t *testing.T) {
		e, m, seen := parkedLoop(t, 0)
		m.sendInline(poisonSelf{}, nil) // the pill is queued behind the borrower's message
		expectSeen(t, seen, "1:stopped")
		<-m.doneChan()
		if e.Registry.GetPID("test", "0") != nil {
			t.Fatal("stopped mailbox still registered")
		}
	})
	t.Run("poison-queued", func(t *testing.T) {
		e, m, seen := parkedLoop(t, 0)
		h := hold{entered: make(chan string, 1), release: make(chan struct{})}
		go m.sendInline(h, nil)
		<-h.entered
		m.Send(nil, ping{n: 1}, nil)
		ctx := e.Poison(m.PID())
		close(h.release)
		<-ctx.Done()
		expectSeen(t, seen, "1:ping 1", "1:stopped")
		<-m.doneChan()
		m.Send(nil, ping{n: 2}, nil) // stopped: dropped
		if len(seen) != 0 {
			t.Fatalf("handled %q after Stopped", <-seen)
		}
	})
	t.Run("shutdown", func(t *testing.T) {
		_, m, seen := parkedLoop(t, 0)
		h := hold{entered: make(chan string, 1), release: make(chan struct{})}
		go m.sendInline(h, nil)
		<-h.entered
		stopped := make(chan struct{})
		go func() {
			m.Shutdown()
			close(stopped)
		}()
		poll.Until(t, 10*time.Second, "Shutdown queues its stop", func() bool {
			m.mu.Lock()
			defer m.mu.Unlock()
			return len(m.in) == 1
		})
		close(h.release)
		<-stopped
		expectSeen(t, seen, "1:stopped")
	})
}

// burstProbe counts the pings it handles on handled; ping -1 first
// signals entered and waits for hold to close.
type burstProbe struct {
	handled, entered, hold chan struct{}
}

func (b *burstProbe) receive(_ *mailCtx, msg any) {
	if p, ok := msg.(ping); ok {
		if p.n < 0 {
			close(b.entered)
			<-b.hold
		}
		b.handled <- struct{}{}
	}
}

// TestMailboxShrinksAfterBurst: a burst of sends (as the pool's puts at
// start, one an account) grows a mailbox's buffers; once its batches are
// small again, the buffers it keeps are at most mailKeep envelopes, not
// the burst's size, for a mailbox on its own goroutine (whose two buffers
// take turns) and a pooled one (its queue and spare).
func TestMailboxShrinksAfterBurst(t *testing.T) {
	const burst = 10000
	eachMailbox(t, func(t *testing.T, pool *mailPool) {
		e, err := actor.NewEngine(actor.NewEngineConfig())
		if err != nil {
			t.Fatal(err)
		}
		p := &burstProbe{handled: make(chan struct{}, burst+16), entered: make(chan struct{}), hold: make(chan struct{})}
		m := newMailbox(e, func() mailHandler { return p }, "burst", "0", slog.New(slog.NewTextHandler(io.Discard, nil)))
		if pool != nil {
			m.wake, m.pool, m.queued = nil, pool, true // as spawnPooled
		}
		e.SpawnProc(m)
		defer e.Poison(m.PID())
		caps := func() (in, spare int) {
			m.mu.Lock()
			defer m.mu.Unlock()
			return cap(m.in), cap(m.spare)
		}
		m.Send(nil, ping{n: -1}, nil)
		<-p.entered // the handler holds its turn: the burst queues behind it
		for i := range burst {
			m.Send(nil, ping{n: i}, nil)
		}
		in, _ := caps()
		close(p.hold)
		if in < burst {
			t.Fatalf("queue of %d after a burst of %d: the burst did not queue", in, burst)
		}
		for range burst + 1 {
			<-p.handled
		}
		for round := range 4 {
			m.Send(nil, ping{n: round}, nil)
			<-p.handled
			if in, spare := caps(); round >= 2 && (in > mailKeep || spare > mailKeep) {
				t.Errorf("after %d small batches the mailbox keeps %d + %d envelopes, want at most %d each", round+1, in, spare, mailKeep)
			}
		}
	})
}

// TestKept: a buffer is let go when it is larger than mailKeep and the
// batch used less than a quarter of it, else kept, emptied.
func TestKept(t *testing.T) {
	for _, tc := range []struct {
		len, cap int
		kept     bool
	}{{0, 0, true}, {1, mailKeep, true}, {1, mailKeep + 1, false}, {(4*mailKeep)/4 - 1, 4 * mailKeep, false}, {mailKeep, 4 * mailKeep, true}, {0, 1 << 14, false}} {
		got := kept(make([]actor.Envelope, tc.len, tc.cap))
		if (got != nil) != tc.kept || len(got) != 0 || (got != nil && cap(got) != tc.cap) {
			t.Errorf("kept(len %d, cap %d): len %d cap %d nil %v; want kept %v", tc.len, tc.cap, len(got), cap(got), got == nil, tc.kept)
		}
	}
}
