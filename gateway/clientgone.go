package gateway

import (
	"context"
	"net"
	"sync"
	"time"
)

// clientPoll is how often watchClient looks at the client's connection.
const clientPoll = 500 * time.Millisecond

// watchClient calls gone once if the client's connection conn is closed by
// the peer while the watch runs, looking every clientPoll; stop ends the
// watch (it returns once a check in progress is done). A request that ends
// within clientPoll costs one timer. The check peeks at the socket without
// consuming a byte (peerClosed), so a pipelined next request stays for
// fasthttp to read; nginx notices a client that went away the same way.
// Connections that are not sockets (in-memory listeners) are not watched.
func watchClient(conn net.Conn, gone func()) (stop func()) {
	if conn == nil || !canPeek(conn) {
		return func() {}
	}
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	check := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if peerClosed(conn) {
			stopped = true
			gone()
			return
		}
		t.Reset(clientPoll)
	}
	mu.Lock()
	t = time.AfterFunc(clientPoll, check)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// runWatched is the failover loop with the client watched: if the client
// hangs up before an answer is ready (waiting for an account, during an
// attempt, or while a stream is held), gone cancels the loop's context, so
// the upstream call stops, the lease goes back at once, and the request is
// recorded as 499 rather than billed and held until the upstream answers.
// The watch ends with the loop: a stream it returns runs on under rctx and
// notices a hang-up at its next write.
func (s *Server) runWatched(rctx context.Context, conn net.Conn, c *call, gone func()) outcome {
	stop := watchClient(conn, gone)
	defer stop()
	return s.run(rctx, c)
}

// requestContext is the context of one client request: it ends after
// RequestTimeout (context.DeadlineExceeded), when cancel is called, or when
// gone reports the client gone (context.Canceled), and at Shutdown. One
// context and its timer per request: a cancel-with-cause context under it,
// only to name the client's hang-up as the cause nothing read, cost each
// request a second context, its registration in the parent and 4
// allocations (docs/benchmarks.md).
func (s *Server) requestContext() (rctx context.Context, cancel context.CancelFunc, gone func()) {
	rctx, cancel = context.WithTimeout(s.life, s.cfg.RequestTimeout)
	return rctx, cancel, cancel
}
