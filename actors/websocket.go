package actors

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/troupe-gw/troupe/upstream"
)

// DefaultWSIdleTimeout is how long an idle upstream WebSocket stays open
// when Config.WSIdleTimeout is 0: 5 minutes.
const DefaultWSIdleTimeout = 5 * time.Minute

// ErrWSUnavailable means no upstream WebSocket could carry the response on
// this lease: the transport does not speak it, or every connection of the
// account is busy and the pool is full. The caller sends over HTTP instead.
var ErrWSUnavailable = errors.New("actors: no upstream websocket available")

// WSRequest is one Responses request to send over an upstream WebSocket.
type WSRequest struct {
	// Body is the whole request (a Responses body without "type"): sent when
	// the connection cannot continue PreviousResponseID itself.
	Body []byte
	// Continuation, when set, is the same request as previous_response_id
	// plus only the new input items: sent instead of Body on a connection
	// whose last completed response is PreviousResponseID (the upstream holds
	// that state on the connection, even with store:false).
	Continuation       []byte
	PreviousResponseID string
	// Header holds the client headers for a new connection's upgrade.
	Header http.Header
	// FirstFrameTimeout bounds the wait for the connection's first frame
	// (0: 60 s).
	FirstFrameTimeout time.Duration
}

// wsPools keeps one wspool actor per account, spawned on first use.
type wsPools struct {
	mu   sync.Mutex
	pids map[string]*actor.PID
	idle time.Duration
}

func (s *System) wsPool(accountID string) *actor.PID {
	s.ws.mu.Lock()
	defer s.ws.mu.Unlock()
	if pid := s.ws.pids[accountID]; pid != nil {
		return pid
	}
	if s.ws.pids == nil {
		s.ws.pids = make(map[string]*actor.PID)
	}
	idle := s.ws.idle
	if idle <= 0 {
		idle = DefaultWSIdleTimeout
	}
	pid := s.engine.Spawn(newWSPool(wsPoolConfig{idle: idle}), "wspool", actor.WithID(accountID))
	s.ws.pids[accountID] = pid
	return pid
}

// dropWSPool stops an account's pool and its connections (account removed).
func (s *System) dropWSPool(accountID string) {
	s.ws.mu.Lock()
	pid := s.ws.pids[accountID]
	delete(s.ws.pids, accountID)
	s.ws.mu.Unlock()
	if pid != nil {
		s.engine.Poison(pid)
	}
}

// stopWSPools stops every pool and closes its connections, waiting until
// ctx ends at most.
func (s *System) stopWSPools(ctx context.Context) {
	s.ws.mu.Lock()
	pids := make([]*actor.PID, 0, len(s.ws.pids))
	for _, pid := range s.ws.pids {
		pids = append(pids, pid)
	}
	s.ws.pids = nil
	s.ws.mu.Unlock()
	for _, pid := range pids {
		select {
		case <-s.engine.Poison(pid).Done():
		case <-ctx.Done():
			return
		}
	}
}

// ResponseWS sends req over one of the lease's account's upstream WebSocket
// connections (a wsconn actor; dialed on demand, reused while idle, at most
// the account's concurrency of them) and returns the response's frames as
// the connection delivers them, once the first one has arrived. It knows
// nothing of what the frames say: the caller reads them (WSResponse.Next),
// decides when the response ended and releases the connection with what it
// learned (WSResponse.Release).
//
// A refused upgrade is returned as the upstream answered it, as a
// *upstream.Response with its status, headers and body, and no WSResponse.
// A close 1009 before the first frame is an *upstream.Error wrapping
// upstream.ErrMessageTooBig. ErrWSUnavailable means the caller should use
// HTTP. A pooled connection that turns out to have died while idle is
// replaced once by a new one, since that is no failure of the account.
func (s *System) ResponseWS(ctx context.Context, l *Lease, req WSRequest) (*WSResponse, *upstream.Response, error) {
	dialer, ok := l.Transport.(upstream.WebSocketDialer)
	if !ok || !upstream.SupportsWebSocket(l.Transport) {
		return nil, nil, ErrWSUnavailable
	}
	limit := 1
	if v, ok := s.View(l.AccountID); ok {
		limit = v.MaxInFlight
	}
	pool := s.wsPool(l.AccountID)
	r, refused, err, stale := s.responseWS(ctx, pool, dialer, limit, req, false)
	if stale {
		r, refused, err, _ = s.responseWS(ctx, pool, dialer, limit, req, true)
	}
	return r, refused, err
}

// staleWait bounds the wait for a pooled (already open) connection to take
// a response; a fresh one may take the whole dial.
const staleWait = 5 * time.Second

