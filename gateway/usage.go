package gateway

import (
	"bytes"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// isContent reports whether ev carries answer content (for time to first token).
func isContent(ep translate.Protocol, ev translate.Event) bool {
	switch ep {
	case translate.Chat:
		if content, ok := chatDeltaContent(ev.Data); ok {
			return content
		}
		return chatContentPaths(ev.Data)
	case translate.Responses:
		switch string(ev.Name) {
		case "response.output_text.delta", "response.function_call_arguments.delta",
			"response.reasoning_summary_text.delta", "response.output_item.added",
			"response.refusal.delta":
			return true
		}
	case translate.Messages:
		// message_start and ping carry no content; every content_block_delta
		// (text, tool input, thinking) does, and a block that starts with
		// content (tool_use).
		return upstream.MessagesEventKind(ev.Name, ev.Data) == upstream.MessagesContent
	}
	return false
}

// chatContentPaths is isContent of a Chat chunk through gjson's paths.
func chatContentPaths(data []byte) bool {
	return gjson.GetBytes(data, "choices.0.delta.content").Str != "" ||
		gjson.GetBytes(data, "choices.0.delta.tool_calls").Exists() ||
		gjson.GetBytes(data, "choices.0.delta.reasoning_content").Str != ""
}

// chatDeltaContent is chatContentPaths(data) read in one pass, ok when
// data is within what it reads: an object whose members up to the first
// "choices" are flat (strings, literals, numbers; keys without a
// backslash, no spaces), whose choices begin with an object flat up to
// its first "delta", an object whose members are flat up to the first
// that settles the answer (a non-empty content or reasoning_content
// string, any tool_calls) or, for a false answer, the whole chunk flat
// after its delta, with one choice: a path that does not find its member
// in the first delta goes on to look for another delta in choices[0] and
// another choices. There each path finds the member this pass finds. Any other chunk (ok false) is the paths' to read: the
// three walks over a chunk, each to its delta, cost about 4,800
// instructions, and ran for every chunk before the first content
// (docs/benchmarks.md, issue 21, cpu4). FuzzChatDeltaContent checks it
// against the paths on any bytes.
func chatDeltaContent(data []byte) (content, ok bool) {
	i, ok := flatMemberValue(data, 0, "choices")
	if !ok || len(data)-i < 2 || data[i] != '[' || data[i+1] != '{' {
		return false, false
	}
	if i, ok = flatMemberValue(data, i+1, "delta"); !ok || i == len(data) || data[i] != '{' {
		return false, false
	}
	const (
		seenContent = 1 << iota
		seenReasoning
	)
	var seen uint8
	i++
	if i < len(data) && data[i] == '}' {
		return false, noLaterDelta(data, i+1)
	}
	for {
		key, v, ok := flatKey(data, i)
		if !ok {
			return false, false
		}
		end, isString := flatValueEnd(data, v)
		if key == "tool_calls" && end < 0 && v < len(data) && (data[v] == '[' || data[v] == '{') {
			return true, true // the path's value is the bracketed value, however it ends
		}
		if end < 0 {
			return false, false
		}
		var bit uint8
		switch key {
		case "tool_calls":
			return true, true
		case "content":
			bit = seenContent
		case "reasoning_content":
			bit = seenReasoning
		}
		if bit != 0 && seen&bit == 0 {
			seen |= bit
			if isString && end-v > 2 {
				if bytes.IndexByte(data[v:end], '\\') >= 0 {
					return false, false // gjson unescapes it: leave it to the paths
				}
				return true, true
			}
		}
		switch {
		case end == len(data):
			return false, false
		case data[end] == ',':
			i = end + 1
		case data[end] == '}':
			return false, noLaterDelta(data, end+1)
		default:
			return false, false
		}
	}
}

// noLaterDelta reports, for a chunk whose first delta ends at data[i]
// without a member that settles isContent, that no path looks further: a
// path that does not find its member in the first delta goes on to
// another delta of choices[0] and another choices. The rest of choices[0]
// and of the chunk must be flat, choices[0] the only choice.
func noLaterDelta(data []byte, i int) bool {
	j, ok := flatRest(data, i, "delta")
	if !ok || j == len(data) || data[j] != ']' {
		return false
	}
	_, ok = flatRest(data, j+1, "choices")
	return ok
}

// flatRest is the index past the end of the object whose members continue
// at data[i] (a comma then the next member, or its closing brace), ok when
// those members are flat, separated by single commas, and none is named
// key.
func flatRest(data []byte, i int, key string) (int, bool) {
	for {
		if i >= len(data) {
			return 0, false
		}
		switch data[i] {
		case '}':
			return i + 1, true
		case ',':
		default:
			return 0, false
		}
		k, v, ok := flatKey(data, i+1)
		if !ok || k == key {
			return 0, false
		}
		if i, _ = flatValueEnd(data, v); i < 0 {
			return 0, false
		}
	}
}

// flatMemberValue is the index of the value of the first member named key
// of the object at data[i] ('{'), when every member before it is flat
// (flatKey, flatValueEnd) and separated by single commas; ok false
// otherwise, or when the object has no such member.
func flatMemberValue(data []byte, i int, key string) (int, bool) {
	if i >= len(data) || data[i] != '{' {
		return 0, false
	}
	i++
	for {
		k, v, ok := flatKey(data, i)
		if !ok {
			return 0, false
		}
		if k == key {
			return v, true
		}
		end, _ := flatValueEnd(data, v)
		if end < 0 || end == len(data) || data[end] != ',' {
			return 0, false
		}
		i = end + 1
	}
}

// flatKey reads the key at data[i], a quoted string without a backslash
// followed by a colon: the key and the index of the value after the
// colon.
func flatKey(data []byte, i int) (key string, value int, ok bool) {
	if i >= len(data) || data[i] != '"' {
		return "", 0, false
	}
	q := bytes.IndexByte(data[i+1:], '"')
	if q < 0 {
		return "", 0, false
	}
	k := data[i+1 : i+1+q]
	v := i + 2 + q
	if v == len(data) || data[v] != ':' || bytes.IndexByte(k, '\\') >= 0 {
		return "", 0, false
	}
	return b2s(k), v + 1, true
}

// flatValueEnd is the index just past the flat value at data[i]: a string
// (ended as gjson ends it), true, false, null, or a number of the bytes
// 0-9 + - . e E; -1 for anything else (an object, an array, a string that
// does not end, a literal cut or run on).
func flatValueEnd(data []byte, i int) (end int, isString bool) {
	if i >= len(data) {
		return -1, false
	}
	switch c := data[i]; {
	case c == '"':
		e, _, ok := gjsonStringEnd(data, i+1)
		if !ok {
			return -1, false
		}
		return e, true
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(data)-i >= len(lit) && b2s(data[i:i+len(lit)]) == lit {
				if e := i + len(lit); e == len(data) || data[e] < 'a' || data[e] > 'z' {
					return e, false
				}
			}
		}
		return -1, false
	case c == '-' || ('0' <= c && c <= '9'):
		e := i + 1
		for e < len(data) && (('0' <= data[e] && data[e] <= '9') || data[e] == '.' || data[e] == 'e' || data[e] == 'E' || data[e] == '+' || data[e] == '-') {
			e++
		}
		return e, false
	}
	return -1, false
}

