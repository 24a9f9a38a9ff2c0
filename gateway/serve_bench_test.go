//go:build unix

package gateway

import (
	"testing"

	"github.com/troupe-gw/troupe/internal/cputime"
	"github.com/valyala/fasthttp"
)

// BenchmarkServeKeepAlive is BenchmarkChatRequest through a real socket:
// one keep-alive connection on loopback, a request after the other, each
// read, handled and answered by the front's fasthttp server as configured
// (New), and, for comparison, with fasthttp's ReduceMemoryUsage off, which
// keeps a connection's read and write buffers (16 and 4 KiB) and request
// context while it waits for its next request instead of pooling them,
// and reads its first byte with the rest (one read system call fewer).
// cpu-ns/op is the process's user+system CPU per request, client
// included.
func BenchmarkServeKeepAlive(b *testing.B) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	for _, reduce := range []bool{true, false} {
		name := "reduce_memory=on"
		if !reduce {
			name = "reduce_memory=off"
		}
		b.Run(name, func(b *testing.B) {
			s, _, key := testServer(b, 4, cannedTransport{200, "application/json", answer})
			s.srv.ReduceMemoryUsage = reduce
			ln := serveTCP(b, s)
			send := chatSender(b, ln.Addr().String(), key, body)
			send() // the connection is open before the clock starts
			b.ReportAllocs()
			cpu0 := int64(cputime.Process())
			for b.Loop() {
				send()
			}
			b.ReportMetric(float64(int64(cputime.Process())-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// chatSender returns a function that POSTs body to /v1/chat/completions of
// the front at addr with key, over one keep-alive connection, failing b
// on an error or a status other than 200.
func chatSender(b *testing.B, addr, key string, body []byte) func() {
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: 1}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	b.Cleanup(func() {
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	})
	return func() {
		req.Reset()
		req.Header.SetMethod("POST")
		req.SetRequestURI("http://" + addr + "/v1/chat/completions")
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.SetContentType("application/json")
		req.SetBody(body)
		if err := hc.Do(req, resp); err != nil {
			b.Fatal(err)
		}
		if resp.StatusCode() != 200 {
			b.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
		}
	}
}
