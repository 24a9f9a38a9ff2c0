package translate

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/tidwall/gjson"
)

// A Responses client's namespace and custom tools travel upstream as flat
// function tools; with the client's request in the options, the calls come
// back as the namespace function_call and the custom_tool_call it declared.
func TestToolNamesRestored(t *testing.T) {
	req := []byte(`{"model":"m","input":"hi","tools":[
		{"type":"namespace","name":"multi_agent_v1","tools":[{"type":"function","name":"close_agent","parameters":{"type":"object"}}]},
		{"type":"custom","name":"apply_patch","format":{"type":"grammar","syntax":"lark","definition":"start: x"}},
		{"type":"function","name":"close_agent","parameters":{"type":"object"}}]}`)
	up, err := TranslateRequest(Responses, Messages, req, RequestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(up, "tools.#.name").String(); got != `["multi_agent_v1__close_agent","apply_patch","close_agent"]` {
		t.Fatalf("upstream tool names %s", got)
	}
	answer := []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[
		{"type":"tool_use","id":"toolu_1","name":"multi_agent_v1__close_agent","input":{"target":"a"}},
		{"type":"tool_use","id":"toolu_2","name":"apply_patch","input":{"input":"*** Begin Patch"}},
		{"type":"tool_use","id":"toolu_3","name":"close_agent","input":{}}],
		"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}`)
	out, err := TranslateResponse(Messages, Responses, answer, ResponseOptions{Request: req, Created: 1})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, items gjson.Result) {
		t.Helper()
		want := []struct{ typ, name, ns, payload string }{
			{"function_call", "close_agent", "multi_agent_v1", `{"target":"a"}`},
			{"custom_tool_call", "apply_patch", "", "*** Begin Patch"},
			{"function_call", "close_agent", "", `{}`},
		}
		if n := len(items.Array()); n != len(want) {
			t.Fatalf("%s: %d items: %s", what, n, items.Raw)
		}
		for i, w := range want {
			it := items.Array()[i]
			payload := it.Get("arguments").Str
			if w.typ == "custom_tool_call" {
				payload = it.Get("input").Str
			}
			if it.Get("type").Str != w.typ || it.Get("name").Str != w.name || it.Get("namespace").Str != w.ns || normJSONString(payload) != normJSONString(w.payload) {
				t.Errorf("%s: item %d is %s, want %+v", what, i, it.Raw, w)
			}
		}
	}
	check("answer", gjson.GetBytes(out, "output"))

	// The same answer as a stream.
	var sse []byte
	sse = AppendEvent(sse, "message_start", []byte(`{"type":"message_start","message":{"id":"msg_1","model":"m","usage":{"input_tokens":1,"output_tokens":1}}}`))
	for i, blk := range []struct{ name, input string }{
		{"multi_agent_v1__close_agent", `{"target":`},
		{"apply_patch", `{"input":"*** Begin`},
		{"close_agent", ``},
	} {
		idx := string(rune('0' + i))
		sse = AppendEvent(sse, "content_block_start", []byte(`{"type":"content_block_start","index":`+idx+`,"content_block":{"type":"tool_use","id":"toolu_`+idx+`","name":"`+blk.name+`","input":{}}}`))
		if blk.input != "" {
			sse = AppendEvent(sse, "content_block_delta", []byte(`{"type":"content_block_delta","index":`+idx+`,"delta":{"type":"input_json_delta","partial_json":`+string(AppendString(nil, blk.input))+`}}`))
			rest := `"a"}`
			if i == 1 {
				rest = ` Patch"}`
			}
			sse = AppendEvent(sse, "content_block_delta", []byte(`{"type":"content_block_delta","index":`+idx+`,"delta":{"type":"input_json_delta","partial_json":`+string(AppendString(nil, rest))+`}}`))
		}
		sse = AppendEvent(sse, "content_block_stop", []byte(`{"type":"content_block_stop","index":`+idx+`}`))
	}
	sse = AppendEvent(sse, "message_delta", []byte(`{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}`))
	sse = AppendEvent(sse, "message_stop", []byte(`{"type":"message_stop"}`))
	stream := translateStream(t, Messages, Responses, sse, StreamOptions{Request: req, Created: 1})
	checkSSE(t, Responses, stream)
	if !bytes.Contains(stream, []byte("event: response.custom_tool_call_input.delta\n")) || !bytes.Contains(stream, []byte(`"input":"*** Begin Patch"`)) {
		t.Fatalf("no custom tool call input events:\n%s", stream)
	}
	last := stream[bytes.LastIndex(stream, []byte("event: response.completed")):]
	data := last[bytes.Index(last, []byte("data: "))+6:]
	check("stream", gjson.GetBytes(bytes.TrimSpace(data), "response.output"))

	// The Codex CLI's own catalog-model request (namespace "functions" with a
	// custom "exec") restores too.
	codex, err := os.ReadFile("testdata/requests/responses-client-codex-cli-http-catalog-model-tool-01.json")
	if err != nil {
		t.Fatal(err)
	}
	tn := loadToolNames(codex)
	if n, ok := tn.lookup("exec"); !ok || !n.custom || n.namespace != "functions" {
		t.Fatalf("exec: %+v %v", n, ok)
	}
}

// normJSONString compacts JSON text so equal values compare equal.
func normJSONString(s string) string {
	if !gjson.Valid(s) {
		return s
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		return s
	}
	return b.String()
}
