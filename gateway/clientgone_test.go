package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// hanging is an upstream that answers only when its call is cancelled,
// with the error the real transports give then. started receives a value
// as each call begins (the request holds its lease then).
type hanging struct {
	cancelled atomic.Int64
	started   chan struct{}
}

func newHanging() *hanging { return &hanging{started: make(chan struct{}, 16)} }

func (h *hanging) Do(ctx context.Context, _ *upstream.Request) (*upstream.Response, error) {
	h.started <- struct{}{}
	<-ctx.Done()
	h.cancelled.Add(1)
	return nil, &upstream.Error{Kind: upstream.KindCanceled, Err: ctx.Err()}
}

// waitStarted waits until a call to h has begun.
func (h *hanging) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-h.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
}

// A client that hangs up while its non-stream request waits on a slow
// upstream ends the request: the upstream call is cancelled, the lease goes
// back, and the request is logged as 499 canceled (it was held until the
// upstream gave up, and logged as a 502). The upstream here never answers
// and the request timeout is minutes: only the hang-up can end it.
func TestClientGoneCancelsRequest(t *testing.T) {
	up := newHanging()
	s, sys, key := testServer(t, 1, up)
	ln := serveTCP(t, s)
	for _, stream := range []bool{false, true} {
		conn, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body)
		up.waitStarted(t)
		conn.Close()
		waitIdle(t, sys)
	}
	if n := up.cancelled.Load(); n != 2 {
		t.Errorf("%d upstream calls cancelled, want 2", n)
	}
	// A request's record is queued after its lease is returned (waitIdle),
	// by the handler's goroutine: wait for both.
	var recs []storage.UsageRecord
	waitUntil(t, "both requests' records", func() bool { recs = logged(t, s); return len(recs) >= 2 })
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	for _, r := range recs {
		if r.Status != statusClientClosed || r.ErrorClass != "canceled" {
			t.Errorf("record %+v, want status 499, class canceled", r)
		}
	}
}

// Watching does not eat into a pipelined next request: two requests sent
// back to back on one connection are both answered.
func TestClientWatchKeepsPipelinedRequests(t *testing.T) {
	slow := delayed{d: 3 * clientPoll, inner: cannedTransport{200, "application/json", []byte(`{"id":"x","object":"chat.completion","choices":[]}`)}}
	s, _, key := testServer(t, 1, slow)
	ln := serveTCP(t, s)
	conn := dialTCP(t, ln)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	req := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body)
	if _, err := io.WriteString(conn, req+req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i+1, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "chat.completion") {
			t.Fatalf("response %d: %d %s", i+1, resp.StatusCode, b)
		}
	}
}

// delayed answers like inner after d (or fails when cancelled first).
type delayed struct {
	d     time.Duration
	inner upstream.Transport
}

func (d delayed) Do(ctx context.Context, r *upstream.Request) (*upstream.Response, error) {
	select {
	case <-time.After(d.d):
		return d.inner.Do(ctx, r)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// A request still running when the shutdown grace ends is cancelled: it
// returns its lease and leaves its record before Shutdown returns, instead
// of being cut when the process then stops the actors and storage.
func TestShutdownCancelsAfterGrace(t *testing.T) {
	up := newHanging()
	s, sys, key := testServer(t, 1, up)
	ln := serveTCP(t, s)
	conn := dialTCP(t, ln)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body)
	up.waitStarted(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown returned nil with a request running past its grace")
	}
	if n := s.serving.Load(); n != 0 {
		t.Fatalf("%d requests still counted after Shutdown", n)
	}
	if up.cancelled.Load() != 1 {
		t.Errorf("the upstream call was not cancelled")
	}
	waitIdle(t, sys)
	// The lease may be back before the request records its usage (a
	// release to an idle account is handled on the request's goroutine).
	waitUntil(t, "the request's usage record", func() bool { return len(logged(t, s)) > 0 })
	if recs := logged(t, s); len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
}

// BenchmarkClientWatch is the client-gone watch's own cost for one request
// on a real socket that ends before the first look: start the watch, stop
// it.
func BenchmarkClientWatch(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	conn := <-accepted
	defer conn.Close()
	var s Server
	gone := func() { b.Error("a live client reported gone") }
	b.ReportAllocs()
	for b.Loop() {
		s.watch.stop(s.watch.watch(conn, goneFunc(gone)))
	}
}

// goneFunc is a func as a canceler, for watches outside a request.
type goneFunc func()

func (f goneFunc) cancel() { f() }
