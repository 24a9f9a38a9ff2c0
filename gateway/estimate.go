package gateway

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/translate"
)

// Usage of a stream the upstream never reported usage for.
//
// Upstreams report a stream's usage at its end (Chat's include_usage chunk,
// Responses' response.completed, Messages' message_delta). A stream cut
// before then — the client hung up, the shutdown grace ended, the upstream
// broke — still cost the upstream its tokens, and the client got content:
// it must not be free. The relay counts the content it passes on (text,
// reasoning, tool arguments: contentCount); when such a stream ends without
// the upstream's final usage, the record gets input tokens from the
// upstream when it sent them (Messages' message_start) or else estimated
// from the request (estimateRequestTokens), and output tokens estimated from
// the content relayed, and is marked estimated (storage.UsageRecord.Estimated).
// Per-key token limits count these tokens like any others.

// contentCount tallies streamed content as rawTokens weighs text: ASCII
// bytes (a token per 4) and other characters (a token each). The raw JSON
// of the strings is counted, escapes included: close enough for an
// estimate, and no string is decoded.
type contentCount struct {
	ascii, other int64
}

// add counts the raw JSON string s (quotes included, or any raw value).
func (n *contentCount) add(s string) {
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			n.ascii++
			i++
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		n.other++
		i += size
	}
	if len(s) >= 2 && s[0] == '"' {
		n.ascii -= 2 // the quotes
	}
}

// tokens is the estimated token count of the content counted.
func (n contentCount) tokens() int64 { return (n.ascii+3)/4 + n.other }

// countEvent adds the content of one upstream stream event of protocol p:
// Chat's delta content, reasoning, refusal and tool-call arguments;
// Responses' *.delta events; Messages' content_block_delta text, thinking
// and tool input. It reads only the event's "delta" value (the first key so
// named: a key, since a quote inside a string value is escaped) and
// allocates nothing.
func (n *contentCount) countEvent(p translate.Protocol, ev translate.Event) {
	switch p {
	case translate.Chat:
		n.countChatDelta(ev.Data, bytes.Index(ev.Data, deltaKey))
	case translate.Responses:
		if t := eventType(ev); strings.HasSuffix(t, ".delta") {
			// OpenAI's shape read directly: its first "delta" is the
			// member deltaMembers reads (checkDeltaMembers), without
			// bytes.Index's search of the event.
			_, v, ok := deltaMembers(ev.Data)
			if !ok {
				v = deltaOf(ev.Data)
			}
			if v.Type == gjson.String {
				n.add(v.Raw)
			}
		}
	case translate.Messages:
		if eventType(ev) != "content_block_delta" {
			return
		}
		deltaOf(ev.Data).ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "text", "thinking", "partial_json":
				n.add(v.Raw)
			}
			return true
		})
	}
}

// countChatDelta is countEvent of a Chat chunk, data, whose first
// `"delta":` is at index at (bytes.Index's; -1: none), found by the
// caller's own pass over it (scanChat). The members are read directly
// (flatDeltaCount) when gjson's pass would meet only strings and literals
// under keys without a backslash, as in every chunk of a text answer;
// any other chunk is read through gjson (countDeltaMembers).
func (n *contentCount) countChatDelta(data []byte, at int) {
	if at < 0 {
		return
	}
	rest := data[at+len(deltaKey):]
	if c, ok := flatDeltaCount(rest); ok {
		n.ascii += c.ascii
		n.other += c.other
		return
	}
	n.countDeltaMembers(rest)
}

// countDeltaMembers counts the content members gjson's ForEach meets in
// rest, the bytes after a Chat chunk's `"delta":`. ForEach does not stop
// at the delta's closing brace: it goes on through the chunk's later
// members (finish_reason, usage, obfuscation, a later choice's index),
// skipping the brackets between them, and a content key among those is
// counted too.
func (n *contentCount) countDeltaMembers(rest []byte) {
	gjson.Parse(b2s(rest)).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "content", "reasoning_content", "reasoning", "refusal":
			if v.Type == gjson.String {
				n.add(v.Raw)
			}
		case "tool_calls":
			v.ForEach(func(_, tc gjson.Result) bool {
				n.add(tc.Get("function.name").Raw)
				n.add(tc.Get("function.arguments").Raw)
				return true
			})
		}
		return true
	})
}

