package translate

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Chat Completions streams: chunks "data: {chat.completion.chunk}" ending in
// "data: [DONE]". Reference:
// https://platform.openai.com/docs/api-reference/chat-streaming

// chatDecoder reads an upstream Chat stream. Chat never says when a block
// ends: a text-like block (content, reasoning, refusal) ends when another
// kind of content or a tool call begins; tool calls are told apart by their
// index (by id, or the last one, for servers that send none) and stay open,
// since their argument fragments may interleave, until finish_reason — or
// until another block begins once their arguments are a complete JSON
// object, so that sequential calls stream one after the other.
type chatDecoder struct {
	text     blockKind // kind of the open text-like block, 0 for none
	textSlot int32
	tools    []chatTool // every tool call of the stream, in the order they began
	finish   finish
	finished bool // finish_reason seen
}

// chatTool is one tool call of an upstream Chat stream.
type chatTool struct {
	index int64  // tool_calls index; negative for a call without one
	id    string // its id, for calls without an index
	slot  int32
	args  argsScan
	open  bool
	// custom: a custom tool's raw input, which only finish_reason ends
	// (it may look like JSON and go on).
	custom bool
}

func (d *chatDecoder) reset() { *d = chatDecoder{} }

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
			dst = d.textDelta(s, dst, blockReasoning, s.str(v))
		case "content":
			dst = d.textDelta(s, dst, blockText, s.str(v))
		case "refusal":
			dst = d.textDelta(s, dst, blockRefusal, s.str(v))
		}
		return true
	})
	var err error
	if tcs.IsArray() {
		tcs.ForEach(func(_, tc gjson.Result) bool {
			dst, err = d.toolCall(s, dst, tc)
			return err == nil
		})
	}
	if err != nil {
		return dst, err
	}
	if fr.Type == gjson.String {
		dst = d.closeAll(s, dst)
		d.finish, d.finished = chatFinish(fr.Str), true
	}
	return dst, nil
}

// toolCall reads one tool_calls entry: a new call's start, or an argument
// fragment of a call already open.
func (d *chatDecoder) toolCall(s *Stream, dst []byte, tc gjson.Result) ([]byte, error) {
	var index, id, typ, fn, custom gjson.Result
	tc.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			index = v
		case "id":
			id = v
		case "type":
			typ = v
		case "function":
			fn = v
		case "custom":
			custom = v
		}
		return true
	})
	t := d.find(index, id.Str)
	isCustom := typ.Str == "custom"
	if t != nil {
		isCustom = t.custom // later fragments may leave out the type
	}
	frag := fn.Get("arguments")
	if isCustom {
		frag = custom.Get("input")
	}
	if t == nil {
		name := fn.Get("name").Str
		if isCustom {
			name = custom.Get("name").Str
		}
		dst = d.closeText(s, dst)
		dst = d.settle(s, dst)
		n := int64(-1 - len(d.tools))
		if index.Type == gjson.Number {
			n = index.Int()
			for i := range d.tools {
				if o := &d.tools[i]; o.open && o.index == n {
					o.open = false // its index now names the new call
					dst = s.emit(dst, sev{kind: sevBlockStop, bk: blockTool, slot: o.slot})
				}
			}
		}
		d.tools = append(d.tools, chatTool{index: n, id: strings.Clone(id.Str), slot: s.slot(), open: true, custom: isCustom})
		t = &d.tools[len(d.tools)-1]
		dst = s.emit(dst, sev{kind: sevBlockStart, bk: blockTool, slot: t.slot, id: id.Str, name: name, custom: isCustom})
	}
	if frag.Str == "" {
		return dst, nil
	}
	t.args.feed(frag.Str)
	if !t.open {
		// Closed early, its arguments already a complete JSON value: only
		// whitespace may follow.
		if t.args.state == argsBroken {
			return dst, badEvent("chat tool call arguments go on after a complete JSON value")
		}
		return dst, nil
	}
	return s.emit(dst, sev{kind: sevDelta, bk: blockTool, slot: t.slot, text: s.str(frag)}), nil
}

