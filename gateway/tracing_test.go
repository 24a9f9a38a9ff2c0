package gateway

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A client's traceparent: trace 4bf92f3577b34da6a3ce929d0e0e4736, span 00f067aa0ba902b7, sampled.
const (
	clientTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	clientTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID      = "00f067aa0ba902b7"
)

// traced turns tracing on for s with an in-memory span recorder.
func traced(t testing.TB, s *Server, contentBytes int) *tracetest.SpanRecorder {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	s.SetTracing(Tracing{Tracer: tp.Tracer("test"), Instance: "test-instance", ContentBytes: contentBytes})
	return rec
}

// doTraced is do with a traceparent header.
func doTraced(s *Server, path, key string, body []byte) *fasthttp.Response {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI(path)
	ctx.Request.Header.Set("Authorization", "Bearer "+key)
	ctx.Request.Header.Set("traceparent", clientTraceparent)
	ctx.Request.SetBody(body)
	s.handle(&ctx)
	return writeOut(&ctx)
}

// spansOf returns the ended spans by kind: the request span (exactly one)
// and the attempt spans in start order.
func spansOf(t *testing.T, rec *tracetest.SpanRecorder) (sdktrace.ReadOnlySpan, []sdktrace.ReadOnlySpan) {
	t.Helper()
	var req sdktrace.ReadOnlySpan
	var attempts []sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		switch sp.SpanKind() {
		case trace.SpanKindServer:
			if req != nil {
				t.Fatalf("two request spans: %q and %q", req.Name(), sp.Name())
			}
			req = sp
		case trace.SpanKindClient:
			attempts = append(attempts, sp)
		default:
			t.Fatalf("span %q of kind %v", sp.Name(), sp.SpanKind())
		}
	}
	if req == nil {
		t.Fatalf("no request span among %d spans", len(rec.Ended()))
	}
	for i := 1; i < len(attempts); i++ {
		if attempts[i].StartTime().Before(attempts[i-1].StartTime()) {
			attempts[i-1], attempts[i] = attempts[i], attempts[i-1]
		}
	}
	return req, attempts
}

