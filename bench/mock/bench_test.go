package mock

import (
	"bufio"
	"io"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkChatStreamLoopback measures a whole streamed chat answer (role
// chunk, 12 deltas, finish, usage, [DONE]) over loopback: a fasthttp client
// and the fleet in one process, so allocs/op count both sides.
func BenchmarkChatStreamLoopback(b *testing.B) {
	acc := Account{Name: "bench-0001", Kind: KindOpenAI, Token: "sk-bench-000001"}
	_, base := startFleet(b, acc)
	c := &fasthttp.Client{}
	body := []byte(`{"model":"gpt-5.4","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Hello!"}]}`)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		for pb.Next() {
			req.SetRequestURI(base + "/v1/chat/completions")
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.Set("Authorization", "Bearer "+acc.Token)
			req.SetBodyRaw(body)
			if err := c.Do(req, resp); err != nil {
				b.Fatal(err)
			}
			if resp.StatusCode() != 200 || len(resp.Body()) < 1000 {
				b.Fatalf("status %d, %d bytes", resp.StatusCode(), len(resp.Body()))
			}
		}
	})
}

// BenchmarkRenderChatStream measures rendering every event of a streamed chat
// answer into the reused buffer, without the network; it should not allocate.
func BenchmarkRenderChatStream(b *testing.B) {
	f := New(Config{})
	acc := newAccount(Account{Name: "bench-0001", Kind: KindOpenAI, Token: "t"})
	s := getStream(f, acc, routeChat)
	s.req = request{model: "gpt-5.4", modelJSON: `"gpt-5.4"`, includeUsage: true, inputTokens: 30}
	s.p = acc.plan(&s.req)
	w := bufio.NewWriter(io.Discard)
	b.ReportAllocs()
	for b.Loop() {
		s.head = s.appendChatHead(s.head[:0])
		s.emit(w, s.appendChatRole(s.buf[:0]))
		for i := range s.p.tokens {
			s.emit(w, s.appendChatDelta(s.buf[:0], i))
		}
		s.emit(w, s.appendChatFinish(s.buf[:0]))
		s.emit(w, s.appendChatUsageChunk(s.buf[:0]))
	}
}

// BenchmarkRenderResponsesStream is the same for a Responses answer.
func BenchmarkRenderResponsesStream(b *testing.B) {
	f := New(Config{})
	acc := newAccount(Account{Name: "bench-0001", Kind: KindOpenAI, Token: "t"})
	s := getStream(f, acc, routeResponses)
	s.req = request{model: "gpt-5.4", modelJSON: `"gpt-5.4"`, store: true, inputTokens: 30}
	s.p = acc.plan(&s.req)
	w := bufio.NewWriter(io.Discard)
	b.ReportAllocs()
	for b.Loop() {
		seq := 0
		s.emit(w, s.appendRespLifecycle(s.buf[:0], "response.created", seq, false))
		s.emit(w, s.appendRespLifecycle(s.buf[:0], "response.in_progress", seq+1, false))
		s.emit(w, s.appendRespItemAdded(s.buf[:0], seq+2))
		s.emit(w, s.appendRespPart(s.buf[:0], "response.content_part.added", seq+3, false))
		for i := range s.p.tokens {
			s.emit(w, s.appendRespDelta(s.buf[:0], seq+4+i, i))
		}
		s.emit(w, s.appendRespTextDone(s.buf[:0], 20))
		s.emit(w, s.appendRespPart(s.buf[:0], "response.content_part.done", 21, true))
		s.emit(w, s.appendRespItemDone(s.buf[:0], 22))
		s.emit(w, s.appendRespLifecycle(s.buf[:0], "response.completed", 23, true))
	}
}

// BenchmarkRenderMessagesStream is the same for an Anthropic Messages
// answer (message_start, block start + ping, 12 deltas, block stop,
// message_delta, message_stop).
func BenchmarkRenderMessagesStream(b *testing.B) {
	f := New(Config{})
	acc := newAccount(Account{Name: "bench-0001", Kind: KindAnthropic, Token: "t"})
	s := getStream(f, acc, routeMessages)
	s.req = request{model: "claude-sonnet-4-5", modelJSON: `"claude-sonnet-4-5"`, inputTokens: 30}
	s.p = acc.plan(&s.req)
	w := bufio.NewWriter(io.Discard)
	b.ReportAllocs()
	for b.Loop() {
		s.emit(w, s.appendMessageStart(s.buf[:0]))
		s.emit(w, append(s.appendBlockStart(s.buf[:0]), messagesPing...))
		for i := range s.p.tokens {
			s.emit(w, s.appendBlockDelta(s.buf[:0], i))
		}
		s.emit(w, append(s.buf[:0], blockStop...))
		s.emit(w, s.appendMessageDelta(s.buf[:0]))
		s.emit(w, append(s.buf[:0], messagesStop...))
	}
}

// BenchmarkMessagesStreamLoopback is BenchmarkChatStreamLoopback for a
// streamed Messages answer of an anthropic account.
func BenchmarkMessagesStreamLoopback(b *testing.B) {
	acc := Account{Name: "bench-0002", Kind: KindAnthropic, Token: "sk-ant-bench-0002"}
	_, base := startFleet(b, acc)
	c := &fasthttp.Client{}
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hello!"}]}`)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		for pb.Next() {
			req.SetRequestURI(base + "/v1/messages")
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.Set("X-Api-Key", acc.Token)
			req.Header.Set("Anthropic-Version", "2023-06-01")
			req.SetBodyRaw(body)
			if err := c.Do(req, resp); err != nil {
				b.Fatal(err)
			}
			if resp.StatusCode() != 200 || len(resp.Body()) < 1000 {
				b.Fatalf("status %d, %d bytes", resp.StatusCode(), len(resp.Body()))
			}
		}
	})
}
