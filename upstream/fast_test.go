package upstream

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/troupe-gw/troupe/internal/cputime"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

func TestClientModeChoice(t *testing.T) {
	for _, tc := range []struct {
		url  string
		mode ClientMode
		want bool
	}{
		{"http://127.0.0.1:9090/v1", ClientAuto, true},
		{"https://api.openai.com/v1", ClientAuto, false},
		{"http://127.0.0.1:9090/v1", ClientNetHTTP, false},
		{"https://api.openai.com/v1", ClientNetHTTP, false},
		{"http://127.0.0.1:9090/v1", ClientHTTP1, true},
		{"https://vllm.internal/v1", ClientHTTP1, true},
	} {
		u, _ := url.Parse(tc.url)
		if got := useFast(u, tc.mode); got != tc.want {
			t.Errorf("useFast(%s, %d) = %v, want %v", tc.url, tc.mode, got, tc.want)
		}
	}
	for _, s := range []string{"", "auto", "nethttp", "http1"} {
		if _, err := ParseClientMode(s); err != nil {
			t.Errorf("ParseClientMode(%q): %v", s, err)
		}
	}
	if _, err := ParseClientMode("fast"); err == nil {
		t.Error("ParseClientMode(fast): no error")
	}
	// codex and accounts with a client of their own never take fasthttp.
	if tr := newDirect(t, account(storage.ProviderCodex, "http://127.0.0.1:1/x"), Options{ClientMode: ClientAuto}).(*codex); tr.fast != nil {
		t.Error("codex account on fasthttp")
	}
	if tr := mustNew(t, account(storage.ProviderOpenAI, "http://127.0.0.1:1/v1"), Options{Client: http.DefaultClient}).(*openAI); tr.fast != nil {
		t.Error("account with Options.Client on fasthttp")
	}
	if tr := newDirect(t, account(storage.ProviderAnthropic, "http://127.0.0.1:1"), Options{ClientMode: ClientAuto}).(*anthropic); tr.fast == nil {
		t.Error("anthropic http:// account not on fasthttp")
	}
}

// On the fasthttp path a body read to its end gives its connection back to
// the pool, a body closed early closes it, and the answer's headers (rate
// limits, request id) come back under canonical keys.
func TestFastConnectionReuse(t *testing.T) {
	srv, got := recordServer(t, answer{status: 200, header: map[string]string{
		"Content-Type": "application/json", "x-request-id": "req-1", "x-ratelimit-remaining-requests": "99",
	}, body: []byte(`{"id":"x"}`)})
	tr := newDirect(t, account(storage.ProviderOpenAI, srv.URL), Options{ClientMode: ClientAuto})
	if tr.(*openAI).fast == nil {
		t.Fatal("not on fasthttp")
	}
	do := func(readAll bool) *Response {
		resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Chat, Body: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if readAll {
			io.Copy(io.Discard, resp.Body)
		}
		resp.Body.Close()
		return resp
	}
	resp := do(true)
	if resp.Header.Get("X-Request-Id") != "req-1" || resp.Header["X-Ratelimit-Remaining-Requests"][0] != "99" || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("headers %v", resp.Header)
	}
	do(true)
	do(false) // closed unread: the connection is closed, not pooled
	do(true)
	c := got()
	if len(c) != 4 {
		t.Fatalf("%d requests, want 4", len(c))
	}
	if c[0].RemoteAddr != c[1].RemoteAddr || c[1].RemoteAddr != c[2].RemoteAddr {
		t.Errorf("whole answers did not reuse the connection: %s %s %s", c[0].RemoteAddr, c[1].RemoteAddr, c[2].RemoteAddr)
	}
	if c[3].RemoteAddr == c[2].RemoteAddr {
		t.Errorf("the connection of a body closed unread was reused (%s)", c[3].RemoteAddr)
	}
}

