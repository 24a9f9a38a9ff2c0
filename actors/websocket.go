package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/tidwall/gjson"
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
	// FirstContentTimeout bounds the wait for the first frame after
	// response.created / in_progress (0: 60 s).
	FirstContentTimeout time.Duration
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
// the account's concurrency of them) and returns the answer as Transport.Do
// would for a stream: status 200 with the upgrade's headers and an SSE body
// (`event: <type>` and `data: <frame>` per frame, as the HTTP stream looks),
// ending at the terminal frame.
//
// It holds the frames before the first content frame (response.created,
// response.in_progress, codex.rate_limits), so a failure before content is
// an error or an error Response, never a half-read body: an error frame with
// a status becomes a Response with that status and {"error":…} body
// (upstream.WebSocketErrorResponse); a refused upgrade is returned as the
// upstream answered it; a close 1009 is an *upstream.Error wrapping
// upstream.ErrMessageTooBig. ErrWSUnavailable means the caller should use
// HTTP. The returned Body must be closed; closing it before the terminal
// frame closes the connection.
func (s *System) ResponseWS(ctx context.Context, l *Lease, req WSRequest) (*upstream.Response, error) {
	dialer, ok := l.Transport.(upstream.WebSocketDialer)
	if !ok || !upstream.SupportsWebSocket(l.Transport) {
		return nil, ErrWSUnavailable
	}
	limit := 1
	if v, ok := s.View(l.AccountID); ok {
		limit = v.MaxInFlight
	}
	pool := s.wsPool(l.AccountID)
	resp, err, stale := s.responseWS(ctx, l.AccountID, pool, dialer, limit, req, false)
	if stale {
		// A pooled connection died while idle (the upstream closed it): that
		// is no failure of the account; try once on a new connection.
		resp, err, _ = s.responseWS(ctx, l.AccountID, pool, dialer, limit, req, true)
	}
	return resp, err
}

// staleWait bounds the wait for a pooled (already open) connection to take
// a response; a fresh one may take the whole dial.
const staleWait = 5 * time.Second

// responseWS is one try of ResponseWS; stale reports that a reused
// connection failed before answering anything.
func (s *System) responseWS(ctx context.Context, account string, pool *actor.PID, dialer upstream.WebSocketDialer, limit int, req WSRequest, fresh bool) (*upstream.Response, error, bool) {
	reply := make(chan wspGot, 1)
	s.engine.Send(pool, wspGet{prefer: req.PreviousResponseID, dialer: dialer, header: req.Header, max: limit, fresh: fresh, reply: reply})
	var got wspGot
	select {
	case got = <-reply:
	case <-ctx.Done():
		return nil, &upstream.Error{Kind: upstream.KindCanceled, Err: ctx.Err()}, false
	}
	if got.pid == nil {
		return nil, ErrWSUnavailable, false
	}
	body := req.Body
	if req.Continuation != nil && req.PreviousResponseID != "" && got.last == req.PreviousResponseID {
		body = req.Continuation
	}
	b := &wsBody{ctx: ctx, last: got.last}
	b.release = func(clean bool) {
		// The connection hears first, so it is idle before the pool can
		// hand it to anyone else.
		s.engine.Send(got.pid, wscRelease{clean: clean})
		if clean {
			s.engine.Send(pool, wspIdle{pid: got.pid, last: b.last})
		}
	}
	frame, err := dialer.CreateFrame(body)
	if err != nil {
		s.engine.Send(got.pid, wscRelease{clean: true})
		s.engine.Send(pool, wspIdle{pid: got.pid, last: got.last})
		return nil, err, false
	}
	b.sink = newSink()
	s.engine.Send(got.pid, wscSend{frame: frame, sink: b.sink})
	wait := wsDialTimeout + staleWait
	if got.reused {
		wait = staleWait
	}
	rt := time.NewTimer(wait)
	defer rt.Stop()
	var ready wsReady
	select {
	case ready = <-b.sink.ready:
	case <-ctx.Done():
		b.Close()
		return nil, &upstream.Error{Kind: upstream.KindCanceled, Err: ctx.Err()}, false
	case <-rt.C:
		b.Close()
		if got.reused {
			return nil, nil, true
		}
		return nil, &upstream.Error{Kind: upstream.KindTimeout, Err: errors.New("upstream websocket did not open in time")}, false
	}
	if ready.err != nil || ready.resp != nil {
		b.Close()
		if ready.resp != nil {
			return ready.resp, nil, false
		}
		return nil, ready.err, got.reused && upstream.KindOf(ready.err) == upstream.KindConn
	}
	fw := req.FirstContentTimeout
	if fw <= 0 {
		fw = 60 * time.Second
	}
	t := time.NewTimer(fw)
	defer t.Stop()
hold:
	for {
		f, err := b.next(t.C)
		if err != nil {
			b.Close()
			if len(b.held) == 0 && got.reused && upstream.KindOf(err) == upstream.KindConn {
				return nil, nil, true
			}
			return nil, err, false
		}
		typ := gjson.GetBytes(f, "type").Str
		if typ == "error" {
			if r, ok := upstream.WebSocketErrorResponse(f, ready.header); ok {
				b.Close()
				return r, nil, false
			}
		}
		b.held = append(b.held, f)
		if typ == "codex.rate_limits" {
			if rl, ok := upstream.ParseRateLimitsEvent(f, time.Now()); ok {
				s.ReportRateLimits(account, rl, time.Now())
			}
		}
		switch typ {
		case "response.created", "response.in_progress", "codex.rate_limits", "responsesapi.websocket_timing":
			continue
		}
		break hold
	}
	h := ready.header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", "text/event-stream")
	return &upstream.Response{Status: 200, Header: h, Body: b}, nil, false
}

