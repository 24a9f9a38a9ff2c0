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

// readFrames reads a ResponseWS answer's frames through its terminal frame
// (or the first error), with a deadline, and releases it as the gateway
// does: completed with its response id, else closing the connection.
func readFrames(t *testing.T, r *WSResponse) ([]string, error) {
	t.Helper()
	type read struct {
		frames []string
		err    error
	}
	done := make(chan read, 1)
	go func() {
		var got read
		for {
			f, err := r.Next()
			if err != nil {
				got.err = err
				r.Release("")
				break
			}
			got.frames = append(got.frames, string(f))
			if typ := gjson.GetBytes(f, "type").Str; typ == "response.completed" {
				r.Release(gjson.GetBytes(f, "response.id").Str)
				break
			} else if typ == "response.failed" || typ == "error" {
				r.Release("")
				break
			}
		}
		done <- got
	}()
	select {
	case got := <-done:
		return got.frames, got.err
	case <-time.After(5 * time.Second):
		t.Fatal("frames did not end")
		return nil, nil
	}
}

// responseWS is ResponseWS for an answer the test expects to be frames.
func responseWS(t *testing.T, s *System, l *Lease, req WSRequest) *WSResponse {
	t.Helper()
	r, refused, err := s.ResponseWS(context.Background(), l, req)
	if err != nil || refused != nil {
		t.Fatalf("ResponseWS: %v, refused %v", err, refused)
	}
	return r
}

func TestResponseWSReusesAndReplaces(t *testing.T) {
	var n atomic.Int64
	ws := newWSServer(t, func(c *websocket.Conn, f []byte) bool {
		i := n.Add(1)
		ok := completeAnswer("resp_"+string(rune('0'+i)))(c, f)
		return ok && i != 2 // the upstream drops the connection after the second response
	})
	s, l := wsLease(t, ws, time.Minute)
	for i := range 4 {
		r := responseWS(t, s, l, WSRequest{Body: []byte(`{"model":"m","input":"hi","stream":true}`)})
		if r.Header.Get("X-Upgrade") != "yes" {
			t.Fatalf("response %d: header %v", i, r.Header)
		}
		frames, err := readFrames(t, r)
		if err != nil || len(frames) != 3 || !strings.HasPrefix(frames[0], `{"type":"response.created",`) || !strings.HasSuffix(frames[2], `"output":[]}}`) {
			t.Fatalf("response %d: frames %q, err %v", i, frames, err)
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
	readFrames(t, responseWS(t, s, l, req))
	if f := ws.lastFrame(); gjson.Get(f, "previous_response_id").Exists() {
		t.Fatalf("a fresh connection got the continuation: %s", f)
	}
	readFrames(t, responseWS(t, s, l, req))
	if f := ws.lastFrame(); gjson.Get(f, "previous_response_id").Str != "resp_A" {
		t.Fatalf("the connection holding resp_A got the full body: %s", f)
	}
}

func TestResponseWSIdleClose(t *testing.T) {
	ws := newWSServer(t, completeAnswer("resp_1"))
	s, l := wsLease(t, ws, 50*time.Millisecond)
	readFrames(t, responseWS(t, s, l, WSRequest{Body: []byte(`{"model":"m"}`)}))
	waitFor(t, func() bool { return ws.closes.Load() == 1 })
}

func TestResponseWSFailuresBeforeContent(t *testing.T) {
	t.Run("1009", func(t *testing.T) {
		ws := newWSServer(t, completeAnswer("x"))
		ws.limit = 64
		s, l := wsLease(t, ws, time.Minute)
		_, _, err := s.ResponseWS(context.Background(), l, WSRequest{Body: []byte(`{"model":"m","input":"` + strings.Repeat("y", 200) + `"}`)})
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
		// The frame is delivered as it came: what it means (a 429 here) is
		// the gateway's to read (gateway TestUpstreamWSErrorFrameStatus).
		frames, err := readFrames(t, responseWS(t, s, l, WSRequest{Body: []byte(`{"model":"m"}`)}))
		if err != nil || len(frames) != 1 || gjson.Get(frames[0], "status").Int() != 429 {
			t.Fatalf("frames %q, err %v", frames, err)
		}
		waitFor(t, func() bool { return ws.closes.Load() == 1 }) // released unclean: the connection closes
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
		r, refused, err := s.ResponseWS(context.Background(), l, WSRequest{Body: []byte(`{"model":"m"}`)})
		if err != nil || r != nil || refused == nil {
			t.Fatalf("answer %v, refused %v, err %v", r, refused, err)
		}
		b, _ := io.ReadAll(refused.Body)
		if refused.Status != 401 || gjson.GetBytes(b, "error.code").Str != "invalid_api_key" {
			t.Fatalf("status %d body %s", refused.Status, b)
		}
	})
	t.Run("broken mid-response", func(t *testing.T) {
		ws := newWSServer(t, func(c *websocket.Conn, _ []byte) bool {
			c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.created","response":{"id":"r"}}`))
			c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.output_text.delta","delta":"a"}`))
			return false
		})
		s, l := wsLease(t, ws, time.Minute)
		frames, err := readFrames(t, responseWS(t, s, l, WSRequest{Body: []byte(`{"model":"m"}`)}))
		if err == nil || len(frames) != 2 || !strings.Contains(frames[1], "output_text.delta") {
			t.Fatalf("read %q, err %v: want the delta then an error", frames, err)
		}
		if upstream.KindOf(err) != upstream.KindConn {
			t.Fatalf("err %v, want KindConn", err)
		}
	})
}
