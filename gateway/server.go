// Package gateway is Troupe's fasthttp front, the hot path: the /v1
// handlers, API-key auth, limits, routing, failover and the relay,
// client-protocol errors, /healthz, /readyz and /metrics. It asks actors for
// leases and runs the upstream call itself, so no I/O ever blocks an actor.
// Other paths are served by a Mount (the admin API, package admin), which
// gets the front's key auth and error shapes through mount.go; the gateway
// imports no storage backend.
package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/billing"
	"github.com/troupe-gw/troupe/routing"
	"github.com/troupe-gw/troupe/stats"
	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// Config configures the front. Zero values take the documented defaults.
type Config struct {
	MaxBodySize    int               // request body limit in bytes; default 16 MiB
	MaxAttempts    int               // upstream attempts per request (1 + failovers); default 3
	MaxWait        time.Duration     // how long a request may wait for a free account; default 10 s
	RequestTimeout time.Duration     // whole-request budget, streaming included; default 10 min
	ReadTimeout    time.Duration     // client request body read timeout, from the end of its head; default 60 s
	IdleTimeout    time.Duration     // keep-alive idle timeout; default 120 s
	Aliases        map[string]string // client model name → upstream model name
	KeyCacheTTL    time.Duration     // API-key cache lifetime; default 30 s

	// HeaderTimeout is how long a new connection may take to deliver its
	// first byte, and then its first request head from that byte (a
	// keep-alive one its next head, from its first byte); a connection
	// that sends nothing in time is closed with 408. Default
	// DefaultHeaderTimeout (10 s).
	HeaderTimeout time.Duration
	// MaxConns caps the client connections open at once; one past it is
	// answered 503 and closed. 0: automatic, half of the process's file
	// descriptor limit less 128 (at least 64); negative: no cap.
	MaxConns int
	// MaxConnsPerIP caps the connections open from one client address; one
	// past it is answered 429 and closed. 0: automatic, a quarter of
	// MaxConns (at least 16); negative: no cap (behind a load balancer,
	// every client shares its address).
	MaxConnsPerIP int

	// FirstTokenTimeout is how long an attempt may take to produce its first
	// content event before it is abandoned for another account; default 60 s.
	FirstTokenTimeout time.Duration
	// NonStreamTimeout bounds one non-stream attempt, head and body: an
	// upstream that has not answered by then is abandoned for another
	// account. Default 5 min.
	NonStreamTimeout time.Duration
	// HoldBufferCap bounds the bytes held before the first content event; a
	// stream that exceeds it commits anyway. Default 1 MiB.
	HoldBufferCap int
	// HeartbeatInterval is how long a stream may stay silent before an SSE
	// comment keeps the connection alive; a hold longer than this commits the
	// response head. Default 15 s.
	HeartbeatInterval time.Duration
	// FailoverBudget bounds the time spent on failover attempts after the
	// first attempt (which is never cut short); default 60 s.
	FailoverBudget time.Duration

	// The Responses WebSocket and affinity (docs/websocket.md, docs/affinity.md).
	WebSocket WSConfig
	// SessionAffinityTTL is how long a client session (session headers,
	// prompt_cache_key) keeps preferring the account that last served it;
	// default 1 h.
	SessionAffinityTTL time.Duration
}

func (c *Config) defaults() {
	c.WebSocket.defaults()
	if c.SessionAffinityTTL <= 0 {
		c.SessionAffinityTTL = DefaultSessionAffinityTTL
	}
	if c.MaxBodySize <= 0 {
		c.MaxBodySize = 16 << 20
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 3
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 10 * time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Minute
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 60 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 120 * time.Second
	}
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = DefaultHeaderTimeout
	}
	if c.MaxConns == 0 {
		c.MaxConns = autoMaxConns(fdLimit())
	}
	if c.MaxConnsPerIP == 0 {
		c.MaxConnsPerIP = autoMaxConnsPerIP(c.MaxConns)
	}
	if c.KeyCacheTTL <= 0 {
		c.KeyCacheTTL = 30 * time.Second
	}
	if c.FirstTokenTimeout <= 0 {
		c.FirstTokenTimeout = 60 * time.Second
	}
	if c.NonStreamTimeout <= 0 {
		c.NonStreamTimeout = 5 * time.Minute
	}
	if c.HoldBufferCap <= 0 {
		c.HoldBufferCap = 1 << 20
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 15 * time.Second
	}
	if c.FailoverBudget <= 0 {
		c.FailoverBudget = 60 * time.Second
	}
}

