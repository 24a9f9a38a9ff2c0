package mock

import (
	"strconv"
	"time"
)

// Responses API rendering, shared by /v1/responses and the Codex backend.
// Shapes follow testdata/openai-responses/*: every SSE event is an
// `event: <type>` line and a `data: {"type":"<type>","sequence_number":n,…}`
// line, sequence numbers rise by one from 0, and the message is output item
// 0 with one output_text part.

// appendEventHead opens an SSE event of type typ with its sequence number.
func appendEventHead(dst []byte, typ string, seq int) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, typ...)
	dst = append(dst, `","sequence_number":`...)
	return strconv.AppendInt(dst, int64(seq), 10)
}

func (s *stream) appendMsgID(dst []byte) []byte {
	dst = append(dst, `"msg_`...)
	dst = append(dst, s.id[:]...)
	return append(dst, '"')
}

// appendRespLifecycle appends response.created / in_progress (completed
// false) or the final response.completed or response.incomplete (completed
// true).
func (s *stream) appendRespLifecycle(dst []byte, typ string, seq int, completed bool) []byte {
	dst = appendEventHead(dst, typ, seq)
	dst = append(dst, `,"response":`...)
	dst = s.appendResponse(dst, completed)
	return append(dst, "}\n\n"...)
}

func (s *stream) appendRespItemAdded(dst []byte, seq int) []byte {
	dst = appendEventHead(dst, "response.output_item.added", seq)
	dst = append(dst, `,"output_index":0,"item":{"id":`...)
	dst = s.appendMsgID(dst)
	return append(dst, `,"type":"message","status":"in_progress","content":[],"role":"assistant"}}`+"\n\n"...)
}

// appendRespPartRef appends item_id, output_index and content_index.
func (s *stream) appendRespPartRef(dst []byte) []byte {
	dst = append(dst, `,"item_id":`...)
	dst = s.appendMsgID(dst)
	return append(dst, `,"output_index":0,"content_index":0`...)
}

// appendOutputText appends the output_text part, empty or with the full text.
func (s *stream) appendOutputText(dst []byte, full bool) []byte {
	dst = append(dst, `{"type":"output_text","annotations":[],"logprobs":[],"text":"`...)
	if full {
		dst = s.appendText(dst)
	}
	return append(dst, `"}`...)
}

// appendRespPart appends content_part.added (full false) or .done.
func (s *stream) appendRespPart(dst []byte, typ string, seq int, full bool) []byte {
	dst = appendEventHead(dst, typ, seq)
	dst = s.appendRespPartRef(dst)
	dst = append(dst, `,"part":`...)
	dst = s.appendOutputText(dst, full)
	return append(dst, "}\n\n"...)
}

func (s *stream) appendRespDelta(dst []byte, seq, i int) []byte {
	dst = appendEventHead(dst, "response.output_text.delta", seq)
	dst = s.appendRespPartRef(dst)
	dst = append(dst, `,"delta":"`...)
	dst = s.appendDelta(dst, i)
	dst = append(dst, `","logprobs":[]`...)
	if !s.req.noObfuscation {
		dst = append(dst, `,"obfuscation":"`...)
		dst = append(dst, obfuscation(i)...)
		dst = append(dst, '"')
	}
	return append(dst, "}\n\n"...)
}

func (s *stream) appendRespTextDone(dst []byte, seq int) []byte {
	dst = appendEventHead(dst, "response.output_text.done", seq)
	dst = s.appendRespPartRef(dst)
	dst = append(dst, `,"text":"`...)
	dst = s.appendText(dst)
	return append(dst, `","logprobs":[]}`+"\n\n"...)
}

func (s *stream) appendRespItemDone(dst []byte, seq int) []byte {
	dst = appendEventHead(dst, "response.output_item.done", seq)
	dst = append(dst, `,"output_index":0,"item":`...)
	dst = s.appendMessageItem(dst)
	return append(dst, "}\n\n"...)
}

// appendMessageItem appends the finished message output item: completed,
// or incomplete when the output limit cut it.
func (s *stream) appendMessageItem(dst []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = s.appendMsgID(dst)
	if s.p.capped {
		dst = append(dst, `,"type":"message","status":"incomplete","content":[`...)
	} else {
		dst = append(dst, `,"type":"message","status":"completed","content":[`...)
	}
	dst = s.appendOutputText(dst, true)
	return append(dst, `],"role":"assistant"}`...)
}

// respStatus is the status of a rendered response object.
type respStatus uint8

