package gateway

import (
	"context"
	"os"
	"testing"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/valyala/fasthttp"
)

// TestCacheRoundTripsPerRequest counts the cache round trips one request
// makes (a call or a batch each: what Redis would see), for a key with
// every limit and a session: one before routing (limits and the session's
// affinity) and one after the answer (tokens and affinity), plus, for a
// Responses stream, the response's affinity written before its end is
// relayed. Before the batches these were 6 to 7 round trips in sequence.
func TestCacheRoundTripsPerRequest(t *testing.T) {
	chatSSE, err := os.ReadFile("testdata/chat-stream-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	respSSE, err := os.ReadFile("testdata/responses-stream-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path, body string
		answer           cannedTransport
		want             int64
	}{
		{"chat", "/v1/chat/completions", `{"model":"alias","messages":[{"role":"user","content":"hi"}]}`,
			cannedTransport{200, "application/json", []byte(`{"id":"c","object":"chat.completion","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3}}`)}, 2},
		{"chat stream", "/v1/chat/completions", `{"model":"alias","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			cannedTransport{200, "text/event-stream", chatSSE}, 2},
		{"responses", "/v1/responses", `{"model":"alias","input":"hi"}`,
			cannedTransport{200, "application/json", []byte(`{"id":"resp_1","object":"response","status":"completed","output":[],"usage":{"input_tokens":9,"output_tokens":3}}`)}, 2},
		{"responses stream", "/v1/responses", `{"model":"alias","stream":true,"input":"hi"}`,
			cannedTransport{200, "text/event-stream", respSSE}, 3},
		{"responses continuation", "/v1/responses", `{"model":"alias","input":"more","previous_response_id":"resp_1"}`,
			cannedTransport{200, "application/json", []byte(`{"id":"resp_2","object":"response","status":"completed","output":[],"usage":{"input_tokens":9,"output_tokens":3}}`)}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, sys, key, store := testServerStore(t, 1, tc.answer)
			var keyID string
			for _, k := range store.keys {
				keyID = k.ID
				k.Limits = storage.KeyLimits{RPM: 1000, RPD: 1000, TokensPerDay: 1 << 30}
				store.UpdateAPIKey(context.Background(), k)
			}
			mc := memcache.New(memcache.Options{})
			t.Cleanup(func() { mc.Close() })
			cc := &countingCache{Cache: mc}
			s.cache = cc
			s.cfg.Aliases = map[string]string{"alias": "m"}
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.SetMethod("POST")
			ctx.Request.SetRequestURI(tc.path)
			ctx.Request.Header.Set("Authorization", "Bearer "+key)
			ctx.Request.Header.Set("Session_id", "round-trips")
			ctx.Request.SetBody([]byte(tc.body))
			s.handle(&ctx)
			resp := writeOut(&ctx)
			if resp.StatusCode() != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
			}
			waitIdle(t, sys)
			if n := cc.calls.Load(); n != tc.want {
				t.Errorf("%d cache round trips, want %d", n, tc.want)
			}
			// The canned Chat stream carries no usage: nothing to charge.
			if n, _ := mc.Count(context.Background(), "rl:tpd:"+keyID, day); n == 0 && tc.name != "chat stream" {
				t.Error("no tokens charged")
			}
		})
	}
}
