package gateway

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestToolChoiceRefusedInClientProtocol: a tool_choice of the wrong shape,
// or naming a tool the request does not provide, is refused with a 400 in
// the client's protocol before any upstream is asked (the upstream here
// would answer 500), with a message saying what is wrong: OpenAI's style
// (code and param) for Chat Completions and Responses, Anthropic's
// validation wording for Messages. Before, a Chat or Responses request
// naming an unknown function went upstream (a translating mock let the
// model call it), and the shapes came back as "tool_choice type  cannot be
// translated" or "tool_choice a is not valid". A valid choice goes upstream.
func TestToolChoiceRefusedInClientProtocol(t *testing.T) {
	s, _, key := testServer(t, 1, cannedTransport{500, "application/json", []byte(`{"error":{"message":"upstream asked","type":"server_error"}}`)})
	const (
		chatTools = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{}}}]`
		respTools = `"tools":[{"type":"function","name":"get_weather","parameters":{}},{"type":"namespace","name":"ns","tools":[{"type":"function","name":"inner","parameters":{}}]}]`
		msgTools  = `"tools":[{"name":"get_weather","input_schema":{"type":"object"}}]`
	)
	cases := []struct {
		path, body, param, code, msg string // msg: a part of the message
	}{
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],` + chatTools + `,"tool_choice":{"type":"function","function":{"name":"zz"}}}`,
			"tool_choice.function.name", "invalid_value", "no function tool named 'zz' is in 'tools'"},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tool_choice":{"type":"function","function":{"name":"get_weather"}}}`,
			"tool_choice.function.name", "invalid_value", "no function tool named 'get_weather'"},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],` + chatTools + `,"tool_choice":{"type":"function","function":{}}}`,
			"tool_choice.function.name", "missing_required_parameter", "Missing required parameter: 'tool_choice.function.name'."},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],` + chatTools + `,"tool_choice":"get_weather"}`,
			"tool_choice", "invalid_value", "Invalid value: 'get_weather'. Supported values are: 'none', 'auto', and 'required'"},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],` + chatTools + `,"tool_choice":42}`,
			"tool_choice", "invalid_type", "but got an integer instead"},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],` + chatTools + `,"tool_choice":{"function":{"name":"get_weather"}}}`,
			"tool_choice.type", "missing_required_parameter", "Missing required parameter: 'tool_choice.type'."},
		{"/v1/responses", `{"model":"m","input":"hi",` + respTools + `,"tool_choice":{"type":"function","name":"zz"}}`,
			"tool_choice.name", "invalid_value", "no function tool named 'zz' is in 'tools'"},
		{"/v1/responses", `{"model":"m","input":"hi",` + respTools + `,"tool_choice":["auto"]}`,
			"tool_choice", "invalid_type", "but got an array instead"},
		{"/v1/responses", `{"model":"m","input":"hi",` + respTools + `,"tool_choice":"any"}`,
			"tool_choice", "invalid_value", "Invalid value: 'any'."},
		{"/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],` + msgTools + `,"tool_choice":"auto"}`,
			"", "", "tool_choice: Input should be a valid dictionary or object to extract fields from"},
		{"/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],` + msgTools + `,"tool_choice":{"type":"required"}}`,
			"", "", "tool_choice: Input tag 'required' found using 'type' does not match any of the expected tags: 'auto', 'any', 'tool', 'none'"},
		{"/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],` + msgTools + `,"tool_choice":{"name":"get_weather"}}`,
			"", "", "tool_choice: Unable to extract tag using discriminator 'type'"},
		{"/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],` + msgTools + `,"tool_choice":{"type":"tool","name":"zz"}}`,
			"", "", "Tool `zz` was not found in `tools`"},
	}
	for _, c := range cases {
		h := map[string]string{"Authorization": "Bearer " + key}
		if strings.HasPrefix(c.path, "/v1/messages") {
			h = map[string]string{"x-api-key": key, "anthropic-version": "2023-06-01"}
		}
		resp := doWith(s, "POST", c.path, h, []byte(c.body))
		body := resp.Body()
		if resp.StatusCode() != 400 {
			t.Errorf("%s %s: %d %s, want 400", c.path, c.body, resp.StatusCode(), body)
			continue
		}
		if c.code == "" { // Anthropic's shape
			if !isAnthropicError(body, "invalid_request_error") || !strings.Contains(gjson.GetBytes(body, "error.message").Str, c.msg) {
				t.Errorf("%s %s: %s, want Anthropic's invalid_request_error saying %q", c.path, c.body, body, c.msg)
			}
			continue
		}
		e := gjson.GetBytes(body, "error")
		if e.Get("type").Str != "invalid_request_error" || e.Get("code").Str != c.code || e.Get("param").Str != c.param ||
			!strings.Contains(e.Get("message").Str, c.msg) {
			t.Errorf("%s %s: %s, want OpenAI's invalid_request_error, code %s, param %s, saying %q", c.path, c.body, body, c.code, c.param, c.msg)
		}
	}
	// Valid choices go upstream (whose 500 comes back as it is a request's).
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],` + chatTools + `,"tool_choice":{"type":"function","function":{"name":"get_weather"}}}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tool_choice":"none"}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],` + chatTools + `,"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[]}}}`},
		{"/v1/responses", `{"model":"m","input":"hi",` + respTools + `,"tool_choice":{"type":"function","name":"inner","namespace":"ns"}}`},
		{"/v1/responses", `{"model":"m","input":"hi",` + respTools + `,"tool_choice":{"type":"web_search_preview"}}`},
		{"/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],` + msgTools + `,"tool_choice":{"type":"tool","name":"get_weather"}}`},
	} {
		h := map[string]string{"Authorization": "Bearer " + key}
		if strings.HasPrefix(c.path, "/v1/messages") {
			h = map[string]string{"x-api-key": key, "anthropic-version": "2023-06-01"}
		}
		if resp := doWith(s, "POST", c.path, h, []byte(c.body)); resp.StatusCode() == 400 {
			t.Errorf("%s %s: %d %s, want it sent upstream", c.path, c.body, resp.StatusCode(), resp.Body())
		}
	}
}
