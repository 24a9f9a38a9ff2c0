package translate

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Responses streams: named events ("event: response.output_text.delta")
// with a sequence_number. Reference:
// https://platform.openai.com/docs/api-reference/responses-streaming

// responsesDecoder reads an upstream Responses stream.
type responsesDecoder struct {
	open    blockKind
	out     int64 // output_index of the open block
	sawArgs bool  // the open tool or reasoning block received deltas
	summary int64 // summary_index of the open reasoning block's current part
}

func (d *responsesDecoder) reset() { *d = responsesDecoder{out: -1} }

func (d *responsesDecoder) decode(s *Stream, dst []byte, ev Event) ([]byte, error) {
	if len(ev.Data) == 0 || !gjson.ValidBytes(ev.Data) {
		return dst, badEvent("responses event is not JSON")
	}
	data := b2s(ev.Data)
	typ := gjson.Get(data, "type").Str
	if typ == "" {
		typ = b2s(ev.Name)
	}
	switch typ {
	case "response.created", "response.in_progress", "response.queued":
		r := gjson.Get(data, "response")
		return s.emit(dst, sev{kind: sevStart, id: r.Get("id").Str, name: r.Get("model").Str, created: r.Get("created_at").Int()}), nil
	case "response.output_item.added":
		it := gjson.Get(data, "item")
		out := gjson.Get(data, "output_index").Int()
		switch it.Get("type").Str {
		case "function_call", "custom_tool_call":
			dst = d.close(s, dst)
			d.open, d.out, d.sawArgs = blockTool, out, false
			custom := it.Get("type").Str == "custom_tool_call"
			dst = s.emit(dst, sev{kind: sevBlockStart, bk: blockTool, id: it.Get("call_id").Str,
				name: flatName(it.Get("namespace").Str, it.Get("name").Str), custom: custom, itemID: it.Get("id").Str})
		case "reasoning":
			dst = d.close(s, dst)
			d.open, d.out, d.summary, d.sawArgs = blockReasoning, out, 0, false
			dst = s.emit(dst, sev{kind: sevBlockStart, bk: blockReasoning, itemID: it.Get("id").Str})
		}
		return dst, nil
	case "response.content_part.added":
		k := blockText
		if gjson.Get(data, "part.type").Str == "refusal" {
			k = blockRefusal
		}
		dst = d.close(s, dst)
		d.open, d.out = k, gjson.Get(data, "output_index").Int()
		return s.emit(dst, sev{kind: sevBlockStart, bk: k}), nil
	case "response.output_text.delta", "response.refusal.delta":
		k := blockText
		if typ == "response.refusal.delta" {
			k = blockRefusal
		}
		if d.open != k {
			dst = d.close(s, dst)
			d.open, d.out = k, gjson.Get(data, "output_index").Int()
			dst = s.emit(dst, sev{kind: sevBlockStart, bk: k})
		}
		return s.emit(dst, sev{kind: sevDelta, bk: k, text: s.str(gjson.Get(data, "delta"))}), nil
	case "response.content_part.done":
		if d.open == blockText || d.open == blockRefusal {
			dst = d.close(s, dst)
		}
		return dst, nil
	case "response.reasoning_summary_part.added":
		if d.open != blockReasoning {
			dst = d.close(s, dst)
			d.open, d.out, d.summary = blockReasoning, gjson.Get(data, "output_index").Int(), 0
			dst = s.emit(dst, sev{kind: sevBlockStart, bk: blockReasoning, itemID: gjson.Get(data, "item_id").Str})
		}
		if idx := gjson.Get(data, "summary_index").Int(); idx > d.summary {
			d.summary = idx
			dst = s.emit(dst, sev{kind: sevDelta, bk: blockReasoning, text: "\n\n"})
		}
		return dst, nil
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		if d.open != blockReasoning {
			dst = d.close(s, dst)
			d.open, d.out = blockReasoning, gjson.Get(data, "output_index").Int()
			dst = s.emit(dst, sev{kind: sevBlockStart, bk: blockReasoning, itemID: gjson.Get(data, "item_id").Str})
		}
		d.sawArgs = true
		return s.emit(dst, sev{kind: sevDelta, bk: blockReasoning, text: s.str(gjson.Get(data, "delta"))}), nil
	case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
		if d.open != blockTool {
			return dst, nil // a delta for an item never announced: nothing to attach it to
		}
		d.sawArgs = true
		return s.emit(dst, sev{kind: sevDelta, bk: blockTool, text: s.str(gjson.Get(data, "delta"))}), nil
	case "response.output_item.done":
		it := gjson.Get(data, "item")
		switch it.Get("type").Str {
		case "reasoning":
			if d.open != blockReasoning {
				dst = d.close(s, dst)
				d.open = blockReasoning
				dst = s.emit(dst, sev{kind: sevBlockStart, bk: blockReasoning, itemID: it.Get("id").Str})
			}
			if !d.sawArgs {
				// Summaries that came only whole, in the done item.
				n := 0
				it.Get("summary").ForEach(func(_, sm gjson.Result) bool {
					if n > 0 {
						dst = s.emit(dst, sev{kind: sevDelta, bk: blockReasoning, text: "\n\n"})
					}
					n++
					dst = s.emit(dst, sev{kind: sevDelta, bk: blockReasoning, text: s.str(sm.Get("text"))})
					return true
				})
			}
			if enc := it.Get("encrypted_content").Str; enc != "" {
				dst = s.emit(dst, sev{kind: sevSignature, sig: sigIsEncrypted, text: enc})
			}
			return d.close(s, dst), nil
		case "function_call", "custom_tool_call":
			if d.open == blockTool && !d.sawArgs {
				args := s.str(it.Get("arguments"))
				if it.Get("type").Str == "custom_tool_call" {
					args = s.str(it.Get("input"))
				}
				if args != "" {
					dst = s.emit(dst, sev{kind: sevDelta, bk: blockTool, text: args})
				}
			}
			return d.close(s, dst), nil
		case "message":
			return d.close(s, dst), nil
		}
		return dst, nil
	case "response.completed", "response.incomplete":
		dst = d.close(s, dst)
		r := gjson.Get(data, "response")
		if u := r.Get("usage"); u.IsObject() {
			s.usage.set(Responses, u)
		}
		tools := false
		r.Get("output").ForEach(func(_, it gjson.Result) bool {
			t := it.Get("type").Str
			tools = tools || t == "function_call" || t == "custom_tool_call"
			return !tools
		})
		f := responsesFinish(r.Get("status").Str, r.Get("incomplete_details.reason").Str, tools)
		return s.emit(dst, sev{kind: sevFinish, finish: f}), nil
	case "response.failed":
		r := gjson.Get(data, "response")
		if u := r.Get("usage"); u.IsObject() {
			s.usage.set(Responses, u)
		}
		code, msg := r.Get("error.code").Str, r.Get("error.message").Str
		if msg == "" {
			msg = "The upstream response failed."
		}
		return s.emit(dst, sev{kind: sevError, errType: responsesErrorType(code), errCode: code, text: msg}), nil
	case "error":
		typ, code, _, msg := errorParts(Responses, ev.Data)
		if code == "" {
			code = gjson.Get(data, "code").Str
		}
		if msg == "" {
			msg = gjson.Get(data, "message").Str
		}
		if typ == "" {
			typ = responsesErrorType(code)
		}
		if msg == "" {
			msg = "The upstream reported an error."
		}
		return s.emit(dst, sev{kind: sevError, errType: typ, errCode: code, text: msg}), nil
	}
	return dst, nil
}

