package translate

import (
	"strings"

	"github.com/tidwall/gjson"
)

// How tools that only Responses (or Chat) can express travel to targets that
// lack them; docs/translation.md explains each choice.

// nsSep joins a Responses namespace and a tool name into one flat function
// name for Chat and Messages upstreams ("multi_agent_v1__close_agent").
const nsSep = "__"

// flatName is the function name a namespaced tool gets on a flat target.
func flatName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + nsSep + name
}

// customParameters is the JSON Schema a custom (freeform) tool gets when the
// target only has function tools: one string parameter holding the input.
const customParameters = `{"type":"object","properties":{"input":{"type":"string","description":"The raw input of this freeform tool."}},"required":["input"],"additionalProperties":false}`

// toolParameters returns t's JSON Schema for a function-only target.
func toolParameters(t *tool) string {
	if t.custom {
		return customParameters
	}
	if t.parameters == "" {
		return `{"type":"object","properties":{}}`
	}
	return t.parameters
}

// toolDescription returns t's description for a function-only target; a
// custom tool's input format (a grammar or regex) is appended so the model
// still knows the syntax.
func toolDescription(t *tool) string {
	if !t.custom || t.format == "" {
		return t.description
	}
	f := gjson.Parse(t.format)
	if f.Get("type").Str != "grammar" {
		return t.description
	}
	var sb strings.Builder
	sb.WriteString(t.description)
	sb.WriteString("\n\nPass the tool's input as the string parameter `input`; it must follow this ")
	sb.WriteString(f.Get("syntax").Str)
	sb.WriteString(" grammar:\n")
	sb.WriteString(f.Get("definition").Str)
	return sb.String()
}

// callArguments returns a tool call's arguments as a JSON object text for a
// function-only target.
func callArguments(p *part) string {
	if p.custom {
		b := append([]byte(`{"input":`), AppendString(nil, p.args)...)
		return string(append(b, '}'))
	}
	if strings.TrimSpace(p.args) == "" {
		return "{}"
	}
	return p.args
}

// wantArguments returns a function call's arguments, which OpenAI's
// protocols carry as JSON text in a string ("{\"x\":1}"): "" when absent
// or null, else a 400 on param unless r is a string. An object or number in
// their place is refused rather than read as no arguments, which would send
// the call upstream with an empty input.
func wantArguments(r gjson.Result, param string) (string, error) {
	if isNull(r) {
		return "", nil
	}
	if r.Type != gjson.String {
		return "", badRequest(param, param+" must be a string of JSON text (such as \"{\\\"x\\\":1}\"), not "+JSONType(r))
	}
	return r.Str, nil
}

// errArgsNotObject is the 400 for a tool call whose arguments a target that
// needs an object (Messages' tool_use input) cannot take: not JSON, or JSON
// other than an object. It names the client's field (p.argsParam).
func errArgsNotObject(p *part) *Error {
	what := "not valid JSON"
	if gjson.Valid(p.args) {
		what = "JSON " + JSONType(gjson.Parse(p.args)) + ", not an object"
	}
	msg := "the arguments of tool call " + p.callID + " are " + what + "; Messages needs them as a JSON object"
	if p.argsParam != "" {
		msg = p.argsParam + ": " + msg
	}
	return badRequest(p.argsParam, msg)
}

// JSONType names r's JSON type as error messages do: "a string", "a
// number", "a boolean", "null", "an array" or "an object".
func JSONType(r gjson.Result) string {
	switch r.Type {
	case gjson.String:
		return "a string"
	case gjson.Number:
		return "a number"
	case gjson.True, gjson.False:
		return "a boolean"
	case gjson.Null:
		return "null"
	}
	if r.IsArray() {
		return "an array"
	}
	return "an object"
}

// toolErrorPrefix marks a failed tool result for targets without is_error.
const toolErrorPrefix = "[tool error] "

// resultText joins a tool result's text, marking an error result.
func resultText(p *part) string {
	t := joinText(p.result, "\n")
	if p.isError {
		return toolErrorPrefix + t
	}
	return t
}

// formatName is the schema name, with OpenAI's required default.
func formatName(f *format) string {
	if f.name == "" {
		return "response"
	}
	return f.name
}

func orEmptyObject(raw string) string {
	if raw == "" {
		return "{}"
	}
	return raw
}

// flatten gives every tool of a Responses request the one flat name it has
// on a Chat or Messages upstream: its own name when no other tool has that
// name, else namespace__name. Tool calls in the history (which may or may
// not carry their namespace) and a named tool_choice get the same names, so
// afterwards no namespace is left in rq.
func flatten(rq *request) {
	count := map[string]int{}
	for i := range rq.tools {
		count[rq.tools[i].name]++
	}
	flat := func(ns, name string) string {
		if count[name] > 1 && ns != "" {
			return flatName(ns, name)
		}
		return name
	}
	for i := range rq.tools {
		t := &rq.tools[i]
		t.name, t.namespace = flat(t.namespace, t.name), ""
	}
	for i := range rq.messages {
		for j := range rq.messages[i].parts {
			p := &rq.messages[i].parts[j]
			if p.typ == partToolCall {
				p.name, p.namespace = flat(p.namespace, p.name), ""
			}
		}
	}
	if rq.toolChoice.mode == "tool" {
		ns, name, found := strings.Cut(rq.toolChoice.name, nsSep)
		if found && count[name] > 0 {
			rq.toolChoice.name = flat(ns, name)
		}
	}
}

