package translate

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Responses streams: named events ("event: response.output_text.delta")
// with a sequence_number. Reference:
// https://platform.openai.com/docs/api-reference/responses-streaming

// responsesDecoder reads an upstream Responses stream. Blocks are output
// items (reasoning, function and custom tool calls) and the content parts of
// message items, told apart by output_index (and content_index), or by
// item_id when an event lacks output_index; any number may be open at once.
type responsesDecoder struct {
	blocks []responsesBlock // the open blocks, in the order they began
}

// responsesBlock is an open block of an upstream Responses stream.
type responsesBlock struct {
	out      int64  // output_index
	part     int64  // content_index of a message part, -1 for an item
	itemID   string // item id
	slot     int32
	kind     blockKind
	sawDelta bool  // a tool or reasoning block received deltas
	summary  int64 // a reasoning block's current summary_index
	// A reasoning item's encrypted_content from output_item.added, used
	// when output_item.done has none.
	encrypted string
	// awaitState: a reasoning item done without encrypted_content, held
	// open until response.completed, whose output may carry it.
	awaitState bool
}

// responsesEvent is what Troupe reads of an upstream Responses event, found
// in one pass over its top level.
type responsesEvent struct {
	typ, itemID, delta    string
	out, content, summary int64
	hasOut                bool
	item, part, response  gjson.Result
}

func (d *responsesDecoder) reset() { *d = responsesDecoder{} }

