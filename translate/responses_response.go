package translate

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Responses non-stream answers. Reference:
// https://platform.openai.com/docs/api-reference/responses/object

func decodeResponsesResponse(root gjson.Result) (*response, error) {
	if root.Get("status").Str == "failed" {
		return nil, ErrUpstreamFailed
	}
	rs := &response{id: root.Get("id").Str, model: root.Get("model").Str, created: root.Get("created_at").Int()}
	root.Get("output").ForEach(func(_, it gjson.Result) bool {
		rs.parts = append(rs.parts, decodeResponsesItem(it)...)
		return true
	})
	rs.finish = responsesFinish(root.Get("status").Str, root.Get("incomplete_details.reason").Str, hasToolCall(rs.parts))
	if u := root.Get("usage"); u.IsObject() {
		rs.usage.set(Responses, u)
		rs.hasUsage = true
	}
	return rs, nil
}

// decodeResponsesItem reads one output item into parts.
func decodeResponsesItem(it gjson.Result) []part {
	switch it.Get("type").Str {
	case "message":
		var ps []part
		it.Get("content").ForEach(func(_, c gjson.Result) bool {
			switch c.Get("type").Str {
			case "output_text":
				ps = append(ps, part{typ: partText, text: c.Get("text").Str})
			case "refusal":
				ps = append(ps, part{typ: partRefusal, text: c.Get("refusal").Str})
			}
			return true
		})
		return ps
	case "function_call":
		return []part{{typ: partToolCall, callID: it.Get("call_id").Str, name: flatName(it.Get("namespace").Str, it.Get("name").Str),
			args: it.Get("arguments").Str, itemID: it.Get("id").Str}}
	case "custom_tool_call":
		return []part{{typ: partToolCall, custom: true, callID: it.Get("call_id").Str, name: flatName(it.Get("namespace").Str, it.Get("name").Str),
			args: it.Get("input").Str, itemID: it.Get("id").Str}}
	case "reasoning":
		rp := part{typ: partReasoning, encrypted: it.Get("encrypted_content").Str, itemID: it.Get("id").Str, item: it.Raw}
		it.Get("summary").ForEach(func(_, s gjson.Result) bool {
			rp.summary = append(rp.summary, s.Get("text").Str)
			return true
		})
		rp.text = strings.Join(rp.summary, "\n\n")
		return []part{rp}
	}
	return nil
}

// responsesFinish derives the finish reason from a response's status.
func responsesFinish(status, incomplete string, tools bool) finish {
	switch status {
	case "incomplete":
		if incomplete == "content_filter" {
			return finishContentFilter
		}
		return finishLength
	case "completed", "":
		if tools {
			return finishToolCalls
		}
		return finishStop
	}
	return finishStop
}

func appendResponsesUsage(b []byte, u *Usage) []byte {
	b = append(b, '{')
	b = kInt(b, "input_tokens", u.InputTokens)
	b = append(key(b, "input_tokens_details"), '{')
	b = kInt(b, "cached_tokens", u.CachedTokens)
	b = append(b, '}')
	b = kInt(b, "output_tokens", u.OutputTokens)
	b = append(key(b, "output_tokens_details"), '{')
	b = kInt(b, "reasoning_tokens", u.ReasoningTokens)
	b = append(b, '}')
	b = kInt(b, "total_tokens", u.InputTokens+u.OutputTokens)
	return append(b, '}')
}

// itemID returns a Responses item id for output item n of response id.
func itemID(b []byte, prefix, respID string, n int) []byte {
	b = append(b, prefix...)
	b = append(b, strings.TrimPrefix(respID, "resp_")...)
	b = append(b, '_')
	return strconv.AppendInt(b, int64(n), 10)
}

// appendResponsesItem writes one output item built from p with status
// ("in_progress", "completed", or "incomplete" for the item a
// max_output_tokens or content_filter stop cut; a reasoning item has no
// status field). A finished item (completed or incomplete) carries its
// content; an incomplete call its arguments as they came.
func appendResponsesItem(b []byte, p *part, id []byte, status string) []byte {
	switch p.typ {
	case partText, partRefusal:
		b = append(b, `{"id":`...)
		b = AppendString(b, b2s(id))
		b = append(b, `,"type":"message"`...)
		b = kStr(b, "status", status)
		b = append(b, `,"role":"assistant","content":[`...)
		if status != "in_progress" || p.text != "" {
			if p.typ == partText {
				b = append(b, `{"type":"output_text","annotations":[],"logprobs":[]`...)
				b = kStr(b, "text", p.text)
			} else {
				b = append(b, `{"type":"refusal"`...)
				b = kStr(b, "refusal", p.text)
			}
			b = append(b, '}')
		}
		return append(b, "]}"...)
	case partToolCall:
		b = append(b, `{"id":`...)
		b = AppendString(b, b2s(id))
		if p.custom {
			b = append(b, `,"type":"custom_tool_call"`...)
			b = kStr(b, "status", status)
			b = kStr(b, "call_id", p.callID)
			b = kStr(b, "name", p.name)
			b = kStrOpt(b, "namespace", p.namespace)
			b = kStr(b, "input", p.args)
		} else {
			b = append(b, `,"type":"function_call"`...)
			b = kStr(b, "status", status)
			b = kStr(b, "call_id", p.callID)
			b = kStr(b, "name", p.name)
			b = kStrOpt(b, "namespace", p.namespace)
			if status == "completed" {
				b = kStr(b, "arguments", callArguments(p))
			} else {
				b = kStr(b, "arguments", p.args)
			}
		}
		return append(b, '}')
	case partReasoning:
		b = append(b, `{"id":`...)
		b = AppendString(b, b2s(id))
		b = append(b, `,"type":"reasoning","summary":[`...)
		if status != "in_progress" {
			for _, s := range p.summaryTexts() {
				b = elem(b)
				b = append(b, `{"type":"summary_text"`...)
				b = kStr(b, "text", s)
				b = append(b, '}')
			}
		}
		b = append(b, ']')
		if enc := responsesEncrypted(p); enc != "" {
			b = kStr(b, "encrypted_content", enc)
		}
		return append(b, '}')
	}
	return b
}

