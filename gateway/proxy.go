package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

// Bounds on upstream bodies the gateway reads whole.
const (
	maxErrorBody    = 1 << 20  // an upstream error body kept for classification and the client
	maxResponseBody = 64 << 20 // a non-stream answer
)

func (s *Server) chat(ctx *fasthttp.RequestCtx)      { s.proxy(ctx, upstream.EndpointChat) }
func (s *Server) responses(ctx *fasthttp.RequestCtx) { s.proxy(ctx, upstream.EndpointResponses) }

// call is one client request on its way through the gateway.
type call struct {
	id       string
	endpoint upstream.Endpoint
	key      storage.APIKey
	model    string // as the client named it
	target   string // after alias resolution
	stream   bool
	body     []byte
	header   http.Header
	start    time.Time
	attempts int
}

// proxy runs one client request: parse what routing needs, acquire a lease,
// call upstream, fail over before anything reached the client, then answer.
func (s *Server) proxy(ctx *fasthttp.RequestCtx, ep upstream.Endpoint) {
	c := &call{id: newRequestID(), endpoint: ep, start: s.now()}
	ctx.Response.Header.Set("X-Request-Id", c.id)
	s.metrics.inflight.Inc()
	status := s.serve(ctx, c)
	if status != 0 { // 0: a stream is running; it counts itself when it ends
		s.finish(c, status)
	}
}

func (s *Server) finish(c *call, status int) {
	s.metrics.inflight.Dec()
	s.metrics.request(c.endpoint.String(), status)
	s.metrics.latency.WithLabelValues(c.endpoint.String()).Observe(s.now().Sub(c.start).Seconds())
}

// serve returns the status it answered with, or 0 when it handed the answer to a stream.
func (s *Server) serve(ctx *fasthttp.RequestCtx, c *call) int {
	key, aerr := s.authenticate(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return aerr.Status
	}
	c.key = key
	if aerr := s.parse(ctx, c); aerr != nil {
		writeError(ctx, aerr)
		return aerr.Status
	}

	rctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	handedOff := false
	defer func() {
		if !handedOff {
			cancel()
		}
	}()

	var tried []string
	var last *failure // the last account-level failure, answered if no attempt succeeds
	for c.attempts < s.cfg.MaxAttempts {
		lease, err := s.sys.Acquire(rctx, actors.AcquireRequest{
			Endpoint: c.endpoint, Model: c.target, Group: key.Group, Exclude: tried, MaxWait: s.cfg.MaxWait,
		})
		if err != nil {
			if last != nil {
				break // accounts ran out during failover: answer with what the last one said
			}
			aerr := s.acquireError(c, err)
			writeError(ctx, aerr)
			return aerr.Status
		}
		c.attempts++
		tried = append(tried, lease.AccountID)
		res := s.attempt(rctx, c, lease)
		if res.failure != nil {
			last = res.failure
			if res.failure.verdict.Class.AccountFault() {
				continue
			}
			break
		}
		s.metrics.failovers.Observe(float64(c.attempts - 1))
		if res.stream != nil {
			handedOff = true
			res.stream.cancel = cancel
			s.commitStream(ctx, c, res)
			return 0
		}
		s.commitBody(ctx, c, res)
		return res.status
	}
	s.metrics.failovers.Observe(float64(max(c.attempts-1, 0)))
	return s.answerFailure(ctx, last)
}