// attrs maps a span's attributes by key.
func attrs(sp sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range sp.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// want checks that span sp has attribute key with the value v (as Value.String shows it).
func want(t *testing.T, sp sdktrace.ReadOnlySpan, key attribute.Key, v string) {
	t.Helper()
	got, ok := attrs(sp)[key]
	if !ok {
		t.Errorf("span %q: no %s (has %v)", sp.Name(), key, sp.Attributes())
		return
	}
	if got.String() != v {
		t.Errorf("span %q: %s = %s, want %s", sp.Name(), key, got.String(), v)
	}
}

func TestTraceNonStream(t *testing.T) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m-2025","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":4}}}`)
	s, sys, key := testServer(t, 1, cannedTransport{200, "application/json", answer})
	rec := traced(t, s, 0)
	resp := doTraced(s, "/v1/chat/completions", key, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
	req, attempts := spansOf(t, rec)

	if req.Name() != "chat m" {
		t.Errorf("request span named %q, want \"chat m\"", req.Name())
	}
	if got := req.SpanContext().TraceID().String(); got != clientTraceID {
		t.Errorf("trace id %s, want the client's %s", got, clientTraceID)
	}
	if got := req.Parent().SpanID().String(); got != clientSpanID || !req.Parent().IsRemote() {
		t.Errorf("request span's parent %s (remote %v), want the client's span %s", got, req.Parent().IsRemote(), clientSpanID)
	}
	for k, v := range map[attribute.Key]string{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "m",
		"gen_ai.response.model": "m-2025", "gen_ai.request.stream": "false",
		"gen_ai.usage.input_tokens": "9", "gen_ai.usage.output_tokens": "3",
		"gen_ai.usage.cache_read.input_tokens": "4", "gen_ai.usage.cache_creation.input_tokens": "0",
		"gen_ai.response.finish_reasons": `["stop"]`, "http.response.status_code": "200",
		"http.route": "/v1/chat/completions", "troupe.attempts": "1", "troupe.account.id": "a0",
	} {
		want(t, req, k, v)
	}
	if _, ok := attrs(req)["error.type"]; ok {
		t.Errorf("a successful request has error.type %v", attrs(req)["error.type"])
	}

	if len(attempts) != 1 {
		t.Fatalf("%d attempt spans, want 1", len(attempts))
	}
	a := attempts[0]
	if a.Name() != "chat m" || a.Parent().SpanID() != req.SpanContext().SpanID() || a.SpanContext().TraceID() != req.SpanContext().TraceID() {
		t.Errorf("attempt span %q, parent %s: want \"chat m\" under the request span %s", a.Name(), a.Parent().SpanID(), req.SpanContext().SpanID())
	}
	for k, v := range map[attribute.Key]string{
		"troupe.account.id": "a0", "troupe.account.name": "acct-0", "troupe.provider": "openai",
		"troupe.instance": "test-instance", "troupe.attempt": "1", "http.response.status_code": "200",
		"troupe.route.candidates": "1", "troupe.route.via": "score",
	} {
		want(t, a, k, v)
	}
	for _, k := range []attribute.Key{"troupe.route.policy", "troupe.route.policy_version", "troupe.route.score", "troupe.route.tier", "troupe.route.top"} {
		if _, ok := attrs(a)[k]; !ok {
			t.Errorf("attempt span has no %s: %v", k, a.Attributes())
		}
	}
	if a.Status().Code == codes.Error {
		t.Errorf("a successful attempt has status %v", a.Status())
	}
}

func TestTraceFailover(t *testing.T) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	s, sys, key := testServer(t, 2, &flaky{fail: 1, ok: cannedTransport{200, "application/json", answer}})
	rec := traced(t, s, 0)
	resp := doTraced(s, "/v1/chat/completions", key, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
	req, attempts := spansOf(t, rec)
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2 (a failover)", len(attempts))
	}
	first, second := attempts[0], attempts[1]
	want(t, first, "troupe.attempt", "1")
	want(t, first, "http.response.status_code", "500")
	want(t, first, "troupe.failure.class", "transient")
	want(t, first, "error.type", "transient")
	if first.Status().Code != codes.Error {
		t.Errorf("failed attempt's status %v, want Error", first.Status())
	}
	want(t, second, "troupe.attempt", "2")
	if _, ok := attrs(second)["error.type"]; ok {
		t.Errorf("the serving attempt has error.type")
	}
	if attrs(first)["troupe.account.id"] == attrs(second)["troupe.account.id"] {
		t.Errorf("both attempts on account %v", attrs(first)["troupe.account.id"].String())
	}
	for _, a := range attempts {
		if a.Parent().SpanID() != req.SpanContext().SpanID() {
			t.Errorf("attempt %q is not a child of the request span", a.Name())
		}
	}
	want(t, req, "troupe.attempts", "2")
	want(t, req, "troupe.account.id", attrs(second)["troupe.account.id"].String())
}

