package translate

import (
	"github.com/tidwall/gjson"
)

// Anthropic Messages non-stream answers. Reference:
// https://docs.anthropic.com/en/api/messages (response body)

func decodeMessagesResponse(root gjson.Result) (*response, error) {
	if root.Get("type").Str == "error" {
		return nil, badRequest("type", "the upstream answer is an error, not a message")
	}
	rs := &response{id: root.Get("id").Str, model: root.Get("model").Str}
	root.Get("content").ForEach(func(_, blk gjson.Result) bool {
		switch blk.Get("type").Str {
		case "text":
			rs.parts = append(rs.parts, part{typ: partText, text: blk.Get("text").Str})
		case "thinking":
			rs.parts = append(rs.parts, part{typ: partReasoning, text: blk.Get("thinking").Str, signature: blk.Get("signature").Str})
		case "redacted_thinking":
			rs.parts = append(rs.parts, part{typ: partReasoning, redacted: blk.Get("data").Str})
		case "tool_use":
			rs.parts = append(rs.parts, part{typ: partToolCall, callID: blk.Get("id").Str, name: blk.Get("name").Str,
				args: rawOrEmpty(blk.Get("input"))})
		}
		return true
	})
	rs.finish = messagesFinish(root.Get("stop_reason").Str)
	rs.stopSeq = root.Get("stop_sequence").Str
	if u := root.Get("usage"); u.IsObject() {
		rs.usage.set(Messages, u)
		rs.hasUsage = true
	}
	return rs, nil
}

// messagesFinish maps an Anthropic stop_reason.
func messagesFinish(s string) finish {
	switch s {
	case "end_turn", "pause_turn":
		return finishStop
	case "max_tokens", "model_context_window_exceeded":
		return finishLength
	case "stop_sequence":
		return finishStopSequence
	case "tool_use":
		return finishToolCalls
	case "refusal":
		return finishContentFilter
	case "":
		return finishNone
	}
	return finishStop
}

// messagesStopReason is the Anthropic stop_reason of f.
func messagesStopReason(f finish) string {
	switch f {
	case finishLength:
		return "max_tokens"
	case finishToolCalls:
		return "tool_use"
	case finishContentFilter:
		return "refusal"
	case finishStopSequence:
		return "stop_sequence"
	}
	return "end_turn"
}

// appendMessagesUsage writes an Anthropic usage object.
func appendMessagesUsage(b []byte, u *Usage) []byte {
	b = append(b, '{')
	b = kInt(b, "input_tokens", max(0, u.InputTokens-u.CachedTokens-u.CacheWriteTokens))
	b = kInt(b, "cache_creation_input_tokens", u.CacheWriteTokens)
	b = kInt(b, "cache_read_input_tokens", u.CachedTokens)
	b = kInt(b, "output_tokens", u.OutputTokens)
	return append(b, '}')
}

// appendMessagesBlock writes one content block of an answer.
func appendMessagesBlock(b []byte, p *part) []byte {
	switch p.typ {
	case partText, partRefusal:
		b = append(b, `{"type":"text"`...)
		b = kStr(b, "text", p.text)
	case partToolCall:
		b = append(b, `{"type":"tool_use"`...)
		b = kStr(b, "id", idWithPrefix("toolu_", p.callID))
		b = kStr(b, "name", p.name)
		args := callArguments(p)
		if !gjson.Valid(args) {
			args = "{}"
		}
		b = kRaw(b, "input", args)
	case partReasoning:
		if p.redacted != "" {
			b = append(b, `{"type":"redacted_thinking"`...)
			b = kStr(b, "data", p.redacted)
		} else {
			b = append(b, `{"type":"thinking"`...)
			b = kStr(b, "thinking", p.text)
			b = kStr(b, "signature", messagesSignature(p))
		}
	}
	return append(b, '}')
}

// messagesSignature is the signature a reasoning part carries to an
// Anthropic client: Anthropic's own, or OpenAI's reasoning item tagged with
// its origin.
func messagesSignature(p *part) string {
	if p.signature != "" {
		return p.signature
	}
	if p.item != "" {
		return openAIItemSignature(p.item)
	}
	if p.encrypted != "" {
		return sigOpenAI + p.encrypted
	}
	return ""
}

func encodeMessagesResponse(b []byte, rs *response) []byte {
	b = append(b, '{')
	b = kStr(b, "id", idWithPrefix("msg_", rs.id))
	b = append(b, `,"type":"message","role":"assistant"`...)
	b = kStr(b, "model", rs.model)
	b = key(b, "content")
	b = append(b, '[')
	for i := range rs.parts {
		b = elem(b)
		b = appendMessagesBlock(b, &rs.parts[i])
	}
	b = append(b, ']')
	f := rs.finish
	if f == finishNone {
		f = finishStop
	}
	if f == finishStop && hasToolCall(rs.parts) {
		f = finishToolCalls
	}
	b = kStr(b, "stop_reason", messagesStopReason(f))
	b = kStrNull(b, "stop_sequence", rs.stopSeq)
	b = appendMessagesUsage(key(b, "usage"), &rs.usage)
	return append(b, '}')
}
