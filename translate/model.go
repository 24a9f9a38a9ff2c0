package translate

// The canonical model: every protocol's request, non-stream response and
// stream is decoded into these types and encoded out of them, so each
// protocol is written once (a decoder and an encoder) and the six
// directions fall out. The field names follow whichever protocol names the
// idea most precisely; docs/translation.md maps every field.

// role is the author of a message.
type role uint8

const (
	roleSystem    role = iota + 1 // system (Chat, Responses, Anthropic's system param)
	roleDeveloper                 // developer (Chat, Responses); Anthropic has only system
	roleUser
	roleAssistant
	roleTool // tool results (Chat role "tool"; Responses *_call_output items; Anthropic tool_result blocks in a user turn)
)

// partType is the kind of a content part.
type partType uint8

const (
	partText       partType = iota + 1
	partImage               // URL or base64 data
	partToolCall            // the assistant calls a tool
	partToolResult          // the result of a call, sent back by the client
	partReasoning           // Responses reasoning item / Anthropic thinking block
	partRefusal             // the assistant refused (Chat refusal, Responses refusal part)
)

// part is one piece of a message's content.
type part struct {
	typ  partType
	text string // text, refusal; reasoning: the thinking text or joined summary

	// image (partImage): url is an http(s) URL or "" when the image is inline
	// base64 data (mediaType + data).
	url, mediaType, data, detail string

	// tool call (partToolCall) and tool result (partToolResult, callID only).
	callID, name string
	args         string // function arguments as JSON text; for a custom tool call, its raw input
	custom       bool   // a Responses/Chat custom (freeform) tool call
	namespace    string // Responses namespace of the called tool, "" for none
	// argsParam is the JSON path of args in the client's request body
	// ("messages[1].tool_calls[0].function.arguments"), which an encoder
	// that cannot take the arguments names in its 400; "" in answers and
	// streams.
	argsParam string

	// tool result
	result  []part // text and image parts
	isError bool

	// reasoning: summary holds the Responses summary texts (text the joined
	// thinking); signature is Anthropic's thinking signature; encrypted is
	// Responses' encrypted_content; redacted is Anthropic's redacted_thinking
	// data.
	summary   []string
	signature string
	encrypted string
	redacted  string
	itemID    string // the Responses item id the client sent, if any
	// item is a Responses reasoning item's JSON as the upstream sent it,
	// carried in an Anthropic signature (sigOpenAIItem) so that it goes
	// back to a Responses upstream byte for byte; "" for none.
	item string
}

// message is one turn (Chat message, Responses message or item group,
// Anthropic message).
type message struct {
	role  role
	parts []part
}

// tool is a tool the model may call.
type tool struct {
	name, description string
	parameters        string // JSON Schema as raw JSON text, "" for none
	strict            *bool
	custom            bool   // freeform custom tool (Responses/Chat "custom")
	format            string // custom tool input format as raw JSON, "" for free text
	namespace         string // Responses namespace the tool came from
}

// toolChoice is how the model must use tools.
type toolChoice struct {
	mode string // "" (unset), "auto", "none", "required", "tool" (exactly name)
	name string
}

// format is the requested output format.
type format struct {
	typ         string // "", "text", "json_object", "json_schema"
	name        string
	description string
	schema      string // raw JSON
	strict      *bool
}

// reasoning is what the request asks of the model's thinking.
type reasoning struct {
	effort  string // minimal, low, medium, high, xhigh (OpenAI names); "none" disables
	budget  int64  // Anthropic thinking budget_tokens, 0 when unset
	summary string // Responses reasoning.summary: auto, concise, detailed
	off     bool   // thinking explicitly disabled
	on      bool   // thinking explicitly enabled (Anthropic enabled/adaptive)
	omitted bool   // Anthropic display "omitted": the client does not want thinking text
}

// request is the canonical request.
type request struct {
	model        string
	stream       bool
	messages     []message
	tools        []tool
	toolChoice   toolChoice
	parallel     *bool // parallel tool calls allowed
	maxTokens    int64 // 0 when unset
	temperature  *float64
	topP         *float64
	stop         []string
	reasoning    reasoning
	format       format
	includeUsage bool // Chat stream_options.include_usage
	encrypted    bool // Responses include reasoning.encrypted_content
	user         string
}

// finish is why the model stopped.
type finish uint8

const (
	finishNone          finish = iota
	finishStop                 // natural end (end_turn, stop, completed)
	finishLength               // token limit (max_tokens, length, incomplete max_output_tokens)
	finishToolCalls            // the turn ends in tool calls (tool_use, tool_calls)
	finishContentFilter        // content filter or refusal
	finishStopSequence         // a stop sequence matched (Anthropic stop_sequence; Chat stop)
)

// response is the canonical non-stream answer.
type response struct {
	id, model string
	created   int64
	parts     []part // assistant output: text, refusal, reasoning, tool calls
	finish    finish
	stopSeq   string
	usage     Usage
	hasUsage  bool
}