// responsesEncrypted is the encrypted_content a reasoning part carries to a
// Responses client: OpenAI's own, or an Anthropic signature tagged with its
// origin.
func responsesEncrypted(p *part) string {
	switch {
	case p.encrypted != "":
		return p.encrypted
	case p.redacted != "":
		return sigRedacted + p.redacted
	case p.signature != "":
		return sigAnthropic + p.signature
	}
	return ""
}

func encodeResponsesResponse(b []byte, rs *response, echo *responsesEcho) []byte {
	id := idWithPrefix("resp_", rs.id)
	status := "completed"
	if rs.finish == finishLength || rs.finish == finishContentFilter {
		status = "incomplete"
	}
	o := responseObject{id: id, created: rs.created, status: status, finish: rs.finish, model: rs.model, echo: echo, usage: &rs.usage}
	return o.append(b, func(b []byte) []byte {
		var idb []byte
		for i := range rs.parts {
			p := &rs.parts[i]
			idb = itemIDFor(idb[:0], p, id, i)
			b = elem(b)
			st := "completed"
			if status == "incomplete" && i == len(rs.parts)-1 {
				st = "incomplete" // the answer was cut in its last item
			}
			b = appendResponsesItem(b, p, idb, st)
		}
		return b
	})
}

// responseObject is what a Responses response object says besides its
// output items, which a callback writes.
type responseObject struct {
	id              string
	created         int64
	status          string // in_progress, completed, incomplete, failed
	finish          finish // for incomplete_details
	errCode, errMsg string // for status failed
	model           string
	echo            *responsesEcho
	usage           *Usage // nil: null (in progress)
}

// append writes the object, in the field order of OpenAI's own; items
// appends the output array's elements.
func (o *responseObject) append(b []byte, items func([]byte) []byte) []byte {
	b = append(b, '{')
	b = kStr(b, "id", o.id)
	b = kStr(b, "object", "response")
	b = kInt(b, "created_at", o.created)
	b = kStr(b, "status", o.status)
	if o.errMsg != "" {
		b = append(key(b, "error"), '{')
		b = kStr(b, "code", o.errCode)
		b = kStr(b, "message", o.errMsg)
		b = append(b, '}')
	} else {
		b = append(b, `,"error":null`...)
	}
	b = appendIncomplete(b, o.finish)
	e := o.echo
	b = kRaw(b, "instructions", e.instructions)
	b = kRaw(b, "max_output_tokens", e.maxOutputTokens)
	b = kStr(b, "model", o.model)
	b = append(key(b, "output"), '[')
	b = append(items(b), ']')
	b = kRaw(b, "parallel_tool_calls", e.parallelToolCalls)
	b = kRaw(b, "previous_response_id", e.previousResponseID)
	b = kRaw(b, "reasoning", e.reasoning)
	b = kRaw(b, "store", e.store)
	b = kRaw(b, "temperature", e.temperature)
	b = kRaw(b, "text", e.text)
	b = kRaw(b, "tool_choice", e.toolChoice)
	b = kRaw(b, "tools", e.tools)
	b = kRaw(b, "top_p", e.topP)
	if o.usage == nil {
		b = append(b, `,"usage":null`...)
	} else {
		b = appendResponsesUsage(key(b, "usage"), o.usage)
	}
	b = kRaw(b, "user", e.user)
	b = kRaw(b, "metadata", e.metadata)
	return append(b, '}')
}

// appendIncomplete writes incomplete_details for f.
func appendIncomplete(b []byte, f finish) []byte {
	switch f {
	case finishLength:
		return append(b, `,"incomplete_details":{"reason":"max_output_tokens"}`...)
	case finishContentFilter:
		return append(b, `,"incomplete_details":{"reason":"content_filter"}`...)
	}
	return append(b, `,"incomplete_details":null`...)
}

// itemIDFor returns the item id of output part i: the upstream's own
// Responses id when it has one, else one made from the response id.
func itemIDFor(b []byte, p *part, respID string, i int) []byte {
	if p.itemID != "" {
		return append(b, p.itemID...)
	}
	switch p.typ {
	case partToolCall:
		if p.custom {
			return itemID(b, "ctc_", respID, i)
		}
		return itemID(b, "fc_", respID, i)
	case partReasoning:
		return itemID(b, "rs_", respID, i)
	}
	return itemID(b, "msg_", respID, i)
}
