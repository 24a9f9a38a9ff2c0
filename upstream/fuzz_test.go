package upstream

import (
	"net/http"
	"testing"

	"github.com/troupe-gw/troupe/translate"
)

// FuzzClassifyMessages feeds arbitrary bodies and event data to the
// Anthropic-facing readers: Classify (with Anthropic's 400, 429 and 529
// statuses and rate-limit headers), ClassifyEvent and ClassifyBody for
// Messages and MessagesEventKind. None may panic; an error is never
// ClassNone. (Usage: translate's FuzzUsage.)
func FuzzClassifyMessages(f *testing.F) {
	for _, name := range []string{
		"errors/anthropic-messages/error-400.json", "errors/anthropic-messages/error-429.json",
		"errors/anthropic-messages/error-529.json", "messages-nonstream-text.response.json",
	} {
		f.Add("", testdata(f, name))
	}
	for _, ev := range sseEvents(f, testdata(f, "messages-stream-text.sse")) {
		f.Add(string(ev.Name), ev.Data)
	}
	f.Add("error", []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2099-01-01 at 00:00 UTC."}}`))
	f.Add("message_delta", []byte(`{"type":"message_delta","usage":{"output_tokens":"x","input_tokens":1e99}}`))
	h := http.Header{
		"Anthropic-Ratelimit-Tokens-Remaining": {"0"},
		"Anthropic-Ratelimit-Tokens-Reset":     {"2099-01-01T00:00:00Z"},
	}
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		for _, st := range []int{400, 429, 529} {
			if v := Classify(st, h, data); v.Class == ClassNone || v.RetryAfter < 0 {
				t.Fatalf("Classify(%d) = %+v", st, v)
			}
		}
		if v, _, isErr := ClassifyEvent(translate.Messages, []byte(name), data); isErr && v.Class == ClassNone {
			t.Fatal("an error event of class none")
		}
		if v, _, isErr := ClassifyBody(translate.Messages, data); isErr && v.Class == ClassNone {
			t.Fatal("an error body of class none")
		}
		_ = MessagesEventKind([]byte(name), data)
	})
}
