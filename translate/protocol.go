package translate

import "strconv"

// Protocol is a wire protocol a client or an upstream speaks, and so the
// endpoint a request goes to: the gateway's client endpoints, the upstream
// transports (upstream.Request.Endpoint) and the translators all name
// protocols with it. The zero value is no protocol.
type Protocol uint8

// The three protocols Troupe speaks and translates among.
const (
	Chat      Protocol = iota + 1 // OpenAI Chat Completions: POST /v1/chat/completions, upstream {base}/chat/completions
	Responses                     // OpenAI Responses: POST /v1/responses, upstream {base}/responses
	Messages                      // Anthropic Messages: POST /v1/messages, upstream {base}/messages
)

// String returns "chat", "responses" or "messages" ("protocol(N)" for an
// unknown value).
func (p Protocol) String() string {
	switch p {
	case Chat:
		return "chat"
	case Responses:
		return "responses"
	case Messages:
		return "messages"
	}
	return "protocol(" + strconv.Itoa(int(p)) + ")"
}

// Route returns the protocol's route name, "chat.completions", "responses"
// or "messages" ("unknown" for another value): the label of the gateway's
// metrics, the route of its usage records and the policy's request.protocol.
func (p Protocol) Route() string {
	switch p {
	case Chat:
		return "chat.completions"
	case Responses:
		return "responses"
	case Messages:
		return "messages"
	}
	return "unknown"
}

func (p Protocol) valid() bool { return p >= Chat && p <= Messages }

// Error is a refusal to translate: the body is malformed for its protocol,
// or the target protocol cannot express something the request uses (never
// silent loss). Status is 400 (HTTP Bad Request); Type is
// "invalid_request_error" (the type both OpenAI and Anthropic use for it);
// Param names the offending field as a JSON path in the client's body
// ("messages.2.content.0.type"), "" when none; Message says what and why.
type Error struct {
	Status  int
	Type    string
	Param   string
	Message string
}

// Error returns the message.
func (e *Error) Error() string { return "translate: " + e.Message }

// badRequest returns a 400 *Error about param.
func badRequest(param, msg string) *Error {
	return &Error{Status: 400, Type: "invalid_request_error", Param: param, Message: msg}
}

// badType returns the 400 for a member named param (such as
// "tools.0.type") whose type value typ a request cannot take: "Missing
// required parameter: 'tools.0.type'." (Anthropic's words with anthropic:
// "tools.0.type: Field required") when typ is empty (absent, null or not a
// string), else "<what> type 'typ' <why>". A missing type read "tool type
// cannot be translated", naming nothing.
func badType(param, what, typ, why string, anthropic bool) *Error {
	switch {
	case typ == "" && anthropic:
		return badRequest(param, param+": Field required")
	case typ == "":
		return badRequest(param, "Missing required parameter: '"+param+"'.")
	}
	return badRequest(param, what+" type '"+typ+"' "+why)
}

// cannot returns the 400 for a field the target protocol cannot express.
func cannot(param string, from, to Protocol, what string) *Error {
	return badRequest(param, what+" ("+param+") cannot be translated from "+from.String()+" to "+to.String())
}
