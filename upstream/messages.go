package upstream

import (
	"github.com/tidwall/gjson"
)

// What the events of an Anthropic Messages stream mean to a gateway (the
// usage they carry is read by translate.Usage.AddEvent). The stream is, per
// https://docs.anthropic.com/en/docs/build-with-claude/streaming:
//
//	message_start → (content_block_start → content_block_delta* → content_block_stop)*
//	→ message_delta → message_stop
//
// with ping anywhere, and `event: error` ending a failed stream (no
// message_stop follows). Unknown event types are to be ignored.

// MessagesEvent is the role of one Messages stream event; see
// MessagesEventKind.
type MessagesEvent uint8

// Messages event roles.
const (
	// MessagesOther carries nothing a gateway acts on: ping,
	// content_block_stop, the start of an empty text or thinking block, and
	// event types this package does not know.
	MessagesOther MessagesEvent = iota
	// MessagesStart is message_start: the message id, model and the input
	// side of the usage (see translate.Usage.AddEvent).
	MessagesStart
	// MessagesContent is answer content, the commit point of a held stream:
	// any content_block_delta (text, thinking, signature, tool input), or a
	// content_block_start of a block that is content by itself (tool_use,
	// server_tool_use, a tool result, redacted_thinking, or a text or
	// thinking block that starts non-empty).
	MessagesContent
	// MessagesDelta is message_delta: the stop_reason and the cumulative
	// usage.
	MessagesDelta
	// MessagesStop is message_stop, the clean end of the stream.
	MessagesStop
	// MessagesError is an error event; ClassifyEvent gives its verdict. The
	// stream is over.
	MessagesError
)

// MessagesEventKind returns the role of one Messages SSE event given its
// event name and data (as translate.Scanner returns them). The name decides;
// an unnamed event falls back to its data's "type", which Anthropic always
// sets equal to the name. Only content_block_start's data is parsed.
func MessagesEventKind(name, data []byte) MessagesEvent {
	if len(name) == 0 {
		name = []byte(gjson.GetBytes(data, "type").Str)
	}
	switch string(name) {
	case "content_block_delta":
		return MessagesContent
	case "content_block_start":
		if blockStartsContent(gjson.GetBytes(data, "content_block")) {
			return MessagesContent
		}
	case "message_start":
		return MessagesStart
	case "message_delta":
		return MessagesDelta
	case "message_stop":
		return MessagesStop
	case "error":
		return MessagesError
	}
	return MessagesOther
}

// blockStartsContent reports whether a content_block_start's block is
// content by itself: anything but a text or thinking block that starts
// empty (those become content with their first delta).
func blockStartsContent(b gjson.Result) bool {
	switch b.Get("type").Str {
	case "text":
		return b.Get("text").Str != ""
	case "thinking":
		return b.Get("thinking").Str != ""
	case "":
		return false
	}
	return true
}
