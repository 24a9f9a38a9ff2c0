package gateway

import (
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// isContent reports whether ev carries answer content (for time to first token).
func isContent(ep translate.Protocol, ev translate.Event) bool {
	switch ep {
	case translate.Chat:
		return gjson.GetBytes(ev.Data, "choices.0.delta.content").Str != "" ||
			gjson.GetBytes(ev.Data, "choices.0.delta.tool_calls").Exists() ||
			gjson.GetBytes(ev.Data, "choices.0.delta.reasoning_content").Str != ""
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
