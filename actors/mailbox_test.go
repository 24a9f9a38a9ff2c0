package actors

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/anthdm/hollywood/actor"
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
	}
}

func newProbeBox(t *testing.T, restarts int) (*actor.Engine, *mailbox, chan string) {
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
	m.maxRestarts = restarts
	e.SpawnProc(m)
	return e, m, seen
}

func expectSeen(t *testing.T, seen chan string, want ...string) {
	t.Helper()
	for _, w := range want {
		if got := <-seen; got != w {
			t.Fatalf("handled %q, want %q", got, w)
		}
	}
}

// mailboxLoops counts the goroutines running a mailbox's loop.
func mailboxLoops() int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	return bytes.Count(buf[:n], []byte("actors.(*mailbox).loop"))
}

// TestMailboxLifecycle: Initialized and Started are handled before the
// spawn returns; messages arrive in order with their sender, so a Request
// gets its reply; a graceful Poison handles everything sent before it, then
// Stopped, and its context is done once the actor has left the registry;
// the loop's goroutine and the tomb are gone.
func TestMailboxLifecycle(t *testing.T) {
	e, m, seen := newProbeBox(t, 3)
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
	<-m.done                       // the loop has returned
	if e.Registry.GetPID("mailbox-stop", "test-0") != nil {
		t.Fatal("the tomb outlived the mailbox")
	}
	if len(seen) != 0 {
		t.Fatalf("handled %q after Stopped", <-seen)
	}
}

// TestMailboxStop: Engine.Stop stops the mailbox without handling what was
// queued behind the pill, and Shutdown stops it too.
func TestMailboxStop(t *testing.T) {
	e, m, seen := newProbeBox(t, 3)
	expectSeen(t, seen, "1:initialized", "1:started")
	<-e.Stop(m.PID()).Done()
	expectSeen(t, seen, "1:stopped")
	<-m.done

	_, m, seen = newProbeBox(t, 3)
	expectSeen(t, seen, "1:initialized", "1:started")
	m.Shutdown()
	expectSeen(t, seen, "1:stopped")
}

// TestMailboxPanic: a panicking handler gets Stopped and is restarted from
// its producer, skipping the message that panicked, as hollywood does; past
// its restarts the mailbox stops and leaves the registry.
func TestMailboxPanic(t *testing.T) {
	e, m, seen := newProbeBox(t, 1)
	expectSeen(t, seen, "1:initialized", "1:started")
	e.Send(m.PID(), ping{n: 1})
	e.Send(m.PID(), boom{})
	e.Send(m.PID(), ping{n: 2})
	expectSeen(t, seen, "1:ping 1", "1:stopped", "2:initialized", "2:started", "2:ping 2")
	e.Send(m.PID(), boom{})
	expectSeen(t, seen, "2:stopped")
	<-m.done
	if e.Registry.GetPID("test", "0") != nil {
		t.Fatal("mailbox registered after its last restart")
	}
	if len(seen) != 0 {
		t.Fatalf("handled %q after Stopped", <-seen)
	}
}

// TestSystemStopsMailbox: System.Stop stops the scheduler's mailbox and
// its goroutine. (Loops of earlier tests' systems may still be exiting, so
// the count is only bounded.)
func TestSystemStopsMailbox(t *testing.T) {
	before := mailboxLoops()
	s, _ := startSystem(t, 2, 1)
	if mailboxLoops() < 1 {
		t.Fatal("the scheduler runs no mailbox")
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
