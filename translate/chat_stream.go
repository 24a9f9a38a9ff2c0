package translate

import (
	"bytes"
	"strconv"

	"github.com/tidwall/gjson"
)

// Chat Completions streams: chunks "data: {chat.completion.chunk}" ending in
// "data: [DONE]". Reference:
// https://platform.openai.com/docs/api-reference/chat-streaming

// chatDecoder reads an upstream Chat stream.
type chatDecoder struct {
	open     blockKind // kind of the open block, 0 for none
	tool     int64     // Chat tool_calls index of the open tool block
	finish   finish
	finished bool // finish_reason seen
}

func (d *chatDecoder) reset() { *d = chatDecoder{tool: -1} }

var doneData = []byte("[DONE]")

func (d *chatDecoder) decode(s *Stream, dst []byte, ev Event) ([]byte, error) {
	data := bytes.TrimSpace(ev.Data)
	if bytes.Equal(data, doneData) {
		return d.end(s, dst), nil
	}
	if len(data) == 0 {
		return dst, nil
	}
	if !gjson.ValidBytes(data) {
		return dst, badEvent("chat chunk is not JSON")
	}
	// One pass per level (ForEach) rather than a Get per field: a Get
	// rescans the chunk from its start.
	var id, model, usage, choices gjson.Result
	var created int64
	isErr := false
	gjson.Parse(b2s(data)).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "id":
			id = v
		case "model":
			model = v
		case "created":
			created = v.Int()
		case "usage":
			usage = v
		case "choices":
			choices = v
		case "error":
			isErr = true
			return false
		}
		return true
	})
	if isErr {
		typ, code, _, msg := errorParts(Chat, data)
		if msg == "" {
			msg = "The upstream reported an error."
		}
		return s.emit(dst, sev{kind: sevError, errType: typ, errCode: code, text: msg}), nil
	}
	if !s.started {
		dst = s.emit(dst, sev{kind: sevStart, id: id.Str, name: model.Str, created: created})
	}
	if usage.IsObject() {
		s.usage.set(Chat, usage)
	}
	var delta, fr gjson.Result
	choices.ForEach(func(_, ch gjson.Result) bool {
		ch.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "delta":
				delta = v
			case "finish_reason":
				fr = v
			}
			return true
		})
		return false // only choice 0: Troupe never asks for n > 1
	})
	var tcs gjson.Result
	delta.ForEach(func(k, v gjson.Result) bool {
		if v.Type != gjson.String || v.Str == "" {
			if k.Str == "tool_calls" {
				tcs = v
			}
			return true
		}
		switch k.Str {
		case "reasoning_content", "reasoning":
			dst = d.text(s, dst, blockReasoning, s.str(v))
		case "content":
			dst = d.text(s, dst, blockText, s.str(v))
		case "refusal":
			dst = d.text(s, dst, blockRefusal, s.str(v))
		}
		return true
	})
	if tcs.IsArray() {
		tcs.ForEach(func(_, tc gjson.Result) bool {
			idx := tc.Get("index").Int()
			custom := tc.Get("type").Str == "custom"
			if d.open != blockTool || idx != d.tool {
				dst = d.close(s, dst)
				name := tc.Get("function.name").Str
				if custom {
					name = tc.Get("custom.name").Str
				}
				d.open, d.tool = blockTool, idx
				dst = s.emit(dst, sev{kind: sevBlockStart, bk: blockTool, id: tc.Get("id").Str, name: name, custom: custom})
			}
			frag := tc.Get("function.arguments")
			if custom {
				frag = tc.Get("custom.input")
			}
			if frag.Str != "" {
				dst = s.emit(dst, sev{kind: sevDelta, bk: blockTool, text: s.str(frag)})
			}
			return true
		})
	}
	if fr.Type == gjson.String {
		dst = d.close(s, dst)
		d.finish, d.finished = chatFinish(fr.Str), true
	}
	return dst, nil
}

// text emits a text-like delta, opening a block of kind k first.
func (d *chatDecoder) text(s *Stream, dst []byte, k blockKind, t string) []byte {
	if d.open != k {
		dst = d.close(s, dst)
		d.open = k
		dst = s.emit(dst, sev{kind: sevBlockStart, bk: k})
	}
	return s.emit(dst, sev{kind: sevDelta, bk: k, text: t})
}