// responsesErrorType guesses the OpenAI error type for a Responses error code.
func responsesErrorType(code string) string {
	switch code {
	case "rate_limit_exceeded":
		return "rate_limit_error"
	case "insufficient_quota":
		return "insufficient_quota"
	case "server_error", "":
		return "server_error"
	}
	return "invalid_request_error"
}

func (d *responsesDecoder) close(s *Stream, dst []byte) []byte {
	if d.open == 0 {
		return dst
	}
	k := d.open
	d.open, d.out = 0, -1
	return s.emit(dst, sev{kind: sevBlockStop, bk: k})
}

func (d *responsesDecoder) end(s *Stream, dst []byte) []byte { return dst }

// responsesItem is one output item the encoder has written.
type responsesItem struct {
	p    part   // the item (text, args, summary accumulate in buf)
	id   []byte // item id
	buf  []byte // text, refusal, arguments or reasoning text so far
	done bool
}

// responsesEncoder writes a Responses stream to the client.
type responsesEncoder struct {
	seq       int64
	items     []responsesItem
	cur       int // index of the open item, -1 for none
	summaryOn bool
	names     toolNames
	request   []byte
	respID    string
	echo      responsesEcho // the request's settings every response object repeats
}

func (e *responsesEncoder) init(request []byte) {
	e.cur = -1
	e.request = request
	e.echo = loadResponsesEcho(request)
}