func TestTraceStream(t *testing.T) {
	sse, err := os.ReadFile("testdata/chat-stream-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	s, sys, key := testServer(t, 1, cannedTransport{200, "text/event-stream", sse})
	rec := traced(t, s, 0)
	resp := doTraced(s, "/v1/chat/completions", key, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
	req, attempts := spansOf(t, rec)
	want(t, req, "gen_ai.request.stream", "true")
	want(t, req, "gen_ai.response.model", "gpt-5-nano-2025-08-07")
	want(t, req, "gen_ai.response.finish_reasons", `["stop"]`)
	if v, ok := attrs(req)["gen_ai.response.time_to_first_chunk"]; !ok || v.AsFloat64() <= 0 {
		t.Errorf("gen_ai.response.time_to_first_chunk %v, want > 0", v.String())
	}
	if len(attempts) != 1 {
		t.Fatalf("%d attempt spans, want 1", len(attempts))
	}
	if v, ok := attrs(attempts[0])["troupe.ttft"]; !ok || v.AsFloat64() <= 0 {
		t.Errorf("attempt troupe.ttft %v, want > 0", v.String())
	}
	if attempts[0].EndTime().After(req.EndTime()) {
		t.Errorf("the stream's attempt span ends after the request span")
	}
}

// spanText is everything a span carries as text: name, attributes, events
// and status, for checks that something never appears.
func spanText(sp sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	b.WriteString(sp.Name())
	for _, kv := range sp.Attributes() {
		b.WriteString(" " + string(kv.Key) + "=" + kv.Value.String())
	}
	for _, ev := range sp.Events() {
		b.WriteString(" " + ev.Name)
		for _, kv := range ev.Attributes {
			b.WriteString(" " + string(kv.Key) + "=" + kv.Value.String())
		}
	}
	b.WriteString(" " + sp.Status().Description)
	return b.String()
}

func TestTraceRecordsNoSecretOrContent(t *testing.T) {
	const (
		question = "what-is-the-secret-recipe-7f3a"
		reply    = "the-recipe-is-42-9c1e"
	)
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` + reply + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + question + `"}]}`)
	for _, content := range []int{0, 1 << 10} {
		s, sys, key := testServer(t, 2, &flaky{fail: 1, ok: cannedTransport{200, "application/json", answer}})
		rec := traced(t, s, content)
		if resp := doTraced(s, "/v1/chat/completions", key, body); resp.StatusCode() != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
		}
		waitIdle(t, sys)
		var all strings.Builder
		for _, sp := range rec.Ended() {
			all.WriteString(spanText(sp) + "\n")
		}
		text := all.String()
		if strings.Contains(text, key) || strings.Contains(text, key[len(key)-12:]) {
			t.Errorf("content %d: the API key appears in a span:\n%s", content, text)
		}
		if strings.Contains(text, "boom") {
			t.Errorf("content %d: an upstream error message appears in a span:\n%s", content, text)
		}
		hasContent := strings.Contains(text, question) || strings.Contains(text, reply)
		switch {
		case content == 0 && hasContent:
			t.Errorf("message content recorded without the opt-in:\n%s", text)
		case content > 0:
			req, _ := spansOf(t, rec)
			if got := attrs(req)["troupe.request.body"].AsString(); got != string(body) {
				t.Errorf("troupe.request.body %q, want the request body", got)
			}
			if got := attrs(req)["troupe.response.body"].AsString(); !strings.Contains(got, reply) {
				t.Errorf("troupe.response.body %q, want the answer", got)
			}
		}
	}
}

func TestTraceContentIsCut(t *testing.T) {
	sse, err := os.ReadFile("testdata/chat-stream-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	s, sys, key := testServer(t, 1, cannedTransport{200, "text/event-stream", sse})
	rec := traced(t, s, 64)
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("é", 100) + `"}]}`)
	if resp := doTraced(s, "/v1/chat/completions", key, body); resp.StatusCode() != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
	req, _ := spansOf(t, rec)
	reqBody := attrs(req)["troupe.request.body"].AsString()
	respBody := attrs(req)["troupe.response.body"].AsString()
	if len(reqBody) > 64 || len(reqBody) < 60 || !strings.HasPrefix(string(body), reqBody) || strings.ContainsRune(reqBody, '\uFFFD') {
		t.Errorf("troupe.request.body %q (%d bytes): want the body's first 63-64 bytes, cut between runes", reqBody, len(reqBody))
	}
	if len(respBody) != 64 || !bytes.HasPrefix(sse, []byte(respBody)) {
		t.Errorf("troupe.response.body %q: want the stream's first 64 bytes", respBody)
	}
}

// TestTraceUnsampled: a request whose client trace is not sampled leaves
// no span and is not traced further.
func TestTraceUnsampled(t *testing.T) {
	s, sys, key := testServer(t, 1, cannedTransport{200, "application/json", []byte(`{"model":"m","choices":[]}`)})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)) // parent-based: follows the client's flag
	defer tp.Shutdown(context.Background())
	s.SetTracing(Tracing{Tracer: tp.Tracer("test")})
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/v1/chat/completions")
	ctx.Request.Header.Set("Authorization", "Bearer "+key)
	ctx.Request.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00") // not sampled
	ctx.Request.SetBody([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	s.handle(&ctx)
	if resp := writeOut(&ctx); resp.StatusCode() != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
	if n := len(rec.Ended()); n != 0 {
		t.Errorf("%d spans recorded for an unsampled request", n)
	}
}

func TestTraceClientErrors(t *testing.T) {
	s, _, key := testServer(t, 1, cannedTransport{200, "application/json", []byte(`{}`)})
	rec := traced(t, s, 0)
	if resp := doTraced(s, "/v1/chat/completions", key, []byte(`{"model":"nope","messages":[{"role":"user","content":"hi"}]}`)); resp.StatusCode() != 404 {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
	}
	req, attempts := spansOf(t, rec)
	want(t, req, "error.type", "404")
	want(t, req, "http.response.status_code", "404")
	if req.Status().Code == codes.Error || len(attempts) != 0 {
		t.Errorf("a 404 without attempts: status %v (want unset), %d attempts", req.Status(), len(attempts))
	}
	if resp := doTraced(s, "/v1/chat/completions", "sk-wrong", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)); resp.StatusCode() != 401 {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
	}
	if n := len(rec.Ended()); n != 2 {
		t.Fatalf("%d spans, want 2", n)
	}
	unauth := rec.Ended()[1]
	if unauth.Name() != "chat" {
		t.Errorf("an unauthenticated request's span is %q, want \"chat\" (no model read)", unauth.Name())
	}
	want(t, unauth, "error.type", "401")
}

