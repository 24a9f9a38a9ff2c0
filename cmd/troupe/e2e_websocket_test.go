package main

// End-to-end tests of the Responses WebSocket: a Go client (and the Codex
// CLI, in e2e_websocket_codex_test.go) on GET /v1/responses, through the
// gateway, to the mock fleet's WebSocket mode (or its HTTP/SSE routes).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
)

// wsURL is the gateway's Responses WebSocket URL.
func (d *testDemo) wsURL() string { return "ws" + strings.TrimPrefix(d.base, "http") + "/responses" }

// dialWS opens a client connection with key; it fails the test unless the
// upgrade succeeds.
func dialWS(t *testing.T, d *testDemo, key string, hdr http.Header) *websocket.Conn {
	t.Helper()
	conn, resp, err := tryDialWS(d, key, hdr)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (status %d)", d.wsURL(), err, status)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func tryDialWS(d *testDemo, key string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
	h := http.Header{}
	for k, v := range hdr {
		h[k] = v
	}
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	h.Set("OpenAI-Beta", "responses_websockets=2026-02-06")
	dialer := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	return dialer.Dial(d.wsURL(), h)
}

// wsTurn sends frame and reads frames until a terminal one (response.completed,
// response.failed, response.incomplete or error), within 20 s.
func wsTurn(t *testing.T, conn *websocket.Conn, frame string) []gjson.Result {
	t.Helper()
	if err := conn.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
		t.Fatalf("write frame: %v", err)
	}
	return wsRead(t, conn)
}

func wsRead(t *testing.T, conn *websocket.Conn) []gjson.Result {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	var out []gjson.Result
	for {
		typ, b, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("read frame after %d frames: %v", len(out), err)
		}
		if typ != websocket.TextMessage {
			t.Fatalf("frame type %d, want text", typ)
		}
		if !gjson.ValidBytes(b) {
			t.Fatalf("frame is not JSON: %q", b)
		}
		ev := gjson.ParseBytes(b)
		out = append(out, ev)
		switch ev.Get("type").Str {
		case "response.completed", "response.failed", "response.incomplete", "error":
			return out
		}
	}
}

// last returns the final frame of a turn, checking its type.
func lastOf(t *testing.T, frames []gjson.Result, typ string) gjson.Result {
	t.Helper()
	if len(frames) == 0 {
		t.Fatal("no frames")
	}
	ev := frames[len(frames)-1]
	if ev.Get("type").Str != typ {
		t.Fatalf("last frame %s, want %s: %s", ev.Get("type").Str, typ, ev.Raw)
	}
	return ev
}

// answerText is the served text of a completed turn.
func answerText(ev gjson.Result) string {
	return ev.Get("response.output.0.content.0.text").Str
}

func wsTestConfig(t *testing.T, tune func(*Config)) *Config {
	cfg := testConfig(t)
	if tune != nil {
		tune(cfg)
	}
	return cfg
}

