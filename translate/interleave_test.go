package translate

import (
	"strconv"
	"strings"
	"testing"
)

// Parallel tool calls whose events interleave (issue #15, defect 1): every
// client gets each call once, with its own id, name and arguments.

// chatChunk is one upstream Chat chunk with delta d.
func chatChunk(d string) []byte {
	return []byte(`{"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + d + `,"finish_reason":null}]}`)
}

func TestStreamInterleavedToolCalls(t *testing.T) {
	var chat []byte
	for _, d := range []string{
		`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_x0","type":"function","function":{"name":"read","arguments":""}}]}`,
		`{"tool_calls":[{"index":1,"id":"call_x1","type":"function","function":{"name":"read","arguments":""}}]}`,
		`{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}`,
		`{"tool_calls":[{"index":1,"function":{"arguments":"{\"path\":\"b\"}"}}]}`,
		`{"tool_calls":[{"index":0,"function":{"arguments":"\"a\"}"}}]}`,
	} {
		chat = AppendData(chat, chatChunk(d))
	}
	chat = AppendData(chat, []byte(`{"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`))
	chat = AppendData(chat, []byte(`[DONE]`))

	var resp []byte
	seq := 0
	ev := func(name, rest string) {
		resp = AppendEvent(resp, name, []byte(`{"type":"`+name+`","sequence_number":`+strconv.Itoa(seq)+rest+`}`))
		seq++
	}
	ev("response.created", `,"response":{"id":"resp_x","created_at":1,"model":"m","status":"in_progress","output":[]}`)
	ev("response.output_item.added", `,"output_index":2,"item":{"id":"fc_2","type":"function_call","status":"in_progress","arguments":"","call_id":"call_a","name":"read"}`)
	ev("response.output_item.added", `,"output_index":3,"item":{"id":"fc_3","type":"function_call","status":"in_progress","arguments":"","call_id":"call_b","name":"read"}`)
	ev("response.function_call_arguments.delta", `,"item_id":"fc_2","output_index":2,"delta":"{\"path\":\"a\"}"`)
	ev("response.function_call_arguments.delta", `,"item_id":"fc_3","output_index":3,"delta":"{\"path\":\"b\"}"`)
	ev("response.output_item.done", `,"output_index":2,"item":{"id":"fc_2","type":"function_call","status":"completed","arguments":"{\"path\":\"a\"}","call_id":"call_a","name":"read"}`)
	ev("response.output_item.done", `,"output_index":3,"item":{"id":"fc_3","type":"function_call","status":"completed","arguments":"{\"path\":\"b\"}","call_id":"call_b","name":"read"}`)
	ev("response.completed", `,"response":{"id":"resp_x","created_at":1,"model":"m","status":"completed","output":[{"type":"function_call"}],"usage":{"input_tokens":1,"output_tokens":1}}`)

	var msgs []byte
	for _, e := range [][2]string{
		{"message_start", `{"type":"message_start","message":{"id":"msg_x","model":"m","usage":{"input_tokens":1,"output_tokens":1}}}`},
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_a","name":"read","input":{}}}`},
		{"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_b","name":"read","input":{}}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"path\":\"b\"}"}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"path\":\"a\"}"}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":1}`},
		{"content_block_stop", `{"type":"content_block_stop","index":0}`},
		{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":5}}`},
		{"message_stop", `{"type":"message_stop"}`},
	} {
		msgs = AppendEvent(msgs, e[0], []byte(e[1]))
	}

	for from, in := range map[Protocol][]byte{Chat: chat, Responses: resp, Messages: msgs} {
		for _, to := range protocols {
			if to == from {
				continue
			}
			out := translateStream(t, from, to, in, StreamOptions{IncludeUsage: true, Created: 1})
			d, err := validateStream(to, out, validateOpts{strictArgs: true, usageChunk: true})
			if err != nil {
				t.Fatalf("%s→%s: %v\n%s", from, to, err, out)
			}
			if len(d.Tools) != 2 || d.Tools[0].Name != "read" || d.Tools[1].Name != "read" ||
				normJSONString(d.Tools[0].Args) != `{"path":"a"}` || normJSONString(d.Tools[1].Args) != `{"path":"b"}` ||
				!strings.HasSuffix(d.Tools[0].ID, "a") && !strings.HasSuffix(d.Tools[0].ID, "x0") || d.Finish != "tool_calls" {
				t.Errorf("%s→%s: the client saw %+v\n%s", from, to, d, out)
			}
		}
	}
}