// parse reads what routing needs from the body without decoding it whole.
func (s *Server) parse(ctx *fasthttp.RequestCtx, c *call) *APIError {
	body := ctx.PostBody()
	if len(ctx.Request.Header.ContentEncoding()) > 0 {
		// Codex sends zstd bodies to the ChatGPT backend; any client may gzip.
		// The limit caps the decompressed size, so a small bomb cannot blow up.
		b, err := ctx.Request.BodyUncompressedWithLimit(s.cfg.MaxBodySize)
		switch {
		case errors.Is(err, fasthttp.ErrBodyTooLarge):
			return errTooLarge(s.cfg.MaxBodySize)
		case errors.Is(err, fasthttp.ErrContentEncodingUnsupported):
			return &APIError{Status: 415, Type: "invalid_request_error", Code: "unsupported_content_encoding",
				Message: "Unsupported Content-Encoding: use gzip, deflate, br or zstd, or none."}
		case err != nil:
			return &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid_body_encoding",
				Message: "The request body could not be decompressed."}
		}
		body = b
	}
	if !gjson.ValidBytes(body) {
		return errBadJSON()
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return errBadJSON()
	}
	m := root.Get("model")
	switch {
	case !m.Exists() || m.Type == gjson.Null || (m.Type == gjson.String && m.Str == ""):
		return errMissingModel()
	case m.Type != gjson.String:
		return errBadParam("model", "Invalid type for 'model': expected a string.")
	}
	c.model = m.Str
	if st := root.Get("stream"); st.Exists() && st.Type != gjson.Null {
		if st.Type != gjson.True && st.Type != gjson.False {
			return errBadParam("stream", "Invalid type for 'stream': expected a boolean.")
		}
		c.stream = st.Type == gjson.True
	}
	if !modelAllowed(&c.key, c.model) {
		return errModelNotAllowed(c.model)
	}
	c.target = c.model
	c.body = body
	if t, ok := s.cfg.Aliases[c.model]; ok {
		c.target = t
		b, err := sjson.SetBytes(append([]byte(nil), body...), "model", t)
		if err != nil {
			return errBadJSON()
		}
		c.body = b
	}
	c.header = passHeaders(ctx)
	return nil
}

// passHeaders copies the client headers an upstream may use (Codex session and
// turn headers, idempotency keys); the transport decides what it sends.
func passHeaders(ctx *fasthttp.RequestCtx) http.Header {
	var h http.Header
	for _, name := range passThrough {
		if v := ctx.Request.Header.Peek(name); len(v) > 0 {
			if h == nil {
				h = make(http.Header, 4)
			}
			h.Set(name, string(v))
		}
	}
	return h
}

var passThrough = []string{
	"Idempotency-Key", "Session-Id", "Session_id", "Thread-Id", "Conversation_id", "X-Client-Request-Id",
	"X-Codex-Turn-Metadata", "X-Codex-Window-Id", "X-Codex-Beta-Features", "X-Codex-Turn-State", "Originator",
}

// failure is an upstream attempt that did not produce an answer for the client.
type failure struct {
	verdict upstream.Verdict
	status  int         // upstream status (0: no HTTP answer)
	header  http.Header // upstream headers, when there was an answer
	body    []byte      // upstream error body (bounded), when there was one
	err     error       // transport error, when there was no answer
}

// result is one attempt's outcome: a committed-able answer or a failure.
type result struct {
	status  int
	header  http.Header
	body    []byte  // non-stream answer
	stream  *stream // streamed answer, not yet committed
	failure *failure
	lease   *actors.Lease
}

// attempt sends c through lease. Every path releases the lease exactly once:
// here for failures and non-stream answers, in the stream's Close otherwise.
func (s *Server) attempt(ctx context.Context, c *call, lease *actors.Lease) result {
	start := s.now()
	resp, err := lease.Transport.Do(ctx, &upstream.Request{Endpoint: c.endpoint, Stream: c.stream, Body: c.body, Header: c.header})
	if err != nil {
		v := upstream.ClassifyError(err)
		s.release(lease, 0, v, start, 0)
		s.log.Warn("upstream attempt failed", "request_id", c.id, "account", lease.Name, "class", v.Class.String(), "err", err)
		return result{failure: &failure{verdict: v, err: err}}
	}
	if resp.Status < 200 || resp.Status > 299 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
		v := upstream.Classify(resp.Status, resp.Header, body)
		s.release(lease, resp.Status, v, start, 0)
		if v.Class.AccountFault() {
			s.log.Info("upstream refused; failing over", "request_id", c.id, "account", lease.Name, "status", resp.Status, "class", v.Class.String())
		}
		return result{failure: &failure{verdict: v, status: resp.Status, header: resp.Header, body: body}}
	}
	if c.stream && isEventStream(resp.Header) {
		return result{status: resp.Status, header: resp.Header, lease: lease, stream: s.newStream(c, lease, resp, start)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody+1))
	resp.Body.Close()
	if err == nil && len(body) > maxResponseBody {
		err = errors.New("upstream answer larger than 64 MiB")
	}
	if err == nil && !gjson.ValidBytes(body) {
		err = errors.New("upstream answer is not valid JSON")
	}
	if err != nil {
		v := upstream.Verdict{Class: upstream.ClassTransient}
		s.release(lease, resp.Status, v, start, 0)
		return result{failure: &failure{verdict: v, err: err}}
	}
	lat := s.now().Sub(start)
	s.release(lease, resp.Status, upstream.Verdict{}, start, lat)
	s.record(c, lease, resp.Status, usageFromBody(c.endpoint, body), lat, 0)
	return result{status: resp.Status, header: resp.Header, body: body, lease: lease}
}

