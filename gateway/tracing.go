package gateway

import (
	"context"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing configures the OpenTelemetry spans the gateway makes: one SERVER
// span per client request and one CLIENT span per upstream attempt, named
// and attributed per the GenAI semantic conventions
// (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/);
// docs/observability.md lists every attribute. The zero value turns tracing
// off, and then the request path does no tracing work at all: every hook is
// behind a nil check of the call's trace state, so nothing is allocated.
type Tracing struct {
	// Tracer makes the spans; nil turns tracing off.
	Tracer trace.Tracer
	// Instance names this gateway instance on attempt spans
	// (troupe.instance; the resource's service.instance.id).
	Instance string
	// ContentBytes, when positive, records message content: the client's
	// request body (troupe.request.body) and the answer the client got
	// (troupe.response.body: the JSON body, or the stream's events as
	// sent), each cut at ContentBytes bytes. 0 (the default): no content is
	// ever recorded.
	ContentBytes int
}

// Attribute keys. The gen_ai.*, error.type, http.* and server.* ones are
// OpenTelemetry semantic conventions; troupe.* are Troupe's own.
const (
	attrOperation     = attribute.Key("gen_ai.operation.name")
	attrProvider      = attribute.Key("gen_ai.provider.name")
	attrRequestModel  = attribute.Key("gen_ai.request.model")
	attrResponseModel = attribute.Key("gen_ai.response.model")
	attrStream        = attribute.Key("gen_ai.request.stream")
	attrInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	attrOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
	attrCacheRead     = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	attrCacheWrite    = attribute.Key("gen_ai.usage.cache_creation.input_tokens")
	attrFinish        = attribute.Key("gen_ai.response.finish_reasons")
	attrFirstChunk    = attribute.Key("gen_ai.response.time_to_first_chunk")
	attrErrorType     = attribute.Key("error.type")
	attrMethod        = attribute.Key("http.request.method")
	attrRoute         = attribute.Key("http.route")
	attrStatus        = attribute.Key("http.response.status_code")

	attrRequestID   = attribute.Key("troupe.request.id")
	attrKeyID       = attribute.Key("troupe.api_key.id")
	attrAttempts    = attribute.Key("troupe.attempts")
	attrWebSocket   = attribute.Key("troupe.websocket")
	attrReqBody     = attribute.Key("troupe.request.body")
	attrRespBody    = attribute.Key("troupe.response.body")
	attrAttempt     = attribute.Key("troupe.attempt")
	attrAccountID   = attribute.Key("troupe.account.id")
	attrAccountName = attribute.Key("troupe.account.name")
	attrTProvider   = attribute.Key("troupe.provider")
	attrInstance    = attribute.Key("troupe.instance")
	attrClass       = attribute.Key("troupe.failure.class")
	attrTTFT        = attribute.Key("troupe.ttft")
	attrPolicy      = attribute.Key("troupe.route.policy")
	attrPolicyVer   = attribute.Key("troupe.route.policy_version")
	attrCanary      = attribute.Key("troupe.route.canary")
	attrVia         = attribute.Key("troupe.route.via")
	attrCandidates  = attribute.Key("troupe.route.candidates")
	attrSkipped     = attribute.Key("troupe.route.skipped")
	attrScore       = attribute.Key("troupe.route.score")
	attrTier        = attribute.Key("troupe.route.tier")
	attrTop         = attribute.Key("troupe.route.top")
	attrRefusals    = attribute.Key("troupe.route.refusals")
	attrWaited      = attribute.Key("troupe.route.waited")
)

// operationName is gen_ai.operation.name of every proxied request: Chat
// Completions, Responses and Messages are all "chat" in the conventions.
const operationName = "chat"

// callTrace is a traced request's span state; a call has one only when
// tracing is on. The failover loop, the stream and finish use it one after
// another, never at once.
type callTrace struct {
	span    trace.Span      // the client request's span (SERVER)
	ctx     context.Context // carries span: the parent of the attempt spans
	attempt trace.Span      // the running upstream attempt's span (CLIENT), nil between attempts

	provider storage.Provider // the last attempt's account's provider
	model    string           // gen_ai.response.model, from the serving attempt's answer
	finish   []string         // gen_ai.response.finish_reasons, as the upstream gave them
	ttfc     time.Duration    // request start to the first content chunk (streams)
	content  []byte           // the answer as the client got it, when content is recorded
}

// SetTracing sets the gateway's tracing (see Tracing). Call it before Serve.
func (s *Server) SetTracing(t Tracing) { s.tracing = t }

// traceHTTP starts c's span for a request on HTTP, continuing the W3C
// trace context (traceparent, tracestate) the client sent.
func (s *Server) traceHTTP(ctx *fasthttp.RequestCtx, c *call) {
	s.startTrace(traceParentOf(&ctx.Request.Header), c, string(ctx.Path()))
}

// traceParentOf returns a context carrying the W3C trace context
// (traceparent, tracestate) of request head h, if it has a valid one.
func traceParentOf(h *fasthttp.RequestHeader) context.Context {
	return propagation.TraceContext{}.Extract(context.Background(), headerCarrier{h})
}

// startTrace starts c's request span under parent; route is http.route.
// The span's name is the operation's until the model is known (traceParsed).
// A request the sampler leaves out is not traced further (c.tr stays nil):
// its attempts would not be sampled either.
func (s *Server) startTrace(parent context.Context, c *call, route string) {
	ctx, span := s.tracing.Tracer.Start(parent, operationName,
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(c.start))
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(attrOperation.String(operationName), attrMethod.String("POST"),
		attrRoute.String(route), attrRequestID.String(c.id))
	c.tr = &callTrace{span: span, ctx: ctx}
}

// traceParsed names c's span "{operation} {model}" and records what the
// request asked for, once its body is parsed.
func (s *Server) traceParsed(c *call) {
	t := c.tr
	t.span.SetName(operationName + " " + c.model)
	t.span.SetAttributes(attrRequestModel.String(c.model), attrStream.Bool(c.stream), attrKeyID.String(c.key.ID))
	if c.ws {
		t.span.SetAttributes(attrWebSocket.Bool(true))
	}
	if n := s.tracing.ContentBytes; n > 0 {
		t.span.SetAttributes(attrReqBody.String(clipUTF8(c.body, n)))
	}
}

// traceAttempt starts the span of c's next upstream attempt on lease, from
// began (before the lease was asked for), with the routing decision.
func (s *Server) traceAttempt(c *call, lease *actors.Lease, began time.Time) {
	t := c.tr
	t.provider, t.model, t.finish = lease.Provider, "", t.finish[:0]
	d := &lease.Decision
	attrs := make([]attribute.KeyValue, 0, 20)
	attrs = append(attrs,
		attrOperation.String(operationName), attrRequestModel.String(c.target),
		attrProvider.String(genAIProvider(lease.Provider)), attrTProvider.String(string(lease.Provider)),
		attrAccountID.String(lease.AccountID), attrAccountName.String(lease.Name),
		attrInstance.String(s.tracing.Instance), attrAttempt.Int(c.attempts),
		attrPolicy.String(d.Policy), attrPolicyVer.Int64(int64(d.PolicyVersion)), attrVia.String(d.Via.String()),
		attrCandidates.Int(d.Candidates), attrSkipped.Int(d.Skipped))
	if d.NTop > 0 {
		chosen := d.ChosenAccount()
		attrs = append(attrs, attrScore.Float64(chosen.Score), attrTier.String(chosen.Tier.String()))
		top := make([]string, d.NTop)
		for i := range d.NTop {
			r := &d.Top[i]
			top[i] = string(appendToken(nil, r.Name)) + ":" + strconv.FormatFloat(r.Score, 'g', 6, 64) + ":" + r.Tier.String()
		}
		attrs = append(attrs, attrTop.StringSlice(top))
	}
	if d.Canary {
		attrs = append(attrs, attrCanary.Bool(true))
	}
	if d.Refusals > 0 {
		attrs = append(attrs, attrRefusals.Int(d.Refusals))
	}
	if d.Waited > 0 {
		attrs = append(attrs, attrWaited.Float64(d.Waited.Seconds()))
	}
	_, t.attempt = s.tracing.Tracer.Start(t.ctx, operationName+" "+c.target,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(began), trace.WithAttributes(attrs...))
}

// traceRelease ends the running attempt's span with its outcome: the
// upstream status (0: no HTTP answer), the failure class, the attempt's
// time to first token.
func (t *callTrace) traceRelease(status int, v upstream.Verdict, ttft time.Duration, end time.Time) {
	span := t.attempt
	if span == nil {
		return
	}
	t.attempt = nil
	if status != 0 {
		span.SetAttributes(attrStatus.Int(status))
	}
	if ttft > 0 {
		span.SetAttributes(attrTTFT.Float64(ttft.Seconds()))
	}
	if v.Class != upstream.ClassNone {
		class := v.Class.String()
		span.SetAttributes(attrClass.String(class), attrErrorType.String(class))
		if v.Class != upstream.ClassCanceled {
			span.SetStatus(codes.Error, "upstream attempt failed: "+class)
		}
	}
	span.End(trace.WithTimestamp(end))
}

// traceFinish ends c's request span: the status the client got, the
// serving attempt's provider, model, usage, finish reasons and time to
// first chunk, and for a failure error.type (the last attempt's failure
// class, else the status).
func (s *Server) traceFinish(c *call, status int, end time.Time) {
	t := c.tr
	span := t.span
	attrs := make([]attribute.KeyValue, 0, 16)
	attrs = append(attrs, attrStatus.Int(status), attrAttempts.Int(c.attempts))
	if t.provider != "" {
		attrs = append(attrs, attrProvider.String(genAIProvider(t.provider)))
	}
	if c.servedBy != "" {
		attrs = append(attrs, attrAccountID.String(c.servedBy),
			attrInputTokens.Int64(c.usage.InputTokens), attrOutputTokens.Int64(c.usage.OutputTokens),
			attrCacheRead.Int64(c.usage.CachedTokens), attrCacheWrite.Int64(c.usage.CacheWriteTokens))
		if t.model != "" {
			attrs = append(attrs, attrResponseModel.String(t.model))
		}
		if len(t.finish) > 0 {
			attrs = append(attrs, attrFinish.StringSlice(t.finish))
		}
		if t.ttfc > 0 {
			attrs = append(attrs, attrFirstChunk.Float64(t.ttfc.Seconds()))
		}
	}
	if status >= 400 {
		errType := strconv.Itoa(status)
		switch {
		case status == statusClientClosed:
			errType = upstream.ClassCanceled.String()
		case len(c.errors) > 0:
			errType = c.errors[len(c.errors)-1].Class
		}
		attrs = append(attrs, attrErrorType.String(errType))
		if status >= 500 {
			span.SetStatus(codes.Error, "status "+strconv.Itoa(status))
		}
	}
	if s.tracing.ContentBytes > 0 && len(t.content) > 0 {
		attrs = append(attrs, attrRespBody.String(clipUTF8(t.content, s.tracing.ContentBytes)))
	}
	span.SetAttributes(attrs...)
	span.End(trace.WithTimestamp(end))
}

// traceAnswer takes the response model and finish reasons from a whole
// upstream answer in protocol up.
func (t *callTrace) traceAnswer(up translate.Protocol, body []byte) {
	root := gjson.ParseBytes(body)
	t.model = root.Get("model").String()
	switch up {
	case translate.Chat:
		root.Get("choices.#.finish_reason").ForEach(func(_, v gjson.Result) bool {
			if v.Type == gjson.String {
				t.finish = append(t.finish, v.Str)
			}
			return true
		})
	case translate.Responses:
		t.responsesFinish(root)
	case translate.Messages:
		if r := root.Get("stop_reason"); r.Type == gjson.String {
			t.finish = append(t.finish, r.Str)
		}
	}
}

// responsesFinish appends a Responses object's finish reason: why it is
// incomplete, else its status.
func (t *callTrace) responsesFinish(resp gjson.Result) {
	if r := resp.Get("incomplete_details.reason"); r.Type == gjson.String {
		t.finish = append(t.finish, r.Str)
	} else if r := resp.Get("status"); r.Type == gjson.String {
		t.finish = append(t.finish, r.Str)
	}
}

// traceEvent takes the response model and finish reasons from one
// upstream stream event in protocol up.
func (t *callTrace) traceEvent(up translate.Protocol, ev translate.Event) {
	switch up {
	case translate.Chat:
		if t.model == "" {
			t.model = gjson.GetBytes(ev.Data, "model").String()
		}
		if len(t.finish) == 0 && containsFinish(ev.Data) {
			gjson.GetBytes(ev.Data, "choices.#.finish_reason").ForEach(func(_, v gjson.Result) bool {
				if v.Type == gjson.String {
					t.finish = append(t.finish, v.Str)
				}
				return true
			})
		}
	case translate.Responses:
		switch eventType(ev) {
		case "response.created":
			t.model = gjson.GetBytes(ev.Data, "response.model").String()
		case "response.completed", "response.incomplete", "response.failed":
			resp := gjson.GetBytes(ev.Data, "response")
			if m := resp.Get("model").String(); m != "" {
				t.model = m
			}
			t.finish = t.finish[:0]
			t.responsesFinish(resp)
		}
	case translate.Messages:
		switch eventType(ev) {
		case "message_start":
			t.model = gjson.GetBytes(ev.Data, "message.model").String()
		case "message_delta":
			if r := gjson.GetBytes(ev.Data, "delta.stop_reason"); r.Type == gjson.String {
				t.finish = append(t.finish[:0], r.Str)
			}
		}
	}
}

func containsFinish(data []byte) bool {
	return len(data) > 0 && gjson.GetBytes(data, "choices.0.finish_reason").Type == gjson.String
}

// traceSent keeps b, bytes the client got, for troupe.response.body (up to limit bytes in all).
func (t *callTrace) traceSent(b []byte, limit int) {
	if room := limit - len(t.content); room > 0 {
		t.content = append(t.content, b[:min(len(b), room)]...)
	}
}

// genAIProvider is gen_ai.provider.name of an account's provider: the
// conventions' "openai" for the OpenAI API and the Codex backend,
// "anthropic"; an OpenAI-compatible endpoint keeps Troupe's name
// ("openai_compat"), since the conventions cannot tell whose it is.
func genAIProvider(p storage.Provider) string {
	switch p {
	case storage.ProviderOpenAI, storage.ProviderCodex:
		return "openai"
	case storage.ProviderAnthropic:
		return "anthropic"
	}
	return string(p)
}

// clipUTF8 returns b as a string of at most n bytes, cut at a rune boundary.
func clipUTF8(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	b = b[:n]
	for i := 0; i < utf8.UTFMax-1 && len(b) > 0; i++ { // drop a rune the cut split
		if r, size := utf8.DecodeLastRune(b); r != utf8.RuneError || size > 1 {
			break
		}
		b = b[:len(b)-1]
	}
	return string(b)
}

// headerCarrier reads a fasthttp request's headers for a propagator.
type headerCarrier struct{ h *fasthttp.RequestHeader }

// Get returns the header key's value ("" when absent).
func (c headerCarrier) Get(key string) string { return string(c.h.Peek(key)) }

// Set sets the header key.
func (c headerCarrier) Set(key, value string) { c.h.Set(key, value) }

// Keys returns the header names.
func (c headerCarrier) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}
