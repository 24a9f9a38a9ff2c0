package translate

import (
	"bytes"
	"io"
	"testing"

	"github.com/tidwall/gjson"
)

// usageOf feeds every event of an SSE file of protocol p to one Usage and
// returns it with the number of events that carried usage.
func usageOf(t *testing.T, p Protocol, name string) (Usage, int) {
	t.Helper()
	sc := NewScanner(bytes.NewReader(readTestdata(t, name)), 1<<20)
	var u Usage
	n := 0
	for {
		ev, err := sc.Next()
		if err == io.EOF {
			return u, n
		}
		if err != nil {
			t.Fatal(err)
		}
		if u.AddEvent(p, ev.Name, ev.Data) {
			n++
		}
	}
}

func TestUsageFromStreams(t *testing.T) {
	for _, tc := range []struct {
		p    Protocol
		file string
		want Usage
	}{
		{Messages, "streams/messages-stream-text.sse", Usage{InputTokens: 509, OutputTokens: 19}},
		{Messages, "streams/messages-stream-thinking.sse", Usage{InputTokens: 46, OutputTokens: 142}},
		{Messages, "streams/messages-stream-tooluse.sse", Usage{InputTokens: 394, OutputTokens: 79}},
		{Messages, "streams/messages-stream-error-overloaded.sse", Usage{InputTokens: 12, OutputTokens: 1}},
		{Chat, "streams/chat-stream-usage.sse", Usage{InputTokens: 12, OutputTokens: 100, ReasoningTokens: 100}},
		{Responses, "streams/responses-stream-text.sse", Usage{InputTokens: 12, OutputTokens: 10}},
	} {
		u, n := usageOf(t, tc.p, tc.file)
		if u != tc.want {
			t.Errorf("%s: usage %+v, want %+v", tc.file, u, tc.want)
		}
		if n == 0 {
			t.Errorf("%s: no event had usage", tc.file)
		}
	}
}

// message_delta counts are cumulative: the fields it has replace those of
// message_start, the others stay; a text that looks like usage is not.
func TestMessagesUsageCumulative(t *testing.T) {
	var u Usage
	u.AddEvent(Messages, []byte("message_start"), []byte(`{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":5,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":1}}}`))
	if u.AddEvent(Messages, []byte("content_block_delta"), []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\"usage\":{\"output_tokens\":999}"}}`)) {
		t.Error("usage read from a content delta")
	}
	u.AddEvent(Messages, []byte("message_delta"), []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":30}}`))
	if want := (Usage{InputTokens: 2105, OutputTokens: 30, CachedTokens: 2000, CacheWriteTokens: 100}); u != want {
		t.Errorf("usage %+v, want %+v", u, want)
	}
	// A later count of the uncached input replaces that part only.
	u.AddEvent(Messages, nil, []byte(`{"type":"message_delta","usage":{"input_tokens":7,"output_tokens":31}}`))
	if want := (Usage{InputTokens: 2107, OutputTokens: 31, CachedTokens: 2000, CacheWriteTokens: 100}); u != want {
		t.Errorf("usage %+v, want %+v", u, want)
	}
}

func TestBodyUsage(t *testing.T) {
	u, ok := BodyUsage(Messages, readTestdata(t, "responses/messages-nonstream-tooluse.json"))
	if !ok || u != (Usage{InputTokens: 402, OutputTokens: 89}) {
		t.Errorf("messages body usage %+v %v", u, ok)
	}
	u, ok = BodyUsage(Chat, []byte(`{"usage":{"prompt_tokens":9,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}}`))
	if !ok || u != (Usage{InputTokens: 9, OutputTokens: 3, CachedTokens: 4, ReasoningTokens: 2}) {
		t.Errorf("chat body usage %+v %v", u, ok)
	}
	u, ok = BodyUsage(Responses, []byte(`{"usage":{"input_tokens":9,"output_tokens":3,"input_tokens_details":{"cached_tokens":4},"output_tokens_details":{"reasoning_tokens":2}}}`))
	if !ok || u != (Usage{InputTokens: 9, OutputTokens: 3, CachedTokens: 4, ReasoningTokens: 2}) {
		t.Errorf("responses body usage %+v %v", u, ok)
	}
	for _, body := range []string{`{"type":"error"}`, `not json`, `{"usage":null}`} {
		if u, ok := BodyUsage(Messages, []byte(body)); ok || u != (Usage{}) {
			t.Errorf("usage %+v from %s", u, body)
		}
	}
}