func (d *responsesDecoder) decode(s *Stream, dst []byte, ev Event) ([]byte, error) {
	if len(ev.Data) == 0 || !gjson.ValidBytes(ev.Data) {
		return dst, badEvent("responses event is not JSON")
	}
	data := b2s(ev.Data)
	var e responsesEvent
	gjson.Parse(data).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			e.typ = v.Str
		case "item_id":
			e.itemID = v.Str
		case "delta":
			e.delta = s.str(v)
		case "output_index":
			e.out, e.hasOut = v.Int(), v.Type == gjson.Number
		case "content_index":
			e.content = v.Int()
		case "summary_index":
			e.summary = v.Int()
		case "item":
			e.item = v
		case "part":
			e.part = v
		case "response":
			e.response = v
		}
		return true
	})
	if e.typ == "" {
		e.typ = b2s(ev.Name)
	}
	switch e.typ {
	case "response.created", "response.in_progress", "response.queued":
		r := e.response
		return s.emit(dst, sev{kind: sevStart, id: r.Get("id").Str, name: r.Get("model").Str, created: r.Get("created_at").Int()}), nil
	case "response.output_item.added":
		it := e.item
		switch t := it.Get("type").Str; t {
		case "function_call", "custom_tool_call":
			id := it.Get("id").Str
			if d.find(&e, -1, id) != nil {
				return dst, nil // announced twice
			}
			b := d.open(s, &e, -1, id, blockTool)
			return s.emit(dst, sev{kind: sevBlockStart, bk: blockTool, slot: b.slot, id: it.Get("call_id").Str,
				name: flatName(it.Get("namespace").Str, it.Get("name").Str), custom: t == "custom_tool_call", itemID: id}), nil
		case "reasoning":
			var b *responsesBlock
			b, dst = d.reasoning(s, dst, &e, it.Get("id").Str)
			if enc := it.Get("encrypted_content").Str; enc != "" {
				b.encrypted = strings.Clone(enc)
			}
		}
		return dst, nil
	case "response.content_part.added":
		k := blockText
		if e.part.Get("type").Str == "refusal" {
			k = blockRefusal
		}
		_, dst = d.text(s, dst, &e, k)
		return dst, nil
	case "response.output_text.delta", "response.refusal.delta":
		k := blockText
		if e.typ == "response.refusal.delta" {
			k = blockRefusal
		}
		b, dst := d.text(s, dst, &e, k)
		return s.emit(dst, sev{kind: sevDelta, bk: b.kind, slot: b.slot, text: e.delta}), nil
	case "response.content_part.done":
		if b := d.find(&e, e.content, e.itemID); b != nil {
			dst = d.close(s, dst, b)
		}
		return dst, nil
	case "response.reasoning_summary_part.added":
		b, dst := d.reasoning(s, dst, &e, e.itemID)
		if e.summary > b.summary {
			b.summary = e.summary
			dst = s.emit(dst, sev{kind: sevDelta, bk: blockReasoning, slot: b.slot, text: "\n\n"})
		}
		return dst, nil
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		b, dst := d.reasoning(s, dst, &e, e.itemID)
		b.sawDelta = true
		return s.emit(dst, sev{kind: sevDelta, bk: blockReasoning, slot: b.slot, text: e.delta}), nil
	case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
		b := d.find(&e, -1, e.itemID)
		if b == nil || b.kind != blockTool {
			return dst, nil // a delta for an item never announced: nothing to attach it to
		}
		b.sawDelta = true
		return s.emit(dst, sev{kind: sevDelta, bk: blockTool, slot: b.slot, text: e.delta}), nil
	case "response.output_item.done":
		return d.itemDone(s, dst, &e), nil
	case "response.completed", "response.incomplete":
		r := e.response
		for i := range d.blocks {
			if b := &d.blocks[i]; b.awaitState {
				r.Get("output").ForEach(func(_, it gjson.Result) bool {
					if it.Get("type").Str != "reasoning" || it.Get("id").Str != b.itemID {
						return true
					}
					if it.Get("encrypted_content").Str != "" {
						dst = s.emit(dst, sev{kind: sevSignature, sig: sigIsReasoningItem, slot: b.slot, text: it.Raw})
					}
					return false
				})
			}
		}
		for len(d.blocks) > 0 {
			dst = d.close(s, dst, &d.blocks[0])
		}
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
		r := e.response
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

// itemDone ends an output item: a reasoning item's summaries (when they
// came only whole) and encrypted state, a call's arguments (when they came
// only whole; a call never announced gets its start here), a message's
// parts.
func (d *responsesDecoder) itemDone(s *Stream, dst []byte, e *responsesEvent) []byte {
	it := e.item
	id := it.Get("id").Str
	switch t := it.Get("type").Str; t {
	case "reasoning":
		b, dst := d.reasoning(s, dst, e, id)
		if !b.sawDelta {
			n := 0
			it.Get("summary").ForEach(func(_, sm gjson.Result) bool {
				if n > 0 {
					dst = s.emit(dst, sev{kind: sevDelta, bk: blockReasoning, slot: b.slot, text: "\n\n"})
				}
				n++
				dst = s.emit(dst, sev{kind: sevDelta, bk: blockReasoning, slot: b.slot, text: s.str(sm.Get("text"))})
				return true
			})
		}
		// The encrypted reasoning may come on this event, only on
		// output_item.added, or only in response.completed's output.
		switch {
		case it.Get("encrypted_content").Str != "":
			dst = s.emit(dst, sev{kind: sevSignature, sig: sigIsReasoningItem, slot: b.slot, text: it.Raw})
		case b.encrypted != "":
			dst = s.emit(dst, sev{kind: sevSignature, sig: sigIsReasoningItem, slot: b.slot, text: withEncrypted(it.Raw, b.encrypted)})
		case s.to == Messages && s.wantsReasoningState():
			// A Messages client's thinking block carries it in its
			// signature, written just before the block stops: the block
			// (and the blocks after it) wait for response.completed.
			b.awaitState = true
			return dst
		}
		return d.close(s, dst, b)
	case "function_call", "custom_tool_call":
		b := d.find(e, -1, id)
		if b == nil {
			b = d.open(s, e, -1, id, blockTool)
			dst = s.emit(dst, sev{kind: sevBlockStart, bk: blockTool, slot: b.slot, id: it.Get("call_id").Str,
				name: flatName(it.Get("namespace").Str, it.Get("name").Str), custom: t == "custom_tool_call", itemID: id})
		}
		if !b.sawDelta {
			args := s.str(it.Get("arguments"))
			if t == "custom_tool_call" {
				args = s.str(it.Get("input"))
			}
			if args != "" {
				dst = s.emit(dst, sev{kind: sevDelta, bk: blockTool, slot: b.slot, text: args})
			}
		}
		return d.close(s, dst, b)
	case "message":
		for i := 0; i < len(d.blocks); {
			if b := &d.blocks[i]; (e.hasOut && b.out == e.out) || (!e.hasOut && id != "" && b.itemID == id) {
				dst = d.close(s, dst, b)
				continue
			}
			i++
		}
	}
	return dst
}

// withEncrypted returns a reasoning item's JSON with an encrypted_content
// member added.
func withEncrypted(item, encrypted string) string {
	i := strings.LastIndexByte(item, '}')
	if i < 0 {
		return item
	}
	b := make([]byte, 0, len(item)+len(encrypted)+24)
	b = append(b, strings.TrimRight(item[:i], " \t\r\n")...)
	if b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	b = append(b, `"encrypted_content":`...)
	b = AppendString(b, encrypted)
	return string(append(b, '}'))
}

// find returns the open block an event names: by output_index and part
// (-1: the item itself), or by item id when the event has no output_index.
func (d *responsesDecoder) find(e *responsesEvent, part int64, itemID string) *responsesBlock {
	for i := range d.blocks {
		b := &d.blocks[i]
		if b.part != part {
			continue
		}
		if e.hasOut && b.out == e.out || !e.hasOut && itemID != "" && b.itemID == itemID {
			return b
		}
	}
	return nil
}

// open adds a block for the item or part an event names.
func (d *responsesDecoder) open(s *Stream, e *responsesEvent, part int64, itemID string, k blockKind) *responsesBlock {
	d.blocks = append(d.blocks, responsesBlock{out: e.out, part: part, itemID: strings.Clone(itemID), slot: s.slot(), kind: k})
	return &d.blocks[len(d.blocks)-1]
}

// text returns the open text or refusal part an event names, opening it
// first when it is new.
func (d *responsesDecoder) text(s *Stream, dst []byte, e *responsesEvent, k blockKind) (*responsesBlock, []byte) {
	if b := d.find(e, e.content, e.itemID); b != nil {
		return b, dst
	}
	b := d.open(s, e, e.content, e.itemID, k)
	return b, s.emit(dst, sev{kind: sevBlockStart, bk: k, slot: b.slot})
}

// reasoning returns the open reasoning item an event names, opening it
// first when it is new.
func (d *responsesDecoder) reasoning(s *Stream, dst []byte, e *responsesEvent, itemID string) (*responsesBlock, []byte) {
	if b := d.find(e, -1, itemID); b != nil && b.kind == blockReasoning {
		return b, dst
	}
	b := d.open(s, e, -1, itemID, blockReasoning)
	return b, s.emit(dst, sev{kind: sevBlockStart, bk: blockReasoning, slot: b.slot, itemID: itemID})
}

// close ends block b (a pointer into d.blocks, invalid afterwards).
func (d *responsesDecoder) close(s *Stream, dst []byte, b *responsesBlock) []byte {
	for i := range d.blocks {
		if &d.blocks[i] == b {
			ev := sev{kind: sevBlockStop, bk: b.kind, slot: b.slot}
			d.blocks = append(d.blocks[:i], d.blocks[i+1:]...)
			return s.emit(dst, ev)
		}
	}
	return dst
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

func (d *responsesDecoder) end(s *Stream, dst []byte) []byte { return dst }

// responsesItem is one output item the encoder has written.
type responsesItem struct {
	p      part   // the item (text, args, summary accumulate in buf)
	id     []byte // item id
	buf    []byte // text, refusal, arguments or reasoning text so far
	done   bool
	status string // once done: "completed", or "incomplete" when the answer was cut in it
}

// responsesEncoder writes a Responses stream to the client.
//
// An item's closing events (output_text.done, content_part.done,
// output_item.done and the like) are held from its block's stop until the
// next block starts or the answer ends: output_item.done carries the
// item's status, and whether the last item was cut ("incomplete", as
// OpenAI marks the item a max_output_tokens or content_filter stop ended
// in) is known only from the upstream's stop reason, which Anthropic sends
// in message_delta after content_block_stop and Chat in the chunk with
// finish_reason. An item followed by another one was not cut.
type responsesEncoder struct {
	seq       int64
	items     []responsesItem
	cur       int  // index of the open item, -1 for none
	stopped   bool // the open item's block has stopped; its closing events are held
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
			st := it.status
			if st == "" {
				// An item still open when the answer failed was cut, as
				// one max_output_tokens ended (see stop).
				st = "incomplete"
			}
			dst = elem(dst)
			dst = appendResponsesItem(dst, e.final(it), it.id, st)
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
		// Copies: ev.text points into the upstream event, and "" + x is x.
		switch ev.sig {
		case sigIsReasoningItem:
			p.encrypted = strings.Clone(gjson.Get(ev.text, "encrypted_content").Str)
		case sigIsRedacted:
			p.redacted = strings.Clone(ev.text)
		default:
			p.signature = strings.Clone(p.signature + ev.text)
		}
		return dst
	case sevBlockStop:
		if e.cur >= 0 {
			e.stopped = true // closed by the next start or the finish (see responsesEncoder)
		}
		return dst
	case sevFinish:
		name, status := "response.completed", "completed"
		if ev.finish == finishLength || ev.finish == finishContentFilter {
			name, status = "response.incomplete", "incomplete"
		}
		dst = e.stop(dst, status)
		dst = e.event(dst, name)
		dst = e.response(append(dst, `,"response":`...), s, status, ev.finish, "", "")
		return endEvent(dst)
	case sevError:
		if !s.started {
			e.respID = idWithPrefix("resp_", s.id)
		}
		if e.stopped {
			// The upstream finished the item before it failed; an item
			// still open stays unclosed, as before.
			dst = e.stop(dst, "completed")
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
	dst = e.stop(dst, "completed")
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

// stop closes the open item with its .done events; status is the item's
// in output_item.done: "completed", or "incomplete" for the item the
// answer was cut in.
func (e *responsesEncoder) stop(dst []byte, status string) []byte {
	if e.cur < 0 {
		return dst
	}
	it := &e.items[e.cur]
	it.status = status
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
	dst = appendResponsesItem(dst, e.final(it), it.id, status)
	dst = endEvent(dst)
	it.done = true
	e.cur = -1
	e.stopped = false
	return dst
}
