package translate

import (
	"github.com/tidwall/gjson"
)

// Anthropic Messages requests: decode into and encode from the canonical
// request. Reference: https://docs.anthropic.com/en/api/messages

// messagesIgnored are Messages fields that are hints with no effect on the
// answer's content, dropped when the target lacks them.
var messagesIgnored = map[string]bool{
	"metadata": true, "service_tier": true, "context_management": true, "cache_control": true,
}

// defaultMaxTokens is the max_tokens Troupe sends to an Anthropic upstream
// (where it is required) when the client did not give one.
const defaultMaxTokens = 16384

func decodeMessagesRequest(root gjson.Result) (*request, error) {
	rq := &request{}
	var err error
	var system []message
	root.ForEach(func(k, v gjson.Result) bool {
		name := k.Str
		switch name {
		case "max_tokens":
			rq.maxTokens, err = wantInt(v, name)
		case "system":
			var ps []part
			ps, err = decodeMessagesBlocks(v, name, roleSystem)
			if err == nil && len(ps) > 0 {
				system = append(system, message{role: roleSystem, parts: ps})
			}
		case "messages":
			rq.messages, err = decodeMessagesMessages(v)
		case "tools":
			rq.tools, err = decodeMessagesTools(v)
		case "tool_choice":
			err = decodeMessagesToolChoice(v, rq)
		case "stop_sequences":
			rq.stop, err = stopList(v, name)
		case "top_k":
			if !isNull(v) {
				err = badRequest(name, "top_k cannot be translated to OpenAI")
			}
		case "thinking":
			err = decodeThinking(v, rq)
		case "output_config":
			if err = wantObject(v, name); err == nil {
				if e := v.Get("effort").Str; e != "" {
					rq.reasoning.effort = openAIEffort(e)
				}
				if f := v.Get("format"); !isNull(f) {
					if f.Get("type").Str != "json_schema" {
						err = badType("output_config.format.type", "output_config.format", f.Get("type").Str, "cannot be translated", true)
						break
					}
					rq.format = format{typ: "json_schema", schema: rawOrEmpty(f.Get("schema")), strict: ptrTrue()}
				}
			}
		default:
			err = decodeSharedField(rq, name, v, messagesIgnored, "Messages")
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	if len(rq.messages) == 0 {
		return nil, badRequest("messages", "messages must be a non-empty array")
	}
	rq.messages = append(system, rq.messages...)
	return rq, nil
}

func ptrTrue() *bool { t := true; return &t }

func decodeThinking(v gjson.Result, rq *request) error {
	if isNull(v) {
		return nil
	}
	if err := wantObject(v, "thinking"); err != nil {
		return err
	}
	rq.reasoning.omitted = v.Get("display").Str == "omitted"
	switch t := v.Get("type").Str; t {
	case "enabled":
		rq.reasoning.on = true
		n, err := wantInt(v.Get("budget_tokens"), "thinking.budget_tokens")
		rq.reasoning.budget = n
		return err
	case "adaptive":
		rq.reasoning.on = true
	case "disabled":
		rq.reasoning.off = true
	default:
		return badType("thinking.type", "thinking", t, "is not valid", true)
	}
	return nil
}

func decodeMessagesMessages(v gjson.Result) ([]message, error) {
	if !v.IsArray() {
		return nil, badRequest("messages", "messages must be an array")
	}
	var msgs []message
	var err error
	i, last := -1, int(v.Get("#").Int())-1
	v.ForEach(func(_, m gjson.Result) bool {
		i++
		p := path("messages", i)
		var r role
		switch m.Get("role").Str {
		case "user":
			r = roleUser
		case "assistant":
			r = roleAssistant
		case "system":
			r = roleSystem
		default:
			err = badRequest(path(p, "role"), "message role "+m.Get("role").Str+" is not valid")
			return false
		}
		// Anthropic refuses a message without content, except the final
		// assistant message (a prefill); naming the message, not messages,
		// which is not empty.
		cp := path(p, "content")
		if c := m.Get("content"); r != roleAssistant || i != last {
			switch {
			case c.Type == gjson.String && c.Str == "":
				// Anthropic's words for it (its message names the message).
				err = badRequest(cp, p+": all messages must have non-empty content except for the optional final assistant message")
				return false
			case isNull(c) || (c.IsArray() && !c.Get("0").Exists()):
				err = badRequest(cp, cp+" must not be empty: only the final assistant message may be")
				return false
			}
		}
		var ps []part
		ps, err = decodeMessagesBlocks(m.Get("content"), cp, r)
		if err != nil {
			return false
		}
		if r == roleUser {
			// Tool results and other content become separate canonical
			// messages, in order.
			for _, x := range ps {
				if x.typ == partToolResult {
					msgs = appendPart(msgs, roleTool, x)
				} else {
					msgs = appendPart(msgs, roleUser, x)
				}
			}
			return true
		}
		msgs = append(msgs, message{role: r, parts: ps})
		return true
	})
	return msgs, err
}

// decodeMessagesBlocks reads a content string or array of blocks.
func decodeMessagesBlocks(c gjson.Result, p string, r role) ([]part, error) {
	if isNull(c) {
		return nil, nil
	}
	if ps, done, err := stringContent(c, p, "content blocks"); done {
		return ps, err
	}
	var ps []part
	var err error
	i := -1
	c.ForEach(func(_, blk gjson.Result) bool {
		i++
		bp := path(p, i)
		t := blk.Get("type").Str
		switch {
		case t == "text":
			ps = append(ps, part{typ: partText, text: blk.Get("text").Str})
		case t == "image" && r == roleUser:
			var ip part
			ip, err = decodeMessagesImage(blk, bp)
			ps = append(ps, ip)
		case t == "tool_use" && r == roleAssistant:
			ip := path(bp, "input")
			if err = wantObject(blk.Get("input"), ip); err == nil {
				ps = append(ps, part{typ: partToolCall, callID: blk.Get("id").Str, name: blk.Get("name").Str,
					args: rawOrEmpty(blk.Get("input")), argsParam: ip})
			}
		case t == "tool_result" && r == roleUser:
			tr := part{typ: partToolResult, callID: blk.Get("tool_use_id").Str, isError: blk.Get("is_error").Bool()}
			tr.result, err = decodeMessagesBlocks(blk.Get("content"), path(bp, "content"), roleUser)
			for _, x := range tr.result {
				if x.typ != partText && x.typ != partImage {
					err = badRequest(path(bp, "content"), "tool_result content may hold only text and image blocks")
				}
			}
			ps = append(ps, tr)
		case t == "thinking" && r == roleAssistant:
			rp := part{typ: partReasoning, text: blk.Get("thinking").Str, signature: blk.Get("signature").Str}
			rp.item, rp.encrypted, _, err = openAIItem(rp.signature, path(bp, "signature"))
			ps = append(ps, rp)
		case t == "redacted_thinking" && r == roleAssistant:
			ps = append(ps, part{typ: partReasoning, redacted: blk.Get("data").Str})
		default:
			err = badType(path(bp, "type"), "content block", t, "cannot be translated here", true)
		}
		return err == nil
	})
	return ps, err
}

func decodeMessagesImage(blk gjson.Result, p string) (part, error) {
	src := blk.Get("source")
	sp := path(p, "source")
	switch src.Get("type").Str {
	case "base64":
		mt, data := src.Get("media_type"), src.Get("data")
		if mt.Type != gjson.String || mt.Str == "" {
			return part{}, badRequest(path(sp, "media_type"), path(sp, "media_type")+" must be the image's media type (image/png, …)")
		}
		if data.Type != gjson.String || data.Str == "" {
			return part{}, badRequest(path(sp, "data"), path(sp, "data")+" must be the image's base64 data")
		}
		return part{typ: partImage, mediaType: mt.Str, data: data.Str}, nil
	case "url":
		u := src.Get("url")
		if u.Type != gjson.String || u.Str == "" {
			return part{}, badRequest(path(sp, "url"), path(sp, "url")+" must be the image's URL")
		}
		return part{typ: partImage, url: u.Str}, nil
	}
	return part{}, badType(path(p, "source.type"), "image source", src.Get("type").Str, "cannot be translated", true)
}

func decodeMessagesTools(v gjson.Result) ([]tool, error) {
	if err := wantToolArray(v, "tools"); err != nil {
		return nil, err
	}
	var ts []tool
	var err error
	i := -1
	v.ForEach(func(_, t gjson.Result) bool {
		i++
		if typ := t.Get("type").Str; typ != "" && typ != "custom" {
			err = badType(path(path("tools", i), "type"), "tool", typ, "is run by Anthropic and cannot be translated", true)
			return false
		}
		if t.Get("defer_loading").Bool() {
			// A deferred tool is not shown to the model until a tool search
			// loads it; OpenAI has no such search, so it is left out.
			return true
		}
		var name string
		if name, err = wantToolName(t.Get("name"), path(path("tools", i), "name")); err != nil {
			return false
		}
		var strict *bool
		strict, err = wantBool(t.Get("strict"), path(path("tools", i), "strict"))
		ts = append(ts, tool{name: name, description: t.Get("description").Str,
			parameters: rawOrEmpty(t.Get("input_schema")), strict: strict})
		return err == nil
	})
	return ts, err
}

func decodeMessagesToolChoice(v gjson.Result, rq *request) error {
	if isNull(v) {
		return nil
	}
	switch t := v.Get("type").Str; t {
	case "auto":
		rq.toolChoice = toolChoice{mode: "auto"}
	case "any":
		rq.toolChoice = toolChoice{mode: "required"}
	case "none":
		rq.toolChoice = toolChoice{mode: "none"}
	case "tool":
		rq.toolChoice = toolChoice{mode: "tool", name: v.Get("name").Str}
	default:
		return badType("tool_choice.type", "tool_choice", t, "is not valid", true)
	}
	if v.Get("disable_parallel_tool_use").Bool() {
		f := false
		rq.parallel = &f
	}
	return nil
}

// encodeMessagesRequest writes rq as a Messages request.
func encodeMessagesRequest(dst []byte, rq *request, from Protocol) ([]byte, error) {
	b := append(dst, '{')
	b = kStr(b, "model", rq.model)
	maxTokens, budget := messagesTokens(rq)
	b = kInt(b, "max_tokens", maxTokens)
	b = appendMessagesSystem(b, rq)
	b, err := appendMessagesTurns(b, rq, budget > 0)
	if err != nil {
		return nil, err
	}
	b = appendMessagesTools(b, rq)
	if len(rq.stop) > 0 {
		b = key(b, "stop_sequences")
		b = append(b, '[')
		for _, s := range rq.stop {
			b = AppendString(elem(b), s)
		}
		b = append(b, ']')
	}
	b = appendMessagesSampling(b, rq, budget)
	switch rq.format.typ {
	case "json_schema":
		b = append(key(b, "output_config"), `{"format":{"type":"json_schema"`...)
		b = kRaw(b, "schema", orEmptyObject(rq.format.schema))
		b = append(b, "}}"...)
	case "json_object":
		return nil, cannot("response_format", from, Messages, "a JSON object response format without a schema")
	}
	if rq.stream {
		b = kBool(b, "stream", true)
	}
	return append(b, '}'), nil
}

// messagesTokens decides max_tokens and the thinking budget (0: no
// thinking) of a Messages request: the reasoning asked for, unless a
// forced tool choice or a tool turn without thinking rules it out, within
// max_tokens (defaultMaxTokens above the budget when the client set none)
// and at least Anthropic's minimum of 1,024.
func messagesTokens(rq *request) (maxTokens, budget int64) {
	maxTokens = rq.maxTokens
	if !rq.reasoning.off {
		budget = rq.reasoning.budget
		if budget == 0 {
			budget = budgetForEffort(rq.reasoning.effort)
		}
		if budget == 0 && rq.reasoning.on {
			budget = budgetForEffort("medium")
		}
	}
	if rq.toolChoice.mode == "required" || rq.toolChoice.mode == "tool" {
		budget = 0 // Anthropic rejects thinking together with a forced tool choice
	}
	if budget > 0 && toolTurnWithoutThinking(rq.messages) {
		// With thinking on, Anthropic requires the last assistant turn of a
		// tool loop to start with its (signed) thinking block; a history
		// made elsewhere has none, so this request goes without thinking.
		budget = 0
	}
	if maxTokens == 0 {
		maxTokens = defaultMaxTokens
		if budget > 0 {
			maxTokens = budget + defaultMaxTokens
		}
	}
	if budget >= maxTokens {
		budget = maxTokens - 1
	}
	if budget > 0 && budget < 1024 {
		budget = 0 // below Anthropic's minimum: answer without thinking
	}
	return maxTokens, budget
}

// appendMessagesSystem writes system: every system and developer message's
// text, in order (nothing when there is none).
func appendMessagesSystem(b []byte, rq *request) []byte {
	hasSystem := false
	for i := range rq.messages {
		m := &rq.messages[i]
		if m.role != roleSystem && m.role != roleDeveloper {
			continue
		}
		if !hasSystem {
			b = key(b, "system")
			b = append(b, '[')
			hasSystem = true
		}
		for j := range m.parts {
			if m.parts[j].typ != partText || m.parts[j].text == "" {
				continue
			}
			b = elem(b)
			b = append(b, `{"type":"text"`...)
			b = kStr(b, "text", m.parts[j].text)
			b = append(b, '}')
		}
	}
	if hasSystem {
		b = append(b, ']')
	}
	return b
}

// appendMessagesTurns writes messages: the conversation's turns with
// consecutive messages of one Anthropic role (tool results are the user's)
// merged into one, and turns left empty (only unverifiable reasoning)
// dropped.
func appendMessagesTurns(b []byte, rq *request, thinking bool) ([]byte, error) {
	b = key(b, "messages")
	b = append(b, '[')
	var err error
	open := role(0) // the Anthropic role of the message being written, 0 for none
	start := 0      // where the open message begins in b (before its comma)
	closeMsg := func() {
		if b[len(b)-1] == '[' {
			b = b[:start] // nothing was left to send in it (e.g. only unverifiable reasoning)
			return
		}
		b = append(b, "]}"...)
	}
	for i := range rq.messages {
		m := &rq.messages[i]
		r := m.role
		switch r {
		case roleSystem, roleDeveloper:
			continue
		case roleTool:
			r = roleUser
		}
		if open != r {
			if open != 0 {
				closeMsg()
			}
			start = len(b)
			b = elem(b)
			if r == roleUser {
				b = append(b, `{"role":"user","content":[`...)
			} else {
				b = append(b, `{"role":"assistant","content":[`...)
			}
			open = r
		}
		if b, err = encodeMessagesBlocks(b, m.parts, thinking); err != nil {
			return nil, err
		}
	}
	if open != 0 {
		closeMsg()
	}
	return append(b, ']'), nil
}

// appendMessagesTools writes tools and tool_choice (any for required; auto
// when only parallel calls are turned off, which is
// disable_parallel_tool_use).
func appendMessagesTools(b []byte, rq *request) []byte {
	if len(rq.tools) > 0 {
		b = key(b, "tools")
		b = append(b, '[')
		for i := range rq.tools {
			t := &rq.tools[i]
			b = elem(b)
			b = append(b, '{')
			b = kStr(b, "name", flatName(t.namespace, t.name))
			b = kStrOpt(b, "description", toolDescription(t))
			b = kRaw(b, "input_schema", toolParameters(t))
			if t.strict != nil && *t.strict {
				b = kBool(b, "strict", true)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	tc := ""
	switch rq.toolChoice.mode {
	case "auto":
		tc = "auto"
	case "required":
		tc = "any"
	case "tool":
		tc = "tool"
	case "none":
		tc = "none"
	}
	noParallel := rq.parallel != nil && !*rq.parallel && len(rq.tools) > 0
	if tc == "" && noParallel {
		tc = "auto"
	}
	if tc != "" && len(rq.tools) > 0 {
		b = key(b, "tool_choice")
		b = append(b, '{')
		b = kStr(b, "type", tc)
		if tc == "tool" {
			b = kStr(b, "name", rq.toolChoice.name)
		}
		if noParallel && tc != "none" {
			b = kBool(b, "disable_parallel_tool_use", true)
		}
		b = append(b, '}')
	}
	return b
}

// appendMessagesSampling writes thinking with its budget, or, without
// thinking, temperature (at most 1) and top_p: Anthropic rejects them
// together with thinking.
func appendMessagesSampling(b []byte, rq *request, budget int64) []byte {
	if budget > 0 {
		b = append(key(b, "thinking"), `{"type":"enabled"`...)
		b = kInt(b, "budget_tokens", budget)
		if rq.reasoning.omitted {
			b = kStr(b, "display", "omitted")
		}
		return append(b, '}')
	}
	if rq.temperature != nil {
		b = kFloat(b, "temperature", min(*rq.temperature, 1))
	}
	if rq.topP != nil {
		b = kFloat(b, "top_p", *rq.topP)
	}
	return b
}

// encodeMessagesBlocks writes the content blocks of one canonical message.
func encodeMessagesBlocks(b []byte, ps []part, thinking bool) ([]byte, error) {
	for i := range ps {
		p := &ps[i]
		switch p.typ {
		case partText:
			if p.text == "" {
				continue
			}
			b = elem(b)
			b = append(b, `{"type":"text"`...)
			b = kStr(b, "text", p.text)
			b = append(b, '}')
		case partRefusal:
			b = elem(b)
			b = append(b, `{"type":"text"`...)
			b = kStr(b, "text", p.text)
			b = append(b, '}')
		case partImage:
			b = encodeMessagesImage(b, p)
		case partToolCall:
			args := callArguments(p)
			if !gjson.Valid(args) || !gjson.Parse(args).IsObject() {
				return nil, errArgsNotObject(p)
			}
			b = elem(b)
			b = append(b, `{"type":"tool_use"`...)
			b = kStr(b, "id", p.callID)
			b = kStr(b, "name", flatName(p.namespace, p.name))
			b = kRaw(b, "input", args)
			b = append(b, '}')
		case partToolResult:
			b = elem(b)
			b = append(b, `{"type":"tool_result"`...)
			b = kStr(b, "tool_use_id", p.callID)
			b = key(b, "content")
			if len(p.result) == 0 {
				b = append(b, `""`...)
				if p.isError {
					b = kBool(b, "is_error", true)
				}
				b = append(b, '}')
				continue
			}
			b = append(b, '[')
			for j := range p.result {
				r := &p.result[j]
				if r.typ == partImage {
					b = encodeMessagesImage(b, r)
				} else if r.text != "" {
					b = elem(b)
					b = append(b, `{"type":"text"`...)
					b = kStr(b, "text", r.text)
					b = append(b, '}')
				}
			}
			b = append(b, ']')
			if p.isError {
				b = kBool(b, "is_error", true)
			}
			b = append(b, '}')
		case partReasoning:
			if !thinking {
				continue
			}
			text, sig, red, ok := anthropicThinking(p)
			if !ok {
				continue
			}
			b = elem(b)
			if red != "" {
				b = append(b, `{"type":"redacted_thinking"`...)
				b = kStr(b, "data", red)
			} else {
				b = append(b, `{"type":"thinking"`...)
				b = kStr(b, "thinking", text)
				b = kStr(b, "signature", sig)
			}
			b = append(b, '}')
		}
	}
	return b, nil
}

func encodeMessagesImage(b []byte, p *part) []byte {
	b = elem(b)
	b = append(b, `{"type":"image","source":{`...)
	if p.url != "" {
		b = kStr(b, "type", "url")
		b = kStr(b, "url", p.url)
	} else {
		b = kStr(b, "type", "base64")
		b = kStr(b, "media_type", p.mediaType)
		b = kStr(b, "data", p.data)
	}
	return append(b, "}}"...)
}

// toolTurnWithoutThinking reports whether the last assistant message calls
// a tool without starting with thinking that Anthropic can verify.
func toolTurnWithoutThinking(msgs []message) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := &msgs[i]
		if m.role != roleAssistant {
			continue
		}
		if !hasToolCall(m.parts) {
			return false
		}
		for j := range m.parts {
			p := &m.parts[j]
			if p.typ == partReasoning {
				if _, _, _, ok := anthropicThinking(p); ok {
					return false
				}
				continue
			}
			if p.typ == partText && p.text == "" {
				continue
			}
			return true
		}
		return true
	}
	return false
}
