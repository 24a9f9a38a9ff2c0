package translate

import (
	"errors"
	"testing"

	"github.com/tidwall/gjson"
)

// Answer cases beyond the recorded fixtures: refusals, content filters,
// reasoning state, finish reasons and usage accounting.
func TestTranslateResponseFields(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to Protocol
		body     string
		want     map[string]string
	}{
		{name: "chat refusal to responses", from: Chat, to: Responses,
			body: `{"id":"chatcmpl-1","created":5,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}`,
			want: map[string]string{"output.0.content.0.type": "refusal", "output.0.content.0.refusal": "I can't help with that.", "status": "completed", "id": "resp_1"}},
		{name: "responses refusal to chat", from: Responses, to: Chat,
			body: `{"id":"resp_9","status":"completed","model":"m","output":[{"type":"message","content":[{"type":"refusal","refusal":"No."}]}],"usage":{"input_tokens":1,"output_tokens":1}}`,
			want: map[string]string{"choices.0.message.refusal": "No.", "choices.0.message.content": "", "choices.0.finish_reason": "stop", "id": "chatcmpl-9"}},
		{name: "anthropic refusal stop reason to chat", from: Messages, to: Chat,
			body: `{"id":"msg_1","model":"m","content":[{"type":"text","text":"I won't."}],"stop_reason":"refusal","usage":{"input_tokens":2,"output_tokens":3}}`,
			want: map[string]string{"choices.0.finish_reason": "content_filter", "choices.0.message.content": "I won't."}},
		{name: "anthropic refusal to responses is incomplete", from: Messages, to: Responses,
			body: `{"id":"msg_1","model":"m","content":[],"stop_reason":"refusal","usage":{"input_tokens":2,"output_tokens":3}}`,
			want: map[string]string{"status": "incomplete", "incomplete_details.reason": "content_filter"}},
		{name: "chat content filter to messages", from: Chat, to: Messages,
			body: `{"id":"x","model":"m","choices":[{"message":{"content":"par"},"finish_reason":"content_filter"}]}`,
			want: map[string]string{"stop_reason": "refusal", "content.0.text": "par"}},
		{name: "length", from: Responses, to: Messages,
			body: `{"id":"resp_1","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"model":"m","output":[]}`,
			want: map[string]string{"stop_reason": "max_tokens", "content.#": "0"}},
		{name: "stop sequence", from: Messages, to: Chat,
			body: `{"id":"msg_1","model":"m","content":[{"type":"text","text":"a"}],"stop_reason":"stop_sequence","stop_sequence":"END"}`,
			want: map[string]string{"choices.0.finish_reason": "stop"}},
		{name: "anthropic cache usage to chat", from: Messages, to: Chat,
			body: `{"id":"msg_1","model":"m","content":[],"stop_reason":"end_turn","usage":{"input_tokens":10,"cache_read_input_tokens":100,"cache_creation_input_tokens":5,"output_tokens":7}}`,
			want: map[string]string{"usage.prompt_tokens": "115", "usage.prompt_tokens_details.cached_tokens": "100", "usage.completion_tokens": "7", "usage.total_tokens": "122"}},
		{name: "openai cached usage to messages", from: Responses, to: Messages,
			body: `{"id":"resp_1","status":"completed","model":"m","output":[],"usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":100},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":4}}}`,
			want: map[string]string{"usage.input_tokens": "20", "usage.cache_read_input_tokens": "100", "usage.output_tokens": "9"}},
		{name: "anthropic thinking to responses reasoning", from: Messages, to: Responses,
			body: `{"id":"msg_1","model":"m","content":[{"type":"thinking","thinking":"hm","signature":"S1"},{"type":"redacted_thinking","data":"R1"},{"type":"text","text":"ok"}],"stop_reason":"end_turn"}`,
			want: map[string]string{"output.0.type": "reasoning", "output.0.summary.0.text": "hm", "output.0.encrypted_content": "troupe.anthropic.v1:S1",
				"output.1.encrypted_content": "troupe.anthropic-redacted.v1:R1", "output.2.content.0.text": "ok"}},
		{name: "responses reasoning to messages thinking", from: Responses, to: Messages,
			body: `{"id":"resp_1","status":"completed","model":"m","output":[{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"a"},{"type":"summary_text","text":"b"}],"encrypted_content":"E"},{"type":"function_call","call_id":"call_1","name":"f","arguments":"{\"x\":1}"}]}`,
			want: map[string]string{"content.0.type": "thinking", "content.0.thinking": "a\n\nb", "content.0.signature": openAIItemSignature(`{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"a"},{"type":"summary_text","text":"b"}],"encrypted_content":"E"}`),
				"content.1.type": "tool_use", "content.1.id": "toolu_1", "content.1.input.x": "1", "stop_reason": "tool_use"}},
		{name: "chat reasoning_content to messages", from: Chat, to: Messages,
			body: `{"id":"x","model":"m","choices":[{"message":{"content":"4","reasoning_content":"2+2"},"finish_reason":"stop"}]}`,
			want: map[string]string{"content.0.type": "thinking", "content.0.thinking": "2+2", "content.0.signature": "", "content.1.text": "4"}},
		{name: "model option", from: Chat, to: Messages,
			body: `{"id":"x","model":"upstream","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}`,
			want: map[string]string{"model": "client-model"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := ResponseOptions{Created: 1}
			if tc.name == "model option" {
				opts.Model = "client-model"
			}
			out, err := TranslateResponse(tc.from, tc.to, []byte(tc.body), opts)
			if err != nil {
				t.Fatal(err)
			}
			for p, want := range tc.want {
				if got := gjson.GetBytes(out, p).String(); got != want {
					t.Errorf("%s = %q, want %q in\n%s", p, got, want, out)
				}
			}
		})
	}
}

