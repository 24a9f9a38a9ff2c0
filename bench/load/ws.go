package load

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
)

// WSClient sends Responses requests over the Responses API WebSocket mode
// (GET /v1/responses upgraded; https://developers.openai.com/api/docs/guides/websocket-mode):
// one {"type":"response.create",…} text frame per request, answered by the
// stream's events as text frames, the last response.completed. A connection
// carries one response at a time; the client keeps a pool of at most
// maxConns connections (the keys used in turn, one per connection), dialing
// when none is idle. Safe for concurrent use.
type WSClient struct {
	target Target
	url    string
	idle   chan *websocket.Conn
	slots  chan struct{} // one per connection, open or being dialed
	next   atomic.Uint64
	frames sync.Map // model → []byte
	dialer websocket.Dialer
}

// NewWSClient returns a WebSocket client for t with at most maxConns
// connections (a gateway may limit connections per key: Troupe allows 64).
func NewWSClient(t Target, maxConns int) (*WSClient, error) {
	if len(t.Keys) == 0 {
		return nil, fmt.Errorf("load: target %s has no key", t.Name)
	}
	u := strings.TrimRight(t.BaseURL, "/") + "/responses"
	switch {
	case strings.HasPrefix(u, "http://"):
		u = "ws://" + strings.TrimPrefix(u, "http://")
	case strings.HasPrefix(u, "https://"):
		u = "wss://" + strings.TrimPrefix(u, "https://")
	default:
		return nil, fmt.Errorf("load: target %q: want an http(s) base URL", t.BaseURL)
	}
	maxConns = max(maxConns, 1)
	return &WSClient{
		target: t, url: u,
		idle:   make(chan *websocket.Conn, maxConns),
		slots:  make(chan struct{}, maxConns),
		dialer: websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 16 << 10, WriteBufferSize: 4 << 10},
	}, nil
}

// Target returns the client's target.
func (c *WSClient) Target() Target { return c.target }

// Close closes the idle connections.
func (c *WSClient) Close() {
	for {
		select {
		case conn := <-c.idle:
			conn.Close()
			<-c.slots
		default:
			return
		}
	}
}

// get returns an idle connection, or dials one when a slot is free, or
// waits for either until deadline.
func (c *WSClient) get(deadline time.Time) (*websocket.Conn, error) {
	select {
	case conn := <-c.idle:
		return conn, nil
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case conn := <-c.idle:
		return conn, nil
	case c.slots <- struct{}{}:
	case <-t.C:
		return nil, errTimeout
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+c.target.Keys[(c.next.Add(1)-1)%uint64(len(c.target.Keys))])
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	conn, resp, err := c.dialer.DialContext(ctx, c.url, h)
	if err != nil {
		<-c.slots
		if resp != nil {
			return nil, fmt.Errorf("%w: %d", errUpgrade, resp.StatusCode)
		}
		return nil, err
	}
	return conn, nil
}

var (
	errTimeout = errors.New("timeout")
	errUpgrade = errors.New("ws_upgrade")
	errWSFrame = errors.New("ws_error")
)

// Do sends one response.create frame for call (its Stream field is
// ignored: a WebSocket answer is always a stream) and reads the answer up
// to response.completed. Connection set-up, when there is no idle
// connection, counts in the request's latency.
func (c *WSClient) Do(call Call, start time.Time) Result {
	sent := time.Now()
	deadline := sent.Add(call.Timeout)
	var res Result
	conn, err := c.get(deadline)
	if err != nil {
		res.Latency = time.Since(start)
		switch {
		case errors.Is(err, errUpgrade):
			res.Err = "ws_upgrade_" + strings.TrimPrefix(err.Error(), errUpgrade.Error()+": ")
		case errors.Is(err, errTimeout):
			res.Err = "timeout"
		default:
			res.Err = "connect"
		}
		return res
	}
	err = c.exchange(conn, call, start, deadline, &res)
	end := time.Now() // one end for both, so Latency-Service is exactly the lateness
	res.Latency = end.Sub(start)
	res.Service = end.Sub(sent)
	if err != nil {
		conn.Close()
		<-c.slots
		switch {
		case errors.Is(err, errWSFrame):
			res.Err = "ws_error"
		case strings.Contains(err.Error(), "timeout"):
			res.Err = "timeout"
		default:
			res.Err = "io"
		}
		return res
	}
	res.Status = http.StatusOK
	c.idle <- conn
	return res
}

// exchange writes the frame and reads events until response.completed.
func (c *WSClient) exchange(conn *websocket.Conn, call Call, start, deadline time.Time, res *Result) error {
	_ = conn.SetWriteDeadline(deadline)
	_ = conn.SetReadDeadline(deadline)
	if err := conn.WriteMessage(websocket.TextMessage, c.frame(call.Model)); err != nil {
		return err
	}
	for {
		typ, msg, err := conn.ReadMessage()
		if err != nil {
			return err
		}
		if typ != websocket.TextMessage {
			continue
		}
		switch {
		case res.TTFT == 0 && bytes.Contains(msg, respDelta):
			res.TTFT = time.Since(start)
		case bytes.Contains(msg, respCompleted):
			if res.TTFT == 0 {
				return errIncomplete
			}
			return nil
		case bytes.HasPrefix(msg, []byte(`{"type":"error"`)), bytes.Contains(msg, []byte(`"type":"response.failed"`)):
			return errWSFrame
		}
	}
}

func (c *WSClient) frame(model string) []byte {
	if b, ok := c.frames.Load(model); ok {
		return b.([]byte)
	}
	b := fmt.Appendf(nil, `{"type":"response.create","model":%q,"input":"Say hello.","store":false}`, model)
	c.frames.Store(model, b)
	return b
}