func (d *chatDecoder) close(s *Stream, dst []byte) []byte {
	if d.open == 0 {
		return dst
	}
	k := d.open
	d.open, d.tool = 0, -1
	return s.emit(dst, sev{kind: sevBlockStop, bk: k})
}

func (d *chatDecoder) end(s *Stream, dst []byte) []byte {
	if s.done || !d.finished {
		return dst
	}
	dst = d.close(s, dst)
	return s.emit(dst, sev{kind: sevFinish, finish: d.finish})
}

// chatEncoder writes a Chat stream to the client.
type chatEncoder struct {
	head    []byte // `data: {"id":…,"object":"chat.completion.chunk","created":…,"model":…` reused by every chunk
	tools   int64  // tool calls started so far
	sawTool bool
	kind    blockKind
}

func (e *chatEncoder) put(s *Stream, dst []byte, ev sev) []byte {
	switch ev.kind {
	case sevStart:
		e.head = append(e.head[:0], `data: {"id":`...)
		e.head = AppendString(e.head, idWithPrefix("chatcmpl-", s.id))
		e.head = append(e.head, `,"object":"chat.completion.chunk","created":`...)
		e.head = strconv.AppendInt(e.head, s.created, 10)
		e.head = append(e.head, `,"model":`...)
		e.head = AppendString(e.head, s.model)
		e.head = append(e.head, `,"choices":[{"index":0,"delta":`...)
		dst = append(dst, e.head...)
		dst = append(dst, `{"role":"assistant","content":""}`...)
		return e.tail(dst, "")
	case sevBlockStart:
		e.kind = ev.bk
		if ev.bk != blockTool {
			return dst
		}
		e.sawTool = true
		dst = append(dst, e.head...)
		dst = append(dst, `{"tool_calls":[{"index":`...)
		dst = strconv.AppendInt(dst, e.tools, 10)
		dst = kStr(dst, "id", ev.id)
		dst = append(dst, `,"type":"function","function":{`...)
		dst = kStr(dst, "name", ev.name)
		dst = append(dst, `,"arguments":""}}]}`...)
		e.tools++
		return e.tail(dst, "")
	case sevDelta:
		dst = append(dst, e.head...)
		switch ev.bk {
		case blockTool:
			dst = append(dst, `{"tool_calls":[{"index":`...)
			dst = strconv.AppendInt(dst, e.tools-1, 10)
			dst = append(dst, `,"function":{"arguments":`...)
			dst = AppendString(dst, ev.text)
			dst = append(dst, "}}]}"...)
		case blockReasoning:
			dst = append(dst, `{"reasoning_content":`...)
			dst = AppendString(dst, ev.text)
			dst = append(dst, '}')
		case blockRefusal:
			dst = append(dst, `{"refusal":`...)
			dst = AppendString(dst, ev.text)
			dst = append(dst, '}')
		default:
			dst = append(dst, `{"content":`...)
			dst = AppendString(dst, ev.text)
			dst = append(dst, '}')
		}
		return e.tail(dst, "")
	case sevFinish:
		f := ev.finish
		if f == finishNone || (f == finishStop && e.sawTool) {
			f = finishStop
			if e.sawTool {
				f = finishToolCalls
			}
		}
		dst = append(dst, e.head...)
		dst = append(dst, "{}"...)
		dst = e.tail(dst, chatFinishName(f))
		if s.opts.IncludeUsage {
			dst = append(dst, e.head[:bytes.LastIndex(e.head, []byte(`"choices":`))]...)
			dst = append(dst, `"choices":[],"usage":`...)
			dst = appendChatUsage(dst, &s.usage)
			dst = append(dst, "}\n\n"...)
		}
		return append(dst, "data: [DONE]\n\n"...)
	case sevError:
		dst = append(dst, "data: "...)
		dst = AppendErrorBody(dst, Chat, 0, ev.errType, ev.errCode, "", ev.text)
		dst = append(dst, "\n\n"...)
		return append(dst, "data: [DONE]\n\n"...)
	}
	return dst
}

// tail closes a chunk begun with head: finish_reason (null when "").
func (e *chatEncoder) tail(dst []byte, finishReason string) []byte {
	dst = append(dst, `,"logprobs":null,"finish_reason":`...)
	if finishReason == "" {
		dst = append(dst, "null"...)
	} else {
		dst = AppendString(dst, finishReason)
	}
	return append(dst, "}]}\n\n"...)
}
