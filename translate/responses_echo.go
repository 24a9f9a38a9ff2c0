package translate

import (
	"strings"

	"github.com/tidwall/gjson"
)

// A native Responses object echoes the request's settings (instructions,
// limits, tools, text, store, metadata, …) beside its output, and clients
// read them back (the SDKs' Response types have these fields; the Codex CLI
// reads none, the openai SDKs expose them). A translated answer echoes the
// client's own request the same way. Reference:
// https://platform.openai.com/docs/api-reference/responses/object

// responsesEcho holds the raw JSON values a translated Responses object
// echoes, each taken from the client's request or the API's default when
// the request has none. Values point into the request body.
type responsesEcho struct {
	instructions, maxOutputTokens, parallelToolCalls, previousResponseID string
	reasoning, store, temperature, text, toolChoice, tools, topP, user   string
	metadata                                                             string
}

// echoDefaults are the values OpenAI echoes for a request that leaves the
// field out.
var echoDefaults = responsesEcho{
	instructions: "null", maxOutputTokens: "null", parallelToolCalls: "true", previousResponseID: "null",
	reasoning: `{"effort":null,"summary":null}`, store: "true", temperature: "null",
	text: `{"format":{"type":"text"}}`, toolChoice: `"auto"`, tools: "[]", topP: "null", user: "null",
	metadata: "{}",
}

// loadResponsesEcho reads the echoed fields from a Responses request body
// (nil, or a body that is not a JSON object: the defaults).
func loadResponsesEcho(body []byte) responsesEcho {
	e := echoDefaults
	if len(body) == 0 || !gjson.ValidBytes(body) {
		return e
	}
	root := gjson.Parse(b2s(body))
	if !root.IsObject() {
		return e
	}
	root.ForEach(func(k, v gjson.Result) bool {
		if v.Type == gjson.Null {
			return true
		}
		switch k.Str {
		case "instructions":
			e.instructions = echoIf(v, v.Type == gjson.String, e.instructions)
		case "max_output_tokens":
			e.maxOutputTokens = echoIf(v, v.Type == gjson.Number, e.maxOutputTokens)
		case "parallel_tool_calls":
			e.parallelToolCalls = echoIf(v, v.IsBool(), e.parallelToolCalls)
		case "previous_response_id":
			e.previousResponseID = echoIf(v, v.Type == gjson.String, e.previousResponseID)
		case "reasoning":
			e.reasoning = echoIf(v, v.IsObject(), e.reasoning)
		case "store":
			e.store = echoIf(v, v.IsBool(), e.store)
		case "temperature":
			e.temperature = echoIf(v, v.Type == gjson.Number, e.temperature)
		case "text":
			e.text = echoIf(v, v.IsObject(), e.text)
		case "tool_choice":
			e.toolChoice = echoIf(v, v.Type == gjson.String || v.IsObject(), e.toolChoice)
		case "tools":
			e.tools = echoIf(v, v.IsArray(), e.tools)
		case "top_p":
			e.topP = echoIf(v, v.Type == gjson.Number, e.topP)
		case "user":
			e.user = echoIf(v, v.Type == gjson.String, e.user)
		case "metadata":
			e.metadata = echoIf(v, v.IsObject(), e.metadata)
		}
		return true
	})
	return e
}

// echoIf returns v's raw JSON when ok, else def. Line breaks are left out
// (they can only be whitespace between JSON tokens: inside strings they are
// escaped), so that the value fits on one SSE data line.
func echoIf(v gjson.Result, ok bool, def string) string {
	if !ok {
		return def
	}
	if !strings.ContainsAny(v.Raw, "\r\n") {
		return v.Raw
	}
	return strings.NewReplacer("\r", "", "\n", "").Replace(v.Raw)
}