// BenchmarkChatRequestTraced is BenchmarkChatRequest with tracing on: every
// request sampled, its spans batched for an exporter that drops them (the
// SDK's cost, not the network's).
func BenchmarkChatRequestTraced(b *testing.B) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`)
	s, _, key := testServer(b, 4, cannedTransport{200, "application/json", answer})
	benchTraced(b, s)
	benchRequest(b, s, "/v1/chat/completions", key, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil)
}

// BenchmarkChatStreamRequestTraced is BenchmarkChatStreamRequest with tracing on.
func BenchmarkChatStreamRequestTraced(b *testing.B) {
	sse := readBench(b, "testdata/chat-stream-text.sse")
	s, _, key := testServer(b, 4, cannedTransport{200, "text/event-stream", sse})
	benchTraced(b, s)
	benchRequest(b, s, "/v1/chat/completions", key, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`), nil)
}

// BenchmarkChatRequestUnsampled is BenchmarkChatRequest with tracing on
// and the request left out by the sampler.
func BenchmarkChatRequestUnsampled(b *testing.B) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`)
	s, _, key := testServer(b, 4, cannedTransport{200, "application/json", answer})
	benchTracedWith(b, s, sdktrace.NeverSample())
	benchRequest(b, s, "/v1/chat/completions", key, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil)
}

func benchTraced(b *testing.B, s *Server) { benchTracedWith(b, s, sdktrace.AlwaysSample()) }

func benchTracedWith(b *testing.B, s *Server, sampler sdktrace.Sampler) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sampler))
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	s.SetTracing(Tracing{Tracer: tp.Tracer("bench"), Instance: "bench"})
}

// TestTraceWebSocket: each response.create on the Responses WebSocket is a
// request span under the upgrade request's traceparent.
func TestTraceWebSocket(t *testing.T) {
	sse := readFile(t, "responses-stream-text.sse")
	s, sys, key, store := testServerStore(t, 1, cannedTransport{200, "text/event-stream", sse})
	rec := traced(t, s, 0)
	ln := serveTCP(t, s)
	conn, resp, err := (&websocket.Dialer{HandshakeTimeout: 5 * time.Second}).Dial("ws://"+ln.Addr().String()+"/v1/responses",
		http.Header{"Authorization": {"Bearer " + key}, "Traceparent": {clientTraceparent}})
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	for range 2 {
		if err := conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"m","input":"hi","store":false}`)); err != nil {
			t.Fatal(err)
		}
		readUntil(t, conn, "response.completed")
	}
	leave(conn)
	requestRecords(t, s, sys, store) // every request ended
	waitIdle(t, sys)
	var reqs, attempts int
	for _, sp := range rec.Ended() {
		switch sp.SpanKind() {
		case trace.SpanKindServer:
			reqs++
			if sp.Name() != "chat m" || sp.Parent().SpanID().String() != clientSpanID {
				t.Errorf("response span %q under %s, want \"chat m\" under the upgrade's %s", sp.Name(), sp.Parent().SpanID(), clientSpanID)
			}
			want(t, sp, "troupe.websocket", "true")
			want(t, sp, "gen_ai.request.stream", "true")
			want(t, sp, "http.route", "/v1/responses")
			if _, ok := attrs(sp)["gen_ai.response.model"]; !ok {
				t.Errorf("no gen_ai.response.model: %v", sp.Attributes())
			}
		case trace.SpanKindClient:
			attempts++
		}
	}
	if reqs != 2 || attempts != 2 {
		t.Errorf("%d request spans and %d attempt spans, want 2 of each (one per response.create)", reqs, attempts)
	}
}
