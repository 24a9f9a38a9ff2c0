package gateway

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkChatRequest is the gateway's own cost of one non-stream Chat
// Completions request end to end in process: auth, parse, acquire, the
// upstream call (an in-memory canned answer), release, the answer and the
// request-log record; no sockets. Run with -cpuprofile to see where a
// request's CPU goes.
func BenchmarkChatRequest(b *testing.B) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`)
	s, _, key := testServer(b, 4, cannedTransport{200, "application/json", answer})
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	auth := "Bearer " + key
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI("/v1/chat/completions")
		ctx.Request.Header.Set("Authorization", auth)
		ctx.Request.Header.SetContentType("application/json")
		ctx.Request.SetBody(body)
		s.handle(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}