// Server is the HTTP front. Create it with New; it is safe for concurrent use.
type Server struct {
	cfg Config
	// life is the parent of every Responses WebSocket session's context;
	// live holds the HTTP requests' contexts (reqCtx). Shutdown cancels
	// both (life with cause errShuttingDown) when its grace ends with
	// requests still running, and serving counts those requests
	// (proxyWith to finish).
	life    context.Context
	endLife context.CancelCauseFunc
	live    liveSet
	watch   clientWatch  // the client-gone watch of requests finding their answer (clientgone.go)
	loops   *loopWorkers // the goroutines streamed requests' failover loops run on (loopworkers.go)
	serving atomic.Int64
	// unsized maps the header of a request whose body has no length
	// (chunked) to whether its client speaks Anthropic's protocol, decided
	// when the head arrives: fasthttp resets the request when such a body
	// runs over the limit, and the 413 must still be in the client's shape.
	// Keys are the pooled RequestCtx's headers, so the map stays small.
	unsized        sync.Map // *fasthttp.RequestHeader → bool
	sys            *actors.System
	store          storage.Store
	cache          storage.Cache // counters for per-key limits; nil disables them
	keys           *keyCache
	hints          *keyHints // headerReceived's key lookups for the handlers (auth.go)
	metrics        *Metrics
	log            *slog.Logger
	srv            *fasthttp.Server
	metricsHandler fasthttp.RequestHandler
	ready          atomic.Bool
	classes        classWindow      // attempt outcomes by class, per minute (ops view)
	stats          *stats.Store     // per-account and per-provider attempt statistics (admin API)
	failovers      failoverCounts   // requests by failovers needed (ops view)
	routing        *routing.Runtime // the routing policy and canary (route.go); nil: no route()
	catalog        ModelCatalog     // upstream models lists for /v1/models (catalog.go); nil: none
	mount          Mount            // the paths served beside /v1: the admin API and console (mount.go); nil: none
	billing        *billing.Gate    // users' requests: admission, price, charge (billing.go); nil: users' keys refused
	now            func() time.Time
	ws             wsHub                    // downstream Responses WebSocket connections (gateway/ws.go)
	health         []storage.HealthReporter // dependencies /readyz reports (ready.go)
	logs           logEvents                // rate-limited log lines (logs.go)
	tracing        Tracing                  // OpenTelemetry spans (tracing.go); zero: off
}

// New builds a Server over a running actor system, a store and a cache (for
// per-key limit counters; nil turns per-key limits off). metrics may be nil
// (a fresh set is created); log may be nil (slog.Default()).
func New(cfg Config, sys *actors.System, store storage.Store, cache storage.Cache, metrics *Metrics, log *slog.Logger) *Server {
	cfg.defaults()
	if log == nil {
		log = slog.Default()
	}
	if metrics == nil {
		metrics = NewMetrics(sys.Views)
	}
	s := &Server{cfg: cfg, sys: sys, store: store, cache: cache, metrics: metrics, log: log, now: time.Now, logs: newLogEvents(), loops: newLoopWorkers(loopWorkersIdle)}
	as, _ := store.(storage.AttemptStats) // the application gives its backend (Stats().UseStorage) when store wraps it
	s.stats = stats.New(as)
	s.life, s.endLife = context.WithCancelCause(context.Background())
	s.keys = &keyCache{store: store, positiveTTL: cfg.KeyCacheTTL, negativeTTL: 5 * time.Second, now: time.Now, digests: newKeyDigests()}
	s.hints = newKeyHints()
	s.metricsHandler = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	s.srv = &fasthttp.Server{
		Handler:                       s.handle,
		ErrorHandler:                  s.handleTransportError,
		HeaderReceived:                s.headerReceived,
		Name:                          "troupe",
		NoDefaultServerHeader:         true,
		NoDefaultDate:                 false,
		MaxRequestBodySize:            cfg.MaxBodySize,
		ReadTimeout:                   cfg.HeaderTimeout, // the first byte and the head; headerReceived gives the body cfg.ReadTimeout
		IdleTimeout:                   cfg.IdleTimeout,
		ReadBufferSize:                16 << 10,
		DisablePreParseMultipartForm:  true,
		DisableHeaderNamesNormalizing: false,
		Logger:                        fasthttpLogger{log},
		// A keep-alive connection waiting for its next request holds no
		// buffers: its 16 KiB read and 4 KiB write buffers and its request
		// context go back to fasthttp's pools between requests (after a
		// 3,000 req/s burst ~2,500 idle connections held 60 MB of them), at
		// the cost of one more read system call per request, as its first
		// byte is read alone (docs/benchmarks.md, issue 21).
		ReduceMemoryUsage: true,
	}
	return s
}

