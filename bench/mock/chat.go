package mock

import "strconv"

// Chat Completions rendering. Shapes follow the recorded OpenAI answers
// (testdata/openai-chat/*): chunk fields in the API's order, a role chunk
// first, one content chunk per token, a finish chunk with delta {} and
// finish_reason "stop", with stream_options.include_usage a "usage":null on
// every chunk plus a final usage chunk with "choices":[], then [DONE].
//
// openai_compat accounts answer as OpenAI-compatible servers (vLLM, SGLang,
// the hosted Qwen endpoints) do: the same chunks without OpenAI's own
// fields (no "obfuscation" padding, no "service_tier" or
// "system_fingerprint") and usage with the three counts only; usage in a
// stream only when stream_options.include_usage asks for it.

// appendChatHead appends the prefix shared by every chunk of the stream, up
// to and including `"choices":`.
func (s *stream) appendChatHead(dst []byte) []byte {
	dst = append(dst, `data: {"id":"chatcmpl-`...)
	dst = append(dst, s.id[:]...)
	dst = append(dst, `","object":"chat.completion.chunk","created":`...)
	dst = strconv.AppendInt(dst, s.created, 10)
	dst = append(dst, `,"model":`...)
	dst = append(dst, s.req.modelJSON...)
	if s.compat() {
		return append(dst, `,"choices":`...)
	}
	return append(dst, `,"service_tier":"default","system_fingerprint":null,"choices":`...)
}

// compat reports whether the answer is an OpenAI-compatible server's
// rather than OpenAI's own.
func (s *stream) compat() bool { return s.acc.cfg.Kind == KindOpenAICompat }

// obfuscated reports whether stream deltas carry OpenAI's "obfuscation"
// padding: OpenAI's own answers, unless stream_options.include_obfuscation
// is false.
func (s *stream) obfuscated() bool { return !s.req.noObfuscation && !s.compat() }

// appendChatTail closes a chunk: the usage placeholder, the obfuscation
// padding and the event terminator.
func (s *stream) appendChatTail(dst []byte, obf string) []byte {
	if s.req.includeUsage {
		dst = append(dst, `,"usage":null`...)
	}
	if s.obfuscated() {
		dst = append(dst, `,"obfuscation":"`...)
		dst = append(dst, obf...)
		dst = append(dst, '"')
	}
	return append(dst, "}\n\n"...)
}

func (s *stream) appendChatRole(dst []byte) []byte {
	dst = append(dst, s.head...)
	dst = append(dst, `[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}]`...)
	return s.appendChatTail(dst, obfuscation(s.p.tokens+1))
}

func (s *stream) appendChatDelta(dst []byte, i int) []byte {
	if s.req.script.kind == scriptToolCall {
		return s.appendChatToolDelta(dst, i)
	}
	dst = append(dst, s.head...)
	dst = append(dst, `[{"index":0,"delta":{"content":"`...)
	dst = s.appendDelta(dst, i)
	dst = append(dst, `"},"finish_reason":null}]`...)
	return s.appendChatTail(dst, obfuscation(i))
}

func (s *stream) appendChatFinish(dst []byte) []byte {
	dst = append(dst, s.head...)
	dst = append(dst, `[{"index":0,"delta":{},"finish_reason":"`...)
	dst = append(dst, s.chatFinishReason()...)
	dst = append(dst, `"}]`...)
	return s.appendChatTail(dst, obfuscation(s.p.tokens+2))
}

func (s *stream) appendChatUsageChunk(dst []byte) []byte {
	dst = append(dst, s.head...)
	dst = append(dst, `[],"usage":`...)
	dst = s.appendChatUsage(dst)
	if s.obfuscated() {
		dst = append(dst, `,"obfuscation":"`...)
		dst = append(dst, obfuscation(s.p.tokens+3)...)
		dst = append(dst, '"')
	}
	return append(dst, "}\n\n"...)
}

// appendChatUsage appends the Chat usage object.
func (s *stream) appendChatUsage(dst []byte) []byte {
	in, out := int64(s.req.inputTokens), int64(s.p.tokens)
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, in, 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, out, 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, in+out, 10)
	if s.compat() {
		return append(dst, '}')
	}
	return append(dst, `,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`...)
}

// appendChatCompletion appends a non-streaming chat.completion object.
func (s *stream) appendChatCompletion(dst []byte) []byte {
	dst = append(dst, `{"id":"chatcmpl-`...)
	dst = append(dst, s.id[:]...)
	dst = append(dst, `","object":"chat.completion","created":`...)
	dst = strconv.AppendInt(dst, s.created, 10)
	dst = append(dst, `,"model":`...)
	dst = append(dst, s.req.modelJSON...)
	dst = append(dst, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	if s.req.script.kind == scriptToolCall {
		dst = append(dst, `null,"tool_calls":[`...)
		dst = s.appendChatToolCall(dst)
		dst = append(dst, ']')
	} else {
		dst = append(dst, '"')
		dst = s.appendText(dst)
		dst = append(dst, '"')
	}
	dst = append(dst, `,"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"`...)
	dst = append(dst, s.chatFinishReason()...)
	dst = append(dst, `"}],"usage":`...)
	dst = s.appendChatUsage(dst)
	if s.compat() {
		return append(dst, '}')
	}
	return append(dst, `,"service_tier":"default","system_fingerprint":null}`...)
}
