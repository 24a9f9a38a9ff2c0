package translate

import (
	"bytes"

	"github.com/tidwall/gjson"
)

// Usage is token usage in OpenAI's accounting: InputTokens counts every
// input token, cached ones included (Anthropic's input_tokens +
// cache_read_input_tokens + cache_creation_input_tokens); CachedTokens are
// input tokens read from the prompt cache (OpenAI cached_tokens, Anthropic
// cache_read_input_tokens); CacheWriteTokens are input tokens written to it
// (Anthropic cache_creation_input_tokens); ReasoningTokens are output tokens
// spent on reasoning, part of OutputTokens. All counts are tokens.
//
// It is the one reading of usage in Troupe: the translators write it into
// the client's protocol, and the gateway bills and counts limits from it,
// so both see the same numbers.
type Usage struct {
	InputTokens, OutputTokens, CachedTokens, ReasoningTokens int64
	CacheWriteTokens                                         int64
}

// BodyUsage reads the usage of a non-stream answer of protocol p (its
// top-level "usage" object: Chat https://platform.openai.com/docs/api-reference/chat/object,
// Responses https://platform.openai.com/docs/api-reference/responses/object,
// Messages https://docs.claude.com/en/api/messages#response-usage); ok is
// false, and the usage zero, when the body has none.
func BodyUsage(p Protocol, body []byte) (u Usage, ok bool) {
	return UsageOf(p, getB(body, "usage"))
}

// UsageOf is BodyUsage of an answer whose top-level "usage" member is r
// (the zero Result when it has none), for a caller that has read the
// answer's members itself: upstream.ReadAnswer, one pass over them.
func UsageOf(p Protocol, r gjson.Result) (u Usage, ok bool) {
	if !r.IsObject() {
		return Usage{}, false
	}
	u.set(p, r)
	return u, true
}

var usageField = []byte(`"usage"`)

// AddEvent takes into u the usage one stream event of protocol p carries
// (its SSE event name and data, as Scanner.Next returns them) and reports
// whether it carried any. Chat: a chunk's "usage" object (the include_usage
// chunk; some compatible upstreams put it on every chunk). Responses:
// response.completed, response.incomplete and response.failed's
// response.usage. Messages: message_start's message.usage, then
// message_delta's usage, whose counts are cumulative, not increments: each
// field present replaces the one seen before and absent fields are kept.
// Other events are not parsed; an unnamed event is known by its data's
// "type". A usage object replaces the Chat and Responses counts whole.
func (u *Usage) AddEvent(p Protocol, name, data []byte) bool {
	var path string
	switch p {
	case Chat:
		if !bytes.Contains(data, usageField) {
			return false
		}
		path = "usage"
	case Responses:
		switch eventType(name, data) {
		case "response.completed", "response.incomplete", "response.failed":
			path = "response.usage"
		default:
			return false
		}
	case Messages:
		switch eventType(name, data) {
		case "message_start":
			path = "message.usage"
		case "message_delta":
			path = "usage"
		default:
			return false
		}
	default:
		return false
	}
	r := getB(data, path)
	if !r.IsObject() {
		return false
	}
	u.set(p, r)
	return true
}

// AddChatUsage is AddEvent(Chat, name, data) for a chunk the caller
// already knows to hold the bytes "usage" in quotes (AddEvent's own test,
// made by the caller's single pass over the chunk: the gateway's relay,
// issue 21); for a chunk without them it may report a usage AddEvent
// would not.
func (u *Usage) AddChatUsage(data []byte) bool {
	r := getB(data, "usage")
	if !r.IsObject() {
		return false
	}
	u.set(Chat, r)
	return true
}

// eventType is an event's SSE name, else its data's "type" (Responses and
// Messages set both, equal).
func eventType(name, data []byte) string {
	if len(name) > 0 {
		return b2s(name)
	}
	return getB(data, "type").Str
}

// set reads usage object r of protocol p into u: the Chat and Responses
// counts replace u's whole; the Messages fields present replace u's (their
// input counts kept apart so that InputTokens stays their sum).
func (u *Usage) set(p Protocol, r gjson.Result) {
	switch p {
	case Chat:
		u.setOpenAI(r, &chatUsageKeys)
	case Responses:
		u.setOpenAI(r, &responsesUsageKeys)
	case Messages:
		uncached := u.InputTokens - u.CachedTokens - u.CacheWriteTokens
		r.ForEach(func(k, v gjson.Result) bool {
			if v.Type != gjson.Number {
				return true
			}
			switch k.Str {
			case "input_tokens":
				uncached = v.Int()
			case "output_tokens":
				u.OutputTokens = v.Int()
			case "cache_read_input_tokens":
				u.CachedTokens = v.Int()
			case "cache_creation_input_tokens":
				u.CacheWriteTokens = v.Int()
			}
			return true
		})
		u.InputTokens = uncached + u.CachedTokens + u.CacheWriteTokens
	}
}

// openAIUsageKeys names the members of an OpenAI usage object: the input
// and output counts, the objects holding the cached and reasoning counts,
// and those counts' names.
type openAIUsageKeys struct {
	input, output, inputDetails, outputDetails, cached, reasoning string
}

var (
	chatUsageKeys      = openAIUsageKeys{"prompt_tokens", "completion_tokens", "prompt_tokens_details", "completion_tokens_details", "cached_tokens", "reasoning_tokens"}
	responsesUsageKeys = openAIUsageKeys{"input_tokens", "output_tokens", "input_tokens_details", "output_tokens_details", "cached_tokens", "reasoning_tokens"}
)

// setOpenAI replaces u with the counts of the OpenAI usage object r, read
// in one pass over r's members (four gjson paths were four passes, two of
// them whole: docs/benchmarks.md, issue 21). It reads what the paths read
// (TestUsageOnePassMatchesPaths, FuzzUsage): a count is the first member
// of its name; a detail is the first member of the details' name that
// holds it, as gjson's "a.b" goes on to a later "a" when the first one has
// no "b".
func (u *Usage) setOpenAI(r gjson.Result, k *openAIUsageKeys) {
	var in, out, cached, reasoning gjson.Result
	r.ForEach(func(key, v gjson.Result) bool {
		switch key.Str {
		case k.input:
			if !in.Exists() {
				in = v
			}
		case k.output:
			if !out.Exists() {
				out = v
			}
		case k.inputDetails:
			if !cached.Exists() {
				cached = v.Get(k.cached)
			}
		case k.outputDetails:
			if !reasoning.Exists() {
				reasoning = v.Get(k.reasoning)
			}
		}
		return true
	})
	*u = Usage{InputTokens: in.Int(), OutputTokens: out.Int(), CachedTokens: cached.Int(), ReasoningTokens: reasoning.Int()}
}