// newDirect is New without mustNew's suite mode: for tests of one path.
func newDirect(t testing.TB, a storage.Account, opts Options) Transport {
	t.Helper()
	tr, err := New(a, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// BenchmarkRoundTrip is one upstream call per op through each client, on
// loopback to a fasthttp server (cheap, so the client's share shows):
// request written, answer read whole, body closed. cpu-ns/op is the
// process's CPU time per op (user+system, server included), which counts
// the work of net/http's per-connection goroutines that ns/op can hide.
//
//	go test -run '^$' -bench RoundTrip -benchmem ./upstream/
func BenchmarkRoundTrip(b *testing.B) {
	json := []byte(`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`)
	sse := testdata(b, "chat-stream-text.sse")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(c *fasthttp.RequestCtx) {
		c.Response.Header.Set("X-Request-Id", "req-1")
		c.Response.Header.Set("X-Ratelimit-Remaining-Requests", "99")
		if string(c.Request.Header.Peek("Accept")) == "text/event-stream" {
			c.SetContentType("text/event-stream")
			c.SetBody(sse)
			return
		}
		c.SetContentType("application/json")
		c.SetBody(json)
	}}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Shutdown() })
	base := "http://" + ln.Addr().String() + "/v1"
	body := []byte(`{"model":"gpt-5-nano","messages":[{"role":"user","content":"hi"}]}`)
	buf := make([]byte, 32<<10)
	for _, mode := range []struct {
		name string
		mode ClientMode
	}{{"nethttp", ClientNetHTTP}, {"fasthttp", ClientAuto}} {
		for _, stream := range []bool{false, true} {
			name := mode.name + "/json"
			if stream {
				name = mode.name + "/sse"
			}
			b.Run(name, func(b *testing.B) {
				tr := newDirect(b, account(storage.ProviderOpenAI, base), Options{ClientMode: mode.mode})
				req := &Request{Endpoint: translate.Chat, Stream: stream, Body: body}
				ctx, cancel := context.WithCancel(context.Background()) // cancelable, as a gateway request's is
				defer cancel()
				b.ReportAllocs()
				cpu0 := int64(cputime.Process())
				for b.Loop() {
					resp, err := tr.Do(ctx, req)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{resp.Body}, buf); err != nil {
						b.Fatal(err)
					}
					resp.Body.Close()
				}
				b.ReportMetric(float64(int64(cputime.Process())-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// An SSE answer in chunks, one event a chunk: the chunks that came in one
// read from the connection are returned by one Read of the body (before,
// one a Read, so the gateway wrote its client one event at a time), and a
// chunk only partly there is not waited for while whole ones are in hand.
func TestFastChunksReadTogether(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	more := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+
			"9\r\ndata: a\n\n\r\n9\r\ndata: b\n\n\r\n9\r\nda")
		<-more
		io.WriteString(c, "ta: c\n\n\r\n0\r\n\r\n")
	}()
	tr := newDirect(t, account(storage.ProviderOpenAI, "http://"+ln.Addr().String()+"/v1"), Options{ClientMode: ClientAuto})
	if tr.(*openAI).fast == nil {
		t.Fatal("not on fasthttp")
	}
	resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Chat, Stream: true, Body: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	type read struct {
		b   string
		err error
	}
	reads := make(chan read)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			reads <- read{string(buf[:n]), err}
			if err != nil {
				return
			}
		}
	}()
	next := func() read {
		select {
		case r := <-reads:
			return r
		case <-time.After(20 * time.Second): // a bound, not a measure: the read is stuck
			t.Fatal("a Read of the body blocked with whole chunks in hand")
			return read{}
		}
	}
	if r := next(); r.b != "data: a\n\ndata: b\n\n" || r.err != nil {
		t.Fatalf("first Read: %q, %v; want both whole chunks", r.b, r.err)
	}
	close(more)
	var rest string
	for {
		r := next()
		rest += r.b
		if r.err == io.EOF {
			break
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	if rest != "data: c\n\n" {
		t.Fatalf("rest %q", rest)
	}
}

// A server that closes a keep-alive connection once it is idle (uvicorn
// after 5 s, Node after 5 s) does not fail the next request: the pooled
// connection is found closed before the request is written on it, and a
// new one is dialed. The server here closes at once and the transport's
// clock runs probeIdleAfter ahead, so every reuse is of a connection idle
// past the interval (as the real closes come seconds after the answer).
func TestFastIdleClosedByServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed := make(chan struct{}, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				body := `{"id":"x"}`
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				c.Close() // the idle timeout, at once: no Connection: close was said
				closed <- struct{}{}
			}()
		}
	}()
	tr := newDirect(t, account(storage.ProviderOpenAI, "http://"+ln.Addr().String()+"/v1"), Options{ClientMode: ClientAuto})
	if tr.(*openAI).fast == nil {
		t.Fatal("not on fasthttp")
	}
	tr.(*openAI).clock = func() time.Time { return time.Now().Add(probeIdleAfter) }
	for i := range 3 {
		resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Chat, Body: []byte(`{}`)})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != `{"id":"x"}` {
			t.Fatalf("request %d: body %q, %v", i, b, err)
		}
		<-closed // the server's close is on the wire before the next request
	}
}