// wsBody is the SSE view of one response's frames.
type wsBody struct {
	ctx     context.Context
	sink    *wsSink
	release func(clean bool)
	held    [][]byte // frames read before the body was returned
	buf     []byte   // SSE bytes not yet read
	ended   bool     // the terminal frame was read
	last    string   // the connection's last completed response: this one's id once it completed
	ok      bool     // the terminal frame was a completion (the connection stays usable)
	closed  sync.Once
}

var errWSFirstContent = errors.New("no first content on the upstream websocket in time")

// next returns the next frame; timeout (may be nil) bounds the wait.
func (b *wsBody) next(timeout <-chan time.Time) ([]byte, error) {
	if b.ended {
		return nil, io.EOF
	}
	select {
	case f := <-b.sink.ch:
		b.observe(f)
		return f, nil
	case err := <-b.sink.errc:
		// Frames sent before the failure come first.
		select {
		case f := <-b.sink.ch:
			b.sink.fail(err)
			b.observe(f)
			return f, nil
		default:
		}
		return nil, err
	case <-b.ctx.Done():
		return nil, &upstream.Error{Kind: upstream.KindCanceled, Err: b.ctx.Err()}
	case <-timeout:
		return nil, &upstream.Error{Kind: upstream.KindTimeout, Err: errWSFirstContent}
	}
}

// observe notes the terminal frame: the response ended; a completed one
// becomes the connection's last response.
func (b *wsBody) observe(f []byte) {
	if id, ok, terminal := terminalFrame(f); terminal {
		b.ended, b.ok = true, ok
		if ok {
			b.last = id
		}
	}
}

// Read returns the frames as SSE events.
func (b *wsBody) Read(p []byte) (int, error) {
	for len(b.buf) == 0 {
		var f []byte
		if len(b.held) > 0 {
			f, b.held = b.held[0], b.held[1:]
		} else {
			var err error
			if f, err = b.next(nil); err != nil {
				return 0, err
			}
		}
		b.buf = AppendSSEFrame(b.buf[:0], f)
	}
	n := copy(p, b.buf)
	b.buf = b.buf[n:]
	return n, nil
}

// Close releases the connection: back to the pool after a terminal frame,
// closed otherwise.
func (b *wsBody) Close() error {
	b.closed.Do(func() {
		b.sink.leave()
		b.release(b.ended && b.ok)
	})
	return nil
}

// AppendSSEFrame appends a Responses WebSocket frame as the SSE event the
// HTTP stream carries for it: "event: <type>\ndata: <json>\n\n". A frame
// spread over several lines is compacted first, so it stays one data line.
func AppendSSEFrame(dst, frame []byte) []byte {
	if bytes.ContainsAny(frame, "\r\n") {
		var c bytes.Buffer
		if json.Compact(&c, frame) == nil {
			frame = c.Bytes()
		} else {
			frame = bytes.ReplaceAll(bytes.ReplaceAll(frame, []byte("\r"), nil), []byte("\n"), nil)
		}
	}
	if typ := gjson.GetBytes(frame, "type").Str; typ != "" && !bytes.ContainsAny([]byte(typ), "\r\n") {
		dst = append(dst, "event: "...)
		dst = append(dst, typ...)
		dst = append(dst, '\n')
	}
	dst = append(dst, "data: "...)
	dst = append(dst, frame...)
	return append(dst, "\n\n"...)
}
