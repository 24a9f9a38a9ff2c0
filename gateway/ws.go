package gateway

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
)

// WSConfig configures the Responses WebSocket: GET /v1/responses upgraded,
// response.create frames in, the Responses stream events out as text frames
// (https://developers.openai.com/api/docs/guides/websocket-mode). Zero values
// take the defaults given.
type WSConfig struct {
	// MaxConnections bounds open client WebSocket connections across the
	// instance; default 10,000. Past it an upgrade gets 429.
	MaxConnections int
	// MaxConnectionsPerKey bounds open connections per API key; default 64.
	MaxConnectionsPerKey int
	// MaxMessage bounds one client frame in bytes; a larger one is closed
	// with 1009 (message too big). Default: MaxBodySize (16 MiB).
	MaxMessage int
	// Upstream says when a Responses stream goes to its account over the
	// upstream WebSocket: UpstreamWSAuto (default), UpstreamWSAlways or
	// UpstreamWSNever.
	Upstream string
	// IdleTimeout closes a client connection that has sent nothing (no
	// frame, no ping) for this long while no response was in flight, with
	// 1001 (going away); default 15 min.
	IdleTimeout time.Duration
	// WriteTimeout bounds one frame written to a client, pongs included: a
	// client that does not read for this long (one that floods pings and
	// never reads their pongs) is closed with 1008 (policy violation);
	// default 30 s.
	WriteTimeout time.Duration
	// MaxTranscriptBytes bounds the bytes the transcripts of all client
	// connections of the instance hold together (each also holds at most
	// 64 MiB and 8 responses); past it a connection drops its oldest
	// responses, and a response that still does not fit is not kept.
	// Default DefaultWSMaxTranscriptBytes (1 GiB).
	MaxTranscriptBytes int64
}

// Client WebSocket defaults (WSConfig).
const (
	DefaultWSIdleTimeout  = 15 * time.Minute
	DefaultWSWriteTimeout = 30 * time.Second
	// DefaultWSMaxTranscriptBytes is WSConfig.MaxTranscriptBytes's
	// default, in bytes: 16 connections' worth of the per-connection bound.
	DefaultWSMaxTranscriptBytes = 1 << 30
)

func (c *WSConfig) defaults() {
	if c.MaxConnections <= 0 {
		c.MaxConnections = 10000
	}
	if c.MaxConnectionsPerKey <= 0 {
		c.MaxConnectionsPerKey = 64
	}
	if c.Upstream == "" {
		c.Upstream = UpstreamWSAuto
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultWSIdleTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWSWriteTimeout
	}
	if c.MaxTranscriptBytes <= 0 {
		c.MaxTranscriptBytes = DefaultWSMaxTranscriptBytes
	}
}

// isWebSocketUpgrade reports whether ctx asks for a WebSocket upgrade.
func isWebSocketUpgrade(ctx *fasthttp.RequestCtx) bool {
	return ctx.IsGet() && websocket.FastHTTPIsWebSocketUpgrade(ctx)
}

// wsHub counts and tracks the open client connections: the limits, and
// shutdown's close 1001.
type wsHub struct {
	mu       sync.Mutex
	total    int
	perKey   map[string]int
	sessions map[*wsSession]struct{}
	closing  chan struct{} // closed when shutdown starts
	closed   bool
	wg       sync.WaitGroup
	// transcripts is the bytes held by every connection's transcript,
	// bounded by WSConfig.MaxTranscriptBytes (gateway/transcript.go).
	transcripts transcriptBudget
}

// admit reserves a connection slot for key; it returns the refusal reason,
// or "" and the release function.
func (h *wsHub) admit(key string, max, maxPerKey int) (string, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return "shutdown", nil
	case h.total >= max:
		return "global_limit", nil
	case h.perKey[key] >= maxPerKey:
		return "key_limit", nil
	}
	if h.perKey == nil {
		h.perKey = make(map[string]int)
		h.sessions = make(map[*wsSession]struct{})
	}
	h.total++
	h.perKey[key]++
	var once sync.Once
	return "", func() {
		once.Do(func() {
			h.mu.Lock()
			h.total--
			if h.perKey[key]--; h.perKey[key] <= 0 {
				delete(h.perKey, key)
			}
			h.mu.Unlock()
		})
	}
}

