package translate

import (
	"github.com/tidwall/gjson"
)

// Chat Completions requests: decode into and encode from the canonical
// request. Reference: https://platform.openai.com/docs/api-reference/chat/create

// chatIgnored are Chat fields that are hints with no effect on the answer's
// content, dropped when the target lacks them (docs/translation.md).
var chatIgnored = map[string]bool{
	"store": true, "metadata": true, "service_tier": true, "prompt_cache_key": true,
	"safety_identifier": true, "verbosity": true, "prompt_cache_retention": true,
}

func decodeChatRequest(root gjson.Result) (*request, error) {
	rq := &request{}
	var err error
	root.ForEach(func(k, v gjson.Result) bool {
		name := k.Str
		switch name {
		case "stream_options":
			// OpenAI refuses a stream_options that is not an object.
			if err = wantObject(v, name); err == nil {
				rq.includeUsage = v.Get("include_usage").Bool()
			}
		case "messages":
			rq.messages, err = decodeChatMessages(v)
		case "tools":
			rq.tools, err = decodeChatTools(v)
		case "tool_choice":
			rq.toolChoice, err = decodeChatToolChoice(v)
		case "parallel_tool_calls":
			rq.parallel, err = wantBool(v, name)
		case "max_tokens", "max_completion_tokens":
			var n int64
			n, err = wantInt(v, name)
			if n > 0 {
				rq.maxTokens = n
			}
		case "stop":
			rq.stop, err = stopList(v, name)
		case "reasoning_effort":
			rq.reasoning.effort, err = wantString(v, name)
		case "response_format":
			rq.format, err = decodeChatFormat(v)
		case "user":
			rq.user, err = wantString(v, name)
		case "n":
			if !isNull(v) && v.Int() != 1 {
				err = badRequest(name, "n other than 1 cannot be translated")
			}
		case "logprobs":
			if v.Bool() {
				err = badRequest(name, "logprobs cannot be translated")
			}
		case "frequency_penalty", "presence_penalty":
			if !isNull(v) && v.Num != 0 {
				err = badRequest(name, name+" cannot be translated")
			}
		default:
			err = decodeSharedField(rq, name, v, chatIgnored, "Chat Completions")
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	if len(rq.messages) == 0 {
		return nil, badRequest("messages", "messages must be a non-empty array")
	}
	return rq, nil
}

func decodeChatMessages(v gjson.Result) ([]message, error) {
	if !v.IsArray() {
		return nil, badRequest("messages", "messages must be an array")
	}
	var msgs []message
	var err error
	i := -1
	v.ForEach(func(_, m gjson.Result) bool {
		i++
		p := path("messages", i)
		if !m.IsObject() {
			err = badRequest(p, p+" must be an object")
			return false
		}
		switch r := m.Get("role").Str; r {
		case "system", "developer", "user":
			ro := roleUser
			if r == "system" {
				ro = roleSystem
			} else if r == "developer" {
				ro = roleDeveloper
			}
			cp := path(p, "content")
			if isNull(m.Get("content")) { // OpenAI requires it of these roles, as a string or parts
				err = badRequest(cp, cp+" is required in a "+r+" message: a string or an array of content parts, not null")
				return false
			}
			var ps []part
			ps, err = decodeChatContent(m.Get("content"), cp, ro == roleUser)
			if err == nil {
				msgs = append(msgs, message{role: ro, parts: ps})
			}
		case "assistant":
			var ps []part
			if rc := m.Get("reasoning_content"); rc.Type == gjson.String && rc.Str != "" {
				ps = append(ps, part{typ: partReasoning, text: rc.Str})
			}
			c, e := decodeChatContent(m.Get("content"), path(p, "content"), false)
			if e != nil {
				err = e
				return false
			}
			ps = append(ps, c...)
			if rf := m.Get("refusal"); rf.Type == gjson.String && rf.Str != "" {
				ps = append(ps, part{typ: partRefusal, text: rf.Str})
			}
			j := -1
			m.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
				j++
				tp := path(path(p, "tool_calls"), j)
				switch tc.Get("type").Str {
				case "function", "":
					ap := path(tp, "function.arguments")
					var args string
					if args, err = wantArguments(tc.Get("function.arguments"), ap); err == nil {
						ps = append(ps, part{typ: partToolCall, callID: tc.Get("id").Str,
							name: tc.Get("function.name").Str, args: args, argsParam: ap})
					}
				case "custom":
					ap := path(tp, "custom.input")
					var args string
					if args, err = wantString(tc.Get("custom.input"), ap); err == nil {
						ps = append(ps, part{typ: partToolCall, custom: true, callID: tc.Get("id").Str,
							name: tc.Get("custom.name").Str, args: args, argsParam: ap})
					}
				default:
					err = badType(tp, "tool call", tc.Get("type").Str, "cannot be translated", false)
				}
				return err == nil
			})
			if err == nil {
				msgs = append(msgs, message{role: roleAssistant, parts: ps})
			}
		case "tool":
			cp := path(p, "content")
			if isNull(m.Get("content")) {
				// OpenAI requires a tool message's content, in these words
				// (its param reads messages.[N].content; Troupe names
				// fields messages.N.content throughout).
				err = badRequest(cp, "Invalid value for 'content': expected a string, got null.")
				return false
			}
			var res []part
			res, err = decodeChatContent(m.Get("content"), cp, false)
			if err == nil {
				msgs = appendPart(msgs, roleTool, part{typ: partToolResult, callID: m.Get("tool_call_id").Str, result: res})
			}
		default:
			err = badRequest(path(p, "role"), "message role "+r+" cannot be translated")
		}
		return err == nil
	})
	return msgs, err
}

// decodeChatContent reads a content string or array of parts.
func decodeChatContent(c gjson.Result, p string, images bool) ([]part, error) {
	if isNull(c) {
		return nil, nil
	}
	if ps, done, err := stringContent(c, p, "content parts"); done {
		return ps, err
	}
	var ps []part
	var err error
	i := -1
	c.ForEach(func(_, cp gjson.Result) bool {
		i++
		switch t := cp.Get("type").Str; t {
		case "text":
			ps = append(ps, part{typ: partText, text: cp.Get("text").Str})
		case "refusal":
			ps = append(ps, part{typ: partRefusal, text: cp.Get("refusal").Str})
		case "image_url":
			if !images {
				err = badRequest(path(p, i), "image parts are only allowed in user messages")
				break
			}
			ip := path(path(p, i), "image_url")
			iu := cp.Get("image_url")
			if !iu.IsObject() {
				err = badRequest(ip, ip+` must be an object {"url": "https://…" or "data:<media type>;base64,<data>"}`)
				break
			}
			var im part
			if im, err = newImage(iu.Get("url"), path(ip, "url")); err == nil {
				im.detail = iu.Get("detail").Str
				ps = append(ps, im)
			}
		default:
			err = badType(path(path(p, i), "type"), "content part", t, "cannot be translated", false)
		}
		return err == nil
	})
	return ps, err
}

func decodeChatTools(v gjson.Result) ([]tool, error) {
	if err := wantToolArray(v, "tools"); err != nil {
		return nil, err
	}
	var ts []tool
	var err error
	i := -1
	v.ForEach(func(_, t gjson.Result) bool {
		i++
		var name string
		switch typ := t.Get("type").Str; typ {
		case "function":
			f := t.Get("function")
			if name, err = wantToolName(f.Get("name"), path(path("tools", i), "function.name")); err != nil {
				break
			}
			var strict *bool
			strict, err = wantBool(f.Get("strict"), path(path("tools", i), "function.strict"))
			ts = append(ts, tool{name: name, description: f.Get("description").Str,
				parameters: rawOrEmpty(f.Get("parameters")), strict: strict})
		case "custom":
			c := t.Get("custom")
			if name, err = wantToolName(c.Get("name"), path(path("tools", i), "custom.name")); err != nil {
				break
			}
			ts = append(ts, tool{custom: true, name: name, description: c.Get("description").Str,
				format: rawOrEmpty(c.Get("format"))})
		default:
			err = badType(path(path("tools", i), "type"), "tool", typ, "cannot be translated", false)
		}
		return err == nil
	})
	return ts, err
}

func decodeChatToolChoice(v gjson.Result) (toolChoice, error) {
	if tc, done, err := decodeToolChoiceMode(v); done {
		return tc, err
	}
	switch v.Get("type").Str {
	case "function":
		return toolChoice{mode: "tool", name: v.Get("function.name").Str}, nil
	case "custom":
		return toolChoice{mode: "tool", name: v.Get("custom.name").Str}, nil
	}
	return toolChoice{}, badType("tool_choice.type", "tool_choice", v.Get("type").Str, "cannot be translated", false)
}

func decodeChatFormat(v gjson.Result) (format, error) {
	if isNull(v) {
		return format{}, nil
	}
	switch t := v.Get("type").Str; t {
	case "text", "json_object":
		return format{typ: t}, nil
	case "json_schema":
		return decodeSchemaFormat(v.Get("json_schema"), "response_format.json_schema")
	default:
		return format{}, badType("response_format.type", "response_format", t, "cannot be translated", false)
	}
}

// encodeChatRequest writes rq as a Chat Completions request.
func encodeChatRequest(dst []byte, rq *request, from Protocol) ([]byte, error) {
	b := append(dst, '{')
	b = kStr(b, "model", rq.model)
	b = key(b, "messages")
	b = append(b, '[')
	var err error
	for i := range rq.messages {
		if b, err = encodeChatMessage(b, &rq.messages[i], from); err != nil {
			return nil, err
		}
	}
	b = append(b, ']')
	if len(rq.tools) > 0 {
		b = key(b, "tools")
		b = append(b, '[')
		for i := range rq.tools {
			t := &rq.tools[i]
			b = elem(b)
			b = append(b, `{"type":"function","function":{`...)
			b = kStr(b, "name", flatName(t.namespace, t.name))
			b = kStrOpt(b, "description", toolDescription(t))
			b = kRaw(b, "parameters", toolParameters(t))
			if t.strict != nil {
				b = kBool(b, "strict", *t.strict)
			}
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	switch rq.toolChoice.mode {
	case "auto", "none", "required":
		b = kStr(b, "tool_choice", rq.toolChoice.mode)
	case "tool":
		b = key(b, "tool_choice")
		b = append(b, `{"type":"function","function":{`...)
		b = kStr(b, "name", rq.toolChoice.name)
		b = append(b, "}}"...)
	}
	if rq.parallel != nil && len(rq.tools) > 0 {
		b = kBool(b, "parallel_tool_calls", *rq.parallel)
	}
	if rq.maxTokens > 0 {
		b = kInt(b, "max_completion_tokens", rq.maxTokens)
	}
	if rq.temperature != nil {
		b = kFloat(b, "temperature", *rq.temperature)
	}
	if rq.topP != nil {
		b = kFloat(b, "top_p", *rq.topP)
	}
	if len(rq.stop) > 0 {
		if len(rq.stop) > 4 {
			return nil, badRequest(stopParam(from), "Chat Completions accepts at most 4 stop sequences")
		}
		b = key(b, "stop")
		b = append(b, '[')
		for _, s := range rq.stop {
			b = AppendString(elem(b), s)
		}
		b = append(b, ']')
	}
	if e := chatEffort(&rq.reasoning); e != "" {
		b = kStr(b, "reasoning_effort", e)
	}
	switch rq.format.typ {
	case "json_object":
		b = append(key(b, "response_format"), `{"type":"json_object"}`...)
	case "json_schema":
		b = append(key(b, "response_format"), `{"type":"json_schema","json_schema":{`...)
		b = appendSchemaFormat(b, &rq.format)
		b = append(b, "}}"...)
	}
	if rq.user != "" {
		b = kStr(b, "user", rq.user)
	}
	if rq.stream {
		b = kBool(b, "stream", true)
		b = append(key(b, "stream_options"), `{"include_usage":true}`...)
	}
	return append(b, '}'), nil
}

func encodeChatMessage(b []byte, m *message, from Protocol) ([]byte, error) {
	switch m.role {
	case roleSystem, roleDeveloper:
		b = elem(b)
		b = append(b, `{"role":"system"`...)
		b = kStr(b, "content", joinText(m.parts, "\n\n"))
		return append(b, '}'), nil
	case roleUser:
		b = elem(b)
		b = append(b, `{"role":"user"`...)
		b = encodeChatContent(key(b, "content"), m.parts)
		return append(b, '}'), nil
	case roleAssistant:
		var text []part
		var refusal string
		calls := 0
		for i := range m.parts {
			switch m.parts[i].typ {
			case partText:
				text = append(text, m.parts[i])
			case partRefusal:
				refusal += m.parts[i].text
			case partToolCall:
				calls++
			}
		}
		if len(text) == 0 && refusal == "" && calls == 0 {
			return b, nil // only reasoning, which Chat cannot take
		}
		b = elem(b)
		b = append(b, `{"role":"assistant"`...)
		if len(text) > 0 {
			b = kStr(b, "content", joinText(text, ""))
		} else {
			b = append(key(b, "content"), "null"...)
		}
		if refusal != "" {
			b = kStr(b, "refusal", refusal)
		}
		if calls > 0 {
			b = appendChatToolCalls(b, m.parts, flatPartName)
		}
		return append(b, '}'), nil
	case roleTool:
		for i := range m.parts {
			p := &m.parts[i]
			if p.typ != partToolResult {
				continue
			}
			for j := range p.result {
				if p.result[j].typ == partImage {
					return nil, badRequest("", "an image in a tool result cannot be translated from "+from.String()+" to chat")
				}
			}
			b = elem(b)
			b = append(b, `{"role":"tool"`...)
			b = kStr(b, "tool_call_id", p.callID)
			b = kStr(b, "content", resultText(p))
			b = append(b, '}')
		}
		return b, nil
	}
	return b, nil
}

// encodeChatContent writes a content value: a string when it is all text,
// else an array of text and image_url parts.
func encodeChatContent(b []byte, ps []part) []byte {
	if onlyText(ps) {
		return AppendString(b, joinText(ps, ""))
	}
	b = append(b, '[')
	for i := range ps {
		p := &ps[i]
		switch p.typ {
		case partText:
			b = elem(b)
			b = append(b, `{"type":"text"`...)
			b = kStr(b, "text", p.text)
			b = append(b, '}')
		case partImage:
			b = elem(b)
			b = append(b, `{"type":"image_url","image_url":{`...)
			b = kStr(b, "url", p.imageURL())
			b = kStrOpt(b, "detail", p.detail)
			b = append(b, "}}"...)
		}
	}
	return append(b, ']')
}

// chatEffort maps the canonical reasoning to Chat's reasoning_effort.
func chatEffort(r *reasoning) string {
	if r.off {
		return ""
	}
	if r.effort != "" {
		return r.effort
	}
	if r.budget > 0 {
		return effortForBudget(r.budget)
	}
	return ""
}