// TestStreamChatToolQuirks: calls without an id get unique ones; a server
// that numbers every call 0 still gives separate calls; arguments that go
// on after a complete JSON value of a call closed early are refused.
func TestStreamChatToolQuirks(t *testing.T) {
	run := func(deltas ...string) ([]byte, error) {
		st := NewStream(Chat, Messages, StreamOptions{Created: 1})
		var out []byte
		var err error
		for _, d := range deltas {
			if out, err = st.Event(out, Event{Data: chatChunk(d)}); err != nil {
				return out, err
			}
		}
		out, err = st.Event(out, Event{Data: []byte(`{"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`)})
		return st.Finish(out), err
	}
	out, err := run(
		`{"tool_calls":[{"index":0,"type":"function","function":{"name":"a","arguments":"{}"}}]}`,
		`{"tool_calls":[{"index":1,"type":"function","function":{"name":"b","arguments":"{}"}}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := validateStream(Messages, out, validateOpts{strictArgs: true}); err != nil || len(d.Tools) != 2 {
		t.Fatalf("calls without ids: %v %+v\n%s", err, d, out)
	}
	out, err = run(
		`{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"a","arguments":"{\"x\":1}"}}]}`,
		`{"tool_calls":[{"index":0,"id":"c2","type":"function","function":{"name":"b","arguments":"{\"y\":2}"}}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := validateStream(Messages, out, validateOpts{strictArgs: true}); err != nil || len(d.Tools) != 2 || d.Tools[1].Name != "b" {
		t.Fatalf("every call numbered 0: %v %+v\n%s", err, d, out)
	}
	_, err = run(
		`{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"a","arguments":"{\"x\":1}"}}]}`,
		`{"tool_calls":[{"index":1,"id":"c2","type":"function","function":{"name":"b","arguments":"{}"}}]}`,
		`{"tool_calls":[{"index":0,"function":{"arguments":" \n"}}]}`)
	if err != nil {
		t.Fatalf("whitespace after a complete call: %v", err)
	}
	_, err = run(
		`{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"a","arguments":"{\"x\":1}"}}]}`,
		`{"tool_calls":[{"index":1,"id":"c2","type":"function","function":{"name":"b","arguments":"{}"}}]}`,
		`{"tool_calls":[{"index":0,"function":{"arguments":"{\"more\":2}"}}]}`)
	if err == nil {
		t.Fatal("arguments after a complete JSON value were taken")
	}
	// A custom tool's raw input may look like JSON and go on: it stays
	// open until finish_reason.
	out, err = run(
		`{"tool_calls":[{"index":0,"id":"c1","type":"custom","custom":{"name":"patch","input":"{x}"}}]}`,
		`{"tool_calls":[{"index":1,"id":"c2","type":"function","function":{"name":"b","arguments":"{}"}}]}`,
		`{"tool_calls":[{"index":0,"custom":{"input":" and more"}}]}`)
	if err != nil {
		t.Fatalf("custom input after a JSON-looking start: %v", err)
	}
	if d, err := validateStream(Messages, out, validateOpts{strictArgs: true}); err != nil || len(d.Tools) != 2 || normJSONString(d.Tools[0].Args) != `{"input":"{x} and more"}` {
		t.Fatalf("custom input: %v %+v\n%s", err, d, out)
	}
}
