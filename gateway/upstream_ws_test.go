package gateway

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// wsUpstream serves the Responses WebSocket on 127.0.0.1, answering every
// response.create with frames; it returns an openai transport dialing it
// and the count of upgrades.
func wsUpstream(t *testing.T, frames ...string) (upstream.Transport, *atomic.Int64) {
	t.Helper()
	var upgrades atomic.Int64
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		upgrades.Add(1)
		defer c.Close()
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
			for _, f := range frames {
				if c.WriteMessage(websocket.TextMessage, []byte(f)) != nil {
					return
				}
			}
		}
	}))
	t.Cleanup(srv.Close)
	tr, err := upstream.New(storage.Account{ID: "ws", Provider: storage.ProviderOpenAI, BaseURL: srv.URL + "/v1",
		Credentials: storage.Credentials{APIKey: "sk-test"}}, upstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tr, &upgrades
}

// An answer over the upstream WebSocket reaches an HTTP client as the SSE
// stream the same answer has over HTTP, and a completed answer leaves its
// connection open for the next request.
func TestUpstreamWSFramesAsSSE(t *testing.T) {
	tr, upgrades := wsUpstream(t,
		`{"type":"response.created","response":{"id":"resp_1","status":"in_progress"}}`,
		`{"type":"response.output_text.delta","delta":"hi"}`,
		`{"type":"response.completed","response":{"id":"resp_1","status":"completed","output":[],"usage":{"input_tokens":3,"output_tokens":1}}}`)
	s, sys, key := testServerCfg(t, 1, tr, Config{MaxWait: 100 * time.Millisecond, WebSocket: WSConfig{Upstream: UpstreamWSAlways}})
	want := "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\"}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n"
	for i := range 2 {
		resp := do(s, "POST", "/v1/responses", key, []byte(`{"model":"m","input":"hi","stream":true}`))
		if resp.StatusCode() != 200 || !bytes.HasPrefix(resp.Body(), []byte(want)) || !bytes.HasSuffix(resp.Body(), []byte("\"output_tokens\":1}}}\n\n")) {
			t.Fatalf("request %d: status %d body %q", i, resp.StatusCode(), resp.Body())
		}
		waitIdle(t, sys)
	}
	if n := upgrades.Load(); n != 1 {
		t.Fatalf("%d upgrades, want 1: the completed answer's connection is reused", n)
	}
}

// An error frame carrying an HTTP status before content is that status's
// failure, as over HTTP: a 429 usage_limit_reached is the account's quota,
// so the client, every account having failed so, gets the gateway's 429.
func TestUpstreamWSErrorFrameStatus(t *testing.T) {
	tr, _ := wsUpstream(t,
		`{"type":"error","status":429,"error":{"type":"usage_limit_reached","message":"limit","resets_in_seconds":60},"headers":{"x-codex-primary-used-percent":"100.0"}}`)
	s, sys, key := testServerCfg(t, 2, tr, Config{MaxWait: 100 * time.Millisecond, WebSocket: WSConfig{Upstream: UpstreamWSAlways}})
	resp := do(s, "POST", "/v1/responses", key, []byte(`{"model":"m","input":"hi","stream":true}`))
	if resp.StatusCode() != 429 || gjson.GetBytes(resp.Body(), "error.code").Str != "rate_limit_exceeded" {
		t.Fatalf("status %d body %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
	for _, v := range sys.Views() {
		if v.CooldownReason != "quota" {
			t.Errorf("account %s: cooldown %q, want quota", v.ID, v.CooldownReason)
		}
	}
}

// The status decides, as over HTTP: a 429 frame whose error reads like a
// server error is the account's rate limit (429 to the client), not a
// transient failure (502).
func TestUpstreamWSErrorFrameStatusDecides(t *testing.T) {
	tr, _ := wsUpstream(t, `{"type":"error","status":429,"error":{"type":"server_error","code":"server_error","message":"slow down"}}`)
	s, sys, key := testServerCfg(t, 1, tr, Config{MaxWait: 100 * time.Millisecond, WebSocket: WSConfig{Upstream: UpstreamWSAlways}})
	resp := do(s, "POST", "/v1/responses", key, []byte(`{"model":"m","input":"hi","stream":true}`))
	if resp.StatusCode() != 429 || !isOpenAIError(resp.Body()) {
		t.Fatalf("status %d body %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
}
