package actors

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// wsServer is a scripted Responses WebSocket upstream on 127.0.0.1: for
// each response.create it calls answer, which writes the frames (or closes).
type wsServer struct {
	srv      *httptest.Server
	upgrades atomic.Int64
	closes   atomic.Int64 // connections that ended
	limit    int64
	answer   func(c *websocket.Conn, frame []byte) bool // false closes the connection
	mu       sync.Mutex
	frames   []string
}

func newWSServer(t *testing.T, answer func(c *websocket.Conn, frame []byte) bool) *wsServer {
	ws := &wsServer{answer: answer}
	up := websocket.Upgrader{}
	ws.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk-test" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(401)
			io.WriteString(w, `{"error":{"message":"bad key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
			return
		}
		c, err := up.Upgrade(w, r, http.Header{"X-Upgrade": {"yes"}})
		if err != nil {
			return
		}
		ws.upgrades.Add(1)
		defer ws.closes.Add(1)
		defer c.Close()
		if ws.limit > 0 {
			c.SetReadLimit(ws.limit)
		}
		for {
			_, f, err := c.ReadMessage()
			if err != nil {
				return
			}
			ws.mu.Lock()
			ws.frames = append(ws.frames, string(f))
			ws.mu.Unlock()
			if !ws.answer(c, f) {
				return
			}
		}
	}))
	t.Cleanup(ws.srv.Close)
	return ws
}

func (ws *wsServer) lastFrame() string {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(ws.frames) == 0 {
		return ""
	}
	return ws.frames[len(ws.frames)-1]
}

// completeAnswer writes created, one delta and completed for response id.
func completeAnswer(id string) func(c *websocket.Conn, frame []byte) bool {
	return func(c *websocket.Conn, _ []byte) bool {
		for _, f := range []string{
			`{"type":"response.created","sequence_number":0,"response":{"id":"` + id + `","status":"in_progress"}}`,
			`{"type":"response.output_text.delta","sequence_number":1,"delta":"hi"}`,
			`{"type":"response.completed","sequence_number":2,"response":{"id":"` + id + `","status":"completed","output":[]}}`,
		} {
			if c.WriteMessage(websocket.TextMessage, []byte(f)) != nil {
				return false
			}
		}
		return true
	}
}

// wsLease starts a system with one openai account on ws and leases it.
func wsLease(t *testing.T, ws *wsServer, idle time.Duration) (*System, *Lease) {
	t.Helper()
	s, err := Start(Config{Store: &memUsage{}, Logger: quiet, WSIdleTimeout: idle,
		Transport: func(a storage.Account) (upstream.Transport, error) { return upstream.New(a, upstream.Options{}) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Stop(ctx)
	})
	s.PutAccount(storage.Account{ID: "a1", Name: "a1", Provider: storage.ProviderOpenAI, BaseURL: ws.srv.URL + "/v1",
		Credentials: storage.Credentials{APIKey: "sk-test"}, MaxConcurrency: 2})
	waitFor(t, func() bool { _, ok := s.View("a1"); return ok })
	l, err := s.Acquire(context.Background(), AcquireRequest{Endpoint: translate.Responses, MaxWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Release(l, Outcome{}) })
	return s, l
}

// readAll reads a ResponseWS body whole, with a deadline.
func readAll(t *testing.T, r *upstream.Response) string {
	t.Helper()
	done := make(chan string, 1)
	go func() { b, _ := io.ReadAll(r.Body); done <- string(b) }()
	select {
	case b := <-done:
		r.Body.Close()
		return b
	case <-time.After(5 * time.Second):
		t.Fatal("body read did not end")
		return ""
	}
}

func TestResponseWSReusesAndReplaces(t *testing.T) {
	var n atomic.Int64
	ws := newWSServer(t, func(c *websocket.Conn, f []byte) bool {
		i := n.Add(1)
		ok := completeAnswer("resp_"+string(rune('0'+i)))(c, f)
		return ok && i != 2 // the upstream drops the connection after the second response
	})
	s, l := wsLease(t, ws, time.Minute)
	ctx := context.Background()
	for i := range 4 {
		r, err := s.ResponseWS(ctx, l, WSRequest{Body: []byte(`{"model":"m","input":"hi","stream":true}`)})
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if r.Status != 200 || r.Header.Get("X-Upgrade") != "yes" || r.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("response %d: status %d header %v", i, r.Status, r.Header)
		}
		body := readAll(t, r)
		if !strings.Contains(body, "event: response.created\ndata: {") || !strings.HasSuffix(body, "\"output\":[]}}\n\n") {
			t.Fatalf("response %d body:\n%s", i, body)
		}
		if i == 0 {
			f := ws.lastFrame()
			if !strings.HasPrefix(f, `{"type":"response.create","model":"m"`) || gjson.Get(f, "stream").Exists() {
				t.Fatalf("frame sent: %s", f)
			}
		}
	}
	// Responses 1 and 2 shared a connection; the upstream closed it, so 3
	// and 4 went on a new one.
	if got := ws.upgrades.Load(); got != 2 {
		t.Fatalf("upgrades %d, want 2", got)
	}
}

func TestResponseWSContinuationOnItsConnection(t *testing.T) {
	ws := newWSServer(t, completeAnswer("resp_A"))
	s, l := wsLease(t, ws, time.Minute)
	req := WSRequest{Body: []byte(`{"model":"m","input":[1,2,3]}`), Continuation: []byte(`{"model":"m","previous_response_id":"resp_A","input":[3]}`), PreviousResponseID: "resp_A"}
	r, err := s.ResponseWS(context.Background(), l, req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, r)
	if f := ws.lastFrame(); gjson.Get(f, "previous_response_id").Exists() {
		t.Fatalf("a fresh connection got the continuation: %s", f)
	}
	r, err = s.ResponseWS(context.Background(), l, req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, r)
	if f := ws.lastFrame(); gjson.Get(f, "previous_response_id").Str != "resp_A" {
		t.Fatalf("the connection holding resp_A got the full body: %s", f)
	}
}

func TestResponseWSIdleClose(t *testing.T) {
	ws := newWSServer(t, completeAnswer("resp_1"))
	s, l := wsLease(t, ws, 50*time.Millisecond)
	r, err := s.ResponseWS(context.Background(), l, WSRequest{Body: []byte(`{"model":"m"}`)})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, r)
	waitFor(t, func() bool { return ws.closes.Load() == 1 })
}

func TestResponseWSFailuresBeforeContent(t *testing.T) {
	t.Run("1009", func(t *testing.T) {
		ws := newWSServer(t, completeAnswer("x"))
		ws.limit = 64
		s, l := wsLease(t, ws, time.Minute)
		_, err := s.ResponseWS(context.Background(), l, WSRequest{Body: []byte(`{"model":"m","input":"` + strings.Repeat("y", 200) + `"}`)})
		if !errors.Is(err, upstream.ErrMessageTooBig) {
			t.Fatalf("err %v, want ErrMessageTooBig", err)
		}
	})
	t.Run("error frame", func(t *testing.T) {
		ws := newWSServer(t, func(c *websocket.Conn, _ []byte) bool {
			c.WriteMessage(websocket.TextMessage, []byte(`{"type":"error","status":429,"error":{"type":"usage_limit_reached","message":"limit","resets_in_seconds":60},"headers":{"x-codex-primary-used-percent":"100.0"}}`))
			return true
		})
		s, l := wsLease(t, ws, time.Minute)
		r, err := s.ResponseWS(context.Background(), l, WSRequest{Body: []byte(`{"model":"m"}`)})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		if r.Status != 429 || gjson.GetBytes(b, "error.type").Str != "usage_limit_reached" || r.Header.Get("X-Codex-Primary-Used-Percent") != "100.0" {
			t.Fatalf("status %d body %s header %v", r.Status, b, r.Header)
		}
		v := upstream.Classify(r.Status, r.Header, b)
		if v.Class != upstream.ClassQuota {
			t.Fatalf("classified %v, want quota", v.Class)
		}
	})
	t.Run("refused upgrade", func(t *testing.T) {
		ws := newWSServer(t, completeAnswer("x"))
		s, err := Start(Config{Store: &memUsage{}, Logger: quiet,
			Transport: func(a storage.Account) (upstream.Transport, error) { return upstream.New(a, upstream.Options{}) }})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Stop(context.Background())
		s.PutAccount(storage.Account{ID: "a1", Name: "a1", Provider: storage.ProviderOpenAI, BaseURL: ws.srv.URL + "/v1",
			Credentials: storage.Credentials{APIKey: "sk-wrong"}, MaxConcurrency: 1})
		waitFor(t, func() bool { _, ok := s.View("a1"); return ok })
		l, err := s.Acquire(context.Background(), AcquireRequest{Endpoint: translate.Responses, MaxWait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release(l, Outcome{})
		r, err := s.ResponseWS(context.Background(), l, WSRequest{Body: []byte(`{"model":"m"}`)})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		if r.Status != 401 || gjson.GetBytes(b, "error.code").Str != "invalid_api_key" {
			t.Fatalf("status %d body %s", r.Status, b)
		}
	})
	t.Run("broken mid-response", func(t *testing.T) {
		ws := newWSServer(t, func(c *websocket.Conn, _ []byte) bool {
			c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.created","response":{"id":"r"}}`))
			c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.output_text.delta","delta":"a"}`))
			return false
		})
		s, l := wsLease(t, ws, time.Minute)
		r, err := s.ResponseWS(context.Background(), l, WSRequest{Body: []byte(`{"model":"m"}`)})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err == nil || !strings.Contains(string(b), "output_text.delta") {
			t.Fatalf("read %q, err %v: want the delta then an error", b, err)
		}
		if upstream.KindOf(err) != upstream.KindConn {
			t.Fatalf("err %v, want KindConn", err)
		}
	})
}

func TestAppendSSEFrame(t *testing.T) {
	got := string(AppendSSEFrame(nil, []byte("{\"type\":\"response.created\",\n \"a\":1}")))
	if got != "event: response.created\ndata: {\"type\":\"response.created\",\"a\":1}\n\n" {
		t.Fatalf("got %q", got)
	}
	if got := string(AppendSSEFrame(nil, []byte(`{"x":1}`))); got != "data: {\"x\":1}\n\n" {
		t.Fatalf("got %q", got)
	}
}
