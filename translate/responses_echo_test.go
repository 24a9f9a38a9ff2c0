package translate

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/tidwall/gjson"
)

// TestResponsesEcho: a translated Responses object, streamed or not,
// repeats the client's request settings as OpenAI's own does, and the
// API's defaults for the ones the request leaves out.
func TestResponsesEcho(t *testing.T) {
	req := []byte(`{"model":"m","input":"hi","instructions":"be brief","store":false,
		"metadata":{"k":"v"},"text":{"format":{"type":"json_object"},"verbosity":"low"},
		"tools":[{"type":"function","name":"f",
		  "parameters":{"type":"object"}}],"tool_choice":"required","parallel_tool_calls":false,
		"max_output_tokens":77,"reasoning":{"summary":"auto"},"temperature":0.5,"top_p":0.9,"user":"u1"}`)
	want := map[string]string{
		"instructions": `"be brief"`, "store": `false`, "metadata": `{"k":"v"}`,
		"text": `{"format":{"type":"json_object"},"verbosity":"low"}`, "previous_response_id": `null`,
		"tools": `[{"type":"function","name":"f",		  "parameters":{"type":"object"}}]`, "tool_choice": `"required"`,
		"parallel_tool_calls": `false`, "max_output_tokens": `77`, "reasoning": `{"summary":"auto"}`,
		"temperature": `0.5`, "top_p": `0.9`, "user": `"u1"`,
	}
	defaults := map[string]string{
		"instructions": `null`, "store": `true`, "metadata": `{}`, "text": `{"format":{"type":"text"}}`,
		"previous_response_id": `null`, "tools": `[]`, "tool_choice": `"auto"`, "parallel_tool_calls": `true`,
		"max_output_tokens": `null`, "reasoning": `{"effort":null,"summary":null}`, "temperature": `null`,
		"top_p": `null`, "user": `null`,
	}
	check := func(t *testing.T, what string, obj gjson.Result, want map[string]string) {
		t.Helper()
		for k, v := range want {
			if got := obj.Get(k); !got.Exists() || got.Raw != v {
				t.Errorf("%s: %s = %s, want %s", what, k, got.Raw, v)
			}
		}
	}
	answer, err := os.ReadFile("testdata/responses/messages-nonstream-text.json")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := os.ReadFile("testdata/streams/messages-stream-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  []byte
		want map[string]string
	}{{"request", req, want}, {"no request", nil, defaults}, {"not JSON", []byte(`{"tools":`), defaults}} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := TranslateResponse(Messages, Responses, answer, ResponseOptions{Request: tc.req, Created: 1})
			if err != nil {
				t.Fatal(err)
			}
			check(t, "answer", gjson.ParseBytes(out), tc.want)
			out = translateStream(t, Messages, Responses, stream, StreamOptions{Request: tc.req, Created: 1})
			checkSSE(t, Responses, out)
			sc := NewScanner(bytes.NewReader(out), 0)
			n := 0
			for {
				ev, err := sc.Next()
				if err == io.EOF {
					break
				}
				if r := gjson.GetBytes(ev.Data, "response"); r.Exists() {
					n++
					check(t, string(ev.Name), r, tc.want)
				}
			}
			if n != 3 {
				t.Errorf("%d events carry the response object, want 3 (created, in_progress, completed)", n)
			}
		})
	}
}
