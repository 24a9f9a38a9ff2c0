package translate

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// A Responses client must see the item an answer was cut in marked
// "incomplete", whatever served it, as OpenAI marks it: the mock's openai
// route (testdata/streams/responses-mock-incomplete.sse and
// responses/responses-mock-incomplete.json, captured from `troupe mock`)
// answers max_output_tokens 3 with the message item "incomplete" in
// output_item.done and in response.incomplete's output. Anthropic says why
// it stopped (message_delta) only after content_block_stop, and Chat in the
// chunk after the last delta, so the encoder holds an item's closing events
// until it knows.

// respItemStatuses returns the statuses of a translated Responses stream's
// output_item.done items and of its terminal event's output, and the
// terminal event's type.
func respItemStatuses(t *testing.T, out []byte) (done, final []string, terminal string) {
	t.Helper()
	evs, err := sseEvents(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		x := gjson.ParseBytes(ev.Data)
		switch typ := x.Get("type").Str; typ {
		case "response.output_item.done":
			done = append(done, x.Get("item.type").Str+":"+x.Get("item.status").Str)
		case "response.completed", "response.incomplete", "response.failed":
			terminal = typ
			x.Get("response.output").ForEach(func(_, it gjson.Result) bool {
				final = append(final, it.Get("type").Str+":"+it.Get("status").Str)
				return true
			})
		}
	}
	return done, final, terminal
}

// respEventTypes lists a Responses stream's event types.
func respEventTypes(t *testing.T, out []byte) []string {
	t.Helper()
	evs, err := sseEvents(out)
	if err != nil {
		t.Fatal(err)
	}
	var typs []string
	for _, ev := range evs {
		typs = append(typs, gjson.GetBytes(ev.Data, "type").Str)
	}
	return typs
}

// thinkingThenCutText is a Messages stream with a thinking block and a text
// block that max_tokens cut, in the shapes of streams/messages-mock-max-tokens.sse
// and streams/messages-stream-thinking.sse: only the text item was cut.
const thinkingThenCutText = `event: message_start
data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Short."}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2ln"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hello "}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":5}}

event: message_stop
data: {"type":"message_stop"}

`

// textThenToolCall is the start of a Messages stream: a finished text
// block, then a tool_use block with part of its input.
const textThenToolCall = `event: message_start
data: {"type":"message_start","message":{"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me look."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\":\"Par"}}

`

// cutToolCall is a Messages stream whose tool_use block max_tokens cut.
const cutToolCall = textThenToolCall + `event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":3}}

event: message_stop
data: {"type":"message_stop"}

`

func TestResponsesItemStatusStream(t *testing.T) {
	ref := readTestdata(t, "streams/responses-mock-incomplete.sse")
	refDone, refFinal, refTerminal := respItemStatuses(t, ref)
	if strings.Join(refDone, ",") != "message:incomplete" || refTerminal != "response.incomplete" {
		t.Fatalf("reference capture changed: %v %s", refDone, refTerminal)
	}
	tests := []struct {
		name     string
		from     Protocol
		in       []byte
		done     string // output_item.done statuses, in order
		terminal string
		sameAs   bool // the event types match the mock's openai route's exactly
	}{
		{"messages max_tokens (mock)", Messages, readTestdata(t, "streams/messages-mock-max-tokens.sse"), "message:incomplete", "response.incomplete", true},
		{"chat length (mock)", Chat, readTestdata(t, "streams/chat-mock-length.sse"), "message:incomplete", "response.incomplete", true},
		{"messages end_turn", Messages, readTestdata(t, "streams/messages-stream-text.sse"), "message:completed", "response.completed", false},
		{"chat stop", Chat, readTestdata(t, "streams/chat-stream-text.sse"), "message:completed", "response.completed", false},
		{"messages refusal", Messages, readTestdata(t, "streams/messages-conf-refusal.sse"), "message:incomplete", "response.incomplete", false},
		{"messages thinking then cut text", Messages, []byte(thinkingThenCutText), "reasoning:,message:incomplete", "response.incomplete", false},
		{"messages cut tool call", Messages, []byte(cutToolCall), "message:completed,function_call:incomplete", "response.incomplete", false},
		{"messages tool use, finished", Messages, readTestdata(t, "streams/messages-stream-tooluse.sse"), "message:completed,function_call:completed", "response.completed", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := translateStream(t, tc.from, Responses, tc.in, StreamOptions{Created: 1700000000})
			if _, err := validateStream(Responses, out, validateOpts{}); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			done, final, terminal := respItemStatuses(t, out)
			if got := strings.Join(done, ","); got != tc.done {
				t.Errorf("output_item.done statuses %s, want %s\n%s", got, tc.done, out)
			}
			if got := strings.Join(final, ","); got != tc.done {
				t.Errorf("%s output statuses %s, want %s", terminal, got, tc.done)
			}
			if terminal != tc.terminal {
				t.Errorf("terminal %s, want %s", terminal, tc.terminal)
			}
			if tc.sameAs {
				if got, want := strings.Join(respEventTypes(t, out), " "), strings.Join(respEventTypes(t, ref), " "); got != want {
					t.Errorf("event order\n%s\nwant (mock openai route)\n%s", got, want)
				}
				if strings.Join(final, ",") != strings.Join(refFinal, ",") {
					t.Errorf("final output %v, the mock's openai route %v", final, refFinal)
				}
			}
		})
	}
}