// appendStreamError appends the events that end a failed stream in ep's
// protocol. Chat: a data chunk carrying "error" (what the OpenAI SDKs raise
// on). Responses: an `error` event then `response.failed` for response id
// respID (or one derived from reqID), as the API itself does
// (https://platform.openai.com/docs/api-reference/responses-streaming/error).
// Messages: `event: error` with Anthropic's error object, after which the
// API sends nothing more (https://docs.claude.com/en/docs/build-with-claude/streaming).
// seq is the sequence_number of the first Responses event written, the
// next of the stream the client has seen (0 when it has seen none): every
// Responses event carries one, rising by 1. out is the output the client
// has had (respOutput): the failed response lists it, as the API's does;
// nil lists none.
func appendStreamError(dst []byte, ep translate.Protocol, respID, reqID, msg string, seq int64, out *respOutput) []byte {
	switch ep {
	case translate.Messages:
		dst = append(dst, "event: error\ndata: "...)
		dst = appendAnthropicError(dst, 502, msg, reqID)
		return append(dst[:len(dst)-1], "\n\n"...) // appendAnthropicError ends with one newline
	case translate.Responses:
		if respID == "" {
			respID = "resp_" + reqID
		}
		// The wire shape nests the error object, as recorded from the API
		// (shared fixture openai-responses/stream-error-event.sse); the SDKs
		// raise on it.
		dst = append(dst, "event: error\ndata: {\"type\":\"error\",\"sequence_number\":"...)
		dst = strconv.AppendInt(dst, seq, 10)
		dst = append(dst, ",\"error\":{\"type\":\"server_error\",\"code\":\"upstream_error\",\"message\":"...)
		dst = translate.AppendString(dst, msg)
		dst = append(dst, ",\"param\":null}}\n\nevent: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":"...)
		dst = strconv.AppendInt(dst, seq+1, 10)
		dst = append(dst, ",\"response\":{\"id\":"...)
		dst = translate.AppendString(dst, respID)
		dst = append(dst, ",\"object\":\"response\",\"status\":\"failed\",\"error\":{\"code\":\"upstream_error\",\"message\":"...)
		dst = translate.AppendString(dst, msg)
		dst = append(dst, "},\"output\":["...)
		dst = out.appendItems(dst)
		return append(dst, "],\"usage\":null}}\n\n"...)
	default:
		dst = append(dst, "data: {\"error\":{\"message\":"...)
		dst = translate.AppendString(dst, msg)
		return append(dst, ",\"type\":\"server_error\",\"param\":null,\"code\":\"upstream_error\"}}\n\n"...)
	}
}