func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	return len(ct) >= 17 && ct[:17] == "text/event-stream"
}

func (s *Server) release(l *actors.Lease, status int, v upstream.Verdict, start time.Time, ttft time.Duration) {
	cl := v.Class.String()
	if v.Class == upstream.ClassNone {
		cl = "ok"
	}
	s.metrics.attempts.WithLabelValues(string(l.Provider), cl).Inc()
	s.sys.Release(l, actors.Outcome{Status: status, Verdict: v, Latency: s.now().Sub(start), TTFT: ttft})
}

// record queues the usage record of a served request.
func (s *Server) record(c *call, l *actors.Lease, status int, u usage, latency, ttft time.Duration) {
	s.sys.Record(storage.UsageRecord{
		RequestID: c.id, At: c.start.UTC(), KeyID: c.key.ID, AccountID: l.AccountID,
		Model: c.model, Route: c.endpoint.String(), Stream: c.stream, Status: status, Attempts: c.attempts,
		Latency: latency, TTFT: ttft,
		InputTokens: u.input, CachedTokens: u.cached, OutputTokens: u.output, ReasoningTokens: u.reasoning,
	})
}

// commitBody writes a non-stream answer.
func (s *Server) commitBody(ctx *fasthttp.RequestCtx, c *call, r result) {
	ctx.SetStatusCode(r.status)
	ctx.SetContentType("application/json")
	ctx.SetBody(r.body)
}

// answerFailure tells the client why no attempt succeeded, in OpenAI's shape.
// A request-class error is the upstream's own answer and passes through.
func (s *Server) answerFailure(ctx *fasthttp.RequestCtx, f *failure) int {
	if f == nil {
		aerr := errNoAccount(time.Second)
		writeError(ctx, aerr)
		return aerr.Status
	}
	if f.status != 0 && f.body != nil && gjson.GetBytes(f.body, "error.message").Exists() {
		ctx.Response.Reset()
		ctx.SetStatusCode(f.status)
		ctx.SetContentType("application/json")
		if ra := f.header.Get("Retry-After"); ra != "" {
			ctx.Response.Header.Set("Retry-After", ra)
		}
		ctx.SetBody(f.body)
		return f.status
	}
	if f.status != 0 {
		msg := gjson.GetBytes(f.body, "detail").String()
		if msg == "" {
			msg = "The upstream answered with status " + http.StatusText(f.status) + "."
		}
		typ := "invalid_request_error"
		if f.status >= 500 || f.verdict.Class.AccountFault() {
			typ = "server_error"
		}
		aerr := &APIError{Status: f.status, Type: typ, Message: msg, RetryAfter: f.verdict.RetryAfter}
		writeError(ctx, aerr)
		return aerr.Status
	}
	aerr := errUpstream("The upstream could not be reached. Please retry.")
	if f.verdict.Class == upstream.ClassCanceled {
		aerr = &APIError{Status: 499, Type: "invalid_request_error", Code: "client_closed_request", Message: "The request was canceled."}
	}
	writeError(ctx, aerr)
	return aerr.Status
}

func (s *Server) acquireError(c *call, err error) *APIError {
	var ae *actors.AcquireError
	if errors.As(err, &ae) {
		if errors.Is(ae.Err, actors.ErrNoAccount) {
			return errModelNotFound(c.model)
		}
		return errNoAccount(max(ae.RetryAfter, time.Second))
	}
	return errNoAccount(time.Second)
}

// newRequestID returns "req_" and 32 hex digits: 48 bits of Unix milliseconds
// then 80 random bits, so ids sort by time (like UUIDv7), which keeps the
// usage table's primary-key inserts append-mostly.
func newRequestID() string {
	var b [16]byte
	ms := uint64(time.Now().UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	_, _ = rand.Read(b[6:])
	return "req_" + hex.EncodeToString(b[:])
}