// event writes `event: name\ndata: {"type":name,"sequence_number":n` — the
// caller appends the rest of the object and calls end.
func (e *responsesEncoder) event(dst []byte, name string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, name...)
	dst = append(dst, `","sequence_number":`...)
	dst = strconv.AppendInt(dst, e.seq, 10)
	e.seq++
	return dst
}

func endEvent(dst []byte) []byte { return append(dst, "}\n\n"...) }

// itemEvent writes one whole event of type name about item it (item_id and
// output_index) whose payload ends in a JSON string: fields (comma-led, ending
// in the string's key), then s, then tail (e.g. "}" closing a part object).
func (e *responsesEncoder) itemEvent(dst []byte, it *responsesItem, name, fields, s, tail string) []byte {
	dst = e.event(dst, name)
	dst = e.ref(dst, it)
	dst = append(dst, fields...)
	dst = AppendString(dst, s)
	dst = append(dst, tail...)
	return endEvent(dst)
}

// response writes the response object.
func (e *responsesEncoder) response(dst []byte, s *Stream, status string, f finish, errCode, errMsg string) []byte {
	o := responseObject{id: e.respID, created: s.created, status: status, finish: f, errCode: errCode, errMsg: errMsg,
		model: s.model, echo: &e.echo}
	if status != "in_progress" {
		o.usage = &s.usage
	}
	return o.append(dst, func(dst []byte) []byte {
		if status == "in_progress" {
			return dst
		}
		for i := range e.items {
			it := &e.items[i]
			dst = elem(dst)
			dst = appendResponsesItem(dst, e.final(it), it.id, "completed")
		}
		return dst
	})
}

// final returns the item's part with its accumulated text.
func (e *responsesEncoder) final(it *responsesItem) *part {
	p := &it.p
	switch p.typ {
	case partToolCall:
		p.args = string(it.buf)
		if p.custom {
			p.args = customInput(p.args)
		}
	default:
		p.text = string(it.buf)
		p.summary = nil
	}
	return p
}

func (e *responsesEncoder) put(s *Stream, dst []byte, ev sev) []byte {
	switch ev.kind {
	case sevStart:
		e.respID = idWithPrefix("resp_", s.id)
		dst = e.event(dst, "response.created")
		dst = e.response(append(dst, `,"response":`...), s, "in_progress", finishNone, "", "")
		dst = endEvent(dst)
		dst = e.event(dst, "response.in_progress")
		dst = e.response(append(dst, `,"response":`...), s, "in_progress", finishNone, "", "")
		return endEvent(dst)
	case sevBlockStart:
		return e.start(s, dst, &ev)
	case sevDelta:
		if e.cur < 0 {
			return dst
		}
		it := &e.items[e.cur]
		it.buf = append(it.buf, ev.text...)
		switch it.p.typ {
		case partText:
			return e.itemEvent(dst, it, "response.output_text.delta", `,"content_index":0,"delta":`, ev.text, `,"logprobs":[]`)
		case partRefusal:
			return e.itemEvent(dst, it, "response.refusal.delta", `,"content_index":0,"delta":`, ev.text, "")
		case partReasoning:
			if !e.summaryOn {
				e.summaryOn = true
				dst = e.event(dst, "response.reasoning_summary_part.added")
				dst = e.ref(dst, it)
				dst = append(dst, `,"summary_index":0,"part":{"type":"summary_text","text":""}`...)
				dst = endEvent(dst)
			}
			return e.itemEvent(dst, it, "response.reasoning_summary_text.delta", `,"summary_index":0,"delta":`, ev.text, "")
		case partToolCall:
			if it.p.custom {
				return dst // the input is sent whole at the end (it arrives JSON-wrapped)
			}
			return e.itemEvent(dst, it, "response.function_call_arguments.delta", `,"delta":`, ev.text, "")
		}
		return dst
	case sevSignature:
		if e.cur < 0 || e.items[e.cur].p.typ != partReasoning {
			return dst
		}
		p := &e.items[e.cur].p
		switch ev.sig {
		case sigIsEncrypted:
			p.encrypted = ev.text
		case sigIsRedacted:
			p.redacted = ev.text
		default:
			p.signature += ev.text
		}
		return dst
	case sevBlockStop:
		return e.stop(dst)
	case sevFinish:
		dst = e.stop(dst)
		name, status := "response.completed", "completed"
		if ev.finish == finishLength || ev.finish == finishContentFilter {
			name, status = "response.incomplete", "incomplete"
		}
		dst = e.event(dst, name)
		dst = e.response(append(dst, `,"response":`...), s, status, ev.finish, "", "")
		return endEvent(dst)
	case sevError:
		if !s.started {
			e.respID = idWithPrefix("resp_", s.id)
		}
		code := ev.errCode
		if code == "" {
			code = ev.errType
		}
		dst = e.event(dst, "error")
		dst = kStrNull(dst, "code", code)
		dst = kStr(dst, "message", ev.text)
		dst = append(dst, `,"param":null`...)
		dst = endEvent(dst)
		dst = e.event(dst, "response.failed")
		dst = e.response(append(dst, `,"response":`...), s, "failed", finishNone, code, ev.text)
		return endEvent(dst)
	}
	return dst
}