// toolNames records, from a Responses client's request, which flat tool
// names the request translation made up (see flatten), so that answers can
// be turned back: a flat name maps to its namespace and original name, and
// custom tools (sent upstream as function tools) are marked.
type toolNames struct {
	flat   map[string]toolName
	loaded bool
}

type toolName struct {
	namespace, name string
	custom          bool
}

// loadToolNames reads the tools of a Responses request body (top-level
// tools and additional_tools input items). Nothing is recorded when the body
// has no namespace or custom tools, or is not a valid request.
func loadToolNames(body []byte) toolNames {
	tn := toolNames{loaded: true}
	if !ValidWithin(body, maxDepth) {
		return tn
	}
	root := gjson.ParseBytes(body)
	var ts []tool
	add := func(r gjson.Result) {
		more, err := decodeResponsesTools(r, "tools", "")
		if err == nil {
			ts = append(ts, more...)
		}
	}
	add(root.Get("tools"))
	root.Get("input").ForEach(func(_, it gjson.Result) bool {
		if it.Get("type").Str == "additional_tools" {
			add(it.Get("tools"))
		}
		return true
	})
	orig := make([]tool, len(ts))
	copy(orig, ts)
	rq := request{tools: ts}
	flatten(&rq)
	for i := range rq.tools {
		o := &orig[i]
		if o.namespace == "" && !o.custom {
			continue
		}
		if tn.flat == nil {
			tn.flat = map[string]toolName{}
		}
		tn.flat[rq.tools[i].name] = toolName{namespace: o.namespace, name: o.name, custom: o.custom}
	}
	return tn
}

// lookup returns the original name of a flat tool name.
func (tn *toolNames) lookup(flat string) (toolName, bool) {
	if tn.flat == nil {
		return toolName{}, false
	}
	n, ok := tn.flat[flat]
	return n, ok
}

// customInput extracts the "input" string from a custom call's arguments.
func customInput(args string) string {
	r := gjson.Get(args, "input")
	if r.Type == gjson.String {
		return r.Str
	}
	return args
}

// decodeToolChoiceMode reads what Chat and Responses share of tool_choice: a
// missing or null value (the zero toolChoice), or the string auto, none or
// required (any other string is a 400 on tool_choice). done is false when v
// is an object, whose shape each protocol reads itself.
func decodeToolChoiceMode(v gjson.Result) (tc toolChoice, done bool, err error) {
	if isNull(v) {
		return toolChoice{}, true, nil
	}
	if v.Type == gjson.String {
		switch v.Str {
		case "auto", "none", "required":
			return toolChoice{mode: v.Str}, true, nil
		}
		return toolChoice{}, true, badRequest("tool_choice", "tool_choice "+v.Str+" is not valid")
	}
	return toolChoice{}, false, nil
}

// decodeSchemaFormat reads a json_schema response format from js, the object
// holding its name, description, schema and strict: Chat's
// response_format.json_schema, Responses' text.format. param names js in
// the 400 for a strict that is not a boolean.
func decodeSchemaFormat(js gjson.Result, param string) (format, error) {
	strict, err := wantBool(js.Get("strict"), param+".strict")
	return format{typ: "json_schema", name: js.Get("name").Str, description: js.Get("description").Str,
		schema: rawOrEmpty(js.Get("schema")), strict: strict}, err
}

// appendSchemaFormat writes the fields of a json_schema response format that
// Chat (response_format.json_schema) and Responses (text.format) share: name,
// description when set, schema ({} when empty) and strict when set. The
// caller opens and closes the object.
func appendSchemaFormat(b []byte, f *format) []byte {
	b = kStr(b, "name", formatName(f))
	b = kStrOpt(b, "description", f.description)
	b = kRaw(b, "schema", orEmptyObject(f.schema))
	if f.strict != nil {
		b = kBool(b, "strict", *f.strict)
	}
	return b
}

// appendChatToolCalls writes the Chat tool_calls key and array
// [{"id","type":"function","function":{"name","arguments"}}] for the tool-call
// parts of ps; name gives each call's function name.
func appendChatToolCalls(b []byte, ps []part, name func(*part) string) []byte {
	b = key(b, "tool_calls")
	b = append(b, '[')
	for i := range ps {
		p := &ps[i]
		if p.typ != partToolCall {
			continue
		}
		b = elem(b)
		b = append(b, '{')
		b = kStr(b, "id", p.callID)
		b = append(b, `,"type":"function","function":{`...)
		b = kStr(b, "name", name(p))
		b = kStr(b, "arguments", callArguments(p))
		b = append(b, "}}"...)
	}
	return append(b, ']')
}

// flatPartName is a tool call's name with its Responses namespace joined on
// (flatName), for requests to targets without namespaces.
func flatPartName(p *part) string { return flatName(p.namespace, p.name) }

// partName is a tool call's name as decoded.
func partName(p *part) string { return p.name }

// wantToolArray refuses tools (at param p) that are present and not null
// but not an array: a string or an object was read as one odd tool and
// refused for a type it did not have.
func wantToolArray(v gjson.Result, p string) error {
	if isNull(v) || v.IsArray() {
		return nil
	}
	return badRequest(p, p+" must be an array of tools")
}

// wantToolName is a tool's name (at param p), which every protocol requires as
// a non-empty string: a number or a missing name went upstream as "".
func wantToolName(v gjson.Result, p string) (string, error) {
	if v.Type != gjson.String || v.Str == "" {
		return "", badRequest(p, p+" must be a non-empty string")
	}
	return v.Str, nil
}
