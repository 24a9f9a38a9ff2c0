package translate

import (
	"strings"

	"github.com/tidwall/gjson"
)

// Responses requests: decode into and encode from the canonical request.
// Reference: https://platform.openai.com/docs/api-reference/responses/create

// responsesIgnored are Responses fields that are hints or bookkeeping with no
// effect on the answer's content, dropped when the target lacks them.
var responsesIgnored = map[string]bool{
	"store": true, "metadata": true, "service_tier": true, "prompt_cache_key": true,
	"safety_identifier": true, "client_metadata": true, "prompt_cache_retention": true,
	"stream_options": true, "truncation": true,
}

func decodeResponsesRequest(root gjson.Result) (*request, error) {
	rq := &request{}
	var err error
	var instructions string
	root.ForEach(func(k, v gjson.Result) bool {
		name := k.Str
		switch name {
		case "instructions":
			instructions, err = wantString(v, name)
		case "input":
			rq.messages, err = decodeResponsesInput(v, rq)
		case "tools":
			var ts []tool
			ts, err = decodeResponsesTools(v, "tools", "")
			rq.tools = append(rq.tools, ts...)
		case "tool_choice":
			rq.toolChoice, err = decodeResponsesToolChoice(v)
		case "parallel_tool_calls":
			rq.parallel, err = wantBool(v, name)
		case "max_output_tokens":
			rq.maxTokens, err = wantInt(v, name)
		case "reasoning":
			if err = wantObject(v, name); err == nil {
				rq.reasoning.effort = v.Get("effort").Str
				rq.reasoning.summary = v.Get("summary").Str
				switch rq.reasoning.effort {
				case "none":
					rq.reasoning.off = true
				case "":
					// A reasoning object without an effort asks for the
					// model's default reasoning (OpenAI: medium).
					rq.reasoning.on = v.IsObject()
				}
			}
		case "text":
			if err = wantObject(v, name); err == nil {
				rq.format, err = decodeResponsesFormat(v.Get("format"))
			}
		case "include":
			v.ForEach(func(_, s gjson.Result) bool {
				if s.Str == "reasoning.encrypted_content" {
					rq.encrypted = true
				}
				return true
			})
		case "user":
			rq.user, err = wantString(v, name)
		case "background":
			if v.Bool() {
				err = badRequest(name, "background responses cannot be translated")
			}
		case "previous_response_id", "conversation", "prompt":
			if !isNull(v) {
				err = badRequest(name, name+" refers to state stored by OpenAI and cannot be translated to another protocol")
			}
		default:
			err = decodeSharedField(rq, name, v, responsesIgnored, "Responses")
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	flatten(rq)
	if instructions != "" {
		rq.messages = append([]message{{role: roleSystem, parts: []part{{typ: partText, text: instructions}}}}, rq.messages...)
	}
	if len(rq.messages) == 0 {
		return nil, badRequest("input", "input must not be empty")
	}
	return rq, nil
}

func decodeResponsesInput(v gjson.Result, rq *request) ([]message, error) {
	if v.Type == gjson.String {
		return []message{{role: roleUser, parts: []part{{typ: partText, text: v.Str}}}}, nil
	}
	if !v.IsArray() {
		return nil, badRequest("input", "input must be a string or an array of items")
	}
	var msgs []message
	var err error
	i := -1
	v.ForEach(func(_, it gjson.Result) bool {
		i++
		p := path("input", i)
		typ := it.Get("type").Str
		if typ == "" && it.Get("role").Exists() {
			typ = "message"
		}
		switch typ {
		case "message":
			var r role
			switch it.Get("role").Str {
			case "system":
				r = roleSystem
			case "developer":
				r = roleDeveloper
			case "user":
				r = roleUser
			case "assistant":
				r = roleAssistant
			default:
				err = badRequest(path(p, "role"), "message role "+it.Get("role").Str+" is not valid")
				return false
			}
			var ps []part
			ps, err = decodeResponsesContent(it.Get("content"), path(p, "content"))
			if err != nil {
				return false
			}
			if r == roleAssistant {
				for _, x := range ps {
					msgs = appendPart(msgs, roleAssistant, x)
				}
			} else {
				msgs = append(msgs, message{role: r, parts: ps})
			}
		case "function_call":
			ap := path(p, "arguments")
			var args string
			if args, err = wantArguments(it.Get("arguments"), ap); err != nil {
				return false
			}
			msgs = appendPart(msgs, roleAssistant, part{typ: partToolCall, callID: it.Get("call_id").Str,
				name: it.Get("name").Str, args: args, argsParam: ap, namespace: it.Get("namespace").Str,
				itemID: it.Get("id").Str})
		case "custom_tool_call":
			ap := path(p, "input")
			var args string
			if args, err = wantString(it.Get("input"), ap); err != nil {
				return false
			}
			msgs = appendPart(msgs, roleAssistant, part{typ: partToolCall, custom: true, callID: it.Get("call_id").Str,
				name: it.Get("name").Str, args: args, argsParam: ap, namespace: it.Get("namespace").Str,
				itemID: it.Get("id").Str})
		case "function_call_output", "custom_tool_call_output":
			var res []part
			res, err = decodeResponsesOutput(it.Get("output"), path(p, "output"))
			if err == nil {
				msgs = appendPart(msgs, roleTool, part{typ: partToolResult, callID: it.Get("call_id").Str, result: res,
					custom: typ == "custom_tool_call_output"})
			}
		case "reasoning":
			rp := part{typ: partReasoning, encrypted: it.Get("encrypted_content").Str, itemID: it.Get("id").Str}
			it.Get("summary").ForEach(func(_, s gjson.Result) bool {
				rp.summary = append(rp.summary, s.Get("text").Str)
				return true
			})
			rp.text = strings.Join(rp.summary, "\n\n")
			if rp.text == "" {
				var sb strings.Builder
				it.Get("content").ForEach(func(_, c gjson.Result) bool {
					sb.WriteString(c.Get("text").Str)
					return true
				})
				rp.text = sb.String()
			}
			msgs = appendPart(msgs, roleAssistant, rp)
		case "additional_tools":
			var ts []tool
			ts, err = decodeResponsesTools(it.Get("tools"), path(p, "tools"), "")
			rq.tools = append(rq.tools, ts...)
		default:
			err = badType(path(p, "type"), "input item", typ, "cannot be translated", false)
		}
		return err == nil
	})
	return msgs, err
}

func decodeResponsesContent(c gjson.Result, p string) ([]part, error) {
	if ps, done, err := stringContent(c, p, "content parts"); done {
		return ps, err
	}
	var ps []part
	var err error
	i := -1
	c.ForEach(func(_, cp gjson.Result) bool {
		i++
		switch t := cp.Get("type").Str; t {
		case "input_text", "output_text", "text", "summary_text":
			ps = append(ps, part{typ: partText, text: cp.Get("text").Str})
		case "refusal":
			ps = append(ps, part{typ: partRefusal, text: cp.Get("refusal").Str})
		case "input_image":
			pp := path(p, i)
			u := cp.Get("image_url")
			if isNull(u) && !isNull(cp.Get("file_id")) {
				err = badRequest(path(pp, "file_id"), "images by file_id refer to files stored by OpenAI and cannot be translated")
				break
			}
			var im part
			if im, err = newImage(u, path(pp, "image_url")); err == nil {
				im.detail = cp.Get("detail").Str
				ps = append(ps, im)
			}
		default:
			err = badType(path(path(p, i), "type"), "content part", t, "cannot be translated", false)
		}
		return err == nil
	})
	return ps, err
}

// decodeResponsesOutput reads a tool output: a string or an array of parts.
func decodeResponsesOutput(o gjson.Result, p string) ([]part, error) {
	if isNull(o) {
		return nil, nil
	}
	return decodeResponsesContent(o, p)
}

func decodeResponsesTools(v gjson.Result, p, ns string) ([]tool, error) {
	if err := wantToolArray(v, p); err != nil {
		return nil, err
	}
	var ts []tool
	var err error
	i := -1
	v.ForEach(func(_, t gjson.Result) bool {
		i++
		tp := path(p, i)
		switch typ := t.Get("type").Str; typ {
		case "function":
			var strict *bool
			var name string
			if name, err = wantToolName(t.Get("name"), path(tp, "name")); err != nil {
				break
			}
			strict, err = wantBool(t.Get("strict"), path(tp, "strict"))
			ts = append(ts, tool{name: name, description: t.Get("description").Str,
				parameters: rawOrEmpty(t.Get("parameters")), strict: strict, namespace: ns})
		case "custom":
			var name string
			if name, err = wantToolName(t.Get("name"), path(tp, "name")); err != nil {
				break
			}
			ts = append(ts, tool{custom: true, name: name, description: t.Get("description").Str,
				format: rawOrEmpty(t.Get("format")), namespace: ns})
		case "namespace":
			if ns != "" {
				err = badRequest(path(tp, "type"), "nested namespaces cannot be translated")
				break
			}
			var inner []tool
			inner, err = decodeResponsesTools(t.Get("tools"), path(tp, "tools"), t.Get("name").Str)
			ts = append(ts, inner...)
		case "web_search", "web_search_preview":
			// Dropped: a hosted OpenAI tool that Chat and Messages upstreams
			// cannot run (docs/translation.md).
		default:
			err = badType(path(tp, "type"), "tool", typ, "is hosted by OpenAI and cannot be translated", false)
		}
		return err == nil
	})
	return ts, err
}

func decodeResponsesToolChoice(v gjson.Result) (toolChoice, error) {
	if tc, done, err := decodeToolChoiceMode(v); done {
		return tc, err
	}
	switch v.Get("type").Str {
	case "function", "custom":
		return toolChoice{mode: "tool", name: flatName(v.Get("namespace").Str, v.Get("name").Str)}, nil
	}
	return toolChoice{}, badType("tool_choice.type", "tool_choice", v.Get("type").Str, "cannot be translated", false)
}

func decodeResponsesFormat(v gjson.Result) (format, error) {
	if isNull(v) {
		return format{}, nil
	}
	switch t := v.Get("type").Str; t {
	case "text", "json_object":
		return format{typ: t}, nil
	case "json_schema":
		return decodeSchemaFormat(v, "text.format")
	default:
		return format{}, badType("text.format.type", "text.format", t, "cannot be translated", false)
	}
}

// MinResponsesOutputTokens is the smallest max_output_tokens the Responses
// API accepts, in tokens: below it, it answers 400 integer_below_min_value
// ("Expected a value >= 16"). A smaller cap of another protocol's client
// (Messages' max_tokens 1, a common probe) is raised to it when translated
// to Responses rather than sent to fail; the answer may then be up to this
// long.
const MinResponsesOutputTokens = 16

// encodeResponsesRequest writes rq as a Responses request.
func encodeResponsesRequest(dst []byte, rq *request, from Protocol) ([]byte, error) {
	b := append(dst, '{')
	b = kStr(b, "model", rq.model)
	msgs := rq.messages
	// Leading system messages become instructions.
	var instr []string
	for len(msgs) > 0 && (msgs[0].role == roleSystem || msgs[0].role == roleDeveloper) {
		instr = append(instr, joinText(msgs[0].parts, "\n\n"))
		msgs = msgs[1:]
	}
	if len(instr) > 0 {
		b = kStr(b, "instructions", strings.Join(instr, "\n\n"))
	}
	b = appendResponsesInput(b, msgs)
	b = appendResponsesTools(b, rq)
	if rq.maxTokens > 0 {
		b = kInt(b, "max_output_tokens", max(rq.maxTokens, MinResponsesOutputTokens))
	}
	if rq.temperature != nil {
		b = kFloat(b, "temperature", *rq.temperature)
	}
	if rq.topP != nil {
		b = kFloat(b, "top_p", *rq.topP)
	}
	if len(rq.stop) > 0 {
		return nil, cannot(stopParam(from), from, Responses, "stop sequences")
	}
	if e, s := responsesReasoning(&rq.reasoning); e != "" || s != "" {
		b = key(b, "reasoning")
		b = append(b, '{')
		b = kStrOpt(b, "effort", e)
		b = kStrOpt(b, "summary", s)
		b = append(b, '}')
		b = append(key(b, "include"), `["reasoning.encrypted_content"]`...)
	}
	switch rq.format.typ {
	case "json_object":
		b = append(key(b, "text"), `{"format":{"type":"json_object"}}`...)
	case "json_schema":
		b = append(key(b, "text"), `{"format":{"type":"json_schema"`...)
		b = appendSchemaFormat(b, &rq.format)
		b = append(b, "}}"...)
	}
	if rq.user != "" {
		b = kStr(b, "user", rq.user)
	}
	if rq.stream {
		b = kBool(b, "stream", true)
	}
	return append(b, '}'), nil
}

// appendResponsesInput writes input: the messages after the instructions
// as Responses items, the assistant's parts each an item of its own (text,
// refusal, function or custom tool call, reasoning) and tool results as
// the outputs of their calls.
func appendResponsesInput(b []byte, msgs []message) []byte {
	b = key(b, "input")
	b = append(b, '[')
	custom := map[string]bool{} // call ids of custom tool calls: their results are custom outputs
	for i := range msgs {
		m := &msgs[i]
		switch m.role {
		case roleSystem, roleDeveloper, roleUser:
			b = elem(b)
			b = append(b, `{"type":"message"`...)
			r := "user"
			if m.role == roleSystem {
				r = "system"
			} else if m.role == roleDeveloper {
				r = "developer"
			}
			b = kStr(b, "role", r)
			b = key(b, "content")
			b = encodeResponsesInputParts(b, m.parts)
			b = append(b, '}')
		case roleAssistant:
			for j := range m.parts {
				b = appendResponsesAssistantItem(b, &m.parts[j], custom)
			}
		case roleTool:
			for j := range m.parts {
				if p := &m.parts[j]; p.typ == partToolResult {
					b = appendResponsesToolOutput(b, p, custom[p.callID] || p.custom)
				}
			}
		}
	}
	return append(b, ']')
}

// appendResponsesAssistantItem writes one part of an assistant message as
// its input item (nothing for reasoning that cannot be sent), noting the
// call ids of custom tool calls in custom.
func appendResponsesAssistantItem(b []byte, p *part, custom map[string]bool) []byte {
	switch p.typ {
	case partText, partRefusal:
		b = elem(b)
		b = append(b, `{"type":"message","role":"assistant","content":[`...)
		if p.typ == partText {
			b = append(b, `{"type":"output_text"`...)
			b = kStr(b, "text", p.text)
		} else {
			b = append(b, `{"type":"refusal"`...)
			b = kStr(b, "refusal", p.text)
		}
		b = append(b, "}]}"...)
	case partToolCall:
		b = elem(b)
		if p.custom {
			custom[p.callID] = true
			b = append(b, `{"type":"custom_tool_call"`...)
			b = kStr(b, "call_id", p.callID)
			b = kStr(b, "name", p.name)
			b = kStr(b, "input", p.args)
		} else {
			b = append(b, `{"type":"function_call"`...)
			b = kStr(b, "call_id", p.callID)
			b = kStr(b, "name", p.name)
			b = kStrOpt(b, "namespace", p.namespace)
			b = kStr(b, "arguments", callArguments(p))
		}
		b = append(b, '}')
	case partReasoning:
		if p.item != "" {
			return append(elem(b), p.item...) // the upstream's own item, as it came
		}
		enc, ok := openAIReasoning(p)
		if !ok {
			return b
		}
		b = elem(b)
		b = append(b, `{"type":"reasoning","summary":[`...)
		for _, s := range p.summaryTexts() {
			b = elem(b)
			b = append(b, `{"type":"summary_text"`...)
			b = kStr(b, "text", s)
			b = append(b, '}')
		}
		b = append(b, ']')
		b = kStr(b, "encrypted_content", enc)
		b = append(b, '}')
	}
	return b
}

// appendResponsesToolOutput writes a tool result as the output item of its
// call (custom: a custom tool's): text as a string, anything else as parts,
// an error marked as one in front of them.
func appendResponsesToolOutput(b []byte, p *part, custom bool) []byte {
	b = elem(b)
	if custom {
		b = append(b, `{"type":"custom_tool_call_output"`...)
	} else {
		b = append(b, `{"type":"function_call_output"`...)
	}
	b = kStr(b, "call_id", p.callID)
	b = key(b, "output")
	if onlyText(p.result) {
		b = AppendString(b, resultText(p))
	} else {
		rs := p.result
		if p.isError {
			rs = append([]part{{typ: partText, text: strings.TrimSpace(toolErrorPrefix)}}, rs...)
		}
		b = encodeResponsesInputParts(b, rs)
	}
	return append(b, '}')
}

// appendResponsesTools writes tools (function and custom), tool_choice and
// parallel_tool_calls.
func appendResponsesTools(b []byte, rq *request) []byte {
	if len(rq.tools) > 0 {
		b = key(b, "tools")
		b = append(b, '[')
		for i := range rq.tools {
			t := &rq.tools[i]
			b = elem(b)
			if t.custom {
				b = append(b, `{"type":"custom"`...)
				b = kStr(b, "name", flatName(t.namespace, t.name))
				b = kStrOpt(b, "description", t.description)
				if t.format != "" {
					b = kRaw(b, "format", t.format)
				}
			} else {
				b = append(b, `{"type":"function"`...)
				b = kStr(b, "name", t.name)
				b = kStrOpt(b, "description", t.description)
				b = kRaw(b, "parameters", toolParameters(t))
				if t.strict != nil {
					b = kBool(b, "strict", *t.strict)
				} else {
					b = kBool(b, "strict", false)
				}
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	switch rq.toolChoice.mode {
	case "auto", "none", "required":
		b = kStr(b, "tool_choice", rq.toolChoice.mode)
	case "tool":
		b = key(b, "tool_choice")
		b = append(b, `{"type":"function"`...)
		b = kStr(b, "name", rq.toolChoice.name)
		b = append(b, '}')
	}
	if rq.parallel != nil {
		b = kBool(b, "parallel_tool_calls", *rq.parallel)
	}
	return b
}

// summaryTexts returns a reasoning part's summary, or its text as one.
func (p *part) summaryTexts() []string {
	if len(p.summary) > 0 {
		return p.summary
	}
	if p.text != "" {
		return []string{p.text}
	}
	return nil
}

func encodeResponsesInputParts(b []byte, ps []part) []byte {
	b = append(b, '[')
	for i := range ps {
		p := &ps[i]
		switch p.typ {
		case partText:
			b = elem(b)
			b = append(b, `{"type":"input_text"`...)
			b = kStr(b, "text", p.text)
			b = append(b, '}')
		case partImage:
			b = elem(b)
			b = append(b, `{"type":"input_image"`...)
			b = kStr(b, "image_url", p.imageURL())
			if p.detail != "" {
				b = kStr(b, "detail", p.detail)
			} else {
				b = kStr(b, "detail", "auto")
			}
			b = append(b, '}')
		}
	}
	return append(b, ']')
}

// responsesReasoning maps the canonical reasoning to reasoning.effort and
// reasoning.summary.
func responsesReasoning(r *reasoning) (effort, summary string) {
	if r.off {
		return "", ""
	}
	effort = r.effort
	if effort == "" && r.budget > 0 {
		effort = effortForBudget(r.budget)
	}
	summary = r.summary
	if summary == "" && r.on && !r.omitted {
		summary = "auto"
	}
	return effort, summary
}