// ref writes item_id and output_index of it.
func (e *responsesEncoder) ref(dst []byte, it *responsesItem) []byte {
	dst = append(dst, `,"item_id":`...)
	dst = AppendString(dst, b2s(it.id))
	dst = append(dst, `,"output_index":`...)
	return strconv.AppendInt(dst, int64(e.cur), 10)
}

func (e *responsesEncoder) start(s *Stream, dst []byte, ev *sev) []byte {
	dst = e.stop(dst)
	n := len(e.items)
	e.items = append(e.items, responsesItem{})
	it := &e.items[n]
	e.cur = n
	switch ev.bk {
	case blockTool:
		it.p = part{typ: partToolCall, callID: strings.Clone(ev.id), name: strings.Clone(ev.name), custom: ev.custom}
		if !e.names.loaded {
			e.names = loadToolNames(e.request)
		}
		e.names.restore(&it.p)
		if ev.custom {
			it.p.custom = false // a native custom call from a Responses-like upstream streams raw input
		}
	case blockReasoning:
		it.p = part{typ: partReasoning}
		e.summaryOn = false
	case blockRefusal:
		it.p = part{typ: partRefusal}
	default:
		it.p = part{typ: partText}
	}
	it.id = itemIDFor(it.id[:0], &it.p, e.respID, n)
	if ev.itemID != "" && ev.bk != blockText {
		it.id = append(it.id[:0], ev.itemID...)
	}
	dst = e.event(dst, "response.output_item.added")
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	dst = append(dst, `,"item":`...)
	dst = appendResponsesItem(dst, &it.p, it.id, "in_progress")
	dst = endEvent(dst)
	switch it.p.typ {
	case partText:
		dst = e.event(dst, "response.content_part.added")
		dst = e.ref(dst, it)
		dst = append(dst, `,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}`...)
		dst = endEvent(dst)
	case partRefusal:
		dst = e.event(dst, "response.content_part.added")
		dst = e.ref(dst, it)
		dst = append(dst, `,"content_index":0,"part":{"type":"refusal","refusal":""}`...)
		dst = endEvent(dst)
	}
	return dst
}

// stop closes the open item with its .done events.
func (e *responsesEncoder) stop(dst []byte) []byte {
	if e.cur < 0 {
		return dst
	}
	it := &e.items[e.cur]
	text := b2s(it.buf)
	switch it.p.typ {
	case partText:
		dst = e.itemEvent(dst, it, "response.output_text.done", `,"content_index":0,"text":`, text, `,"logprobs":[]`)
		dst = e.itemEvent(dst, it, "response.content_part.done", `,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":`, text, "}")
	case partRefusal:
		dst = e.itemEvent(dst, it, "response.refusal.done", `,"content_index":0,"refusal":`, text, "")
		dst = e.itemEvent(dst, it, "response.content_part.done", `,"content_index":0,"part":{"type":"refusal","refusal":`, text, "}")
	case partReasoning:
		if e.summaryOn {
			dst = e.itemEvent(dst, it, "response.reasoning_summary_text.done", `,"summary_index":0,"text":`, text, "")
			dst = e.itemEvent(dst, it, "response.reasoning_summary_part.done", `,"summary_index":0,"part":{"type":"summary_text","text":`, text, "}")
		}
	case partToolCall:
		if it.p.custom {
			input := customInput(text)
			dst = e.itemEvent(dst, it, "response.custom_tool_call_input.delta", `,"delta":`, input, "")
			dst = e.itemEvent(dst, it, "response.custom_tool_call_input.done", `,"input":`, input, "")
		} else {
			dst = e.itemEvent(dst, it, "response.function_call_arguments.done", `,"arguments":`, text, "")
		}
	}
	dst = e.event(dst, "response.output_item.done")
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(e.cur), 10)
	dst = append(dst, `,"item":`...)
	dst = appendResponsesItem(dst, e.final(it), it.id, "completed")
	dst = endEvent(dst)
	it.done = true
	e.cur = -1
	return dst
}