// find returns the tool call an entry belongs to: by index, else by id,
// else the last one; nil for a new call.
func (d *chatDecoder) find(index gjson.Result, id string) *chatTool {
	for i := len(d.tools) - 1; i >= 0; i-- {
		t := &d.tools[i]
		switch {
		case index.Type == gjson.Number:
			if t.index == index.Int() {
				if id != "" && t.id != "" && id != t.id {
					return nil // a server that numbers every call 0
				}
				return t
			}
		case id != "":
			if t.id == id {
				return t
			}
		default:
			return t
		}
	}
	return nil
}

// textDelta emits a text-like delta, opening a block of kind k first.
func (d *chatDecoder) textDelta(s *Stream, dst []byte, k blockKind, t string) []byte {
	if d.text != k {
		dst = d.closeText(s, dst)
		dst = d.settle(s, dst)
		d.text, d.textSlot = k, s.slot()
		dst = s.emit(dst, sev{kind: sevBlockStart, bk: k, slot: d.textSlot})
	}
	return s.emit(dst, sev{kind: sevDelta, bk: k, slot: d.textSlot, text: t})
}

func (d *chatDecoder) closeText(s *Stream, dst []byte) []byte {
	if d.text == 0 {
		return dst
	}
	k := d.text
	d.text = 0
	return s.emit(dst, sev{kind: sevBlockStop, bk: k, slot: d.textSlot})
}

// settle closes the open tool calls whose arguments are complete, as
// another block begins.
func (d *chatDecoder) settle(s *Stream, dst []byte) []byte {
	for i := range d.tools {
		if t := &d.tools[i]; t.open && !t.custom && t.args.state == argsComplete {
			t.open = false
			dst = s.emit(dst, sev{kind: sevBlockStop, bk: blockTool, slot: t.slot})
		}
	}
	return dst
}

// closeAll closes every open block.
func (d *chatDecoder) closeAll(s *Stream, dst []byte) []byte {
	dst = d.closeText(s, dst)
	for i := range d.tools {
		if t := &d.tools[i]; t.open {
			t.open = false
			dst = s.emit(dst, sev{kind: sevBlockStop, bk: blockTool, slot: t.slot})
		}
	}
	return dst
}

func (d *chatDecoder) end(s *Stream, dst []byte) []byte {
	if s.done || !d.finished {
		return dst
	}
	dst = d.closeAll(s, dst)
	return s.emit(dst, sev{kind: sevFinish, finish: d.finish})
}

// argsScan follows a tool call's argument fragments just far enough to
// tell when they form a complete JSON object or array.
type argsScan struct {
	depth int32
	state argsState
	inStr bool
	esc   bool
}

type argsState uint8

const (
	argsEmpty    argsState = iota // only whitespace so far
	argsOpen                      // inside the top-level object or array
	argsComplete                  // the top-level value has ended (whitespace may follow)
	argsBroken                    // not an object or array, or text after its end
)

func (a *argsScan) feed(p string) {
	for i := 0; i < len(p) && a.state != argsBroken; i++ {
		c := p[i]
		switch a.state {
		case argsEmpty:
			switch c {
			case ' ', '\t', '\n', '\r':
			case '{', '[':
				a.state, a.depth = argsOpen, 1
			default:
				a.state = argsBroken
			}
		case argsOpen:
			switch {
			case a.inStr && a.esc:
				a.esc = false
			case a.inStr && c == '\\':
				a.esc = true
			case a.inStr:
				a.inStr = c != '"'
			case c == '"':
				a.inStr = true
			case c == '{' || c == '[':
				a.depth++
			case c == '}' || c == ']':
				if a.depth--; a.depth == 0 {
					a.state = argsComplete
				}
			}
		case argsComplete:
			switch c {
			case ' ', '\t', '\n', '\r':
			default:
				a.state = argsBroken
			}
		}
	}
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
