package main

import (
	"net/http"
	"testing"

	"github.com/troupe-gw/troupe/storage"
)

// TestWebSocketTranslated drives the Responses WebSocket on accounts that do
// not speak Responses — anthropic (Messages) and openai_compat (Chat): every
// frame must be a Responses event translated from the upstream's stream, and
// a continuation by previous_response_id (resolved from the connection's
// transcript) must be served too.
func TestWebSocketTranslated(t *testing.T) {
	const tokens = 12
	d := startTestDemo(t, nil, demoPool(8))
	for _, pm := range providerModels {
		if pm.provider != storage.ProviderAnthropic && pm.provider != storage.ProviderOpenAICompat {
			continue
		}
		t.Run(string(pm.provider), func(t *testing.T) {
			conn := dialWS(t, d, d.apiKey, http.Header{})
			frames := wsTurn(t, conn, `{"type":"response.create","model":"`+pm.model+`","stream":true,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}]}`)
			if frames[0].Get("type").Str != "response.created" {
				t.Fatalf("first frame %s", frames[0].Raw)
			}
			for _, f := range frames {
				if typ := f.Get("type").Str; len(typ) < 9 || typ[:9] != "response." {
					t.Fatalf("frame not a Responses event: %s", f.Raw)
				}
			}
			done := lastOf(t, frames, "response.completed")
			id := done.Get("response.id").Str
			d.checkServed(t, "ws turn", answerText(done), tokens, pm.provider)
			if id == "" || done.Get("response.usage.output_tokens").Int() <= 0 {
				t.Fatalf("completed: %s", done.Raw)
			}
			next := wsTurn(t, conn, `{"type":"response.create","model":"`+pm.model+`","stream":true,"previous_response_id":"`+id+`","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"and again"}]}]}`)
			d.checkServed(t, "ws continuation", answerText(lastOf(t, next, "response.completed")), tokens, pm.provider)
		})
	}
	d.assertNoLeases(t)
}
