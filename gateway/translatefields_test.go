package gateway

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/storage"
)

// A Chat Completions request translated to Anthropic with a stream_options
// that is not an object, or a user message whose content is null, is the
// 400 invalid_request_error OpenAI answers, in OpenAI's envelope, naming
// the field; nothing goes upstream. They were translated without a word
// (stream_options dropped, the null message sent as an empty one).
func TestChatTranslatedRefusesBadFields(t *testing.T) {
	c := &counting{inner: cannedTransport{200, "application/json", []byte(`{}`)}}
	s, sys, key := testServerOf(t, c, storage.ProviderAnthropic)
	for _, tc := range []struct{ body, param string }{
		{`{"model":"m","stream_options":"yes","messages":[{"role":"user","content":"hi"}]}`, "stream_options"},
		{`{"model":"m","messages":[{"role":"user","content":null}]}`, "messages.0.content"},
		{`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user"}]}`, "messages.1.content"},
	} {
		resp := do(s, "POST", "/v1/chat/completions", key, []byte(tc.body))
		e := gjson.GetBytes(resp.Body(), "error")
		if resp.StatusCode() != 400 || !isOpenAIError(resp.Body()) || e.Get("type").Str != "invalid_request_error" ||
			e.Get("param").Str != tc.param || !strings.Contains(e.Get("message").Str, tc.param) {
			t.Errorf("%s: status %d body %s, want a 400 invalid_request_error naming %s", tc.body, resp.StatusCode(), resp.Body(), tc.param)
		}
	}
	if c.n.Load() != 0 {
		t.Errorf("%d upstream calls", c.n.Load())
	}
	waitIdle(t, sys)
}

// A Messages request translated to OpenAI whose message has no content
// blocks (content: []) is refused naming that message's content, not
// "messages must be a non-empty array" about a non-empty messages; a final
// assistant message may be empty (Anthropic allows it).
func TestMessagesTranslatedEmptyContentNamed(t *testing.T) {
	c := &counting{inner: cannedTransport{200, "application/json", []byte(`{}`)}}
	s, sys, key := testServerOf(t, c, storage.ProviderOpenAI)
	h := map[string]string{"x-api-key": key, "anthropic-version": "2023-06-01"}
	for _, tc := range []struct{ body, param string }{
		{`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":[]}]}`, "messages.0.content"},
		{`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[]},{"role":"user","content":"again"}]}`, "messages.1.content"},
	} {
		resp := doWith(s, "POST", "/v1/messages", h, []byte(tc.body))
		msg := gjson.GetBytes(resp.Body(), "error.message").Str
		if resp.StatusCode() != 400 || !isAnthropicError(resp.Body(), "invalid_request_error") || !strings.Contains(msg, tc.param) ||
			strings.Contains(msg, "messages must be a non-empty array") {
			t.Errorf("%s: status %d body %s, want a 400 naming %s", tc.body, resp.StatusCode(), resp.Body(), tc.param)
		}
	}
	if c.n.Load() != 0 {
		t.Errorf("%d upstream calls", c.n.Load())
	}
	waitIdle(t, sys)
}
