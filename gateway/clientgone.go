package gateway

import (
	"context"
	"net"
	"sync"
	"time"
)

// clientPoll is how often the client watch looks at the connections it
// watches.
const clientPoll = 500 * time.Millisecond

// clientWatch looks, every clientPoll, at the connections of the requests
// still finding their answer, and calls a request's gone once if its client
// closed the connection. One goroutine serves every request (it runs while
// something is watched and ends after a tick that finds nothing), so a
// request costs no timer of its own; a connection is first looked at on
// the second tick after its request began (clientPoll to twice that), so a
// request that ends within clientPoll costs no look. The check peeks at the
// socket without consuming a byte (peerClosed), so a pipelined next request
// stays for fasthttp to read; nginx notices a client that went away the
// same way. Connections that are not sockets (in-memory listeners) are not
// watched.
type clientWatch struct {
	mu      sync.Mutex
	set     map[*watched]struct{}
	running bool // the ticking goroutine runs
}

// canceler is what the watch calls when a request's client is gone: the
// request's context (reqCtx), whose cancel it is. An interface rather than
// a func: the method value rctx.cancel was an allocation a request.
type canceler interface{ cancel() }

// watched is one request's connection under watch.
type watched struct {
	conn net.Conn
	gone canceler
	// mu serialises the check with stop, so gone is not called once stop
	// has returned.
	mu      sync.Mutex
	stopped bool
	ticks   int // ticks seen; looked at from the second on
}

// watch calls gone.cancel once if the client's connection conn is closed
// by the peer while the watch runs; stop(w) ends the watch w (nil when conn is not
// watched). The watch is returned rather than a closure that stops it,
// which was an allocation a request (docs/benchmarks.md, issue 21).
func (cw *clientWatch) watch(conn net.Conn, gone canceler) *watched {
	if conn == nil || !canPeek(conn) {
		return nil
	}
	w := &watched{conn: conn, gone: gone}
	cw.mu.Lock()
	if cw.set == nil {
		cw.set = make(map[*watched]struct{})
	}
	cw.set[w] = struct{}{}
	if !cw.running {
		cw.running = true
		go cw.run()
	}
	cw.mu.Unlock()
	return w
}

// stop ends the watch w (nothing when w is nil); it returns once a check
// of w in progress is done, so gone is not called after it.
func (cw *clientWatch) stop(w *watched) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	cw.mu.Lock()
	delete(cw.set, w)
	cw.mu.Unlock()
}

// run ticks every clientPoll and checks the watched connections, until a
// tick finds none.
func (cw *clientWatch) run() {
	t := time.NewTicker(clientPoll)
	defer t.Stop()
	var due []*watched
	for range t.C {
		cw.mu.Lock()
		if len(cw.set) == 0 {
			cw.running = false
			cw.mu.Unlock()
			return
		}
		due = due[:0]
		for w := range cw.set {
			if w.ticks++; w.ticks >= 2 {
				due = append(due, w)
			}
		}
		cw.mu.Unlock()
		for _, w := range due {
			w.check()
		}
		clear(due)
	}
}

// check looks at w's connection once, unless its watch has stopped.
func (w *watched) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || !peerClosed(w.conn) {
		return
	}
	w.stopped = true
	w.gone.cancel()
}

// runWatched is the failover loop with the client watched: if the client
// hangs up before an answer is ready (waiting for an account, during an
// attempt, or while a stream is held), gone (the request's reqCtx) cancels
// the loop's context, so the upstream call stops, the lease goes back at
// once, and the request is recorded as 499 rather than billed and held
// until the upstream answers.
// The watch ends with the loop: a stream it returns is watched again while
// it is relayed (stream.WriteTo, streamGone).
func (s *Server) runWatched(rctx context.Context, conn net.Conn, c *call, gone canceler) outcome {
	w := s.watch.watch(conn, gone)
	defer s.watch.stop(w)
	return s.run(rctx, c)
}

// requestContext starts c's context (c.rctx, a reqCtx) and returns it: it
// ends after RequestTimeout (context.DeadlineExceeded), when its cancel is
// called, which is also what the client watch calls when the client is
// gone (context.Canceled), and at Shutdown (context.Canceled). One
// context and one timer per request, its attempts' included
// (docs/benchmarks.md, issue 21).
func (s *Server) requestContext(c *call) *reqCtx {
	c.rctx.start(&s.live, s.cfg.RequestTimeout)
	return &c.rctx
}
