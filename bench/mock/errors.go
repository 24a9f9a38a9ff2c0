package mock

import "strconv"

// failKind names one way a request is refused.
type failKind uint8

const (
	failMissingKey       failKind = iota + 1 // no bearer token (anthropic: no x-api-key)
	failInvalidKey                           // unknown token, or a token of another kind; arg: the masked key
	failAccountID                            // codex: chatgpt-account-id missing
	failWorkspace                            // codex: chatgpt-account-id differs from the token's account
	failNotFound                             // unknown route; arg: "METHOD /path"
	failMethod                               // known route, wrong method; arg: "METHOD /path"
	failMalformed                            // body is not a JSON object
	failEncoding                             // Content-Encoding cannot be decoded
	failMissingModel                         // no "model" string
	failModelNotFound                        // the account does not serve the model; arg: the model
	failStreamRequired                       // codex: "stream" is not true
	failStoreRequired                        // codex: "store" is not false
	failShutdown                             // the fleet closed before the answer started
	failMissingVersion                       // anthropic: no anthropic-version header
	failMissingMaxTokens                     // anthropic: no "max_tokens" number
	failMissingMessages                      // anthropic: no "messages" array
	failUnsupportedParam                     // codex: a top-level member the backend refuses; arg: its key
	failMissingInput                         // responses: no "input" (nor "prompt" or "conversation", which stand for it)
	failOutputBelowMin                       // responses: max_output_tokens below minOutputTokens; arg: the value sent
)

// failure is a refusal decided by the router, the request checks or an
// account's plan; appendFailure renders it in the route's protocol.
type failure struct {
	kind    failKind
	arg     string
	headers []header // extra response headers
}

// openAIError is one OpenAI error envelope: {"error":{message,type,param,code}}.
type openAIError struct {
	status  int
	message string
	typ     string
	param   string // "" renders null
	code    string // "" renders null
}

func (f *failure) openAI() openAIError {
	switch f.kind {
	case failMissingKey:
		return openAIError{401, "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username and password. You can obtain an API key from https://platform.openai.com/account/api-keys.", "invalid_request_error", "", ""}
	case failInvalidKey, failAccountID, failWorkspace:
		return openAIError{401, "Incorrect API key provided: " + f.arg + ". You can find your API key at https://platform.openai.com/account/api-keys.", "invalid_request_error", "", "invalid_api_key"}
	case failNotFound:
		return openAIError{404, "Invalid URL (" + f.arg + ")", "invalid_request_error", "", ""}
	case failMethod:
		return openAIError{405, "Invalid method for URL (" + f.arg + ")", "invalid_request_error", "", ""}
	case failMalformed:
		return openAIError{400, "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)", "invalid_request_error", "", ""}
	case failEncoding:
		return openAIError{400, "We could not decode the body of your request (unsupported or corrupt Content-Encoding).", "invalid_request_error", "", ""}
	case failMissingModel:
		return openAIError{400, "you must provide a model parameter", "invalid_request_error", "", ""}
	case failModelNotFound:
		return openAIError{404, "The model `" + f.arg + "` does not exist or you do not have access to it.", "invalid_request_error", "", "model_not_found"}
	case failStreamRequired:
		return openAIError{400, "Stream must be set to true", "invalid_request_error", "stream", ""}
	case failStoreRequired:
		return openAIError{400, "Store must be set to false", "invalid_request_error", "store", ""}
	case failUnsupportedParam:
		return openAIError{400, "Unsupported parameter: " + f.arg, "invalid_request_error", f.arg, "unsupported_parameter"}
	case failMissingInput:
		// OpenAI's missing-parameter refusal, as the Responses API words it
		// for a missing member (openai/codex issue 6725: "Missing required
		// parameter: 'input[79].id'.", param, code missing_required_parameter).
		return openAIError{400, "Missing required parameter: 'input'.", "invalid_request_error", "input", "missing_required_parameter"}
	case failOutputBelowMin:
		// The Responses API's refusal of a max_output_tokens below 16, in
		// the words of its integer range checks (the gateway's
		// outputcap.go refuses values below 1 in the same words).
		return openAIError{400, "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= " + strconv.Itoa(minOutputTokens) + ", but got " + f.arg + " instead.", "invalid_request_error", "max_output_tokens", "integer_below_min_value"}
	case failShutdown:
		return openAIError{503, "The server is shutting down. Please retry your request.", "server_error", "", ""}
	}
	return openAIError{500, "The server had an error while processing your request. Sorry about that!", "server_error", "", ""}
}

// codex renders the failure the way the ChatGPT Codex backend does: a FastAPI
// {"detail": "..."} body.
func (f *failure) codex() (status int, detail string) {
	switch f.kind {
	case failMissingKey, failInvalidKey, failAccountID:
		return 401, "Unauthorized"
	case failWorkspace:
		return 403, "You do not have access to this workspace."
	case failNotFound:
		return 404, "Not Found"
	case failMethod:
		return 405, "Method Not Allowed"
	case failMalformed, failEncoding:
		return 400, "Invalid request body"
	case failMissingModel:
		return 400, "Model is required"
	case failModelNotFound:
		return 400, "The '" + f.arg + "' model is not supported when using Codex with a ChatGPT account."
	case failStreamRequired:
		return 400, "Stream must be set to true"
	case failStoreRequired:
		return 400, "Store must be set to false"
	case failUnsupportedParam:
		return 400, "Unsupported parameter: " + f.arg
	case failShutdown:
		return 503, "Service Unavailable"
	}
	return 500, "Internal Server Error"
}

// appendFailure appends the error body of f in the protocol of rt and returns
// the HTTP status. reqID is the request_id of an Anthropic body.
func appendFailure(dst []byte, f *failure, rt route, reqID []byte) ([]byte, int) {
	if rt.anthropicProtocol() {
		e := f.anthropic()
		return appendAnthropicError(dst, e, reqID), e.status
	}
	if rt.codexProtocol() {
		status, detail := f.codex()
		dst = append(dst, `{"detail":`...)
		dst = appendJSONString(dst, detail)
		return append(dst, '}'), status
	}
	e := f.openAI()
	return appendOpenAIError(dst, e), e.status
}

// appendOpenAIError appends the OpenAI error envelope of e.
func appendOpenAIError(dst []byte, e openAIError) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = appendJSONString(dst, e.message)
	dst = append(dst, `,"type":`...)
	dst = appendJSONString(dst, e.typ)
	dst = append(dst, `,"param":`...)
	dst = appendNullableString(dst, e.param)
	dst = append(dst, `,"code":`...)
	dst = appendNullableString(dst, e.code)
	return append(dst, "}}"...)
}

func appendNullableString(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "null"...)
	}
	return appendJSONString(dst, s)
}

// maskKey masks a bearer token the way OpenAI echoes a wrong key:
// "sk-proj-****…abcd".
func maskKey(tok []byte) string {
	if len(tok) <= 8 {
		return "****"
	}
	keep := 3
	if len(tok) > 12 {
		keep = 8
	}
	b := make([]byte, 0, len(tok))
	b = append(b, tok[:keep]...)
	for range len(tok) - keep - 4 {
		b = append(b, '*')
	}
	b = append(b, tok[len(tok)-4:]...)
	return string(b)
}
