package translate

import (
	"strconv"

	"github.com/tidwall/gjson"
)

// Anthropic Messages streams: message_start, content_block_start/delta/stop
// per block, message_delta, message_stop; ping and error. Reference:
// https://docs.anthropic.com/en/docs/build-with-claude/streaming

// messagesDecoder reads an upstream Messages stream.
type messagesDecoder struct {
	open     blockKind
	index    int64 // Anthropic index of the open block
	skip     bool  // the open block is of a kind Troupe does not translate
	finish   finish
	stopSeq  string
	finished bool // message_delta with a stop_reason seen
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
		dst = d.close(s, dst)
		cb := gjson.Get(data, "content_block")
		d.index = gjson.Get(data, "index").Int()
		d.skip = false
		switch cb.Get("type").Str {
		case "text":
			d.open = blockText
			dst = s.emit(dst, sev{kind: sevBlockStart, bk: blockText})
			if t := s.str(cb.Get("text")); t != "" {
				dst = s.emit(dst, sev{kind: sevDelta, bk: blockText, text: t})
			}
		case "thinking":
			d.open = blockReasoning
			dst = s.emit(dst, sev{kind: sevBlockStart, bk: blockReasoning})
		case "redacted_thinking":
			d.open = blockReasoning
			dst = s.emit(dst, sev{kind: sevBlockStart, bk: blockReasoning})
			dst = s.emit(dst, sev{kind: sevSignature, sig: sigIsRedacted, text: cb.Get("data").Str})
		case "tool_use":
			d.open = blockTool
			dst = s.emit(dst, sev{kind: sevBlockStart, bk: blockTool, id: cb.Get("id").Str, name: cb.Get("name").Str})
		default:
			d.skip = true // server tool blocks: never asked for by a translated request
		}
		return dst, nil
	case "content_block_delta":
		if d.open == 0 || d.skip {
			return dst, nil
		}
		delta := gjson.Get(data, "delta")
		switch delta.Get("type").Str {
		case "text_delta":
			return s.emit(dst, sev{kind: sevDelta, bk: blockText, text: s.str(delta.Get("text"))}), nil
		case "thinking_delta":
			return s.emit(dst, sev{kind: sevDelta, bk: blockReasoning, text: s.str(delta.Get("thinking"))}), nil
		case "signature_delta":
			return s.emit(dst, sev{kind: sevSignature, sig: sigIsSignature, text: s.str(delta.Get("signature"))}), nil
		case "input_json_delta":
			if pj := s.str(delta.Get("partial_json")); pj != "" {
				return s.emit(dst, sev{kind: sevDelta, bk: blockTool, text: pj}), nil
			}
		}
		return dst, nil
	case "content_block_stop":
		return d.close(s, dst), nil
	case "message_delta":
		if u := gjson.Get(data, "usage"); u.IsObject() {
			s.usage.set(Messages, u) // cumulative counts: those present replace
		}
		if sr := gjson.Get(data, "delta.stop_reason"); sr.Type == gjson.String {
			d.finish, d.finished = messagesFinish(sr.Str), true
			d.stopSeq = gjson.Get(data, "delta.stop_sequence").Str
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

func (d *messagesDecoder) close(s *Stream, dst []byte) []byte {
	if d.open == 0 && !d.skip {
		return dst
	}
	k, skip := d.open, d.skip
	d.open, d.skip = 0, false
	if skip {
		return dst
	}
	return s.emit(dst, sev{kind: sevBlockStop, bk: k})
}

func (d *messagesDecoder) end(s *Stream, dst []byte) []byte {
	if s.done {
		return dst
	}
	dst = d.close(s, dst)
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
		dst = appendMessagesUsage(dst, &s.usage)
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
		if e.open != blockReasoning {
			return dst
		}
		sig := ev.text
		if ev.sig == sigIsEncrypted {
			sig = sigOpenAI + sig
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
	if e.open == blockReasoning && !e.sig {
		// Every thinking block ends in a signature_delta; a reasoning block
		// from a provider with no reasoning state gets an empty one.
		dst = msgEvent(dst, "content_block_delta")
		dst = append(dst, `,"index":`...)
		dst = strconv.AppendInt(dst, e.index, 10)
		dst = append(dst, `,"delta":{"type":"signature_delta","signature":""}`...)
		dst = endEvent(dst)
	}
	dst = msgEvent(dst, "content_block_stop")
	dst = append(dst, `,"index":`...)
	dst = strconv.AppendInt(dst, e.index, 10)
	dst = endEvent(dst)
	e.open = 0
	e.index++
	return dst
}