// FuzzUsage feeds arbitrary event names and data to every protocol's usage
// reader: none may panic, Messages usage comes only from message_start
// and message_delta, and valid JSON data read as an OpenAI usage object
// gives what the four gjson paths gave (checkUsageOnePass).
func FuzzUsage(f *testing.F) {
	f.Add("message_delta", []byte(`{"type":"message_delta","usage":{"output_tokens":"x","input_tokens":1e99}}`))
	f.Add("", []byte(`{"type":"message_start","message":{"usage":{"input_tokens":1}}}`))
	f.Add("response.completed", []byte(`{"response":{"usage":{"input_tokens":[]}}}`))
	f.Add("", []byte(`{"usage":{"prompt_tokens":"9"}}`))
	f.Add("", []byte(`{"prompt_tokens":1,"prompt_tokens_details":1,"prompt_tokens_details":{"cached_tokens":4},"output_tokens_details":{"reasoning_tokens":2}}`))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		for _, p := range []Protocol{Chat, Responses, Messages} {
			var u Usage
			if u.AddEvent(p, []byte(name), data) && p == Messages {
				if typ := eventType([]byte(name), data); typ != "message_start" && typ != "message_delta" {
					t.Fatalf("usage from a %q event", typ)
				}
			}
			_, _ = BodyUsage(p, data)
		}
		if gjson.ValidBytes(data) {
			checkUsageOnePass(t, gjson.ParseBytes(data))
		}
	})
}

// usageByPaths is how Usage.set read an OpenAI usage object before
// setOpenAI: four gjson paths, the reference setOpenAI must match.
func usageByPaths(p Protocol, r gjson.Result) Usage {
	if p == Chat {
		return Usage{InputTokens: r.Get("prompt_tokens").Int(), OutputTokens: r.Get("completion_tokens").Int(),
			CachedTokens: r.Get("prompt_tokens_details.cached_tokens").Int(), ReasoningTokens: r.Get("completion_tokens_details.reasoning_tokens").Int()}
	}
	return Usage{InputTokens: r.Get("input_tokens").Int(), OutputTokens: r.Get("output_tokens").Int(),
		CachedTokens: r.Get("input_tokens_details.cached_tokens").Int(), ReasoningTokens: r.Get("output_tokens_details.reasoning_tokens").Int()}
}

func checkUsageOnePass(t *testing.T, r gjson.Result) {
	t.Helper()
	for _, p := range []Protocol{Chat, Responses} {
		var u Usage
		u.set(p, r)
		if want := usageByPaths(p, r); u != want {
			t.Fatalf("%v usage of %s: one pass %+v, paths %+v", p, r.Raw, u, want)
		}
	}
}

// TestUsageOnePassMatchesPaths: setOpenAI reads what the four paths read,
// repeated keys, details that are not objects and string counts included.
func TestUsageOnePassMatchesPaths(t *testing.T) {
	for _, s := range []string{
		`{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}`,
		`{"prompt_tokens":9,"prompt_tokens":5,"completion_tokens":"3","prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}`,
		`{"prompt_tokens_details":7,"prompt_tokens_details":{"audio":1},"prompt_tokens_details":{"cached_tokens":4},"prompt_tokens_details":{"cached_tokens":6}}`,
		`{"prompt_tokens_details":[{"cached_tokens":4}],"completion_tokens_details":{"reasoning_tokens":null},"completion_tokens_details":{"reasoning_tokens":2}}`,
		`{"input_tokens":9,"output_tokens":3,"input_tokens_details":{"cached_tokens":8},"output_tokens_details":{"reasoning_tokens":1}}`,
		`{"input_tokens":null,"input_tokens":2,"output_tokens":1e3,"input_tokens_details":{"cached_tokens":"5"}}`,
		`{"prompt\u005ftokens":9,"input_tokens_details":{"cached\u005ftokens":3}}`,
		`[{"prompt_tokens":1}]`, `"x"`, `12`, `null`, `{}`,
	} {
		checkUsageOnePass(t, gjson.Parse(s))
	}
}
