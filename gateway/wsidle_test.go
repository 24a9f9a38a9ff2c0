package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/troupe-gw/troupe/internal/poll"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// wsServer is a server whose client WebSockets time out as ws says.
func wsServer(t *testing.T, ws WSConfig) (*Server, string) {
	t.Helper()
	base, sys, key := testServer(t, 1, openStream{body: readFile(t, "responses-stream-text.sse")})
	return New(Config{WebSocket: ws}, sys, base.store, nil, nil, nil), key
}

// waitClosed waits until the server has no client WebSocket left.
func waitClosed(t *testing.T, s *Server, reason string) {
	t.Helper()
	poll.UntilState(t, 60*time.Second, "the connection closed as "+reason, func() (bool, string) {
		open, closed := testutil.ToFloat64(s.metrics.wsConns), testutil.ToFloat64(s.metrics.wsClosed.WithLabelValues(reason))
		return open == 0 && closed == 1, fmt.Sprintf("open %v, closed{%s} %v", open, reason, closed)
	})
}

// TestWebSocketIdleClosed: a client connection that sends nothing is
// closed with 1001 after the idle timeout (before, it stayed open
// indefinitely; issue 16, finding 7) and counted.
func TestWebSocketIdleClosed(t *testing.T) {
	s, key := wsServer(t, WSConfig{IdleTimeout: 100 * time.Millisecond})
	conn := wsClient(t, s, key) // reads time out after 20 s: the test fails, never hangs
	_, _, err := conn.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway || ce.Text != "idle timeout" {
		t.Fatalf("read: %v, want close 1001 idle timeout", err)
	}
	waitClosed(t, s, "idle_timeout")
}

// TestWebSocketIdleSparesResponse: a response that takes longer than the
// idle timeout, to a client that sends nothing meanwhile, is not cut, and
// the idle time counts from its end.
func TestWebSocketIdleSparesResponse(t *testing.T) {
	base, sys, key := testServer(t, 1, slowSSE{delay: 300 * time.Millisecond, body: readFile(t, "responses-stream-text.sse")})
	s := New(Config{WebSocket: WSConfig{IdleTimeout: 100 * time.Millisecond}}, sys, base.store, nil, nil, nil)
	conn := wsClient(t, s, key)
	if err := conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"m","input":"hi","store":false}`)); err != nil {
		t.Fatal(err)
	}
	if frames := readUntil(t, conn, "response.completed"); frames[len(frames)-1].Get("type").Str != "response.completed" {
		t.Fatalf("last frame: %s", frames[len(frames)-1].Raw)
	}
	_, _, err := conn.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
		t.Fatalf("after the response: %v, want close 1001", err)
	}
}

// TestWebSocketPingFloodClosed: a client that floods pings and reads none
// of their pongs is closed once a pong cannot be written within the write
// timeout (before, the library's ping handler gave up on each pong after a
// second and kept the connection: it was never closed; issue 16,
// finding 7).
func TestWebSocketPingFloodClosed(t *testing.T) {
	s, key := wsServer(t, WSConfig{WriteTimeout: 200 * time.Millisecond})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := smallSendBuffers{inner} // the pongs back up after a few KiB, not 4 MiB
	go s.Serve(ln)
	t.Cleanup(func() { s.srv.Shutdown() })
	var resp *http.Response
	var conn *websocket.Conn
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second, NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4 << 10) // a small window: the server's pongs back up soon
		}
		return c, err
	}}
	conn, resp, err = d.Dial("ws://"+ln.Addr().String()+"/v1/responses", http.Header{"Authorization": {"Bearer " + key}})
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	defer conn.Close()
	// The handshake's answer can reach the client before the server counts
	// the connection: flooding before then would see 0 open and stop at once.
	waitUntil(t, "the connection counted", func() bool { return testutil.ToFloat64(s.metrics.wsConns) == 1 })
	// Raw masked pings (mask key 0): the library's client stops at its
	// first write timeout, while a flood goes on. Stop once the server has
	// closed, or after 60 s (a bound for a loaded machine, not a timing).
	raw := conn.NetConn()
	frame := append([]byte{0x89, 0x80 | 125, 0, 0, 0, 0}, strings.Repeat("p", 125)...)
	batch := bytes.Repeat(frame, 64)
	sent := 0
	defer func() { t.Logf("closed after %d pings", sent) }()
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end) && testutil.ToFloat64(s.metrics.wsConns) != 0; {
		_ = raw.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := raw.Write(batch)
		sent += n / len(frame)
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			break // reset: the server closed
		}
	}
	waitClosed(t, s, "write_timeout")
}

// smallSendBuffers gives the connections it accepts a 4 KiB send buffer.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}
