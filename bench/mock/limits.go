package mock

import (
	"math"

	"github.com/tidwall/gjson"
)

// Output limits, as real upstreams honour them: an answer longer than the
// request's limit is cut at it and says so. Each route reads only the field
// its API defines, so a gateway that forwards the wrong one (max_tokens to
// the Responses API) gets an answer the limit did not cut, as it would in
// production:
//
//	Chat Completions  max_completion_tokens, or the older max_tokens (the smaller when both);
//	                  finish_reason "length"
//	Responses         max_output_tokens; status "incomplete", incomplete_details
//	                  {"reason":"max_output_tokens"}, the message item "incomplete",
//	                  and a stream ends with response.incomplete instead of
//	                  response.completed (fixture openai-responses/stream-incomplete.sse)
//	                  A max_output_tokens below minOutputTokens (16) is refused 400
//	                  integer_below_min_value, as the API refuses it, on HTTP and
//	                  the WebSocket alike.
//	Codex backend     none (it refuses max_output_tokens)
//	Messages          max_tokens; stop_reason "max_tokens"
//
// The usage's output count (completion_tokens, output_tokens) is what was
// generated, so at most the limit. A scripted tool call (script.go) needs
// toolFragments tokens; under a smaller limit the answer is the account's
// text cut at the limit instead. tool_choice "none" (Messages: {"type":
// "none"}) never gets a tool call: the answer is the account's text.

// minOutputTokens is the least max_output_tokens the Responses API takes;
// a smaller number is refused 400 integer_below_min_value (failOutputBelowMin).
const minOutputTokens = 16

// outputLimits are a request's output limit fields, 0 when absent (or not
// a positive integer).
type outputLimits struct {
	maxTokens, maxCompletionTokens, maxOutputTokens int
}

// of returns the limit route rt honours; 0: none.
func (l outputLimits) of(rt route) int {
	switch rt {
	case routeChat:
		switch {
		case l.maxCompletionTokens > 0 && l.maxTokens > 0:
			return min(l.maxCompletionTokens, l.maxTokens)
		case l.maxCompletionTokens > 0:
			return l.maxCompletionTokens
		}
		return l.maxTokens
	case routeResponses:
		return l.maxOutputTokens
	case routeMessages:
		return l.maxTokens
	}
	return 0
}

// limitOf returns v as a limit: a positive integer, else 0 (absent). Values
// past an int32 are clamped; no answer is that long.
func limitOf(v gjson.Result) int {
	if v.Type != gjson.Number || v.Num < 1 || v.Num != math.Trunc(v.Num) {
		return 0
	}
	return int(min(v.Num, math.MaxInt32))
}