// responseWS is one try of ResponseWS; stale reports that a reused
// connection failed before answering anything.
func (s *System) responseWS(ctx context.Context, pool *actor.PID, dialer upstream.WebSocketDialer, limit int, req WSRequest, fresh bool) (r *WSResponse, refused *upstream.Response, err error, stale bool) {
	reply := make(chan wspGot, 1)
	s.engine.Send(pool, wspGet{prefer: req.PreviousResponseID, dialer: dialer, header: req.Header, max: limit, fresh: fresh, reply: reply})
	var got wspGot
	select {
	case got = <-reply:
	case <-ctx.Done():
		return nil, nil, &upstream.Error{Kind: upstream.KindCanceled, Err: ctx.Err()}, false
	}
	if got.pid == nil {
		return nil, nil, ErrWSUnavailable, false
	}
	body := req.Body
	if req.Continuation != nil && req.PreviousResponseID != "" && got.last == req.PreviousResponseID {
		body = req.Continuation
	}
	r = &WSResponse{ctx: ctx}
	r.release = func(completed string) {
		// The connection hears first, so it is idle before the pool can
		// hand it to anyone else.
		s.engine.Send(got.pid, wscRelease{clean: completed != "", last: completed})
		if completed != "" {
			s.engine.Send(pool, wspIdle{pid: got.pid, last: completed})
		}
	}
	frame, err := dialer.CreateFrame(body)
	if err != nil {
		s.engine.Send(got.pid, wscRelease{clean: true, last: got.last})
		s.engine.Send(pool, wspIdle{pid: got.pid, last: got.last})
		return nil, nil, err, false
	}
	r.sink = newSink()
	s.engine.Send(got.pid, wscSend{frame: frame, sink: r.sink})
	wait := wsDialTimeout + staleWait
	if got.reused {
		wait = staleWait
	}
	rt := time.NewTimer(wait)
	defer rt.Stop()
	var ready wsReady
	select {
	case ready = <-r.sink.ready:
	case <-ctx.Done():
		r.Release("")
		return nil, nil, &upstream.Error{Kind: upstream.KindCanceled, Err: ctx.Err()}, false
	case <-rt.C:
		r.Release("")
		if got.reused {
			return nil, nil, nil, true
		}
		return nil, nil, &upstream.Error{Kind: upstream.KindTimeout, Err: errors.New("upstream websocket did not open in time")}, false
	}
	if ready.err != nil || ready.resp != nil {
		r.Release("")
		return nil, ready.resp, ready.err, ready.err != nil && got.reused && upstream.KindOf(ready.err) == upstream.KindConn
	}
	// Wait for the connection to answer: a pooled connection that died
	// while idle fails here, before anything was read.
	fw := req.FirstFrameTimeout
	if fw <= 0 {
		fw = 60 * time.Second
	}
	t := time.NewTimer(fw)
	defer t.Stop()
	f, err := r.next(t.C)
	if err != nil {
		r.Release("")
		return nil, nil, err, got.reused && upstream.KindOf(err) == upstream.KindConn
	}
	r.first = f
	r.Header = ready.header
	return r, nil, nil, false
}

// WSResponse is one response in flight on an upstream WebSocket connection:
// its text frames, in order. Its methods are for one goroutine.
type WSResponse struct {
	// Header holds the headers of the connection's upgrade response.
	Header http.Header

	ctx     context.Context
	sink    *wsSink
	release func(completed string)
	first   []byte // the frame ResponseWS waited for, not yet returned
	closed  sync.Once
}

var errWSFirstFrame = errors.New("no frame on the upstream websocket in time")

// Next returns the response's next text frame, waiting for it. Frames sent
// before the connection failed come first; then the failure is returned
// (an *upstream.Error: KindConn for a closed or broken connection, KindCanceled
// when the request's context ended). The frame is the caller's to keep.
func (r *WSResponse) Next() ([]byte, error) {
	if f := r.first; f != nil {
		r.first = nil
		return f, nil
	}
	return r.next(nil)
}

// Ready reports whether Next will return without waiting: a frame, or the
// failure that ended the response, is already queued.
func (r *WSResponse) Ready() bool {
	return r.first != nil || len(r.sink.ch) > 0 || len(r.sink.errc) > 0
}

// next is Next with a bound on the wait (timeout may be nil).
func (r *WSResponse) next(timeout <-chan time.Time) ([]byte, error) {
	select {
	case f := <-r.sink.ch:
		return f, nil
	case err := <-r.sink.errc:
		select {
		case f := <-r.sink.ch:
			r.sink.fail(err)
			return f, nil
		default:
		}
		return nil, err
	case <-r.ctx.Done():
		return nil, &upstream.Error{Kind: upstream.KindCanceled, Err: r.ctx.Err()}
	case <-timeout:
		return nil, &upstream.Error{Kind: upstream.KindTimeout, Err: errWSFirstFrame}
	}
}

// Release ends the response's use of its connection, once (later calls do
// nothing). completed is the response's id when the caller read it to a
// terminal event that completed it: the connection then goes back to its
// pool, able to continue that response. "" (the response failed, broke or
// was abandoned) closes the connection, as Codex does after a failed
// response: the upstream's state for it is unknown.
func (r *WSResponse) Release(completed string) {
	r.closed.Do(func() {
		r.sink.leave()
		r.release(completed)
	})
}
