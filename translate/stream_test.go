package translate

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"

	"github.com/tidwall/gjson"
)

// upstream events that open a text block, and one text delta, per protocol.
var (
	openText = map[Protocol][]Event{
		Chat: {{Data: []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}`)}},
		Responses: {
			{Name: []byte("response.created"), Data: []byte(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","created_at":1,"model":"m","status":"in_progress","output":[]}}`)},
			{Name: []byte("response.output_item.added"), Data: []byte(`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_1","type":"message","role":"assistant","content":[]}}`)},
			{Name: []byte("response.content_part.added"), Data: []byte(`{"type":"response.content_part.added","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":""}}`)},
		},
		Messages: {
			{Name: []byte("message_start"), Data: []byte(`{"type":"message_start","message":{"id":"msg_1","model":"m","usage":{"input_tokens":3,"output_tokens":1}}}`)},
			{Name: []byte("content_block_start"), Data: []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)},
		},
	}
	textDelta = map[Protocol]Event{
		Chat:      {Data: []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hello wörld"},"finish_reason":null}]}`)},
		Responses: {Name: []byte("response.output_text.delta"), Data: []byte(`{"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"hello wörld"}`)},
		Messages:  {Name: []byte("content_block_delta"), Data: []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hello wörld"}}`)},
	}
)

// TestStreamDeltaAllocs locks in that a text delta without JSON escapes
// costs no allocation in steady state (a Responses client's stream keeps
// the text for its .done events, so its buffer grows now and then; a delta
// with escapes costs one, gjson's decoded string).
func TestStreamDeltaAllocs(t *testing.T) {
	for _, from := range protocols {
		for _, to := range protocols {
			if from == to {
				continue
			}
			st := NewStream(from, to, StreamOptions{Created: 1})
			out := make([]byte, 0, 4096)
			var err error
			for _, ev := range openText[from] {
				if out, err = st.Event(out[:0], ev); err != nil {
					t.Fatal(err)
				}
			}
			allocs := testing.AllocsPerRun(200, func() {
				out, err = st.Event(out[:0], textDelta[from])
			})
			if err != nil || !bytes.Contains(out, []byte(`hello wörld`)) {
				t.Fatalf("%s→%s: %v %s", from, to, err, out)
			}
			if limit := 0.0; allocs > limit+boolf(to == Responses) {
				t.Errorf("%s→%s: %.2f allocations per text delta", from, to, allocs)
			}
		}
	}
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// TestStreamOneByteReads feeds every recorded stream one byte per read, so
// multi-byte UTF-8 characters and CRLF pairs are split across reads; the
// translation must be the same as from whole reads.
func TestStreamOneByteReads(t *testing.T) {
	for _, f := range files(t, "streams") {
		name := filepath.Base(f)
		from := protocolOf(t, name)
		in, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crlf := bytes.ReplaceAll(in, []byte("\n"), []byte("\r\n"))
		for _, to := range protocols {
			if to == from {
				continue
			}
			whole := translateStream(t, from, to, in, StreamOptions{Created: 1})
			split := translateStreamFrom(t, from, to, iotest.OneByteReader(bytes.NewReader(crlf)), StreamOptions{Created: 1})
			if !bytes.Equal(whole, split) {
				t.Errorf("%s→%s: one-byte CRLF reads translate differently", name, to)
			}
		}
	}
}

func TestStreamUnfinishedGetsFail(t *testing.T) {
	for _, from := range protocols {
		for _, to := range protocols {
			if from == to {
				continue
			}
			st := NewStream(from, to, StreamOptions{Created: 1})
			var out []byte
			var err error
			for _, ev := range openText[from] {
				if out, err = st.Event(out, ev); err != nil {
					t.Fatal(err)
				}
			}
			out = st.Finish(out)
			checkSSE(t, to, out)
			if !st.Done() || !bytes.Contains(out, []byte("stream_incomplete")) && to != Messages {
				t.Errorf("%s→%s: an unfinished stream did not fail:\n%s", from, to, out)
			}
			if more := st.Fail(nil, "server_error", "", "again"); len(more) != 0 {
				t.Errorf("%s→%s: Fail after the end wrote %s", from, to, more)
			}
			if more, err := st.Event(nil, textDelta[from]); len(more) != 0 || err != nil {
				t.Errorf("%s→%s: Event after the end wrote %s, %v", from, to, more, err)
			}
		}
	}
}

func TestStreamBadEvent(t *testing.T) {
	for _, from := range protocols {
		st := NewStream(from, protocols[int(from)%3], StreamOptions{})
		out, err := st.Event([]byte("x"), Event{Name: []byte("content_block_delta"), Data: []byte(`{"type":`)})
		if !errors.Is(err, ErrBadEvent) || string(out) != "x" {
			t.Errorf("%s: %q, %v", from, out, err)
		}
	}
}

// TestStreamFailShapes checks the terminal error of each client protocol.
func TestStreamFailShapes(t *testing.T) {
	want := map[Protocol][]string{
		Chat:      {`data: {"error":{"message":"boom","type":"server_error","param":null,"code":"upstream_error"}}`, "data: [DONE]"},
		Responses: {"event: error\n", `"code":"upstream_error","message":"boom"`, "event: response.failed\n", `"status":"failed","error":{"code":"upstream_error","message":"boom"}`, `"id":"resp_1"`},
		Messages:  {"event: error\n", `{"type":"error","error":{"type":"api_error","message":"boom"}}`},
	}
	for _, to := range protocols {
		from := protocols[int(to)%3]
		st := NewStream(from, to, StreamOptions{Created: 1})
		var out []byte
		for _, ev := range openText[from] {
			out, _ = st.Event(out, ev)
		}
		out = st.Fail(out, "server_error", "upstream_error", "boom")
		for _, w := range want[to] {
			if !bytes.Contains(out, []byte(w)) {
				t.Errorf("%s client: %q missing from\n%s", to, w, out)
			}
		}
		checkSSE(t, to, out)
	}
}

// TestStreamUsage checks that Usage reports every protocol's usage fields.
func TestStreamUsage(t *testing.T) {
	for name, want := range map[string]Usage{
		"chat-stream-usage.sse":                   {InputTokens: 12, OutputTokens: 100, ReasoningTokens: 100},
		"responses-stream-reasoning-summary.sse":  {InputTokens: 0, OutputTokens: 0, CachedTokens: 1152, ReasoningTokens: 64},
		"messages-stream-thinking.sse":            {InputTokens: 46, OutputTokens: 142},
		"responses-stream-toolcall-reasoning.sse": {ReasoningTokens: 128},
	} {
		in, err := os.ReadFile(filepath.Join("testdata", "streams", name))
		if err != nil {
			t.Fatal(err)
		}
		from := protocolOf(t, name)
		st := NewStream(from, protocols[int(from)%3], StreamOptions{})
		sc := NewScanner(bytes.NewReader(in), 0)
		for {
			ev, err := sc.Next()
			if err != nil {
				break
			}
			if _, err := st.Event(nil, ev); err != nil {
				t.Fatal(err)
			}
		}
		got := st.Usage()
		if want.InputTokens == 0 {
			want.InputTokens, want.OutputTokens = got.InputTokens, got.OutputTokens
		}
		if got != want {
			t.Errorf("%s: usage %+v, want %+v", name, got, want)
		}
	}
}

// TestStreamRefusalAndReasoning: a Chat upstream's streamed refusal and
// reasoning_content reach a Responses client as a refusal part and a
// reasoning item, and a Messages client as text and thinking blocks.
func TestStreamRefusalAndReasoning(t *testing.T) {
	var in []byte
	for _, d := range []string{
		`{"role":"assistant","reasoning_content":"think"}`,
		`{"reasoning_content":"ing"}`,
		`{"refusal":"No"}`,
		`{"refusal":" way."}`,
	} {
		in = AppendData(in, []byte(`{"id":"chatcmpl-7","created":3,"model":"m","choices":[{"index":0,"delta":`+d+`,"finish_reason":null}]}`))
	}
	in = AppendData(in, []byte(`{"id":"chatcmpl-7","created":3,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`))
	in = AppendData(in, []byte(`[DONE]`))

	out := translateStream(t, Chat, Responses, in, StreamOptions{Created: 1})
	checkSSE(t, Responses, out)
	last := out[bytes.LastIndex(out, []byte("event: response.completed")):]
	resp := gjson.GetBytes(bytes.TrimSpace(last[bytes.Index(last, []byte("data: "))+6:]), "response")
	if resp.Get("output.0.type").Str != "reasoning" || resp.Get("output.0.summary.0.text").Str != "thinking" ||
		resp.Get("output.1.content.0.type").Str != "refusal" || resp.Get("output.1.content.0.refusal").Str != "No way." {
		t.Fatalf("responses output %s", resp.Get("output").Raw)
	}
	if !bytes.Contains(out, []byte("event: response.refusal.delta\n")) || !bytes.Contains(out, []byte("event: response.reasoning_summary_text.delta\n")) {
		t.Fatalf("missing delta events:\n%s", out)
	}

	out = translateStream(t, Chat, Messages, in, StreamOptions{Created: 1})
	checkSSE(t, Messages, out)
	for _, w := range []string{`"content_block":{"type":"thinking","thinking":"","signature":""}`, `"thinking_delta","thinking":"ing"`,
		`"text_delta","text":"No"`, `"stop_reason":"end_turn"`} {
		if !bytes.Contains(out, []byte(w)) {
			t.Errorf("%s missing from\n%s", w, out)
		}
	}
	// Chat reasoning has no state to sign: no signature_delta, rather than
	// an empty one the client would send back as a signature.
	if bytes.Contains(out, []byte(`signature_delta`)) {
		t.Errorf("a signature_delta without a signature:\n%s", out)
	}
}

// TestStreamLargeDelta: a 1.5 MiB text delta of multi-byte characters,
// read in halves, arrives whole in every client protocol.
func TestStreamLargeDelta(t *testing.T) {
	big := bytes.Repeat([]byte("é世"), 300<<10) // 1.5 MiB
	var in []byte
	in = AppendEvent(in, "message_start", []byte(`{"type":"message_start","message":{"id":"msg_1","model":"m","usage":{"input_tokens":1,"output_tokens":1}}}`))
	in = AppendEvent(in, "content_block_start", []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
	in = AppendEvent(in, "content_block_delta", append(append([]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`), big...), `"}}`...))
	in = AppendEvent(in, "content_block_stop", []byte(`{"type":"content_block_stop","index":0}`))
	in = AppendEvent(in, "message_delta", []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`))
	in = AppendEvent(in, "message_stop", []byte(`{"type":"message_stop"}`))
	for _, to := range []Protocol{Chat, Responses} {
		out := translateStreamFrom(t, Messages, to, iotest.HalfReader(bytes.NewReader(in)), StreamOptions{Created: 1})
		checkSSE(t, to, out)
		if !bytes.Contains(out, big) {
			t.Errorf("%s: the large delta did not arrive whole", to)
		}
	}
}

// TestStreamChatUsageChunk: a Chat client gets the usage chunk only when it
// asked for stream_options.include_usage.
func TestStreamChatUsageChunk(t *testing.T) {
	in, err := os.ReadFile("testdata/streams/messages-stream-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	for _, include := range []bool{false, true} {
		out := translateStream(t, Messages, Chat, in, StreamOptions{IncludeUsage: include, Created: 1})
		checkSSE(t, Chat, out)
		if got := bytes.Contains(out, []byte(`"choices":[],"usage":{`)); got != include {
			t.Errorf("IncludeUsage %v: usage chunk present %v", include, got)
		}
		if !bytes.Contains(out, []byte(`"finish_reason":"stop"`)) {
			t.Errorf("IncludeUsage %v: no finish_reason chunk", include)
		}
	}
}

// TestMessagesStartInputEstimate: a Messages client's message_start says the
// estimate it was given (Chat and Responses upstreams count the prompt only
// at the end), and message_delta the upstream's figures.
func TestMessagesStartInputEstimate(t *testing.T) {
	usageChunk := Event{Data: []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":57,"completion_tokens":4,"total_tokens":61}}`)}
	stop := Event{Data: []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)}
	for _, tc := range []struct {
		from     Protocol
		estimate int64
		want     int64
	}{
		{Chat, 42, 42},
		{Chat, 0, 0},
		{Chat, -5, 0},
		{Responses, 42, 42},
	} {
		st := NewStream(tc.from, Messages, StreamOptions{Created: 1, InputTokens: tc.estimate})
		var out []byte
		var err error
		for _, ev := range append(openText[tc.from], textDelta[tc.from]) {
			if out, err = st.Event(out, ev); err != nil {
				t.Fatal(err)
			}
		}
		if tc.from == Chat {
			for _, ev := range []Event{stop, usageChunk} {
				if out, err = st.Event(out, ev); err != nil {
					t.Fatal(err)
				}
			}
		}
		out = st.Finish(out)
		var start, delta gjson.Result
		sc := NewScanner(bytes.NewReader(out), 1<<20)
		for {
			ev, err := sc.Next()
			if err != nil {
				break
			}
			switch string(ev.Name) {
			case "message_start":
				start = gjson.GetBytes(ev.Data, "message.usage")
			case "message_delta":
				delta = gjson.GetBytes(ev.Data, "usage")
			}
		}
		if got := start.Get("input_tokens"); !got.Exists() || got.Int() != tc.want {
			t.Errorf("%s, estimate %d: message_start usage %s, want input_tokens %d", tc.from, tc.estimate, start.Raw, tc.want)
		}
		if tc.from == Chat && delta.Get("input_tokens").Int() != 57 {
			t.Errorf("%s, estimate %d: message_delta usage %s, want the upstream's 57", tc.from, tc.estimate, delta.Raw)
		}
	}
}