// TestWebSocketTurns drives a Codex-shaped conversation over the gateway's
// WebSocket with a Go client: a warm-up (generate:false) answered by the
// gateway, a turn continuing it with only the new items, a continuation of
// that turn, each relayed frame by frame from the upstream WebSocket.
func TestWebSocketTurns(t *testing.T) {
	d := startTestDemo(t, nil, tuned([]int{1, 5}, nil))
	conn := dialWS(t, d, d.apiKey, http.Header{"Session-Id": {"sess-ws-1"}})

	warm := wsTurn(t, conn, `{"type":"response.create","model":"gpt-5.5","store":false,"stream":true,"generate":false,
		"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"base instructions"}]}],"tools":[]}`)
	if len(warm) != 2 || warm[0].Get("type").Str != "response.created" {
		t.Fatalf("warm-up frames: %v", warm)
	}
	done := lastOf(t, warm, "response.completed")
	warmID := done.Get("response.id").Str
	if warmID == "" || done.Get("response.output.#").Int() != 0 || done.Get("response.usage.total_tokens").Int() != 0 {
		t.Fatalf("warm-up completion: %s", done.Raw)
	}
	up0, _, _ := d.fleet.WebSocketStats()

	turn := wsTurn(t, conn, fmt.Sprintf(`{"type":"response.create","model":"gpt-5.5","store":false,"stream":true,"previous_response_id":%q,
		"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hello"}]}]}`, warmID))
	if turn[0].Get("type").Str != "response.created" || turn[0].Get("sequence_number").Int() != 0 {
		t.Fatalf("first frame: %s", turn[0].Raw)
	}
	for i, ev := range turn {
		if ev.Get("sequence_number").Int() != int64(i) {
			t.Fatalf("frame %d has sequence_number %d: %s", i, ev.Get("sequence_number").Int(), ev.Raw)
		}
	}
	first := lastOf(t, turn, "response.completed")
	acc := servedBy.FindString(answerText(first))
	if acc == "" {
		t.Fatalf("no account in the answer: %s", first.Raw)
	}
	up1, _, creates1 := d.fleet.WebSocketStats()
	if up1 <= up0 || creates1 == 0 {
		t.Fatalf("the turn did not go over the upstream WebSocket (upgrades %d→%d, creates %d)", up0, up1, creates1)
	}

	// A continuation with only the new item: served by the same account, on
	// the same upstream connection (no new upgrade), as the client sent it.
	for i := range 3 {
		next := wsTurn(t, conn, fmt.Sprintf(`{"type":"response.create","model":"gpt-5.5","store":false,"previous_response_id":%q,
			"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"again %d"}]}]}`, first.Get("response.id").Str, i))
		ev := lastOf(t, next, "response.completed")
		if got := servedBy.FindString(answerText(ev)); got != acc {
			t.Fatalf("continuation %d served by %s, want %s", i, got, acc)
		}
		first = ev
	}
	if up2, _, _ := d.fleet.WebSocketStats(); up2 != up1 {
		t.Errorf("continuations opened new upstream connections: upgrades %d → %d", up1, up2)
	}

	// Errors answer as error frames; the connection stays usable.
	for _, bad := range []string{`not json`, `{"type":"response.append","input":[]}`, `{"type":"response.create"}`, `{"type":"session.update"}`} {
		ev := lastOf(t, wsTurn(t, conn, bad), "error")
		if ev.Get("status").Int() != 400 || ev.Get("error.message").Str == "" || !ev.Get("error.type").Exists() {
			t.Fatalf("error frame for %q: %s", bad, ev.Raw)
		}
	}
	lastOf(t, wsTurn(t, conn, `{"type":"response.create","model":"gpt-5.5","input":"still here?"}`), "response.completed")
	// A model no account serves: the gateway's 404 as an error frame.
	ev := lastOf(t, wsTurn(t, conn, `{"type":"response.create","model":"no-such-model","input":"x"}`), "error")
	if ev.Get("status").Int() != 404 || ev.Get("error.code").Str != "model_not_found" {
		t.Fatalf("unknown model: %s", ev.Raw)
	}
	if err := conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "done")); err != nil {
		t.Fatal(err)
	}
	d.assertNoLeases(t)
}

// TestWebSocketHTTPUpstream: an openai_compat-free pool of openai accounts
// with gateway.websocket.upstream=never serves WebSocket clients over
// HTTP/SSE upstream, and a continuation works through the transcript the
// connection holds (the upstream never saw previous_response_id).
func TestWebSocketHTTPUpstream(t *testing.T) {
	cfg := wsTestConfig(t, func(c *Config) { c.Gateway.WebSocket.Upstream = "never" })
	d := startTestDemo(t, cfg, tuned([]int{2, 6}, nil))
	conn := dialWS(t, d, d.apiKey, nil)
	ev := lastOf(t, wsTurn(t, conn, `{"type":"response.create","model":"gpt-4.1-mini","input":"Say hi","store":false}`), "response.completed")
	ev2 := lastOf(t, wsTurn(t, conn, fmt.Sprintf(`{"type":"response.create","model":"gpt-4.1-mini","input":"again","store":false,"previous_response_id":%q}`, ev.Get("response.id").Str)), "response.completed")
	if answerText(ev2) == "" {
		t.Fatalf("continuation: %s", ev2.Raw)
	}
	if up, _, _ := d.fleet.WebSocketStats(); up != 0 {
		t.Fatalf("upstream=never opened %d upstream WebSockets", up)
	}
	d.assertNoLeases(t)
}