// budget returns the transcripts' budget, bounded by max (the
// configuration's, set on every call so a changed one applies).
func (h *wsHub) budget(max int64) *transcriptBudget {
	h.transcripts.max.Store(max)
	return &h.transcripts
}

// closingCh returns the channel closed when shutdown starts.
func (h *wsHub) closingCh() chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing == nil {
		h.closing = make(chan struct{})
	}
	return h.closing
}

// add registers a running session; false when shutdown already began.
func (h *wsHub) add(ss *wsSession) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	if h.sessions == nil {
		h.sessions = make(map[*wsSession]struct{})
	}
	h.sessions[ss] = struct{}{}
	h.wg.Add(1)
	return true
}

func (h *wsHub) remove(ss *wsSession) {
	h.mu.Lock()
	_, ok := h.sessions[ss]
	delete(h.sessions, ss)
	h.mu.Unlock()
	if ok {
		h.wg.Done()
	}
}

// shutdown asks every session to finish its response in flight and close
// with 1001; those still open when ctx ends are cut off.
func (h *wsHub) shutdown(ctx context.Context) {
	ch := h.closingCh()
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(ch)
	}
	h.mu.Unlock()
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	h.mu.Lock()
	for ss := range h.sessions {
		ss.abort()
	}
	h.mu.Unlock()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
}

// responsesWS upgrades GET /v1/responses after authenticating it: a bad key
// gets 401 in OpenAI's shape and no upgrade, like every failure before the
// upgrade (ordinary HTTP errors, as the websocket-mode guide says); too many
// open connections get 429.
func (s *Server) responsesWS(ctx *fasthttp.RequestCtx) {
	c := &call{id: newRequestID(), key: &noKey}
	ctx.Response.Header.Set("X-Request-Id", c.id)
	key, aerr := s.authenticate(ctx)
	if aerr != nil {
		s.metrics.wsRefused.WithLabelValues("auth").Inc()
		writeError(ctx, aerr)
		return
	}
	reason, release := s.ws.admit(key.ID, s.cfg.WebSocket.MaxConnections, s.cfg.WebSocket.MaxConnectionsPerKey)
	if reason != "" {
		s.metrics.wsRefused.WithLabelValues(reason).Inc()
		if reason == "shutdown" {
			writeError(ctx, &APIError{Status: 503, Type: "server_error", Code: "server_shutting_down", RetryAfter: time.Second,
				Message: "The server is shutting down. Please reconnect."})
			return
		}
		limit := s.cfg.WebSocket.MaxConnections
		if reason == "key_limit" {
			limit = s.cfg.WebSocket.MaxConnectionsPerKey
		}
		writeError(ctx, &APIError{Status: 429, Type: "requests", Code: "websocket_connection_limit_reached", RetryAfter: time.Second,
			Message: "Too many open WebSocket connections (limit " + strconv.Itoa(limit) + "). Close one before opening another."})
		return
	}
	ss := &wsSession{
		s: s, key: key, header: passHeaders(ctx), clientIP: ctx.RemoteIP().String(),
		session: sessionKey(ctx, nil), closing: s.ws.closingCh(),
		tr: transcript{budget: s.ws.budget(s.cfg.WebSocket.MaxTranscriptBytes)},
	}
	if s.tracing.Tracer != nil {
		ss.traceParent = traceParentOf(&ctx.Request.Header)
	}
	up := websocket.FastHTTPUpgrader{
		ReadBufferSize:  16 << 10,
		WriteBufferSize: 16 << 10,
		// API clients send no Origin; a browser page must not ride a user's
		// key (the key is a bearer token, so this only matters for cookies,
		// which the gateway does not use — same-origin is the safe default).
		CheckOrigin: nil,
		Error: func(ctx *fasthttp.RequestCtx, status int, reason error) {
			writeError(ctx, &APIError{Status: status, Type: "invalid_request_error", Code: "websocket_handshake_failed", Message: reason.Error()})
		},
	}
	err := up.Upgrade(ctx, func(conn *websocket.Conn) {
		defer release()
		ss.conn = conn
		ss.run()
	})
	if err != nil {
		release()
	}
}
