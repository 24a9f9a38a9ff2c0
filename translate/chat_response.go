package translate

import (
	"github.com/tidwall/gjson"
)

// Chat Completions non-stream answers. Reference:
// https://platform.openai.com/docs/api-reference/chat/object

func decodeChatResponse(root gjson.Result) (*response, error) {
	rs := &response{id: root.Get("id").Str, model: root.Get("model").Str, created: root.Get("created").Int()}
	ch := root.Get("choices.0")
	if !ch.Exists() {
		return nil, badRequest("choices", "the Chat answer has no choices")
	}
	m := ch.Get("message")
	if rc := m.Get("reasoning_content"); rc.Type == gjson.String && rc.Str != "" {
		rs.parts = append(rs.parts, part{typ: partReasoning, text: rc.Str})
	}
	if c := m.Get("content"); c.Type == gjson.String && c.Str != "" {
		rs.parts = append(rs.parts, part{typ: partText, text: c.Str})
	}
	if rf := m.Get("refusal"); rf.Type == gjson.String && rf.Str != "" {
		rs.parts = append(rs.parts, part{typ: partRefusal, text: rf.Str})
	}
	m.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
		if tc.Get("type").Str == "custom" {
			rs.parts = append(rs.parts, part{typ: partToolCall, custom: true, callID: tc.Get("id").Str,
				name: tc.Get("custom.name").Str, args: tc.Get("custom.input").Str})
			return true
		}
		rs.parts = append(rs.parts, part{typ: partToolCall, callID: tc.Get("id").Str,
			name: tc.Get("function.name").Str, args: tc.Get("function.arguments").Str})
		return true
	})
	rs.finish = chatFinish(ch.Get("finish_reason").Str)
	if u := root.Get("usage"); u.IsObject() {
		rs.usage.set(Chat, u)
		rs.hasUsage = true
	}
	return rs, nil
}

// chatFinish maps a Chat finish_reason.
func chatFinish(s string) finish {
	switch s {
	case "stop":
		return finishStop
	case "length":
		return finishLength
	case "tool_calls", "function_call":
		return finishToolCalls
	case "content_filter":
		return finishContentFilter
	case "":
		return finishNone
	}
	return finishStop
}

// chatFinishName is the Chat finish_reason of f.
func chatFinishName(f finish) string {
	switch f {
	case finishLength:
		return "length"
	case finishToolCalls:
		return "tool_calls"
	case finishContentFilter:
		return "content_filter"
	}
	return "stop"
}

// appendChatUsage writes a Chat usage object.
func appendChatUsage(b []byte, u *Usage) []byte {
	b = append(b, '{')
	b = kInt(b, "prompt_tokens", u.InputTokens)
	b = kInt(b, "completion_tokens", u.OutputTokens)
	b = kInt(b, "total_tokens", u.InputTokens+u.OutputTokens)
	b = append(key(b, "prompt_tokens_details"), '{')
	b = kInt(b, "cached_tokens", u.CachedTokens)
	b = append(b, '}')
	b = append(key(b, "completion_tokens_details"), '{')
	b = kInt(b, "reasoning_tokens", u.ReasoningTokens)
	return append(b, "}}"...)
}

func encodeChatResponse(b []byte, rs *response) []byte {
	b = append(b, '{')
	b = kStr(b, "id", idWithPrefix("chatcmpl-", rs.id))
	b = kStr(b, "object", "chat.completion")
	b = kInt(b, "created", rs.created)
	b = kStr(b, "model", rs.model)
	b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant"`...)
	var text, refusal, thinking []byte
	for i := range rs.parts {
		switch p := &rs.parts[i]; p.typ {
		case partText:
			text = append(text, p.text...)
		case partRefusal:
			refusal = append(refusal, p.text...)
		case partReasoning:
			thinking = append(thinking, p.text...)
		}
	}
	if len(text) > 0 || !hasToolCall(rs.parts) {
		b = AppendString(key(b, "content"), b2s(text))
	} else {
		b = append(key(b, "content"), "null"...)
	}
	if len(refusal) > 0 {
		b = AppendString(key(b, "refusal"), b2s(refusal))
	} else {
		b = append(key(b, "refusal"), "null"...)
	}
	if len(thinking) > 0 {
		b = AppendString(key(b, "reasoning_content"), b2s(thinking))
	}
	if hasToolCall(rs.parts) {
		b = appendChatToolCalls(b, rs.parts, partName)
	}
	b = append(b, `},"logprobs":null`...)
	f := rs.finish
	if f == finishNone {
		f = finishStop
	}
	b = kStr(b, "finish_reason", chatFinishName(f))
	b = append(b, "}]"...)
	b = appendChatUsage(key(b, "usage"), &rs.usage)
	return append(b, '}')
}