// flatDeltaCount is countDeltaMembers(rest) without gjson, ok when rest
// is within what it reads: it makes gjson's ForEach pass over the bytes
// (a key is the string at the next quote, a value follows after any
// spaces, commas and colons, and one byte after each value is skipped)
// and gives up (ok false) at a key with a backslash (gjson would unescape
// it), at a tool_calls key, or at a value other than a string or a
// literal (numbers, objects, arrays: gjson's parse of those is not
// copied). gjson's pass (Parse, then ForEach and parseAny over every
// member to the chunk's end) cost a relayed text chunk about 1,500
// instructions, the largest gjson item of a Chat stream after isContent's
// (docs/benchmarks.md, issue 21, cpu4). FuzzCountChatDelta checks it
// against countDeltaMembers on any bytes.
func flatDeltaCount(rest []byte) (c contentCount, ok bool) {
	i := 0
	for i < len(rest) && rest[i] <= ' ' {
		i++
	}
	if i == len(rest) || rest[i] != '{' {
		return c, true // not an object: ForEach gives no key a name
	}
	json := rest[i:] // indices as in gjson's Raw
	for j := 1; j < len(json); j++ {
		q := bytes.IndexByte(json[j:], '"')
		if q < 0 {
			return c, true
		}
		ks := j + q + 1
		ke, esc, ok := gjsonStringEnd(json, ks)
		if !ok {
			return c, true // an unterminated key ends ForEach
		}
		if esc {
			return c, false
		}
		key := b2s(json[ks : ke-1])
		if key == "tool_calls" {
			return c, false
		}
		j = ke
		for j < len(json) && (json[j] <= ' ' || json[j] == ',' || json[j] == ':') {
			j++
		}
		if j == len(json) {
			return c, true // no value: ForEach ends
		}
		switch ch := json[j]; {
		case ch == '"':
			e, _, ok := gjsonStringEnd(json, j+1)
			if !ok {
				return c, true // an unterminated value ends ForEach
			}
			switch key {
			case "content", "reasoning_content", "reasoning", "refusal":
				c.add(b2s(json[j:e]))
			}
			j = e
		case ch == 't' || ch == 'f' || (ch == 'n' && (j+1 == len(json) || json[j+1] == 'u')):
			j++ // gjson's parseLiteral: the letters a to z that follow
			for j < len(json) && 'a' <= json[j] && json[j] <= 'z' {
				j++
			}
		default:
			return c, false
		}
		// the loop's j++ skips the byte after the value, as ForEach's does
	}
	return c, true
}

// gjsonStringEnd is where gjson's parseString ends the string whose
// opening quote is just before json[i]: the index past its closing quote
// (a quote after an even run of backslashes), whether it holds a
// backslash, and ok false when it does not end.
func gjsonStringEnd(json []byte, i int) (end int, esc, ok bool) {
	for len(json)-i >= 8 { // eight bytes a step to the first quote or backslash
		w := binary.LittleEndian.Uint64(json[i:])
		if m := quotesIn(w) | backslashesIn(w); m != 0 {
			i += bits.TrailingZeros64(m) >> 3
			break
		}
		i += 8
	}
	for ; i < len(json); i++ {
		if json[i] > '\\' {
			continue
		}
		if json[i] == '"' {
			return i + 1, false, true
		}
		if json[i] == '\\' {
			i++
			for ; i < len(json); i++ {
				if json[i] > '\\' {
					continue
				}
				if json[i] == '"' {
					if json[i-1] == '\\' {
						n := 0
						for j := i - 2; j > 0; j-- {
							if json[j] != '\\' {
								break
							}
							n++
						}
						if n%2 == 0 {
							continue
						}
					}
					return i + 1, true, true
				}
			}
			break
		}
	}
	return i, false, false
}

// deltaOf is the value of data's first "delta" key (an object's Raw runs on
// to the end of data; ForEach stops at its closing brace); the zero Result
// when there is none.
func deltaOf(data []byte) gjson.Result {
	i := bytes.Index(data, deltaKey)
	if i < 0 {
		return gjson.Result{}
	}
	return gjson.Parse(b2s(data[i+len(deltaKey):]))
}

var deltaKey = []byte(`"delta":`)

// estimateRequestTokens estimates the input tokens of a request body of
// protocol p, as estimateInputTokens does for Messages: the text of the
// instructions, messages or input items (content, tool calls and their
// results) and tools, a fixed cost per message, tool, image and file. At
// least 1.
func estimateRequestTokens(p translate.Protocol, body []byte) int64 {
	if p == translate.Messages {
		return estimateInputTokens(body)
	}
	root := gjson.Parse(b2s(body))            // no copy: body outlives root
	n := textTokens(root.Get("instructions")) // Responses
	items := root.Get("messages")             // Chat
	if p == translate.Responses {
		items = root.Get("input")
	}
	if items.Type == gjson.String {
		n += tokensPerMessage + rawTokens(items.Str)
	} else {
		items.ForEach(func(_, m gjson.Result) bool {
			n += tokensPerMessage + itemTokens(m)
			return true
		})
	}
	root.Get("tools").ForEach(func(_, t gjson.Result) bool {
		if fn := t.Get("function"); fn.IsObject() { // Chat nests the function
			t = fn
		}
		n += tokensPerTool + rawTokens(t.Get("name").Str) + rawTokens(t.Get("description").Str) + rawTokens(t.Get("parameters").Raw)
		return true
	})
	return max(n, 1)
}

// itemTokens estimates one Chat message or Responses input item.
func itemTokens(m gjson.Result) int64 {
	n := textTokens(m.Get("content"))
	m.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool { // Chat
		n += rawTokens(tc.Get("function.name").Str) + rawTokens(tc.Get("function.arguments").Str)
		return true
	})
	switch m.Get("type").Str { // Responses items other than messages
	case "function_call":
		n += rawTokens(m.Get("name").Str) + rawTokens(m.Get("arguments").Str)
	case "custom_tool_call":
		n += rawTokens(m.Get("name").Str) + rawTokens(m.Get("input").Str)
	case "function_call_output", "custom_tool_call_output":
		n += textTokens(m.Get("output"))
	case "reasoning":
		m.Get("summary").ForEach(func(_, s gjson.Result) bool {
			n += rawTokens(s.Get("text").Str)
			return true
		})
	}
	return n
}
