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

// A translated Chat request whose tool message has null (or no) content,
// and a translated Messages request whose message content is "" (other
// than a final assistant prefill), are refused 400 in the client's
// protocol with the real APIs' words, naming the message: OpenAI's
// "Invalid value for 'content': expected a string, got null." (param
// messages.N.content), Anthropic's "messages.N: all messages must have
// non-empty content except for the optional final assistant message".
// Both were passed on, and the upstream refused them in its own words.
func TestTranslatedEmptyContentRefused(t *testing.T) {
	c := &counting{inner: cannedTransport{200, "application/json", []byte(`{}`)}}
	s, sys, key := testServerOf(t, c, storage.ProviderAnthropic)
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_1","content":null}]}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_1"}]}`,
	} {
		resp := do(s, "POST", "/v1/chat/completions", key, []byte(body))
		e := gjson.GetBytes(resp.Body(), "error")
		if resp.StatusCode() != 400 || !isOpenAIError(resp.Body()) || e.Get("type").Str != "invalid_request_error" ||
			e.Get("param").Str != "messages.2.content" || (strings.Contains(body, "null") && e.Get("message").Str != "Invalid value for 'content': expected a string, got null.") {
			t.Errorf("%s: status %d body %s, want OpenAI's 400 naming messages.2.content", body, resp.StatusCode(), resp.Body())
		}
	}
	s2, sys2, key2 := testServerOf(t, c, storage.ProviderOpenAI)
	h := map[string]string{"x-api-key": key2, "anthropic-version": "2023-06-01"}
	for _, tc := range []struct {
		body string
		n    string
	}{
		{`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":""}]}`, "0"},
		{`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":""},{"role":"user","content":"again"}]}`, "1"},
	} {
		resp := doWith(s2, "POST", "/v1/messages", h, []byte(tc.body))
		want := "messages." + tc.n + ": all messages must have non-empty content except for the optional final assistant message"
		if resp.StatusCode() != 400 || !isAnthropicError(resp.Body(), "invalid_request_error") || gjson.GetBytes(resp.Body(), "error.message").Str != want {
			t.Errorf("%s: status %d body %s, want Anthropic's 400 %q", tc.body, resp.StatusCode(), resp.Body(), want)
		}
	}
	if c.n.Load() != 0 {
		t.Errorf("%d upstream calls", c.n.Load())
	}
	// A final assistant message may be empty (a prefill), "" as [] is.
	ok := &counting{inner: cannedTransport{200, "application/json", []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)}}
	s3, sys3, key3 := testServerOf(t, ok, storage.ProviderOpenAI)
	resp := doWith(s3, "POST", "/v1/messages", map[string]string{"x-api-key": key3, "anthropic-version": "2023-06-01"},
		[]byte(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":""}]}`))
	if resp.StatusCode() != 200 {
		t.Errorf("an empty final assistant message: %d %s, want 200", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
	waitIdle(t, sys2)
	waitIdle(t, sys3)
}
