package translate

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Anthropic Messages streams: message_start, content_block_start/delta/stop
// per block, message_delta, message_stop; ping and error. Reference:
// https://docs.anthropic.com/en/docs/build-with-claude/streaming

// messagesDecoder reads an upstream Messages stream. Blocks are told apart
// by their index: Anthropic sends one after the other, but nothing in the
// protocol's events depends on that.
type messagesDecoder struct {
	blocks   []messagesBlock // the open blocks, in the order they began
	finish   finish
	stopSeq  string
	finished bool // message_delta with a stop_reason seen
}

// messagesBlock is an open content block of an upstream Messages stream.
type messagesBlock struct {
	index int64
	slot  int32
	kind  blockKind
	skip  bool // a kind Troupe does not translate
}

func (d *messagesDecoder) decode(s *Stream, dst []byte, ev Event) ([]byte, error) {
	if len(ev.Data) == 0 || !gjson.ValidBytes(ev.Data) {
		return dst, badEvent("messages event is not JSON")
	}
	data := b2s(ev.Data)
	typ := gjson.Get(data, "type").Str
	switch typ {
	case "message_start":
		m := gjson.Get(data, "message")
		if u := m.Get("usage"); u.IsObject() {
			s.usage.set(Messages, u)
		}
		return s.emit(dst, sev{kind: sevStart, id: m.Get("id").Str, name: m.Get("model").Str}), nil
	case "content_block_start":
		index := gjson.Get(data, "index").Int()
		dst = d.close(s, dst, index) // a block that reuses an open block's index ends it
		cb := gjson.Get(data, "content_block")
		b := messagesBlock{index: index, slot: s.slot()}
		switch cb.Get("type").Str {
		case "text":
			b.kind = blockText
			dst = s.emit(dst, sev{kind: sevBlockStart, bk: blockText, slot: b.slot})
			if t := s.str(cb.Get("text")); t != "" {
				dst = s.emit(dst, sev{kind: sevDelta, bk: blockText, slot: b.slot, text: t})
			}
		case "thinking":
			b.kind = blockReasoning
			dst = s.emit(dst, sev{kind: sevBlockStart, bk: blockReasoning, slot: b.slot})
		case "redacted_thinking":
			b.kind = blockReasoning
			dst = s.emit(dst, sev{kind: sevBlockStart, bk: blockReasoning, slot: b.slot})
			dst = s.emit(dst, sev{kind: sevSignature, sig: sigIsRedacted, slot: b.slot, text: cb.Get("data").Str})
		case "tool_use":
			b.kind = blockTool
			dst = s.emit(dst, sev{kind: sevBlockStart, bk: blockTool, slot: b.slot, id: cb.Get("id").Str, name: cb.Get("name").Str})
		default:
			b.skip = true // server tool blocks: never asked for by a translated request
		}
		d.blocks = append(d.blocks, b)
		return dst, nil
	case "content_block_delta":
		b := d.find(gjson.Get(data, "index").Int())
		if b == nil || b.skip {
			return dst, nil
		}
		delta := gjson.Get(data, "delta")
		switch delta.Get("type").Str {
		case "text_delta":
			return s.emit(dst, sev{kind: sevDelta, bk: b.kind, slot: b.slot, text: s.str(delta.Get("text"))}), nil
		case "thinking_delta":
			return s.emit(dst, sev{kind: sevDelta, bk: b.kind, slot: b.slot, text: s.str(delta.Get("thinking"))}), nil
		case "signature_delta":
			return s.emit(dst, sev{kind: sevSignature, sig: sigIsSignature, slot: b.slot, text: s.str(delta.Get("signature"))}), nil
		case "input_json_delta":
			if pj := s.str(delta.Get("partial_json")); pj != "" {
				return s.emit(dst, sev{kind: sevDelta, bk: b.kind, slot: b.slot, text: pj}), nil
			}
		}
		return dst, nil
	case "content_block_stop":
		return d.close(s, dst, gjson.Get(data, "index").Int()), nil
	case "message_delta":
		if u := gjson.Get(data, "usage"); u.IsObject() {
			s.usage.set(Messages, u) // cumulative counts: those present replace
		}
		if sr := gjson.Get(data, "delta.stop_reason"); sr.Type == gjson.String {
			d.finish, d.finished = messagesFinish(sr.Str), true
			d.stopSeq = strings.Clone(gjson.Get(data, "delta.stop_sequence").Str)
		}
		return dst, nil
	case "message_stop":
		return d.end(s, dst), nil
	case "error":
		t := gjson.Get(data, "error.type").Str
		msg := gjson.Get(data, "error.message").Str
		if msg == "" {
			msg = "The upstream reported an error."
		}
		otype, code := openAIType(t, 0)
		return s.emit(dst, sev{kind: sevError, errType: otype, errCode: code, text: msg}), nil
	}
	return dst, nil // ping and future event types
}

// find returns the open block with index, nil for none.
func (d *messagesDecoder) find(index int64) *messagesBlock {
	for i := range d.blocks {
		if d.blocks[i].index == index {
			return &d.blocks[i]
		}
	}
	return nil
}

// close ends the open block with index, if any.
func (d *messagesDecoder) close(s *Stream, dst []byte, index int64) []byte {
	for i := range d.blocks {
		if b := d.blocks[i]; b.index == index {
			d.blocks = append(d.blocks[:i], d.blocks[i+1:]...)
			if b.skip {
				return dst
			}
			return s.emit(dst, sev{kind: sevBlockStop, bk: b.kind, slot: b.slot})
		}
	}
	return dst
}

