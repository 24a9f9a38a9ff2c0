package mock

import (
	"bufio"
	"unicode/utf8"
)

// Rendering of scripted tool calls (script.go) in the Chat and Responses
// protocols; Messages' tool_use is in messages.go. Streamed arguments arrive
// in toolFragments pieces (one "delta" each, paced like text tokens), shaped
// as the recorded streams show: Chat's first tool_calls fragment carries
// index, id, type and function.name (testdata/openai-chat/stream-toolcall
// in the shared fixtures), Responses sends output_item.added with empty
// arguments, function_call_arguments.delta pieces and .done.

// toolFragments is the number of pieces a streamed tool call's arguments
// are sent in.
const toolFragments = 2

// argFragment returns piece i (0 or 1) of the scripted arguments, split in
// the middle on a UTF-8 boundary.
func (s *stream) argFragment(i int) string {
	a := s.req.script.args
	mid := len(a) / 2
	for mid > 0 && !utf8.RuneStart(a[mid]) {
		mid--
	}
	if i == 0 {
		return a[:mid]
	}
	return a[mid:]
}

// appendCallID appends the tool call's id ("call_…" and 24 characters, as
// Chat and Responses write call ids): the id's last 24 hex digits, which hold
// the whole per-response sequence number, so no two answers share one.
func (s *stream) appendCallID(dst []byte) []byte {
	dst = append(dst, `"call_`...)
	dst = append(dst, s.id[len(s.id)-24:]...)
	return append(dst, '"')
}

// chatFinishReason is the finish_reason of the answer.
func (s *stream) chatFinishReason() string {
	if s.p.capped {
		return "length"
	}
	if s.req.script.kind == scriptToolCall {
		return "tool_calls"
	}
	return "stop"
}

// appendChatToolCall appends a complete Chat tool call object
// {"id","type":"function","function":{"name","arguments"}}.
func (s *stream) appendChatToolCall(dst []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = s.appendCallID(dst)
	dst = append(dst, `,"type":"function","function":{"name":`...)
	dst = appendJSONString(dst, s.req.script.tool)
	dst = append(dst, `,"arguments":`...)
	dst = appendJSONString(dst, s.req.script.args)
	return append(dst, "}}"...)
}

// appendChatToolDelta appends the chunk of argument piece i: the first
// names the call, the next only carry arguments.
func (s *stream) appendChatToolDelta(dst []byte, i int) []byte {
	dst = append(dst, s.head...)
	dst = append(dst, `[{"index":0,"delta":{"tool_calls":[{"index":0,`...)
	if i == 0 {
		dst = append(dst, `"id":`...)
		dst = s.appendCallID(dst)
		dst = append(dst, `,"type":"function","function":{"name":`...)
		dst = appendJSONString(dst, s.req.script.tool)
		dst = append(dst, ',')
	} else {
		dst = append(dst, `"function":{`...)
	}
	dst = append(dst, `"arguments":`...)
	dst = appendJSONString(dst, s.argFragment(i))
	dst = append(dst, `}}]},"finish_reason":null}]`...)
	return s.appendChatTail(dst, obfuscation(i))
}

// appendFCID appends the function_call item's id ("fc_…").
func (s *stream) appendFCID(dst []byte) []byte {
	dst = append(dst, `"fc_`...)
	dst = append(dst, s.id[:]...)
	return append(dst, '"')
}

// appendOutputItem appends the completed output item of the answer: the
// message, or the scripted function_call.
func (s *stream) appendOutputItem(dst []byte) []byte {
	if s.req.script.kind == scriptToolCall {
		return s.appendFunctionCallItem(dst, true)
	}
	return s.appendMessageItem(dst)
}

// appendFunctionCallItem appends the function_call item, in progress (empty
// arguments) or completed.
func (s *stream) appendFunctionCallItem(dst []byte, done bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = s.appendFCID(dst)
	if done {
		dst = append(dst, `,"type":"function_call","status":"completed","arguments":`...)
		dst = appendJSONString(dst, s.req.script.args)
	} else {
		dst = append(dst, `,"type":"function_call","status":"in_progress","arguments":""`...)
	}
	dst = append(dst, `,"call_id":`...)
	dst = s.appendCallID(dst)
	dst = append(dst, `,"name":`...)
	dst = appendJSONString(dst, s.req.script.tool)
	return append(dst, '}')
}

// writeResponsesToolCall writes a Responses (and Codex) event stream whose
// output is the scripted function_call: response.created and in_progress at
// once, output_item.added after Latency, the argument deltas, .done,
// output_item.done, response.completed. It stops early like writeChat.
func (s *stream) writeResponsesToolCall(w *bufio.Writer) bool {
	seq := 0
	if !s.emit(w, s.appendRespLifecycle(s.buf[:0], "response.created", seq, false)) {
		return false
	}
	seq++
	if !s.emit(w, s.appendRespLifecycle(s.buf[:0], "response.in_progress", seq, false)) {
		return false
	}
	seq++
	if !s.untilToken(0) {
		return false
	}
	b := appendEventHead(s.buf[:0], "response.output_item.added", seq)
	b = append(b, `,"output_index":0,"item":`...)
	b = s.appendFunctionCallItem(b, false)
	if !s.emit(w, append(b, "}\n\n"...)) {
		return false
	}
	seq++
	for i := range s.p.tokens {
		if i > 0 && !s.untilToken(i) {
			return false
		}
		b := appendEventHead(s.buf[:0], "response.function_call_arguments.delta", seq)
		b = append(b, `,"item_id":`...)
		b = s.appendFCID(b)
		b = append(b, `,"output_index":0,"delta":`...)
		b = appendJSONString(b, s.argFragment(i))
		if !s.req.noObfuscation {
			b = append(b, `,"obfuscation":"`...)
			b = append(b, obfuscation(i)...)
			b = append(b, '"')
		}
		if !s.emit(w, append(b, "}\n\n"...)) || i+1 == s.p.cutAfter {
			return false
		}
		seq++
	}
	b = appendEventHead(s.buf[:0], "response.function_call_arguments.done", seq)
	b = append(b, `,"item_id":`...)
	b = s.appendFCID(b)
	b = append(b, `,"output_index":0,"arguments":`...)
	b = appendJSONString(b, s.req.script.args)
	if !s.emit(w, append(b, "}\n\n"...)) {
		return false
	}
	seq++
	b = appendEventHead(s.buf[:0], "response.output_item.done", seq)
	b = append(b, `,"output_index":0,"item":`...)
	b = s.appendFunctionCallItem(b, true)
	if !s.emit(w, append(b, "}\n\n"...)) {
		return false
	}
	seq++
	return s.emitLast(w, s.appendRespLifecycle(s.buf[:0], s.respFinalEvent(), seq, true))
}