// TestWebSocketReplayOnAnotherAccount: when the account that served a
// response fails before content, the continuation moves to another account
// with the full transcript, invisibly.
func TestWebSocketReplayOnAnotherAccount(t *testing.T) {
	d := startTestDemo(t, nil, tuned([]int{1, 5}, nil))
	conn := dialWS(t, d, d.apiKey, nil)
	ev := lastOf(t, wsTurn(t, conn, `{"type":"response.create","model":"gpt-5.5","input":"first","store":false}`), "response.completed")
	owner := servedBy.FindString(answerText(ev))
	d.fleet.SetFault(owner, &mock.Fault{Kind: mock.FaultServerError})
	next := lastOf(t, wsTurn(t, conn, fmt.Sprintf(`{"type":"response.create","model":"gpt-5.5","store":false,"previous_response_id":%q,
		"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"second"}]}]}`, ev.Get("response.id").Str)), "response.completed")
	if got := servedBy.FindString(answerText(next)); got == "" || got == owner {
		t.Fatalf("continuation served by %q, want the other account than %s", got, owner)
	}
	d.fleet.SetFault(owner, nil)
	d.assertNoLeases(t)
}

// TestWebSocketUpgradeRefusals: a bad or missing key gets 401 in OpenAI's
// shape and no upgrade; past the per-key connection limit, 429.
func TestWebSocketUpgradeRefusals(t *testing.T) {
	cfg := wsTestConfig(t, func(c *Config) { c.Gateway.WebSocket.MaxConnectionsPerKey = 1 })
	d := startTestDemo(t, cfg, tuned([]int{1}, nil))
	for _, key := range []string{"", "sk-troupe-wrong"} {
		conn, resp, err := tryDialWS(d, key, nil)
		if err == nil {
			conn.Close()
			t.Fatalf("key %q: upgraded", key)
		}
		if resp == nil || resp.StatusCode != 401 {
			t.Fatalf("key %q: %v, response %v", key, err, resp)
		}
		b, _ := io.ReadAll(resp.Body)
		if e, err := parseOpenAIError(b); err != nil || e.Type != "invalid_request_error" {
			t.Fatalf("key %q: 401 body %s: %v", key, b, err)
		}
	}
	c1 := dialWS(t, d, d.apiKey, nil)
	conn, resp, err := tryDialWS(d, d.apiKey, nil)
	if err == nil {
		conn.Close()
		t.Fatal("second connection upgraded past max_connections_per_key=1")
	}
	if resp == nil || resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("second connection: %v, response %v", err, resp)
	}
	c1.Close()
	// The slot frees when the connection closes.
	eventually(t, 5*time.Second, "a new connection after the first closed", func() (bool, string) {
		conn, resp, err := tryDialWS(d, d.apiKey, nil)
		if err != nil {
			return false, fmt.Sprintf("%v %v", err, resp)
		}
		conn.Close()
		return true, ""
	})
}

