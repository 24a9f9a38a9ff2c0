package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// openStream answers with the SSE events of body and then keeps the stream
// open until the call is cancelled, as an upstream does whose last bytes
// have not arrived yet: the gateway's read of the stream's end can then
// only end by the cancellation. cut, when > 0, keeps only the events
// before the cut-th "response.output_text.delta" (the client sees content,
// not the end).
type openStream struct {
	body []byte
	cut  int
}

func (o openStream) Do(ctx context.Context, _ *upstream.Request) (*upstream.Response, error) {
	body := o.body
	if o.cut > 0 {
		i := 0
		for range o.cut {
			j := bytes.Index(body[i:], []byte("event: response.output_text.delta"))
			if j < 0 {
				break
			}
			i += j + 1
		}
		body = body[:i-1]
	}
	pr, pw := io.Pipe()
	go func() {
		if _, err := pw.Write(body); err != nil {
			return
		}
		<-ctx.Done()
		pw.CloseWithError(ctx.Err())
	}()
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	return &upstream.Response{Status: 200, Header: h, Body: pr}, nil
}

// wsClient dials the gateway's Responses WebSocket with key.
func wsClient(t *testing.T, s *Server, key string) *websocket.Conn {
	t.Helper()
	ln := serveTCP(t, s)
	conn, resp, err := (&websocket.Dialer{HandshakeTimeout: 5 * time.Second}).Dial("ws://"+ln.Addr().String()+"/v1/responses",
		http.Header{"Authorization": {"Bearer " + key}})
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	return conn
}

// readUntil reads frames until one of type typ (or an error frame).
func readUntil(t *testing.T, conn *websocket.Conn, typ string) []gjson.Result {
	t.Helper()
	var out []gjson.Result
	for {
		_, b, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("read after %d frames: %v", len(out), err)
		}
		ev := gjson.ParseBytes(b)
		out = append(out, ev)
		if ev.Get("type").Str == typ || ev.Get("type").Str == "error" {
			return out
		}
	}
}

// leave closes conn as a client does: a close frame, then the connection.
func leave(conn *websocket.Conn) {
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "done"), time.Now().Add(time.Second))
	_ = conn.Close()
}

// requestRecords waits until the server has ended every client request
// (their records queued), then writes the queued records and returns them.
func requestRecords(t *testing.T, s *Server, sys *actors.System, store *memStore) []storage.UsageRecord {
	t.Helper()
	waitUntil(t, "every request ended", func() bool { return s.serving.Load() == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sys.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	return append([]storage.UsageRecord(nil), store.usage...)
}

// A WebSocket client that closes its connection right after
// response.completed got a whole answer: the request is recorded as a 200
// and the account as having succeeded, though the gateway's read of the
// upstream's end was cancelled by the close (issue #15, defect 5). A client
// that leaves before the end is a 499 (the client's doing), and the
// account is not charged a failure either.
func TestWebSocketClientClosing(t *testing.T) {
	sse := readFile(t, "responses-stream-text.sse")
	for _, tc := range []struct {
		name   string
		cut    int
		until  string
		status int
	}{
		{"right after response.completed", 0, "response.completed", 200},
		{"in the middle of the answer", 2, "response.output_text.delta", statusClientClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, sys, key, store := testServerStore(t, 1, openStream{body: sse, cut: tc.cut})
			conn := wsClient(t, s, key)
			if err := conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"m","input":"hi","store":false}`)); err != nil {
				t.Fatal(err)
			}
			frames := readUntil(t, conn, tc.until)
			if last := frames[len(frames)-1].Get("type").Str; last != tc.until {
				t.Fatalf("last frame %s: %s", last, frames[len(frames)-1].Raw)
			}
			leave(conn)
			recs := requestRecords(t, s, sys, store)
			if len(recs) != 1 || recs[0].Status != tc.status || recs[0].ErrorClass == upstream.ClassTransient.String() {
				t.Fatalf("records %+v; want one with status %d", recs, tc.status)
			}
			waitIdle(t, sys)
			v, _ := sys.View("a0")
			if v.Failures != 0 || v.FailureStreak != 0 || v.Status != actors.StatusActive {
				t.Fatalf("the account was charged: failures %d streak %d status %s", v.Failures, v.FailureStreak, v.Status)
			}
			if tc.status == 200 && v.Successes != 1 {
				t.Fatalf("successes %d, want 1", v.Successes)
			}
		})
	}
}

// A warm-up (generate:false), with input or with none (the Codex CLI's
// built-in provider sends "input":[]), is recorded with its model (issue
// #15, defect 6).
func TestWebSocketWarmupRecordsModel(t *testing.T) {
	s, sys, key, store := testServerStore(t, 1, cannedTransport{200, "text/event-stream", readFile(t, "responses-stream-text.sse")})
	conn := wsClient(t, s, key)
	for _, frame := range []string{
		`{"type":"response.create","model":"m","generate":false,"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"x"}]}]}`,
		`{"type":"response.create","model":"m","generate":false,"input":[]}`,
	} {
		if err := conn.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
			t.Fatal(err)
		}
		readUntil(t, conn, "response.completed")
	}
	leave(conn)
	recs := requestRecords(t, s, sys, store)
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	for _, r := range recs {
		if r.Model != "m" || r.Status != 200 || r.Route != translate.Responses.Route() {
			t.Errorf("warm-up record %+v", r)
		}
	}
}

// TestWebSocketWarmupLimited: warm-ups are charged to the key's requests
// per minute like any request, so a client cannot send them past the
// limit: with RPM 2, a warm-up and a generating frame are admitted, the
// next warm-up is the 429 rate_limit_exceeded error frame an HTTP request
// gets, and the next generating frame too (the warm-ups used the minute).
func TestWebSocketWarmupLimited(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)}
	s, _, _, store := testServerStore(t, 1, cannedTransport{200, "text/event-stream", readFile(t, "responses-stream-text.sse")})
	c := memcache.New(memcache.Options{Now: clock.now, SweepInterval: -1})
	t.Cleanup(func() { c.Close() })
	s.cache = c
	secret, _ := limitedKey(t, store, storage.KeyLimits{RPM: 2})
	conn := wsClient(t, s, secret)
	warm := `{"type":"response.create","model":"m","generate":false,"input":[]}`
	gen := `{"type":"response.create","model":"m","input":"hi"}`
	for i, step := range []struct {
		frame, want string
	}{{warm, "response.completed"}, {gen, "response.completed"}, {warm, "error"}, {gen, "error"}} {
		if err := conn.WriteMessage(websocket.TextMessage, []byte(step.frame)); err != nil {
			t.Fatal(err)
		}
		evs := readUntil(t, conn, "response.completed")
		last := evs[len(evs)-1]
		if got := last.Get("type").Str; got != step.want {
			t.Fatalf("frame %d: %s, want %s", i, last.Raw, step.want)
		}
		if step.want == "error" && (last.Get("status").Int() != 429 || last.Get("error.code").Str != "rate_limit_exceeded") {
			t.Fatalf("frame %d: %s, want the 429 rate_limit_exceeded frame", i, last.Raw)
		}
	}
}