// Stats returns the front's per-account and per-provider statistics of
// upstream attempts (package stats), fed from every lease it releases.
func (s *Server) Stats() *stats.Store { return s.stats }

// InvalidateKeys drops cached API-key lookups, so a created, changed or
// removed key takes effect at once.
func (s *Server) InvalidateKeys() { s.keys.invalidate() }

// Serve serves on ln until Shutdown. It marks the server ready. Accept
// errors that pass (out of file descriptors) are retried, and connections
// past Config.MaxConns or MaxConnsPerIP refused (gateway/conns.go).
func (s *Server) Serve(ln net.Listener) error {
	s.ready.Store(true)
	err := s.srv.Serve(newConnListener(ln, s.cfg.MaxConns, s.cfg.MaxConnsPerIP, s.metrics, s.log))
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting, waits for open requests (streams included) until
// ctx ends, then closes the rest. Responses WebSocket connections finish the
// response in flight and get close 1001 (going away); at ctx's end the rest
// are closed with it.
func (s *Server) Shutdown(ctx context.Context) error {
	s.ready.Store(false)
	wsDone := make(chan struct{})
	go func() { s.ws.shutdown(ctx); close(wsDone) }() // WebSocket connections are hijacked: fasthttp does not wait for them
	err := s.srv.ShutdownWithContext(ctx)
	<-wsDone
	if n := s.serving.Load(); err != nil && n > 0 {
		// The grace is over: cancel what still runs, so each request ends
		// with an error in its protocol, returns its lease and leaves its
		// record, before the caller stops the actors and storage.
		s.log.Warn("shutdown grace over: cancelling the requests still running", "requests", n)
		s.endLife(errShuttingDown)
		s.live.end()
		deadline := time.Now().Add(shutdownDrain)
		for s.serving.Load() > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := s.serving.Load(); n > 0 {
			s.log.Error("requests still running after being cancelled at shutdown", "requests", n)
		}
	}
	s.loops.close()
	return err
}

// shutdownDrain bounds how long Shutdown waits, after its grace, for the
// requests it cancelled to end.
const shutdownDrain = 5 * time.Second

// errShuttingDown is the cause of the WebSocket sessions' contexts
// cancelled by Shutdown.
var errShuttingDown = errors.New("gateway: shutting down")

// Handler returns the request handler (for tests that serve it themselves).
func (s *Server) Handler() fasthttp.RequestHandler { return s.handle }

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	defer func() {
		// fasthttp does not recover handler panics; a bug must cost one
		// request, never the process.
		if r := recover(); r != nil {
			s.log.Error("handler panic", "path", string(ctx.Path()), "panic", r, "stack", string(debug.Stack()))
			writeError(ctx, &APIError{Status: 500, Type: "server_error", Message: "The server had an error while processing your request."})
		}
	}()
	path := ctx.Path()
	switch string(path) {
	case "/v1/chat/completions", "/chat/completions":
		s.onlyPost(ctx, s.chat)
	case "/v1/responses", "/responses":
		switch {
		case isWebSocketUpgrade(ctx):
			s.responsesWS(ctx) // gateway/ws.go
		case ctx.IsPost():
			s.responses(ctx)
		default:
			responsesMethod(ctx)
		}
	case "/v1/responses/compact", "/responses/compact":
		s.onlyPost(ctx, s.compactResponses)
	case "/v1/messages", "/messages":
		s.onlyPost(ctx, s.messages)
	case "/v1/messages/count_tokens", "/messages/count_tokens":
		s.onlyPost(ctx, s.countTokens)
	case "/v1/models", "/models":
		if s.onlyGet(ctx) {
			s.models(ctx)
		}
	case "/backend-api/wham/usage", "/wham/usage", "/api/codex/usage":
		if s.onlyGet(ctx) {
			s.codexUsage(ctx) // gateway/codexusage.go
		}
	case "/healthz":
		if s.onlyGet(ctx) {
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"status":"ok"}`)
		}
	case "/readyz":
		if s.onlyGet(ctx) {
			s.readyz(ctx)
		}
	case "/metrics":
		if s.onlyGet(ctx) {
			s.metricsHandler(ctx)
		}
	default:
		if s.mount != nil && s.mount.Owns(path) {
			s.mount.Serve(ctx)
			return
		}
		if id, ok := modelPath(path); ok { // GET /v1/models/{id} (models.go)
			if s.onlyGet(ctx) {
				s.model(ctx, id)
			}
			return
		}
		writeError(ctx, errNotFound(string(path)))
		s.logUnrouted(ctx)
	}
}

func (s *Server) onlyPost(ctx *fasthttp.RequestCtx, h fasthttp.RequestHandler) {
	if !ctx.IsPost() {
		writeError(ctx, errMethod(string(ctx.Method()), string(ctx.Path())))
		ctx.Response.Header.Set("Allow", "POST")
		s.logUnrouted(ctx)
		return
	}
	h(ctx)
}

// responsesMethod answers a /v1/responses request that is neither a POST
// nor a WebSocket upgrade: a GET without the upgrade 426 Upgrade Required,
// naming the upgrade it takes (RFC 9110 §15.5.22), any other method 405
// with Allow: GET, POST.
func responsesMethod(ctx *fasthttp.RequestCtx) {
	if ctx.IsGet() {
		writeError(ctx, &APIError{Status: 426, Type: "invalid_request_error", Code: "upgrade_required",
			Message: "GET " + clip(string(ctx.Path())) + " is the Responses WebSocket: send it with Connection: Upgrade and Upgrade: websocket, or POST the request."})
		ctx.Response.Header.Set("Upgrade", "websocket")
		ctx.Response.Header.Set("Connection", "Upgrade")
		return
	}
	writeError(ctx, errMethod(string(ctx.Method()), string(ctx.Path())))
	ctx.Response.Header.Set("Allow", "GET, POST")
}

// onlyGet answers 405 (with Allow) unless the method is GET or HEAD.
func (s *Server) onlyGet(ctx *fasthttp.RequestCtx) bool {
	if ctx.IsGet() || ctx.IsHead() {
		return true
	}
	writeError(ctx, errMethod(string(ctx.Method()), string(ctx.Path())))
	ctx.Response.Header.Set("Allow", "GET, HEAD")
	s.logUnrouted(ctx)
	return false
}

// UnauthenticatedBodyLimit caps, in bytes, the body fasthttp reads for a
// request without a valid API key (unless the mount's FullBody lets it
// through), so anonymous clients cannot make the server buffer 16 MiB
// bodies; the request is refused with 401 either way.
const UnauthenticatedBodyLimit = 64 << 10

// headerReceived runs once a request's head is read, before its body: a
// request without a valid key gets a small body limit, and every body
// Config.ReadTimeout (the head had Config.HeaderTimeout). The key's lookup
// is handed to the request's handler (keyHints), which need not hash the
// secret again.
func (s *Server) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if h.ContentLength() < 0 && !h.IsGet() {
		s.unsized.Store(h, anthropicHeader(h))
	}
	if ck, err := s.lookupHeader(h); err != nil || (ck != nil && ck.found && !ck.key.Disabled) {
		return fasthttp.RequestConfig{ReadTimeout: s.cfg.ReadTimeout} // a storage error is decided by the handler
	}
	if s.mount != nil && s.mount.FullBody(h) {
		return fasthttp.RequestConfig{ReadTimeout: s.cfg.ReadTimeout} // e.g. a logged-in admin (account imports are large)
	}
	return fasthttp.RequestConfig{MaxRequestBodySize: UnauthenticatedBodyLimit, ReadTimeout: s.cfg.ReadTimeout}
}

// lookupHeader looks up the key the head h carries and files the lookup
// for the request's handler; nil when h carries no key (or none that can
// be valid).
func (s *Server) lookupHeader(h *fasthttp.RequestHeader) (*cachedKey, error) {
	secret := headerSecret(h)
	if len(secret) == 0 || !validSecret(secret) {
		s.hints.put(h, nil, nil) // nothing to hand over: clear a stale entry
		return nil, nil
	}
	hash, t := s.keys.secretHash(secret)
	ck := s.keys.cached(hash)
	if ck == nil { // a context (and its timer) only when the store is asked
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var err error
		ck, err = s.keys.lookup(ctx, hash)
		cancel()
		if err != nil {
			s.hints.put(h, nil, nil)
			return nil, err
		}
	}
	s.keys.remember(ck, t, hash)
	s.hints.put(h, secret, ck)
	return ck, nil
}

// handleTransportError answers requests fasthttp could not read (too large,
// malformed, timeouts): the mount those of its paths, the front the rest
// (answerUnread). Every such answer names a request id (X-Request-Id, and
// request_id in Anthropic's shape).
func (s *Server) handleTransportError(ctx *fasthttp.RequestCtx, err error) {
	ctx.Response.Header.Set("X-Request-Id", newRequestID())
	if s.mount != nil && s.mount.Owns(ctx.Path()) {
		s.mount.Unread(ctx, err, s.answerUnread)
		return
	}
	s.answerUnread(ctx, err)
}

// answerUnread is the front's answer to a request fasthttp could not read,
// in the client's error shape (OpenAI's when it cannot be known).
func (s *Server) answerUnread(ctx *fasthttp.RequestCtx, err error) {
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge) && len(ctx.Request.Header.Host()) == 0:
		// fasthttp resets the request when a chunked (or unsized) body runs
		// over the limit, so neither the key nor the path is known here; the
		// old answer, "You didn't provide an API key", was false for a client
		// that sent one. headerReceived noted the client's protocol.
		anthropic, _ := s.unsized.LoadAndDelete(&ctx.Request.Header)
		writeErrorShape(ctx, &APIError{Status: 413, Type: "invalid_request_error", Code: "request_too_large",
			Message: "Request body too large: the limit is " + strconv.Itoa(s.cfg.MaxBodySize) + " bytes (" +
				strconv.Itoa(UnauthenticatedBodyLimit) + " without a valid API key)."}, anthropic == true)
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		if _, aerr := s.authenticate(ctx); aerr != nil {
			writeError(ctx, aerr) // an unauthenticated body hit the small limit
			return
		}
		writeError(ctx, errTooLarge(s.cfg.MaxBodySize))
	default:
		var small *fasthttp.ErrSmallBuffer
		if errors.As(err, &small) || errors.Is(err, fasthttp.ErrSmallReadBuffer) {
			// The head did not fit the read buffer: fasthttp has parsed
			// nothing, but the connection kept the start of the request
			// line, whose path says the client's protocol.
			writeErrorShape(ctx, &APIError{Status: 431, Type: "invalid_request_error", Code: "request_header_fields_too_large",
				Message: "The request's header fields are too large."}, unreadAnthropic(ctx))
			return
		}
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			if len(ctx.Request.Header.Host()) == 0 {
				// No head within HeaderTimeout: an idle or slow connection
				// holding a descriptor.
				s.metrics.connsTimedOut.Inc()
			}
			writeErrorShape(ctx, &APIError{Status: 408, Type: "invalid_request_error", Code: "request_timeout", Message: "The request was not received in time."}, unreadAnthropic(ctx))
			return
		}
		writeErrorShape(ctx, &APIError{Status: 400, Type: "invalid_request_error", Code: "bad_request", Message: "The HTTP request could not be parsed."}, unreadAnthropic(ctx))
	}
}

// unreadAnthropic reports whether the client of a request fasthttp could
// not read speaks Anthropic's protocol: by its head (anthropicClient) when
// fasthttp kept it, else by the path of the request line the connection
// kept (guardedConn.headPath). fasthttp resets the request when its body
// cannot be read (a truncated body, a malformed chunk), so a /v1/messages
// client got OpenAI's error shape.
func unreadAnthropic(ctx *fasthttp.RequestCtx) bool {
	if len(ctx.Request.Header.Host()) > 0 {
		return anthropicClient(ctx)
	}
	gc, ok := ctx.Conn().(*guardedConn)
	return ok && anthropicPath(gc.headPath())
}

type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug("fasthttp", "msg", format, "args", args)
	}
}
