package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/troupe-gw/troupe/storage/rediscache"
	"github.com/troupe-gw/troupe/upstream"
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
	benchRequest(b, s, "/v1/chat/completions", key, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil)
}

// BenchmarkChatRequestUpstream is BenchmarkChatRequest with the account's
// real transport (upstream.New, fasthttp's client) calling a fasthttp
// server on loopback: the request's and its attempt's contexts meet
// sendFast's registration of its connection's close, which the canned
// transport never makes. Client and server share the process, so ns/op
// holds the upstream's work too.
func BenchmarkChatRequestUpstream(b *testing.B) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(c *fasthttp.RequestCtx) {
		c.SetContentType("application/json")
		c.SetBody(answer)
	}}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Shutdown() })
	tr, err := upstream.New(storage.Account{ID: "up", Name: "up", Provider: storage.ProviderOpenAI, BaseURL: "http://" + ln.Addr().String() + "/v1",
		Credentials: storage.Credentials{APIKey: "sk-bench"}}, upstream.Options{})
	if err != nil {
		b.Fatal(err)
	}
	s, _, key := testServer(b, 1, tr)
	benchRequest(b, s, "/v1/chat/completions", key, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil)
}

// BenchmarkChatStreamRequest is BenchmarkChatRequest for a streamed Chat
// request passed through (the gateway asks the openai upstream for usage
// and drops that chunk): hold, commit, relay of the canned stream, Close.
func BenchmarkChatStreamRequest(b *testing.B) {
	sse := readBench(b, "testdata/chat-stream-text.sse")
	s, _, key := testServer(b, 4, cannedTransport{200, "text/event-stream", sse})
	benchRequest(b, s, "/v1/chat/completions", key, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`), nil)
}

// BenchmarkResponsesStreamRequest is a streamed Responses request passed
// through from an openai account: hold, commit, relay, and the output the
// stream produced kept for a response.failed (respOutput).
func BenchmarkResponsesStreamRequest(b *testing.B) {
	sse := readBench(b, "testdata/responses-stream-text.sse")
	s, _, key := testServer(b, 4, cannedTransport{200, "text/event-stream", sse})
	benchRequest(b, s, "/v1/responses", key, []byte(`{"model":"m","stream":true,"input":"hi"}`), nil)
}

// BenchmarkMessagesStreamRequest is a streamed Messages request served by an
// openai account in Responses: the request and every event translated.
func BenchmarkMessagesStreamRequest(b *testing.B) {
	sse := readBench(b, "testdata/responses-stream-text.sse")
	s, _, key := testServer(b, 4, cannedTransport{200, "text/event-stream", sse})
	benchRequest(b, s, "/v1/messages", key, []byte(`{"model":"m","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`), nil)
}

// BenchmarkResponsesLimitedRequest is a non-stream Responses request on a
// key with every limit set, a session header and a model alias, against the
// in-memory cache: the prelude's limit, affinity and session calls, the
// alias rewrite, and after the answer the token charge, the response's and
// the session's affinity.
func BenchmarkResponsesLimitedRequest(b *testing.B) {
	benchLimited(b, memcache.New(memcache.Options{}))
}

// BenchmarkResponsesLimitedRequestRedis is BenchmarkResponsesLimitedRequest
// against Redis (TROUPE_TEST_REDIS_URL, default redis://127.0.0.1:6379/0;
// skipped when it does not answer): what the cache's round trips cost a
// request.
func BenchmarkResponsesLimitedRequestRedis(b *testing.B) {
	url := os.Getenv("TROUPE_TEST_REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rc, err := rediscache.New(ctx, url, rediscache.Options{Prefix: "troupe-bench-" + newRequestID() + ":"})
	if err != nil {
		b.Skip("redis:", err)
	}
	b.Cleanup(func() { rc.Close() })
	benchLimited(b, rc)
}

func benchLimited(b *testing.B, cache storage.Cache) {
	answer := []byte(`{"id":"resp_1","object":"response","status":"completed","model":"m","output":[{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"hello there"}]}],"usage":{"input_tokens":9,"output_tokens":3,"total_tokens":12}}`)
	s, _, key, store := testServerStore(b, 4, cannedTransport{200, "application/json", answer})
	for _, k := range store.keys {
		k.Limits = storage.KeyLimits{RPM: 1 << 40, RPD: 1 << 40, TokensPerDay: 1 << 50}
		store.UpdateAPIKey(context.Background(), k)
	}
	s.cache = cache
	s.cfg.Aliases = map[string]string{"alias": "m"}
	benchRequest(b, s, "/v1/responses", key, []byte(`{"model":"alias","input":"hi"}`), func(ctx *fasthttp.RequestCtx) {
		ctx.Request.Header.Set("Session_id", "bench-session")
	})
}

func readBench(b *testing.B, path string) []byte {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// benchRequest sends body to path with key through s.headerReceived and
// s.handle until b ends, as the server calls them, writing the response out
// as the server would (a stream's WriteTo and Close included); header, when
// set, adds headers to each request. writes/op counts the writes that
// reached the connection (one per flush: a stream's chunks, the end);
// goroutines/op the goroutines the process started (runtime/metrics), the
// background's included (timers' functions, a few a second).
func benchRequest(b *testing.B, s *Server, path, key string, body []byte, header func(*fasthttp.RequestCtx)) {
	auth := "Bearer " + key
	var ctx fasthttp.RequestCtx
	conn, peer := net.Pipe() // a connection whose deadlines work, and a context whose Done does, as a served one's
	b.Cleanup(func() { conn.Close(); peer.Close() })
	ctx.Init2(conn, nil, false)
	cw := &countingWriter{w: io.Discard}
	w := bufio.NewWriter(cw)
	b.ReportAllocs()
	started := goroutinesStarted()
	for b.Loop() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI(path)
		ctx.Request.Header.Set("Authorization", auth)
		ctx.Request.Header.SetContentType("application/json")
		if header != nil {
			header(&ctx)
		}
		s.headerReceived(&ctx.Request.Header)
		ctx.Request.SetBody(body)
		s.handle(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		if err := ctx.Response.Write(w); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cw.writes)/float64(b.N), "writes/op")
	b.ReportMetric(float64(goroutinesStarted()-started)/float64(b.N), "goroutines/op")
}

// goroutinesStarted is how many goroutines the process has started.
func goroutinesStarted() uint64 {
	m := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(m)
	return m[0].Value.Uint64()
}