func (d *messagesDecoder) end(s *Stream, dst []byte) []byte {
	if s.done {
		return dst
	}
	for len(d.blocks) > 0 {
		dst = d.close(s, dst, d.blocks[0].index)
	}
	if !d.finished {
		return dst // Finish turns this into a failure
	}
	return s.emit(dst, sev{kind: sevFinish, finish: d.finish, stopSeq: d.stopSeq})
}

// messagesEncoder writes a Messages stream to the client.
type messagesEncoder struct {
	index   int64 // Anthropic index of the next block
	open    blockKind
	sawTool bool
	sig     bool // the open thinking block got its signature
}

func msgEvent(dst []byte, name string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, name...)
	return append(dst, '"')
}

func (e *messagesEncoder) put(s *Stream, dst []byte, ev sev) []byte {
	switch ev.kind {
	case sevStart:
		dst = msgEvent(dst, "message_start")
		dst = append(dst, `,"message":{"id":`...)
		dst = AppendString(dst, idWithPrefix("msg_", s.id))
		dst = append(dst, `,"type":"message","role":"assistant","model":`...)
		dst = AppendString(dst, s.model)
		dst = append(dst, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":`...)
		u := s.usage
		if u.InputTokens == 0 {
			u.InputTokens = max(s.opts.InputTokens, 0)
		}
		dst = appendMessagesUsage(dst, &u)
		return endEvent(append(dst, '}'))
	case sevBlockStart:
		dst = e.stop(dst)
		e.open, e.sig = ev.bk, false
		dst = msgEvent(dst, "content_block_start")
		dst = append(dst, `,"index":`...)
		dst = strconv.AppendInt(dst, e.index, 10)
		dst = append(dst, `,"content_block":`...)
		switch ev.bk {
		case blockTool:
			e.sawTool = true
			dst = append(dst, `{"type":"tool_use","id":`...)
			dst = AppendString(dst, idWithPrefix("toolu_", ev.id))
			dst = append(dst, `,"name":`...)
			dst = AppendString(dst, ev.name)
			dst = append(dst, `,"input":{}}`...)
		case blockReasoning:
			dst = append(dst, `{"type":"thinking","thinking":"","signature":""}`...)
		default:
			dst = append(dst, `{"type":"text","text":""}`...)
		}
		return endEvent(dst)
	case sevDelta:
		if e.open == 0 {
			return dst
		}
		dst = msgEvent(dst, "content_block_delta")
		dst = append(dst, `,"index":`...)
		dst = strconv.AppendInt(dst, e.index, 10)
		switch e.open {
		case blockTool:
			dst = append(dst, `,"delta":{"type":"input_json_delta","partial_json":`...)
		case blockReasoning:
			dst = append(dst, `,"delta":{"type":"thinking_delta","thinking":`...)
		default:
			dst = append(dst, `,"delta":{"type":"text_delta","text":`...)
		}
		dst = AppendString(dst, ev.text)
		return endEvent(append(dst, '}'))
	case sevSignature:
		if e.open != blockReasoning || ev.text == "" || e.sig {
			return dst
		}
		sig := ev.text
		if ev.sig == sigIsReasoningItem {
			if sig = openAIItemSignature(ev.text); sig == "" {
				return dst
			}
		}
		e.sig = true
		dst = msgEvent(dst, "content_block_delta")
		dst = append(dst, `,"index":`...)
		dst = strconv.AppendInt(dst, e.index, 10)
		dst = append(dst, `,"delta":{"type":"signature_delta","signature":`...)
		dst = AppendString(dst, sig)
		return endEvent(append(dst, '}'))
	case sevBlockStop:
		return e.stop(dst)
	case sevFinish:
		dst = e.stop(dst)
		f := ev.finish
		if f == finishNone || (f == finishStop && e.sawTool) {
			f = finishStop
			if e.sawTool {
				f = finishToolCalls
			}
		}
		dst = msgEvent(dst, "message_delta")
		dst = append(dst, `,"delta":{"stop_reason":`...)
		dst = AppendString(dst, messagesStopReason(f))
		dst = append(dst, `,"stop_sequence":`...)
		if ev.stopSeq != "" {
			dst = AppendString(dst, ev.stopSeq)
		} else {
			dst = append(dst, "null"...)
		}
		dst = append(dst, `},"usage":`...)
		dst = appendMessagesUsage(dst, &s.usage)
		dst = endEvent(dst)
		dst = msgEvent(dst, "message_stop")
		return endEvent(dst)
	case sevError:
		dst = msgEvent(dst, "error")
		dst = append(dst, `,"error":{"type":`...)
		dst = AppendString(dst, anthropicType(ev.errType, ev.errCode, 0))
		dst = append(dst, `,"message":`...)
		dst = AppendString(dst, ev.text)
		return endEvent(append(dst, '}'))
	}
	return dst
}

// stop closes the open block.
func (e *messagesEncoder) stop(dst []byte) []byte {
	if e.open == 0 {
		return dst
	}
	// A reasoning block from a provider with no reasoning state gets no
	// signature_delta: an empty one would be sent back as a signature.
	dst = msgEvent(dst, "content_block_stop")
	dst = append(dst, `,"index":`...)
	dst = strconv.AppendInt(dst, e.index, 10)
	dst = endEvent(dst)
	e.open = 0
	e.index++
	return dst
}
