package gateway

import (
	"strconv"

	"github.com/tidwall/gjson"
)

// minThinkingBudget is the least thinking.budget_tokens the Messages API
// takes (https://docs.claude.com/en/docs/build-with-claude/extended-thinking).
const minThinkingBudget = 1024

// messagesParams is what parseBody keeps of a Messages body for
// checkMessagesParams: its tools, tool_choice and thinking members
// (absent ones do not Exist).
type messagesParams struct {
	tools, toolChoice, thinking gjson.Result
}

// checkMessagesParams refuses, before any upstream is chosen, the Messages
// requests that Anthropic's API itself refuses with 400
// invalid_request_error but that a translation to an OpenAI or Codex
// upstream would pass on, so a client gets the same answer whichever
// account serves it (the messages are Anthropic's, or in its style):
//   - a custom tool (type absent or "custom") without input_schema:
//     "tools.N.custom.input_schema: Field required";
//   - thinking of type "enabled" whose budget_tokens is missing, not an
//     integer, below 1024, or (without the interleaved-thinking beta,
//     under which the budget spans the turn and may pass max_tokens) not
//     below max_tokens;
//   - a tool_choice that is not an object, or whose type is not one of
//     auto, any, tool and none (checkMessagesToolChoice);
//   - a tool_choice of type "tool" naming no tool in tools.
//
// maxTokens is the request's max_tokens, already checked (checkMaxTokens);
// interleaved says the anthropic-beta header asks for interleaved thinking.
func checkMessagesParams(p *messagesParams, maxTokens int64, interleaved bool) *APIError {
	if p.tools.IsArray() {
		i := 0
		var aerr *APIError
		p.tools.ForEach(func(_, t gjson.Result) bool {
			typ := t.Get("type")
			if t.IsObject() && (!typ.Exists() || typ.Type == gjson.Null || typ.Str == "custom") {
				if s := t.Get("input_schema"); !s.Exists() || s.Type == gjson.Null {
					aerr = errBadParam("tools", "tools."+strconv.Itoa(i)+".custom.input_schema: Field required")
					return false
				}
			}
			i++
			return true
		})
		if aerr != nil {
			return aerr
		}
	}
	if p.thinking.IsObject() && p.thinking.Get("type").Str == "enabled" {
		b := p.thinking.Get("budget_tokens")
		switch {
		case !b.Exists() || b.Type == gjson.Null:
			return errBadParam("thinking", "thinking.enabled.budget_tokens: Field required")
		case b.Type != gjson.Number || b.Num != float64(int64(b.Num)):
			return errBadParam("thinking", "thinking.enabled.budget_tokens: Input should be a valid integer")
		case b.Num < minThinkingBudget:
			return errBadParam("thinking", "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
		case !interleaved && int64(b.Num) >= maxTokens:
			return errBadParam("max_tokens", "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at "+
				"https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size")
		}
	}
	if aerr := checkMessagesToolChoice(p.toolChoice); aerr != nil {
		return aerr
	}
	if p.toolChoice.IsObject() && p.toolChoice.Get("type").Str == "tool" {
		name := p.toolChoice.Get("name")
		if name.Type != gjson.String || name.Str == "" {
			return errBadParam("tool_choice", "tool_choice.tool.name: Field required")
		}
		found := false
		p.tools.ForEach(func(_, t gjson.Result) bool {
			found = t.Get("name").Str == name.Str
			return !found
		})
		if !found {
			return errBadParam("tool_choice", "tool_choice.tool.name: Tool `"+clip(name.Str)+"` was not found in `tools`. "+
				"The tool named in tool_choice must be one of the tools the request provides.")
		}
	}
	return nil
}

// checkMessagesToolChoice refuses a Messages tool_choice of the wrong
// shape with the validation message Anthropic's API gives (its request
// validation names the field, then the rule): not an object, an object
// without a type, or a type other than auto, any, tool and none
// (https://docs.claude.com/en/docs/agents-and-tools/tool-use/implement-tool-use#forcing-tool-use).
// An OpenAI upstream's translation refused these as "tool_choice type  is
// not valid", and an Anthropic upstream answered in its own words.
func checkMessagesToolChoice(tc gjson.Result) *APIError {
	switch {
	case !tc.Exists() || tc.Type == gjson.Null:
		return nil
	case !tc.IsObject():
		return errBadParam("tool_choice", "tool_choice: Input should be a valid dictionary or object to extract fields from")
	}
	typ := tc.Get("type")
	switch {
	case !typ.Exists() || typ.Type == gjson.Null:
		return errBadParam("tool_choice", "tool_choice: Unable to extract tag using discriminator 'type'")
	case typ.Type != gjson.String:
		return errBadParam("tool_choice", "tool_choice.type: Input should be a valid string")
	}
	switch typ.Str {
	case "auto", "any", "tool", "none":
		return nil
	}
	return errBadParam("tool_choice", "tool_choice: Input tag '"+clip(typ.Str)+"' found using 'type' does not match any of the expected tags: 'auto', 'any', 'tool', 'none'")
}
