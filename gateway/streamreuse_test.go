package gateway

import (
	"net"
	"os"
	"sync/atomic"
	"testing"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

// countingListener counts the connections it accepted.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// TestStreamReusesUpstreamConn: a Chat stream relayed to its end gives its
// upstream connection back to the pool, so the next stream to the same
// upstream goes out on it. The stream's end used to end the attempt's
// context before closing the body, which closed the connection (the
// context's AfterFunc) and made every stream dial anew: a connect, an
// accept and a close a stream, and a TLS handshake for an https upstream.
func TestStreamReusesUpstreamConn(t *testing.T) {
	sse, err := os.ReadFile("testdata/chat-stream-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	up := &fasthttp.Server{Handler: func(r *fasthttp.RequestCtx) {
		r.SetContentType("text/event-stream")
		r.SetBody(sse)
	}}
	go up.Serve(cl)
	t.Cleanup(func() { up.Shutdown() })
	tr, err := upstream.New(storage.Account{ID: "up", Name: "up", Provider: storage.ProviderOpenAI, BaseURL: "http://" + ln.Addr().String() + "/v1",
		Credentials: storage.Credentials{APIKey: "sk-test"}}, upstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, sys, key := testServer(t, 1, tr)
	front := serveTCP(t, s)
	hc := &fasthttp.HostClient{Addr: front.Addr().String(), MaxConns: 1}
	for i := range 3 {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.Header.SetMethod("POST")
		req.SetRequestURI("http://" + front.Addr().String() + "/v1/chat/completions")
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.SetContentType("application/json")
		req.SetBody([]byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		if err := hc.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != 200 {
			t.Fatalf("stream %d: status %d: %s", i, resp.StatusCode(), resp.Body())
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		// The stream's Close (which gives the connection back) has run once
		// its lease is released.
		waitUntil(t, "the stream's lease to be released", func() bool { return inFlight(sys) == 0 })
	}
	if n := cl.n.Load(); n != 1 {
		t.Fatalf("3 streams one after another took %d upstream connections, want 1", n)
	}
}
