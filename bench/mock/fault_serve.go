package mock

import (
	"bufio"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// Serving the faults of faults.go. Every path here ends the answer exactly
// once (stream.finish), counted as Faults unless a slow_first_token answer
// was delivered in full. Faults that must control the connection itself (a
// reset, a cut mid-body, waits that end as soon as the client leaves) hijack
// it from fasthttp and write raw HTTP/1.1: the same head and events a normal
// answer has, in chunked framing for streams.

// serveFault answers a request on which the account's fault fired. s was
// accepted (begin counted); serveFault ends it and releases s, now or from
// a stream writer or hijack handler.
func (s *stream) serveFault(ctx *fasthttp.RequestCtx) {
	fs := s.p.fault
	switch {
	case fs.isStatus():
		s.serveFaultStatus(ctx)
	case fs.Kind == FaultResetBeforeHeaders, fs.Kind == FaultDisconnectBeforeContent,
		fs.Kind == FaultDisconnectAfterContent, fs.Kind == FaultHang, fs.Kind == FaultSlowFirstToken:
		s.serveRaw(ctx)
	case fs.Kind == FaultJSONWhenStream:
		s.writeHeaders(ctx)
		if s.req.stream {
			s.serveJSON(ctx)
		} else {
			s.serveStream(ctx)
		}
	default: // empty_stream, error_event_first
		s.writeHeaders(ctx)
		if s.req.stream {
			s.setSSEHeaders(ctx)
			ctx.Response.ImmediateHeaderFlush = true
			ctx.SetBodyStreamWriter(s.streamFault)
			return
		}
		s.serveFaultJSON(ctx)
	}
}

// serveFaultStatus answers with the fault's error status after its Delay.
func (s *stream) serveFaultStatus(ctx *fasthttp.RequestCtx) {
	defer s.finish(false)
	s.sleep(s.p.fault.Delay) // on Close, answer at once
	s.writeFaultStatus(ctx, time.Now())
}

// writeFaultStatus renders the status fault in the route's shapes: status,
// headers and body.
func (s *stream) writeFaultStatus(ctx *fasthttp.RequestCtx, now time.Time) {
	if s.route.anthropicProtocol() {
		s.writeAnthropicFaultStatus(ctx, now)
		return
	}
	fs := s.p.fault
	h := &ctx.Response.Header
	codex := s.route.codexProtocol()
	b := append(s.buf[:0], "req_"...)
	b = append(b, s.id[:]...)
	h.SetBytesV("X-Request-Id", b)
	b = b[:0]
	var status int
	switch fs.Kind {
	case FaultRateLimitReset:
		status = 429
		switch {
		case codex:
			b = s.appendUsageLimit(b, h, now)
		case s.acc.cfg.Kind == KindOpenAICompat:
			b = append(b, bodyCompatQuota...)
		default:
			b = appendOpenAIError(b, openAIError{status: 429, message: msgInsufficientQuota, typ: "insufficient_quota", code: "insufficient_quota"})
			setOpenAIRateHeaders(h)
		}
	case FaultRateLimitRetryAfter:
		status = 429
		wait := fs.RetryAfter
		if wait < 0 {
			wait = DefaultRetryAfter
		} else {
			h.Set("Retry-After", strconv.FormatInt(max(ceilSeconds(wait), 1), 10))
		}
		if codex {
			l := s.acc.codexLimits(now, s.f.started)
			b = setCodexLimitHeaders(h, &l, b)
		} else {
			setOpenAIRateHeaders(h)
			h.Set("X-Ratelimit-Remaining-Tokens", "0")
			h.SetBytesV("X-Ratelimit-Reset-Tokens", appendSeconds(b, wait))
		}
		msg := "Rate limit reached for " + s.req.model + " in organization org-troupe-mock on tokens per min (TPM): Limit 30000000, Used 30000000, Requested " +
			strconv.Itoa(s.req.inputTokens) + ". Please try again in " + string(appendSeconds(nil, wait)) +
			". Visit https://platform.openai.com/account/rate-limits to learn more."
		b = appendOpenAIError(b[:0], openAIError{status: 429, message: msg, typ: "tokens", code: "rate_limit_exceeded"})
	case FaultUnauthorized:
		status = 401
		if codex {
			b = append(b, bodyTokenInvalidated...)
		} else {
			b = appendOpenAIError(b, (&failure{kind: failInvalidKey, arg: maskKey([]byte(s.acc.cfg.Token))}).openAI())
		}
	case FaultDeactivated:
		if codex {
			status = 402
			b = append(b, bodyDeactivatedWorkspace...)
		} else {
			status = 403
			b = appendOpenAIError(b, openAIError{status: 403, message: msgDeactivated, typ: "invalid_request_error", code: "account_deactivated"})
		}
	case FaultBadGateway:
		status = 502
		b = appendOpenAIError(b, serverError(502, msgBadGateway))
	case FaultUnavailable:
		status = 503
		b = appendOpenAIError(b, serverError(503, msgUnavailable))
	case FaultServerError:
		status = 500
		b = appendOpenAIError(b, serverError(500, msgServerError))
	default:
		status = 500
		b = appendOpenAIError(b, serverError(500, "mock: unknown fault kind "+strconv.Quote(string(fs.Kind))))
	}
	s.buf = b
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// appendUsageLimit sets the codex headers of a used-up quota (the window
// that covers the reset at 100%, its reset at the fault's) and appends the
// usage_limit_reached body.
func (s *stream) appendUsageLimit(dst []byte, h *fasthttp.ResponseHeader, now time.Time) []byte {
	fs := s.p.fault
	in := max(ceilSeconds(fs.resetAt.Sub(now)), 1)
	at := ceilSeconds(time.Duration(fs.resetAt.UnixNano()))
	l := s.acc.codexLimits(now, s.f.started)
	if fs.ResetsIn <= codexPrimaryWindow {
		l.primaryUsed, l.primaryResetAfter, l.primaryResetAt = 100, in, at
	} else {
		l.secondaryUsed, l.secondaryResetAfter, l.secondaryResetAt = 100, in, at
	}
	dst = setCodexLimitHeaders(h, &l, dst)
	dst = append(dst, `{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","plan_type":"pro","resets_at":`...)
	dst = strconv.AppendInt(dst, at, 10)
	dst = append(dst, `,"resets_in_seconds":`...)
	dst = strconv.AppendInt(dst, in, 10)
	return append(dst, "}}"...)
}

// setOpenAIRateHeaders sets the usual x-ratelimit-* set.
func setOpenAIRateHeaders(h *fasthttp.ResponseHeader) {
	for _, hd := range openAIRateHeaders {
		h.Set(hd.name, hd.value)
	}
}

// serveFaultJSON answers a non-streamed request for empty_stream (an empty
// 200) or error_event_first (a 200 whose body is an error) after Delay.
func (s *stream) serveFaultJSON(ctx *fasthttp.RequestCtx) {
	defer s.finish(false)
	if !s.sleep(s.p.fault.Delay) {
		ctx.Response.Header.Reset()
		writeFailure(ctx, &failure{kind: failShutdown}, s.route)
		return
	}
	ctx.SetContentType("application/json")
	if s.p.fault.Kind == FaultEmptyStream {
		ctx.SetBody(nil)
		return
	}
	switch s.route {
	case routeChat:
		s.buf = appendOpenAIError(s.buf[:0], serverError(200, msgServerError))
	case routeMessages:
		s.buf = appendAnthropicError(s.buf[:0], anthropicOverloaded, s.appendRequestID(s.head[:0]))
	default:
		s.buf = s.appendResponseStatus(s.buf[:0], respFailed)
	}
	ctx.SetBody(s.buf)
}

// streamFault is the stream writer of empty_stream (no events) and
// error_event_first (the error events), after Delay.
func (s *stream) streamFault(w *bufio.Writer) {
	defer s.finish(false)
	if !s.sleep(s.p.fault.Delay) || s.p.fault.Kind == FaultEmptyStream {
		return
	}
	switch s.route {
	case routeChat:
		s.emit(w, append(s.buf[:0], chatErrorEvent...))
		return
	case routeMessages:
		s.emit(w, append(s.buf[:0], messagesOverloadedEvent...))
		return
	}
	if !s.emit(w, s.appendRespErrorEvent(s.buf[:0], 0)) {
		return
	}
	s.emit(w, s.appendRespFailed(s.buf[:0], 1))
}

// appendRespErrorEvent appends a Responses `event: error` with the nested
// error object of the wire (testdata/openai-responses/stream-error-event.sse).
func (s *stream) appendRespErrorEvent(dst []byte, seq int) []byte {
	dst = appendEventHead(dst, "error", seq)
	return append(dst, `,"error":{"type":"server_error","code":"server_error","message":"`+msgServerError+`","param":null}}`+"\n\n"...)
}

// appendRespFailed appends response.failed.
func (s *stream) appendRespFailed(dst []byte, seq int) []byte {
	dst = appendEventHead(dst, "response.failed", seq)
	dst = append(dst, `,"response":`...)
	dst = s.appendResponseStatus(dst, respFailed)
	return append(dst, "}\n\n"...)
}

// serveRaw hijacks the connection for the faults that need it: those that
// reset or cut it, hang until the client leaves, or (slow_first_token) keep
// a client that gave up during the long wait from being counted Completed.
// The response head gets the headers a normal answer has; runRaw sends it.
func (s *stream) serveRaw(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	s.writeHeaders(ctx)
	if s.req.stream {
		s.setSSEHeaders(ctx)
	} else {
		ctx.SetContentType("application/json")
	}
	h.SetServer("troupe-mock")
	if s.p.fault.Kind == FaultSlowFirstToken {
		// The answer completes, but the connection is not fasthttp's any
		// more: tell the client not to reuse it.
		h.SetConnectionClose()
	}
	if s.hdr == nil {
		s.hdr = new(fasthttp.ResponseHeader)
	}
	h.CopyTo(s.hdr)
	s.f.raw.Add(1)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(s.runRaw)
}

// runRaw is the hijack handler of serveRaw. When it returns, fasthttp closes
// the connection: a FIN, or a reset for reset_before_headers.
func (s *stream) runRaw(c net.Conn) {
	defer s.f.raw.Add(-1)
	gone := make(chan struct{})
	go watchClose(c, gone)
	s.gone = gone // from now on every wait ends when the client leaves
	delivered := s.rawAnswer(c)
	_ = c.SetReadDeadline(time.Now()) // stop watchClose
	<-gone
	s.finish(delivered)
}

// rawAnswer writes what the fault sends on the hijacked connection c and
// reports whether a whole answer was delivered (slow_first_token only).
func (s *stream) rawAnswer(c net.Conn) bool {
	fs := s.p.fault
	switch fs.Kind {
	case FaultResetBeforeHeaders:
		s.sleep(fs.Delay)
		resetOnClose(c)
		return false
	case FaultHang:
		if s.req.stream {
			s.rawHead(c, -1)
		}
		s.hang()
		return false
	}
	if !s.req.stream {
		wait := s.p.nonStreamDelay() // includes a slow_first_token's Delay
		if fs.Kind != FaultSlowFirstToken {
			wait += fs.Delay
		}
		if !s.sleep(time.Until(s.start.Add(wait))) {
			return false
		}
		s.body = s.appendJSONAnswer(s.body[:0])
		n := len(s.body)
		switch fs.Kind {
		case FaultDisconnectBeforeContent:
			n = 0
		case FaultDisconnectAfterContent:
			n /= 2
		}
		if fs.Kind != FaultSlowFirstToken { // a cut answer: never delivered
			_ = s.rawHead(c, len(s.body)) && s.rawWrite(c, s.body[:n])
			return false
		}
		// Settled before the last byte: the client has the answer only then.
		if !s.rawHead(c, len(s.body)) || !s.rawWrite(c, s.body[:n-1]) {
			return false
		}
		s.settle(true)
		return s.rawWrite(c, s.body[n-1:])
	}
	if !s.rawHead(c, -1) {
		return false
	}
	w := bufio.NewWriter(chunkWriter{s, c})
	switch fs.Kind {
	case FaultDisconnectBeforeContent:
		if s.writePreContent(w) {
			s.sleep(time.Until(s.start.Add(s.p.latency + fs.Delay)))
		}
		return false
	case FaultDisconnectAfterContent:
		if !s.writeStream(w) { // stops at plan.cutAfter
			s.sleep(fs.Delay)
		}
		return false
	}
	// slow_first_token: the normal stream, then the end of the chunked body.
	return s.writeStream(w) && s.rawWrite(c, []byte("0\r\n\r\n"))
}

// hang waits until the client goes away or the fleet closes.
func (s *stream) hang() {
	select {
	case <-s.gone:
	case <-s.f.done:
	}
}

// rawHead writes the response head with a Content-Length of n, or chunked
// when n < 0.
func (s *stream) rawHead(c net.Conn, n int) bool {
	s.hdr.SetContentLength(n)
	s.wire = append(s.wire[:0], s.hdr.Header()...)
	return s.rawWrite(c, s.wire)
}

func (s *stream) rawWrite(c net.Conn, b []byte) bool {
	_, err := c.Write(b)
	return err == nil
}

// chunkWriter writes each Write to the connection as one HTTP/1.1 chunk
// (under a bufio.Writer flushed per event: one chunk per event, like
// fasthttp's own stream writer).
type chunkWriter struct {
	s *stream
	c net.Conn
}

func (w chunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	b := strconv.AppendInt(w.s.wire[:0], int64(len(p)), 16)
	b = append(b, "\r\n"...)
	b = append(b, p...)
	b = append(b, "\r\n"...)
	w.s.wire = b
	if _, err := w.c.Write(b); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writePreContent writes at once the events a stream sends before its first
// content: the Chat role chunk, Responses' created and in_progress, or
// Messages' message_start.
func (s *stream) writePreContent(w *bufio.Writer) bool {
	switch s.route {
	case routeChat:
		s.head = s.appendChatHead(s.head[:0])
		return s.emit(w, s.appendChatRole(s.buf[:0]))
	case routeMessages:
		return s.emit(w, s.appendMessageStart(s.buf[:0]))
	}
	return s.emit(w, s.appendRespLifecycle(s.buf[:0], "response.created", 0, false)) &&
		s.emit(w, s.appendRespLifecycle(s.buf[:0], "response.in_progress", 1, false))
}

// watchClose reads (and discards) from c until it fails: the client closed
// the connection, or runRaw set a past read deadline. Then it closes gone.
func watchClose(c net.Conn, gone chan<- struct{}) {
	var b [512]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			close(gone)
			return
		}
	}
}

// resetOnClose makes the close of c send a TCP reset instead of a FIN.
func resetOnClose(c net.Conn) {
	if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok {
		c = u.UnsafeConn()
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
}
