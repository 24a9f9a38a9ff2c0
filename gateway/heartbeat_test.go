package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// goneWriter is a client connection's writer: once a write holding
// "alpha" has passed, it signals first; once gone is set, it fails every
// write, counting those that held a heartbeat.
type goneWriter struct {
	first     chan struct{}
	once      sync.Once
	gone      atomic.Bool
	heartbeat atomic.Int32 // failed writes that held a heartbeat
}

func (w *goneWriter) Write(b []byte) (int, error) {
	if w.gone.Load() {
		if bytes.Contains(b, heartbeat) {
			w.heartbeat.Add(1)
		}
		return 0, errors.New("client gone")
	}
	if bytes.Contains(b, []byte("alpha")) {
		w.once.Do(func() { close(w.first) })
	}
	return len(b), nil
}

// TestHeartbeatFindsClientGone: a relayed stream whose upstream has gone
// silent writes a heartbeat on the request's timer (stream.beat); when the
// client no longer takes writes, that heartbeat's failed write ends the
// stream: the upstream call is cancelled, the lease goes back, and the
// request is recorded as the client's doing (499, canceled). The client's
// connection here is in memory, so the client watch cannot peek at it: the
// heartbeat alone notices, and without it the stream would wait on the
// silent upstream until the request's deadline (RequestTimeout, ten
// minutes).
func TestHeartbeatFindsClientGone(t *testing.T) {
	s, sys, key := testServerCfg(t, 1, stalledStream{head: chatChunk("alpha")}, Config{MaxWait: 100 * time.Millisecond, HeartbeatInterval: 20 * time.Millisecond})
	var ctx fasthttp.RequestCtx
	conn, peer := net.Pipe()
	defer conn.Close()
	defer peer.Close()
	ctx.Init2(conn, nil, false)
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/v1/chat/completions")
	ctx.Request.Header.Set("Authorization", "Bearer "+key)
	ctx.Request.Header.SetContentType("application/json")
	s.headerReceived(&ctx.Request.Header)
	ctx.Request.SetBody([]byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	s.handle(&ctx)
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	gw := &goneWriter{first: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- ctx.Response.Write(bufio.NewWriter(gw)) }() // relays, then closes the stream (Close)
	// The client goes once the held event is through: the relay then
	// waits on the silent upstream, and only a heartbeat writes.
	<-gw.first
	gw.gone.Store(true)
	select {
	case err := <-done:
		if err == nil || gw.heartbeat.Load() == 0 {
			t.Fatalf("the response's write ended with %v after %d failed heartbeats; want a heartbeat's failure", err, gw.heartbeat.Load())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stream is still relayed 20 s after its client went away")
	}
	waitIdle(t, sys)
	waitUntil(t, "the request's record", func() bool { return len(logged(t, s)) > 0 })
	if r := logged(t, s)[0]; r.Status != statusClientClosed || r.ErrorClass != "canceled" {
		t.Fatalf("record: status %d class %q; want 499 canceled", r.Status, r.ErrorClass)
	}
}
