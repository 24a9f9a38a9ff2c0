package gateway

import (
	"bytes"
	"context"
	"log/slog"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/internal/ratelog"
	"github.com/troupe-gw/troupe/upstream"
)

// The front's log lines about failures (docs/logging.md). Each kind is
// rate-limited (internal/ratelog): a failure repeated thousands of times a
// second leaves logBurst lines per logWindow, the next one saying how many
// were suppressed. A line whose level the logger does not take costs a
// level check and allocates nothing: its attributes are built only after
// ratelog.Event.Take said yes.

// logEvents holds the budget of each kind of line.
type logEvents struct {
	attempt  *ratelog.Event // an upstream attempt failed (and the request failed over, or not)
	failed   *ratelog.Event // a request ended with an error status
	wsClosed *ratelog.Event // a client WebSocket closed for idling or not reading
	unrouted *ratelog.Event // a request for a path no route serves, or with a method it does not take
	billing  *ratelog.Event // a user's request refused because storage could not tell its balance
	route    *ratelog.Event // the policy's route() failed on a request
}

// logBurst lines per logWindow for each kind of line.
const (
	logBurst  = 20
	logWindow = 10 * time.Second
)

func newLogEvents() logEvents {
	return logEvents{
		attempt:  ratelog.New(logBurst, logWindow),
		failed:   ratelog.New(logBurst, logWindow),
		wsClosed: ratelog.New(logBurst, logWindow),
		unrouted: ratelog.New(logBurst, logWindow),
		billing:  ratelog.New(logBurst, logWindow),
		route:    ratelog.New(logBurst, logWindow),
	}
}

// logAttempt logs a failed upstream attempt of c on lease: WARN when it
// was the account's fault (failover says whether another account is tried
// next), INFO when the request itself was refused, DEBUG when the client
// went away.
func (s *Server) logAttempt(c *call, lease *actors.Lease, f *failure, failover bool) {
	level := slog.LevelWarn
	switch f.verdict.Class {
	case upstream.ClassCanceled:
		level = slog.LevelDebug
	case upstream.ClassRequest:
		level = slog.LevelInfo
	}
	ctx := context.Background()
	ok, held := s.logs.attempt.Take(ctx, s.log, level)
	if !ok {
		return
	}
	why := f.msg
	if f.err != nil {
		why = f.err.Error()
	}
	attrs := [...]slog.Attr{
		slog.String("request_id", c.id), slog.String("account", lease.Name), slog.String("provider", string(lease.Provider)),
		slog.String("class", f.verdict.Class.String()), slog.Int("status", f.status), slog.Int("attempt", c.attempts),
		slog.Bool("failover", failover), slog.Int64("suppressed", held), slog.String("error", clip(why))}
	n := len(attrs)
	if why == "" {
		n-- // an upstream status without a message: no empty error=""
	}
	s.log.LogAttrs(ctx, level, "upstream attempt failed", attrs[:n]...)
}

// logEnd logs a request that ended with an error status: WARN for the
// gateway's or the upstreams' failures (5xx), INFO for requests refused or
// abandoned by the client (4xx, 499), DEBUG for unauthenticated ones
// (anyone can send those).
func (s *Server) logEnd(c *call, status int) {
	if status < 400 {
		return
	}
	level := slog.LevelInfo
	switch {
	case status >= 500:
		level = slog.LevelWarn
	case !c.authed:
		level = slog.LevelDebug
	}
	ctx := context.Background()
	ok, held := s.logs.failed.Take(ctx, s.log, level)
	if !ok {
		return
	}
	account, class := c.servedBy, ""
	if n := len(c.errors); n > 0 {
		class = c.errors[n-1].Class
		if account == "" {
			account = c.errors[n-1].AccountID
		}
	}
	var why string
	switch {
	case status == statusClientClosed:
		class = upstream.ClassCanceled.String()
	case c.broke != nil:
		// A committed stream that broke: no failover was possible, and the
		// read's error is the only trace of why.
		class, why = upstream.ClassTransient.String(), clip(c.broke.Error())
	case c.brokeClass != upstream.ClassNone:
		class = c.brokeClass.String() // an error event after commit
	}
	if account != "" {
		if v, ok := s.sys.View(account); ok {
			account = v.Name
		}
	}
	attrs := []slog.Attr{
		slog.String("request_id", c.id), slog.String("route", c.route()), slog.String("model", c.model),
		slog.Int("status", status), slog.String("class", class), slog.String("account", account),
		slog.Int("attempts", c.attempts), slog.String("key", c.key.Name), slog.Int64("suppressed", held)}
	if why != "" {
		attrs = append(attrs, slog.String("error", why))
	}
	s.log.LogAttrs(ctx, level, "request failed", attrs...)
}

// logUnrouted logs, at INFO, a request answered 404 unknown_url or 405
// method_not_allowed by the front: its method, path, status and request id.
// A client with a wrong base URL (/v1/v1/…) otherwise left no trace in the
// log. The path is the decoded path alone, never the query string (which
// may carry a key), with no header, any segment that looks like a secret
// (sk-…) cut to its prefix, and clipped to 256 bytes. Call it after the
// error was written (it reads the status and X-Request-Id set there).
func (s *Server) logUnrouted(ctx *fasthttp.RequestCtx) {
	c := context.Background()
	ok, held := s.logs.unrouted.Take(c, s.log, slog.LevelInfo)
	if !ok {
		return
	}
	msg := "unknown url"
	if ctx.Response.StatusCode() == fasthttp.StatusMethodNotAllowed {
		msg = "method not allowed"
	}
	s.log.LogAttrs(c, slog.LevelInfo, msg,
		slog.String("method", clip(string(ctx.Method()))), slog.String("path", clip(redactPath(ctx.Path()))),
		slog.Int("status", ctx.Response.StatusCode()), slog.String("request_id", string(ctx.Response.Header.Peek("X-Request-Id"))),
		slog.Int64("suppressed", held))
}

// redactPath returns path with every segment that starts "sk-" (an API
// key's shape, Troupe's, OpenAI's and Anthropic's) cut to "sk-…".
func redactPath(path []byte) string {
	if !bytes.Contains(path, []byte("sk-")) {
		return string(path)
	}
	segs := bytes.Split(path, []byte("/"))
	for i, seg := range segs {
		if bytes.HasPrefix(seg, []byte("sk-")) {
			segs[i] = []byte("sk-…")
		}
	}
	return string(bytes.Join(segs, []byte("/")))
}
