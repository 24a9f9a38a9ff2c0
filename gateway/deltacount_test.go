package gateway

import (
	"bytes"
	"os"
	"testing"

	"github.com/troupe-gw/troupe/translate"
)

// deltaCountSeeds are the bytes after a Chat chunk's "delta": that take
// each of flatDeltaCount's turns: escapes in keys and values, literals cut
// short or run on, numbers, nested values, tool calls, content keys after
// the delta's closing brace, unterminated strings, values glued to keys.
var deltaCountSeeds = []string{
	``, ` `, `"x"`, `[{"content":"a"}]`, `null`, `{`, `{}`, `{"content":"a"}`,
	`{"role":"assistant","content":"","refusal":null},"finish_reason":null}],"usage":null,"obfuscation":"hAM"}`,
	`{"content":"Hi"},"finish_reason":null}],"obfuscation":"UC"}`,
	`{"content":"a\"b\\"},"refusal":"c"}`, `{"content":"\\\\\"x"}`, `{"con\u0074ent":"a"}`,
	`{"reasoning_content":"thinking é 日本"}`, `{"reasoning":"r","refusal":"no"}`,
	`{"content":nul,"refusal":"x"}`, `{"content":n}`, `{"content":n`, `{"content":nan}`, `{"content":true"refusal":"y"}`,
	`{"content":1,"refusal":"z"}`, `{"content":-1}`, `{"content":{"a":"b"},"refusal":"q"}`, `{"content":["a"]}`,
	`{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\":1}"}}]}`, `{"tool_calls":null}`, `{"tool_calls":"x"}`,
	`{"content":"a"},"content":"b"}`, `{"content":"a"}}},{"index":1,"delta":{"content":"c"}}]}`,
	`{"content":"unterminated`, `{"content`, `{"content":`, `{"content"::,, "a"}`, `{"content""b"}`,
	`{"content":"a""refusal":"b"}`, `{"content":"a"x"refusal":"b"}`, "{\"content\":\t\"a\"}", `{"a":}"content"`,
	`{"content":"a\\`, `{"content":"a\\"`, `{"\\":"x","content":"y"}`, "{\"content\":\"\xff\xfe\"}",
}

// checkDeltaCount fails t when flatDeltaCount reads rest and differs from
// countDeltaMembers (gjson), or countChatDelta differs from it.
func checkDeltaCount(t *testing.T, rest []byte) {
	t.Helper()
	var want contentCount
	want.countDeltaMembers(rest)
	if got, ok := flatDeltaCount(rest); ok && got != want {
		t.Fatalf("flatDeltaCount(%q) = %+v, gjson's %+v", rest, got, want)
	}
	data := append([]byte(`{"choices":[{"index":0,"delta":`), rest...)
	var got contentCount
	got.countChatDelta(data, bytes.Index(data, deltaKey))
	if got != want {
		t.Fatalf("countChatDelta(%q) = %+v, gjson's %+v", data, got, want)
	}
}

// TestFlatDeltaCount: every chunk of the captured Chat streams is read
// directly and as gjson reads it, and the seeds as gjson reads them.
func TestFlatDeltaCount(t *testing.T) {
	for _, path := range []string{"testdata/chat-stream-text.sse", "testdata/chat-stream-usage-mock.sse"} {
		body, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, data := range responsesEventData(t, body) {
			at := bytes.Index(data, deltaKey)
			if at < 0 {
				continue
			}
			rest := data[at+len(deltaKey):]
			if _, ok := flatDeltaCount(rest); !ok {
				t.Errorf("%s: %q not read directly", path, data)
			}
			checkDeltaCount(t, rest)
		}
	}
	for _, s := range deltaCountSeeds {
		checkDeltaCount(t, []byte(s))
	}
	if c, ok := flatDeltaCount([]byte(`{"content":"abcd","refusal":"é"},"x":1}`)); ok {
		t.Errorf("a number read directly: %+v", c)
	}
	if c, ok := flatDeltaCount([]byte(`{"content":"abcd","refusal":"é"},"x":null}`)); !ok || c != (contentCount{ascii: 4, other: 1}) {
		t.Errorf("read %+v %v, want 4 ASCII and 1 other", c, ok)
	}
}

// FuzzCountChatDelta checks flatDeltaCount and countChatDelta against
// gjson's pass (countDeltaMembers) on any bytes.
func FuzzCountChatDelta(f *testing.F) {
	for _, s := range deltaCountSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, rest []byte) { checkDeltaCount(t, rest) })
}