func TestResponsesItemStatusNonStream(t *testing.T) {
	ref := gjson.ParseBytes(readTestdata(t, "responses/responses-mock-incomplete.json"))
	if ref.Get("output.0.status").Str != "incomplete" {
		t.Fatal("reference capture changed")
	}
	tests := []struct {
		name   string
		from   Protocol
		body   string
		status string // the response's
		items  string // its output items' type:status
	}{
		{"messages max_tokens (mock)", Messages, string(readTestdata(t, "responses/messages-mock-max-tokens.json")), "incomplete", "message:incomplete"},
		{"chat length (mock)", Chat, string(readTestdata(t, "responses/chat-mock-length.json")), "incomplete", "message:incomplete"},
		{"messages end_turn", Messages, string(readTestdata(t, "responses/messages-nonstream-text.json")), "completed", "message:completed"},
		{"chat stop", Chat, string(readTestdata(t, "responses/chat-nonstream-text.json")), "completed", "message:completed"},
		{"messages text then cut tool call", Messages, `{"id":"msg_03","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":22,"output_tokens":3}}`, "incomplete", "message:completed,function_call:incomplete"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := TranslateResponse(tc.from, Responses, []byte(tc.body), ResponseOptions{Created: 1700000000})
			if err != nil {
				t.Fatal(err)
			}
			r := gjson.ParseBytes(out)
			if got := r.Get("status").Str; got != tc.status {
				t.Errorf("status %s, want %s", got, tc.status)
			}
			var items []string
			r.Get("output").ForEach(func(_, it gjson.Result) bool {
				items = append(items, it.Get("type").Str+":"+it.Get("status").Str)
				return true
			})
			if got := strings.Join(items, ","); got != tc.items {
				t.Errorf("items %s, want %s\n%s", got, tc.items, out)
			}
		})
	}
}

// textThenFailedToolCall is a Messages stream whose text block finished and
// whose tool_use block was still open when the upstream failed, in the
// shapes of streams/messages-conf-error-mid-tool.sse (the error event from
// fixtures/anthropic-messages/stream-error-overloaded.sse).
const textThenFailedToolCall = textThenToolCall + `event: error
data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}

`

// TestResponsesItemStatusFailed: when the answer fails (response.failed),
// the item still open is listed "incomplete", as a cut answer's is, and an
// item finished before the failure "completed"; the open item gets no
// output_item.done (as the captures in streams/responses-conf-error-mid-tool.sse).
func TestResponsesItemStatusFailed(t *testing.T) {
	tests := []struct {
		name  string
		from  Protocol
		in    []byte
		done  string // output_item.done statuses, in order
		final string // response.failed's output statuses
	}{
		{"messages error mid tool call", Messages, readTestdata(t, "streams/messages-conf-error-mid-tool.sse"), "", "function_call:incomplete"},
		{"chat error mid tool call", Chat, readTestdata(t, "streams/chat-conf-error-mid-tool.sse"), "", "function_call:incomplete"},
		{"messages overloaded mid text", Messages, readTestdata(t, "streams/messages-stream-error-overloaded.sse"), "", "message:incomplete"},
		{"messages text done, tool call open", Messages, []byte(textThenFailedToolCall), "message:completed", "message:completed,function_call:incomplete"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := translateStream(t, tc.from, Responses, tc.in, StreamOptions{Created: 1700000000})
			if _, err := validateStream(Responses, out, validateOpts{}); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			done, final, terminal := respItemStatuses(t, out)
			if terminal != "response.failed" {
				t.Fatalf("terminal %s, want response.failed\n%s", terminal, out)
			}
			if got := strings.Join(done, ","); got != tc.done {
				t.Errorf("output_item.done statuses %s, want %s", got, tc.done)
			}
			if got := strings.Join(final, ","); got != tc.final {
				t.Errorf("response.failed output statuses %s, want %s\n%s", got, tc.final, out)
			}
		})
	}
}