// TestWebSocketFrameLimit: a client frame above gateway.websocket.max_message_bytes
// is refused with close 1009 (message too big).
func TestWebSocketFrameLimit(t *testing.T) {
	cfg := wsTestConfig(t, func(c *Config) { c.Gateway.WebSocket.MaxMessageBytes = 4096 })
	d := startTestDemo(t, cfg, tuned([]int{1}, nil))
	conn := dialWS(t, d, d.apiKey, nil)
	big := `{"type":"response.create","model":"gpt-5.5","input":"` + strings.Repeat("x", 8192) + `"}`
	if err := conn.WriteMessage(websocket.TextMessage, []byte(big)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err := conn.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseMessageTooBig {
		t.Fatalf("read after a too-big frame: %v, want close 1009", err)
	}
}

// TestWebSocketUpstream1009Fallback: an upstream that closes its WebSocket
// with 1009 before any content gets the same request over HTTP on the same
// lease; the client sees one normal answer.
func TestWebSocketUpstream1009Fallback(t *testing.T) {
	d := startTestDemo(t, nil, tuned([]int{1}, nil))
	d.fleet.SetWebSocketReadLimit(256)
	conn := dialWS(t, d, d.apiKey, nil)
	ev := lastOf(t, wsTurn(t, conn, `{"type":"response.create","model":"gpt-5.5","store":false,"input":"`+strings.Repeat("long ", 200)+`"}`), "response.completed")
	if servedBy.FindString(answerText(ev)) != "demo-0001" {
		t.Fatalf("answer: %s", ev.Raw)
	}
	up, _, creates := d.fleet.WebSocketStats()
	if up == 0 || creates != 0 {
		t.Fatalf("upstream WebSocket upgrades %d, creates %d: want an upgrade and no accepted frame", up, creates)
	}
	// The mock counts an answer Completed after flushing its last event,
	// which the client may have read first.
	eventually(t, 5*time.Second, "the mock completed 1 answer (over HTTP)", func() (bool, string) {
		n := d.fleet.Stats("demo-0001").Completed
		return n == 1, fmt.Sprint(n)
	})
	// A small frame still goes over the WebSocket.
	lastOf(t, wsTurn(t, conn, `{"type":"response.create","model":"gpt-5.5","store":false,"input":"hi"}`), "response.completed")
	if _, _, creates := d.fleet.WebSocketStats(); creates != 1 {
		t.Fatalf("creates %d, want 1", creates)
	}
	d.assertNoLeases(t)
}

// TestWebSocketShutdown: on shutdown a connection finishes the response in
// flight, then gets close 1001 (going away).
func TestWebSocketShutdown(t *testing.T) {
	d := startTestDemo(t, nil, tuned([]int{1}, func(ma *mock.Account, _ *storage.Account) {
		ma.Latency, ma.TokensPerSecond, ma.OutputTokens = 300*time.Millisecond, 40, 20
	}))
	conn := dialWS(t, d, d.apiKey, nil)
	if err := conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"gpt-5.5","input":"slow"}`)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, b, err := conn.ReadMessage(); err != nil || gjson.GetBytes(b, "type").Str != "response.created" {
		t.Fatalf("first frame: %s %v", b, err)
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- d.app.server.Shutdown(ctx)
	}()
	frames := wsRead(t, conn)
	lastOf(t, frames, "response.completed")
	_, _, err := conn.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
		t.Fatalf("after the response: %v, want close 1001", err)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("shutdown did not return")
	}
}

// TestWebSocketForeignContinuation: a continuation of a response served on
// another connection (so not in this connection's transcript) goes to the
// account that served it; once that account leaves the pool, the answer is
// the error frame 409 previous_response_not_found.
func TestWebSocketForeignContinuation(t *testing.T) {
	cfg := wsTestConfig(t, func(c *Config) { c.Gateway.WebSocket.Upstream = "never" })
	d := startTestDemo(t, cfg, tuned([]int{2, 6, 10}, nil))
	c1 := dialWS(t, d, d.apiKey, nil)
	ev := lastOf(t, wsTurn(t, c1, `{"type":"response.create","model":"gpt-4.1-mini","input":"first"}`), "response.completed")
	id, owner := ev.Get("response.id").Str, servedBy.FindString(answerText(ev))
	c1.Close()

	c2 := dialWS(t, d, d.apiKey, nil)
	for i := range 4 {
		next := lastOf(t, wsTurn(t, c2, fmt.Sprintf(`{"type":"response.create","model":"gpt-4.1-mini","input":"next %d","previous_response_id":%q}`, i, id)), "response.completed")
		if got := servedBy.FindString(answerText(next)); got != owner {
			t.Fatalf("continuation %d served by %s, want the owner %s", i, got, owner)
		}
	}
	var ownerID string
	for _, v := range d.app.sys.Views() {
		if v.Name == owner {
			ownerID = v.ID
		}
	}
	d.app.sys.RemoveAccount(ownerID)
	eventually(t, 5*time.Second, "the owner left the pool", func() (bool, string) {
		_, ok := d.app.sys.View(ownerID)
		return !ok, ""
	})
	e := lastOf(t, wsTurn(t, c2, fmt.Sprintf(`{"type":"response.create","model":"gpt-4.1-mini","input":"x","previous_response_id":%q}`, id)), "error")
	if e.Get("status").Int() != 409 || e.Get("error.code").Str != "previous_response_not_found" || e.Get("error.param").Str != "previous_response_id" {
		t.Fatalf("error frame: %s", e.Raw)
	}
}

// TestWebSocketGlobalLimit: past gateway.websocket.max_connections open
// connections on the instance, an upgrade gets 429 whatever the key.
func TestWebSocketGlobalLimit(t *testing.T) {
	cfg := wsTestConfig(t, func(c *Config) { c.Gateway.WebSocket.MaxConnections = 2 })
	d := startTestDemo(t, cfg, tuned([]int{1}, nil))
	dialWS(t, d, d.apiKey, nil)
	dialWS(t, d, d.apiKey, nil)
	conn, resp, err := tryDialWS(d, d.apiKey, nil)
	if err == nil {
		conn.Close()
		t.Fatal("a third connection upgraded past max_connections=2")
	}
	if resp == nil || resp.StatusCode != 429 {
		t.Fatalf("third connection: %v %v", err, resp)
	}
	b, _ := io.ReadAll(resp.Body)
	if e, err := parseOpenAIError(b); err != nil || e.Code == nil || *e.Code != "websocket_connection_limit_reached" {
		t.Fatalf("429 body %s: %v", b, err)
	}
}
