package gateway

import (
	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/translate"
)

// checkToolChoice refuses, before any upstream is chosen, a tool_choice
// the client's own API refuses with 400, so the client gets the same
// answer in its protocol whichever account serves it: a translation to
// another upstream used to answer "tool_choice type  cannot be translated"
// or "tool_choice a is not valid", and one that passed the request on let
// the upstream model call a tool the client never described.
//
// For Chat Completions and Responses (OpenAI's error style:
// https://platform.openai.com/docs/guides/error-codes):
//   - a value neither a string, an object nor null: 400 invalid_type;
//   - a string other than "none", "auto" or "required": 400 invalid_value;
//   - an object without a type: 400 missing_required_parameter;
//   - a "function" or "custom" choice without a name: 400
//     missing_required_parameter; naming no tool of tools (Chat:
//     tools[].function.name or tools[].custom.name; Responses: a tool's
//     name, or a namespace's tool's): 400 invalid_value.
//
// Other object types (Chat's allowed_tools, the tools OpenAI runs on
// Responses) are left to the upstream or the translation.
// For Messages see checkMessagesParams.
func checkToolChoice(ep translate.Protocol, p *messagesParams) *APIError {
	tc := p.toolChoice
	switch {
	case !tc.Exists() || tc.Type == gjson.Null:
		return nil
	case tc.Type == gjson.String:
		switch tc.Str {
		case "none", "auto", "required":
			return nil
		}
		return &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid_value", Param: "tool_choice",
			Message: "Invalid value: '" + clip(tc.Str) + "'. Supported values are: 'none', 'auto', and 'required' (or an object naming a tool)."}
	case !tc.IsObject():
		return &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid_type", Param: "tool_choice",
			Message: "Invalid type for 'tool_choice': expected a string ('none', 'auto' or 'required') or an object, but got " + jsonTypeName(tc) + " instead."}
	}
	typ := tc.Get("type")
	if typ.Type != gjson.String || typ.Str == "" {
		return &APIError{Status: 400, Type: "invalid_request_error", Code: "missing_required_parameter", Param: "tool_choice.type",
			Message: "Missing required parameter: 'tool_choice.type'."}
	}
	if typ.Str != "function" && typ.Str != "custom" {
		return nil
	}
	param := "tool_choice.name"
	if ep == translate.Chat {
		param = "tool_choice." + typ.Str + ".name"
	}
	name := tc.Get(param[len("tool_choice."):])
	if name.Type != gjson.String || name.Str == "" {
		return &APIError{Status: 400, Type: "invalid_request_error", Code: "missing_required_parameter", Param: param,
			Message: "Missing required parameter: '" + param + "'."}
	}
	if hasTool(ep, p.tools, name.Str) {
		return nil
	}
	return &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid_value", Param: param,
		Message: "Invalid value for '" + param + "': no " + typ.Str + " tool named '" + clip(name.Str) +
			"' is in 'tools'. The tool named in tool_choice must be one of the tools the request provides."}
}

// hasTool reports whether tools (a Chat or Responses tools array) holds a
// tool named name. Responses' namespaces (the Codex CLI's) hold tools of
// their own, which count too.
func hasTool(ep translate.Protocol, tools gjson.Result, name string) bool {
	found := false
	tools.ForEach(func(_, t gjson.Result) bool {
		if ep == translate.Chat {
			found = t.Get("function.name").Str == name || t.Get("custom.name").Str == name
			return !found
		}
		found = t.Get("name").Str == name
		if !found && t.Get("tools").IsArray() {
			found = hasTool(ep, t.Get("tools"), name)
		}
		return !found
	})
	return found
}

// jsonTypeName names r's JSON type as OpenAI's type errors do: "an
// integer" for a whole number, else translate.JSONType's name ("a
// boolean", "an array", ...).
func jsonTypeName(r gjson.Result) string {
	if r.Type == gjson.Number && r.Num == float64(int64(r.Num)) {
		return "an integer"
	}
	return translate.JSONType(r)
}