const (
	respInProgress respStatus = iota // no output, usage null
	respCompleted                    // the message and usage
	respFailed                       // no output, usage null, error set (see faults.go)
	// respIncomplete: the message the output limit cut and usage,
	// incomplete_details {"reason":"max_output_tokens"}.
	respIncomplete
)

// appendResponse appends the response object: in progress (no output, usage
// null) or finished (the message and usage): completed, or incomplete when
// the output limit cut the message.
func (s *stream) appendResponse(dst []byte, completed bool) []byte {
	switch {
	case completed && s.p.capped:
		return s.appendResponseStatus(dst, respIncomplete)
	case completed:
		return s.appendResponseStatus(dst, respCompleted)
	}
	return s.appendResponseStatus(dst, respInProgress)
}

// respFinalEvent is the type of a Responses stream's last event.
func (s *stream) respFinalEvent() string {
	if s.p.capped {
		return "response.incomplete"
	}
	return "response.completed"
}

// appendResponseStatus appends the response object with status st.
func (s *stream) appendResponseStatus(dst []byte, st respStatus) []byte {
	completed := st == respCompleted || st == respIncomplete
	dst = append(dst, `{"id":"resp_`...)
	dst = append(dst, s.id[:]...)
	dst = append(dst, `","object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, s.created, 10)
	switch st {
	case respCompleted:
		dst = append(dst, `,"status":"completed","background":false,"completed_at":`...)
		dst = strconv.AppendInt(dst, time.Now().Unix(), 10)
	case respIncomplete:
		dst = append(dst, `,"status":"incomplete","background":false,"completed_at":null`...)
	case respFailed:
		dst = append(dst, `,"status":"failed","background":false,"completed_at":null`...)
	default:
		dst = append(dst, `,"status":"in_progress","background":false,"completed_at":null`...)
	}
	if st == respFailed {
		dst = append(dst, `,"error":{"code":"server_error","message":"`+msgServerError+`"}`...)
	} else {
		dst = append(dst, `,"error":null`...)
	}
	if st == respIncomplete {
		dst = append(dst, `,"incomplete_details":{"reason":"max_output_tokens"}`...)
	} else {
		dst = append(dst, `,"incomplete_details":null`...)
	}
	dst = append(dst, `,"instructions":null,"max_output_tokens":`...)
	if s.req.maxOutput > 0 { // only Responses requests carry one (outputLimits.of)
		dst = strconv.AppendInt(dst, int64(s.req.maxOutput), 10)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"max_tool_calls":null,"model":`...)
	dst = append(dst, s.req.modelJSON...)
	if completed {
		dst = append(dst, `,"output":[`...)
		dst = s.appendOutputItem(dst)
		dst = append(dst, ']')
	} else {
		dst = append(dst, `,"output":[]`...)
	}
	dst = append(dst, `,"parallel_tool_calls":true,"previous_response_id":null,"prompt_cache_key":`...)
	if s.req.cacheKeyJSON != "" {
		dst = append(dst, s.req.cacheKeyJSON...)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"reasoning":{"effort":null,"summary":null},"safety_identifier":null,"service_tier":`...)
	if completed {
		dst = append(dst, `"default"`...)
	} else {
		dst = append(dst, `"auto"`...)
	}
	dst = append(dst, `,"store":`...)
	dst = appendBool(dst, s.req.store)
	dst = append(dst, `,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":`...)
	switch f := s.req.force; {
	case s.req.noTools:
		dst = append(dst, `"none"`...)
	case f.forced && f.name != "": // echoed as the Responses API echoes it
		dst = append(dst, `{"type":"function","name":`...)
		dst = appendJSONString(dst, f.name)
		dst = append(dst, '}')
	case f.forced:
		dst = append(dst, `"required"`...)
	default:
		dst = append(dst, `"auto"`...)
	}
	dst = append(dst, `,"tools":[],"top_logprobs":0,"top_p":1.0,"truncation":"disabled","usage":`...)
	if completed {
		dst = s.appendRespUsage(dst)
	} else {
		dst = append(dst, "null"...)
	}
	return append(dst, `,"user":null,"metadata":{}}`...)
}

// appendRespUsage appends the Responses usage object.
func (s *stream) appendRespUsage(dst []byte) []byte {
	in, out := int64(s.req.inputTokens), int64(s.p.tokens)
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, in, 10)
	dst = append(dst, `,"input_tokens_details":{"cached_tokens":0},"output_tokens":`...)
	dst = strconv.AppendInt(dst, out, 10)
	dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
	dst = strconv.AppendInt(dst, in+out, 10)
	return append(dst, '}')
}