// A pooled connection is probed for the server's close only when it has
// been idle probeIdleAfter or longer: one given back just now is reused
// without the probe's system call, a new one is never probed, and one idle
// past the interval is probed and, alive, reused. The transport's clock is
// pinned, not waited for: first before every use (each connection was used
// "just now"), then probeIdleAfter past the present.
func TestFastProbeOnlyIdle(t *testing.T) {
	srv, got := recordServer(t, answer{status: 200, header: map[string]string{"Content-Type": "application/json"}, body: []byte(`{"id":"x"}`)})
	tr := newDirect(t, account(storage.ProviderOpenAI, srv.URL), Options{ClientMode: ClientAuto})
	o := tr.(*openAI)
	if o.fast == nil {
		t.Fatal("not on fasthttp")
	}
	probes := 0 // requests run one at a time on this goroutine
	o.probe = func(c net.Conn) bool { probes++; return idleAlive(c) }
	do := func() {
		t.Helper()
		resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Chat, Body: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	start := time.Now()
	o.clock = func() time.Time { return start }
	for range 4 {
		do()
	}
	if probes != 0 {
		t.Errorf("%d probes of connections used just now, want 0", probes)
	}
	o.clock = func() time.Time { return time.Now().Add(probeIdleAfter) }
	do()
	do()
	if probes != 2 {
		t.Errorf("%d probes of connections idle past probeIdleAfter, want 2", probes)
	}
	c := got()
	if len(c) != 6 {
		t.Fatalf("%d requests, want 6", len(c))
	}
	for i := range c {
		if c[i].RemoteAddr != c[0].RemoteAddr {
			t.Fatalf("request %d on %s, want every request on the first connection %s", i, c[i].RemoteAddr, c[0].RemoteAddr)
		}
	}
}

func TestProbeDue(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	b := &base{clock: func() time.Time { return now }}
	for _, tc := range []struct {
		name             string
		created, lastUse time.Time
		want             bool
	}{
		{"new connection", now.Add(-time.Minute), time.Time{}, false},
		{"used just now", now.Add(-time.Minute), now.Add(-time.Millisecond), false},
		{"idle just under the interval", now.Add(-time.Minute), now.Add(-probeIdleAfter + time.Nanosecond), false},
		{"idle the interval", now.Add(-time.Minute), now.Add(-probeIdleAfter), true},
		{"idle for long", now.Add(-time.Hour), now.Add(-time.Minute), true},
	} {
		if got := b.probeDue(tc.created, tc.lastUse); got != tc.want {
			t.Errorf("%s: probeDue = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// fastHeader keeps every field but Connection, repeated fields in order, and
// its values' shared backing never lets an append to one key's values show
// in another's.
func TestFastHeader(t *testing.T) {
	var fh fasthttp.ResponseHeader
	head := "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n" +
		"Set-Cookie: a=1\r\nRetry-After: 7\r\nSet-Cookie: b=2\r\nX-Ratelimit-Reset-Requests: 1s\r\nContent-Length: 2\r\n\r\n"
	if err := fh.Read(bufio.NewReader(strings.NewReader(head))); err != nil {
		t.Fatal(err)
	}
	h := fastHeader(&fh)
	want := http.Header{
		"Content-Type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"}, "Retry-After": {"7"},
		"X-Ratelimit-Reset-Requests": {"1s"}, "Content-Length": {"2"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("fastHeader = %v, want %v", h, want)
	}
	h.Add("Retry-After", "8")
	h["Content-Type"] = append(h["Content-Type"], "text/plain")
	if got := h["X-Ratelimit-Reset-Requests"]; len(got) != 1 || got[0] != "1s" {
		t.Fatalf("a neighbour's append changed X-Ratelimit-Reset-Requests to %q", got)
	}
	if got := h.Values("Retry-After"); len(got) != 2 || got[0] != "7" || got[1] != "8" {
		t.Fatalf("Retry-After = %q", got)
	}
	// The map (2 up to 8 keys), the values, the string, Set-Cookie's append.
	if n := testing.AllocsPerRun(100, func() { fastHeader(&fh) }); n > 5 {
		t.Errorf("fastHeader: %v allocations, want 5 at most", n)
	}
}

// ownAfterFunc is a context with an AfterFunc method of its own, as the
// gateway's request and attempt contexts have; registered counts its
// registrations.
type ownAfterFunc struct {
	context.Context
	registered atomic.Int64
}

func (c *ownAfterFunc) AfterFunc(f func()) func() bool {
	c.registered.Add(1)
	return context.AfterFunc(c.Context, f)
}

// sendFast registers its connection's close with a context's own
// AfterFunc, when it has one, rather than through context.AfterFunc; the
// context's end still interrupts a read blocked on the connection, and
// the body's error says the call was cancelled.
func TestFastUsesContextsAfterFunc(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hold := make(chan struct{})
	defer close(hold)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
		<-hold // the rest of the body never comes
	}()
	tr := newDirect(t, account(storage.ProviderOpenAI, "http://"+ln.Addr().String()+"/v1"), Options{ClientMode: ClientAuto})
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx := &ownAfterFunc{Context: parent}
	resp, err := tr.Do(ctx, &Request{Endpoint: translate.Chat, Body: []byte(`{"model":"m"}`)})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if n := ctx.registered.Load(); n != 1 {
		t.Fatalf("%d registrations with the context's AfterFunc, want 1", n)
	}
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(resp.Body)
		read <- err
	}()
	cancel()
	if err := <-read; KindOf(err) != KindCanceled {
		t.Fatalf("body read after the cancel: %v, want a cancelled call", err)
	}
}

// TestFastCanonical: a name fastCanonical accepts is set by SetCanonical to
// the same request bytes as by Set, and every name the providers write
// (their own, the headers they pass on, the codex identity's) is one of
// them, so sendFast's requests are what they were with Set.
func TestFastCanonical(t *testing.T) {
	provider := []string{"Authorization", "Content-Type", "Accept", "User-Agent", "X-Api-Key", "Anthropic-Version",
		"Chatgpt-Account-Id", "Originator", "Version", hSessionID, hSessionIDLegacy, hThreadID, hClientRequestID}
	provider = append(provider, openAIPassHeaders...)
	provider = append(provider, anthropicPassHeaders...)
	provider = append(provider, codexPassHeaders...)
	for _, k := range provider {
		if !fastCanonical(k) {
			t.Errorf("%q: not canonical for fasthttp, so sendFast sets it with Set", k)
		}
	}
	odd := []string{"x-lower", "X-UPPER", "X-Mixed-cASE", "Foo Bar", "Foo\r\nX-Injected", "A_b-C", "1abc", "-foo", "Host",
		"Content-Length", "Connection", "Ä-B", "X.Dot", "a", "A", "X--Y", "X-"}
	for _, k := range append(provider, odd...) {
		var set, canon fasthttp.Request
		set.Header.Set(k, "v")
		canon.Header.SetCanonical([]byte(k), []byte("v"))
		same := set.Header.String() == canon.Header.String()
		if fastCanonical(k) && !same {
			t.Errorf("%q: fastCanonical, but Set writes %q and SetCanonical %q", k, set.Header.String(), canon.Header.String())
		}
		if !fastCanonical(k) && k != "Foo Bar" && k != "Foo\r\nX-Injected" && k != "Ä-B" && k != "X.Dot" && same {
			t.Errorf("%q: Set and SetCanonical agree, but fastCanonical refuses it", k)
		}
	}
}