// deltaContentSeeds are Chat chunks for chatDeltaContent's turns: content
// empty, missing, escaped, repeated, after its delta, in a second delta or
// a second choices; tool calls flat and bracketed; values cut short.
var deltaContentSeeds = []string{
	``, `{}`, `[]`, ` {"choices":[{"delta":{"content":"a"}}]}`,
	`{"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}],"usage":null}`,
	`{"id":"x","created":17,"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}`,
	`{"choices":[{"delta":{"content":""},"delta":{"content":"x"}}]}`, `{"choices":[{"delta":{},"delta":{"content":"x"}}]}`,
	`{"choices":[{"delta":{}}],"choices":[{"delta":{"content":"x"}}]}`, `{"choices":[{"delta":{}},{"delta":{"content":"x"}}]}`,
	`{"choices":[{"delta":{"content":"","content":"x"}}]}`, `{"choices":[{"delta":{"content":"\u0000"}}]}`, `{"choices":[{"delta":{"content":"\"}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`, `{"choices":[{"delta":{"tool_calls":null}}]}`, `{"choices":[{"delta":{"tool_calls":"`,
	`{"choices":[{"delta":{"tool_calls":[`, `{"choices":[{"delta":{"tool_calls":1x}}]}`, `{"choices":[{"delta":{"reasoning_content":"r"}}]}`,
	`{"choices":[{"delta":{"reasoning_content":null,"content":"c"}}]}`, `{"choices":[{"delta":{"content":nul}}]}`, `{"choices":[{"delta":{"content":null}}]}`,
	`{"choices":[{"delta":{"content":"a"`, `{"choices":[{"delta":{"content":""`, `{"choices":[{"delta":{"content":""}`, `{"choices":[{"delta":{"content":""}]`,
	`{"choices":[{"delta":{"content":""}}],"x":{"choices":1}}`, `{"choices":[{"delta":{"content":""}}],"x":1}`, `{"choices":null,"choices":[{"delta":{"content":"x"}}]}`,
	`{"a\"b":1,"choices":[{"delta":{"content":"x"}}]}`, `{"a":"\\","choices":[{"delta":{"content":"x"}}]}`, `{"a":-1.5e+3,"choices":[{"delta":{"content":"x"}}]}`,
	`{"choices":[{"delta":{"con\u0074ent":"x"}}]}`, `{"choices" :[{"delta":{"content":"x"}}]}`, `{"choices":[ {"delta":{"content":"x"}}]}`,
	`{"choices":[{"delta":{"content":"x"}}]}trailing`, `{"choices":[{"delta":{"audio":{"a":1},"content":"x"}}]}`, `{"choices":[{"delta":{"content":"","audio":{}}}]}`,
}

// checkDeltaContent fails t when chatDeltaContent reads data and differs
// from the three paths, or isContent differs from them.
func checkDeltaContent(t *testing.T, data []byte) {
	t.Helper()
	want := chatContentPaths(data)
	if got, ok := chatDeltaContent(data); ok && got != want {
		t.Fatalf("chatDeltaContent(%q) = %v, the paths %v", data, got, want)
	}
	if got := isContent(translate.Chat, translate.Event{Data: data}); got != want {
		t.Fatalf("isContent(%q) = %v, the paths %v", data, got, want)
	}
}

// TestChatDeltaContent: every chunk of the captured Chat streams is read
// in one pass and as the paths read it, and the seeds as the paths read
// them.
func TestChatDeltaContent(t *testing.T) {
	for _, path := range []string{"testdata/chat-stream-text.sse", "testdata/chat-stream-usage-mock.sse"} {
		body, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, data := range responsesEventData(t, body) {
			if _, ok := chatDeltaContent(data); !ok && bytes.HasPrefix(data, []byte(`{"id"`)) && !bytes.Contains(data, []byte(`"choices":[]`)) {
				t.Errorf("%s: %q not read in one pass", path, data)
			}
			checkDeltaContent(t, data)
		}
	}
	for _, s := range deltaContentSeeds {
		checkDeltaContent(t, []byte(s))
	}
}

// FuzzChatDeltaContent checks chatDeltaContent and isContent of a Chat
// chunk against the three gjson paths on any bytes.
func FuzzChatDeltaContent(f *testing.F) {
	for _, s := range deltaContentSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDeltaContent(t, data) })
}
