package mock

import (
	"bufio"
	"strconv"
)

// Anthropic Messages rendering (kind anthropic, POST /v1/messages). Shapes
// follow testdata/anthropic-messages/*: every SSE event is an `event: <type>`
// line and a `data: {"type":"<type>",…}` line; the stream is message_start,
// one content block (content_block_start, a ping, one content_block_delta
// per token, content_block_stop), message_delta with the stop_reason and
// the cumulative usage, message_stop. The block is the answer text, or for
// a scripted tool call (script.go) a tool_use block whose input arrives as
// input_json_delta pieces.

// appendMessagesEvent opens an Anthropic SSE event of type typ, up to the
// data object's "type" member.
func appendMessagesEvent(dst []byte, typ string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, typ...)
	return append(dst, '"')
}

// appendMessageID appends the message id ("msg_…").
func (s *stream) appendMessageID(dst []byte) []byte {
	dst = append(dst, `"msg_`...)
	dst = append(dst, s.id[:]...)
	return append(dst, '"')
}

// appendToolUseID appends the tool_use block's id ("toolu_…", 24 characters
// after the prefix as the real API's): the id's last 24 hex digits, which
// hold the whole per-response sequence number, so no two answers share one.
func (s *stream) appendToolUseID(dst []byte) []byte {
	dst = append(dst, `"toolu_`...)
	dst = append(dst, s.id[len(s.id)-24:]...)
	return append(dst, '"')
}

// stopReason is the answer's stop_reason.
func (s *stream) stopReason() string {
	if s.p.capped {
		return "max_tokens"
	}
	if s.req.script.kind == scriptToolCall {
		return "tool_use"
	}
	return "end_turn"
}

// appendMessagesUsage appends the usage object: message_start's (output
// small, the service tier given), the final one of a non-stream message,
// or message_delta's cumulative counts (no cache_creation or service_tier,
// as recorded). A request with cache_control breakpoints finds its prompt
// cached: three quarters of its input are cache_read_input_tokens (a warm
// cache, as an agent's later turns see it), the rest input_tokens; the
// total is the mock's input count either way.
func (s *stream) appendMessagesUsage(dst []byte, output int, delta bool) []byte {
	in, cached := int64(s.req.inputTokens), int64(0)
	if s.req.cacheHint {
		cached = in * 3 / 4
	}
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, in-cached, 10)
	dst = append(dst, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":`...)
	dst = strconv.AppendInt(dst, cached, 10)
	if !delta {
		dst = append(dst, `,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0}`...)
	}
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(output), 10)
	if !delta {
		dst = append(dst, `,"service_tier":"standard"`...)
	}
	return append(dst, '}')
}

// appendMessageHead appends the message object's fields up to "content":.
func (s *stream) appendMessageHead(dst []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = s.appendMessageID(dst)
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	dst = append(dst, s.req.modelJSON...)
	return append(dst, `,"content":`...)
}

// appendMessage appends a non-stream message object.
func (s *stream) appendMessage(dst []byte) []byte {
	dst = s.appendMessageHead(dst)
	if s.req.script.kind == scriptToolCall {
		dst = append(dst, `[{"type":"tool_use","id":`...)
		dst = s.appendToolUseID(dst)
		dst = append(dst, `,"name":`...)
		dst = appendJSONString(dst, s.req.script.tool)
		dst = append(dst, `,"input":`...)
		dst = append(dst, s.req.script.args...)
		dst = append(dst, `}]`...)
	} else {
		dst = append(dst, `[{"type":"text","text":"`...)
		dst = s.appendText(dst)
		dst = append(dst, `"}]`...)
	}
	dst = append(dst, `,"stop_reason":"`...)
	dst = append(dst, s.stopReason()...)
	dst = append(dst, `","stop_sequence":null,"usage":`...)
	dst = s.appendMessagesUsage(dst, s.p.tokens, false)
	return append(dst, '}')
}

// appendMessageStart appends message_start: the message without content.
func (s *stream) appendMessageStart(dst []byte) []byte {
	dst = appendMessagesEvent(dst, "message_start")
	dst = append(dst, `,"message":`...)
	dst = s.appendMessageHead(dst)
	dst = append(dst, `[],"stop_reason":null,"stop_sequence":null,"usage":`...)
	dst = s.appendMessagesUsage(dst, 1, false)
	return append(dst, "}}\n\n"...)
}

// appendBlockStart appends content_block_start of block 0: an empty text
// block, or the tool_use block with its placeholder input {}.
func (s *stream) appendBlockStart(dst []byte) []byte {
	dst = appendMessagesEvent(dst, "content_block_start")
	if s.req.script.kind == scriptToolCall {
		dst = append(dst, `,"index":0,"content_block":{"type":"tool_use","id":`...)
		dst = s.appendToolUseID(dst)
		dst = append(dst, `,"name":`...)
		dst = appendJSONString(dst, s.req.script.tool)
		return append(dst, `,"input":{}}}`+"\n\n"...)
	}
	return append(dst, `,"index":0,"content_block":{"type":"text","text":""}}`+"\n\n"...)
}

// appendBlockDelta appends content_block_delta i: a text_delta word, or an
// input_json_delta piece of the tool input.
func (s *stream) appendBlockDelta(dst []byte, i int) []byte {
	dst = appendMessagesEvent(dst, "content_block_delta")
	if s.req.script.kind == scriptToolCall {
		dst = append(dst, `,"index":0,"delta":{"type":"input_json_delta","partial_json":`...)
		dst = appendJSONString(dst, s.argFragment(i))
		return append(dst, "}}\n\n"...)
	}
	dst = append(dst, `,"index":0,"delta":{"type":"text_delta","text":"`...)
	dst = s.appendDelta(dst, i)
	return append(dst, "\"}}\n\n"...)
}

// appendMessageDelta appends message_delta with the stop_reason and the
// cumulative usage.
func (s *stream) appendMessageDelta(dst []byte) []byte {
	dst = appendMessagesEvent(dst, "message_delta")
	dst = append(dst, `,"delta":{"stop_reason":"`...)
	dst = append(dst, s.stopReason()...)
	dst = append(dst, `","stop_sequence":null},"usage":`...)
	dst = s.appendMessagesUsage(dst, s.p.tokens, true)
	return append(dst, "}\n\n"...)
}

const (
	messagesPing = "event: ping\ndata: {\"type\": \"ping\"}\n\n"
	messagesStop = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	blockStop    = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
)

// streamMessages is the stream writer of a Messages answer.
func (s *stream) streamMessages(w *bufio.Writer) { s.finish(s.writeMessages(w)) }

// writeMessages writes a Messages event stream: message_start at once, the
// content block after Latency (start, ping, one delta per token, stop),
// message_delta and message_stop. It stops early like writeChat.
func (s *stream) writeMessages(w *bufio.Writer) bool {
	if !s.emit(w, s.appendMessageStart(s.buf[:0])) || !s.untilToken(0) {
		return false
	}
	if !s.emit(w, append(s.appendBlockStart(s.buf[:0]), messagesPing...)) {
		return false
	}
	for i := range s.p.tokens {
		if i > 0 && !s.untilToken(i) {
			return false
		}
		if !s.emit(w, s.appendBlockDelta(s.buf[:0], i)) || i+1 == s.p.cutAfter {
			return false
		}
	}
	if !s.emit(w, append(s.buf[:0], blockStop...)) || !s.emit(w, s.appendMessageDelta(s.buf[:0])) {
		return false
	}
	return s.emitLast(w, append(s.buf[:0], messagesStop...))
}