func TestTranslateResponseRefusals(t *testing.T) {
	if _, err := TranslateResponse(Responses, Chat, []byte(`{"id":"r","status":"failed","error":{"code":"server_error","message":"x"}}`), ResponseOptions{}); !errors.Is(err, ErrUpstreamFailed) {
		t.Errorf("failed response: %v", err)
	}
	var te *Error
	if _, err := TranslateResponse(Chat, Messages, []byte(`{"choices":`), ResponseOptions{}); !errors.As(err, &te) {
		t.Errorf("invalid JSON: %v", err)
	}
	if _, err := TranslateResponse(Chat, Chat, []byte(`{}`), ResponseOptions{}); !errors.As(err, &te) {
		t.Errorf("same protocol: %v", err)
	}
}

func TestAppendErrorBody(t *testing.T) {
	for _, tc := range []struct {
		p                         Protocol
		status                    int
		typ, code, param, message string
		want                      string
	}{
		{Chat, 429, "rate_limit_error", "rate_limit_exceeded", "", "slow down", `{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`},
		{Messages, 401, "invalid_request_error", "invalid_api_key", "", "bad key", `{"type":"error","error":{"type":"authentication_error","message":"bad key"}}`},
		{Messages, 503, "server_error", "no_account_available", "", "busy", `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`},
		{Messages, 400, "invalid_request_error", "", "stop", "no", `{"type":"error","error":{"type":"invalid_request_error","message":"no"}}`},
		{Messages, 404, "invalid_request_error", "model_not_found", "model", "no model", `{"type":"error","error":{"type":"not_found_error","message":"no model"}}`},
		{Responses, 500, "", "", "", "oops", `{"error":{"message":"oops","type":"server_error","param":null,"code":null}}`},
	} {
		if got := string(AppendErrorBody(nil, tc.p, tc.status, tc.typ, tc.code, tc.param, tc.message)); got != tc.want {
			t.Errorf("%s %d %s: %s, want %s", tc.p, tc.status, tc.typ, got, tc.want)
		}
	}
}
