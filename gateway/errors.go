package gateway

import (
	"bytes"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/translate"
	"github.com/valyala/fasthttp"
)

// APIError is the one HTTP-facing error type of the gateway. It renders in the
// client's protocol; for OpenAI clients that is
//
//	{"error":{"message":"…","type":"…","param":null,"code":"…"}}
//
// (https://platform.openai.com/docs/guides/error-codes), for Anthropic
// clients
//
//	{"type":"error","error":{"type":"…","message":"…"},"request_id":"req_…"}
//
// with the type following the status (anthropicErrorType;
// https://docs.claude.com/en/api/errors). Messages never contain secrets.
type APIError struct {
	Status     int           // HTTP status
	Type       string        // OpenAI error type, e.g. "invalid_request_error"
	Code       string        // OpenAI error code, e.g. "invalid_api_key"; "" renders null
	Param      string        // offending parameter; "" renders null
	Message    string        // human-readable
	RetryAfter time.Duration // sets Retry-After (whole seconds, at least 1) when > 0
}

// Error returns the client-facing message.
func (e *APIError) Error() string { return e.Message }

// Errors the gateway answers with. Each constructor documents its status.
//
// errInvalidKey is the 401 for a key the gateway does not know. Its text is
// the same for every such key (it names no key and says nothing of why), so
// it tells a caller nothing about which keys exist; it says where keys come
// from, because the usual unknown key is one from another data directory or
// from an earlier troupe demo run, whose keys are revoked at each start.
func errInvalidKey() *APIError {
	return &APIError{Status: 401, Type: "invalid_request_error", Code: "invalid_api_key",
		Message: "Incorrect API key provided. Troupe keys belong to the data directory they were created in, and troupe demo makes a new key at each start (an earlier run's no longer works): use the key this gateway printed or was given, or ask your Troupe operator for a valid key."}
}

// errUnusableKey is the 401 for a known key that may not be used now:
// disabled by the operator, or past its expiry. The code stays
// invalid_api_key, which clients act on; only a holder of the secret
// learns the reason.
func errUnusableKey(why string) *APIError {
	return &APIError{Status: 401, Type: "invalid_request_error", Code: "invalid_api_key",
		Message: "This API key " + why + ". Ask your Troupe operator to enable it or for a new key."}
}

func errMissingKey() *APIError {
	return &APIError{Status: 401, Type: "invalid_request_error", Code: "missing_api_key",
		Message: "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."}
}

func errBadJSON() *APIError {
	return &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid_json",
		Message: "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload.)"}
}

// msgAnthropicBadJSON is the message of an unparsable body in Anthropic's
// error shape (type invalid_request_error, status 400).
const msgAnthropicBadJSON = "There was an error parsing the body of your request: it must be a JSON object (https://docs.anthropic.com/en/api/messages)."

func errMissingModel() *APIError {
	return &APIError{Status: 400, Type: "invalid_request_error", Code: "missing_required_parameter", Param: "model",
		Message: "you must provide a model parameter"}
}

func errBadParam(param, msg string) *APIError {
	return &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid_type", Param: param, Message: msg}
}

// clip shortens client-supplied text quoted in an error to 256 bytes.
func clip(s string) string {
	if len(s) <= 256 {
		return s
	}
	return s[:256] + "…"
}

func errModelNotFound(model string) *APIError {
	model = clip(model)
	return &APIError{Status: 404, Type: "invalid_request_error", Code: "model_not_found", Param: "model",
		Message: "The model `" + model + "` does not exist or you do not have access to it. GET /v1/models lists the models this key can use."}
}

func errModelNotAllowed(model string) *APIError {
	model = clip(model)
	return &APIError{Status: 403, Type: "permission_error", Code: "model_not_allowed", Param: "model",
		Message: "This API key is not allowed to use the model `" + model + "`."}
}

func errNoAccount(retry time.Duration) *APIError {
	return &APIError{Status: 503, Type: "server_error", Code: "no_account_available", RetryAfter: retry,
		Message: "No upstream account is available to serve this request right now. Please retry shortly."}
}

func errUpstream(msg string) *APIError {
	return &APIError{Status: 502, Type: "server_error", Code: "upstream_error", Message: msg}
}

func errTooLarge(limit int) *APIError {
	return &APIError{Status: 413, Type: "invalid_request_error", Code: "request_too_large",
		Message: "Request body too large: the limit is " + strconv.Itoa(limit) + " bytes."}
}

// errNotFound answers a path no route serves. A path that starts /v1/v1/ is
// almost always a client base URL that already ends in /v1 (ANTHROPIC_BASE_URL
// takes none; OPENAI_BASE_URL takes one), so the message says which to drop.
func errNotFound(path string) *APIError {
	path = clip(path)
	msg := "Unknown request URL: " + path + ". Please check the URL for typos."
	if strings.HasPrefix(path, "/v1/v1/") {
		msg = "Unknown request URL: " + path + ". The base URL already ends in /v1: drop one " +
			"(ANTHROPIC_BASE_URL takes the gateway's address without /v1; OPENAI_BASE_URL takes it with /v1)."
	}
	return &APIError{Status: 404, Type: "invalid_request_error", Code: "unknown_url", Message: msg}
}

func errMethod(method, path string) *APIError {
	method, path = clip(method), clip(path)
	return &APIError{Status: 405, Type: "invalid_request_error", Code: "method_not_allowed",
		Message: "Method " + method + " is not allowed for " + path + "."}
}

// writeError renders e in the client's error shape (anthropicClient decides).
func writeError(ctx *fasthttp.RequestCtx, e *APIError) {
	writeErrorShape(ctx, e, anthropicClient(ctx))
}

// writeErrorShape renders e in Anthropic's error shape when anthropic is
// set, else in OpenAI's.
func writeErrorShape(ctx *fasthttp.RequestCtx, e *APIError, anthropic bool) {
	resetKeepingRequestID(ctx)
	if len(ctx.Response.Header.Peek("X-Request-Id")) == 0 {
		// Every error names a request, as Anthropic's always do: answers
		// that never started a request record (a method refused, an
		// unknown path, /v1/models/{id}) name one here.
		setRequestID(ctx, newRequestID(), anthropic)
	}
	ctx.SetStatusCode(e.Status)
	ctx.SetContentType("application/json")
	if e.RetryAfter > 0 {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(max(1, int((e.RetryAfter+time.Second-1)/time.Second))))
	}
	if anthropic {
		msg := e.Message
		if e.Code == "invalid_json" {
			msg = msgAnthropicBadJSON // errBadJSON's text is OpenAI's and names the OpenAI API
		}
		id := string(ctx.Response.Header.Peek("X-Request-Id"))
		setRequestID(ctx, id, true) // request-id too, and the body's request_id
		b := make([]byte, 0, 128+len(msg))
		ctx.SetBody(appendAnthropicError(b, e.Status, msg, id))
		return
	}
	b := make([]byte, 0, 160+len(e.Message))
	b = append(b, `{"error":{"message":`...)
	b = translate.AppendString(b, e.Message)
	b = append(b, `,"type":`...)
	b = translate.AppendString(b, e.Type)
	b = append(b, `,"param":`...)
	b = appendNullable(b, e.Param)
	b = append(b, `,"code":`...)
	b = appendNullable(b, e.Code)
	b = append(b, "}}\n"...)
	ctx.SetBody(b)
}

func appendNullable(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return translate.AppendString(b, s)
}

// setRequestID names the request id on the answer: X-Request-Id always,
// and for an Anthropic client also request-id, the header Anthropic's API
// answers with and its SDKs read (response._request_id, error.request_id
// comes in the body too).
func setRequestID(ctx *fasthttp.RequestCtx, id string, anthropic bool) {
	ctx.Response.Header.Set("X-Request-Id", id)
	if anthropic {
		ctx.Response.Header.Set("Request-Id", id)
	}
}

// resetKeepingRequestID clears the response but keeps its X-Request-Id
// (and request-id, when set), so every answer, errors included, can be
// traced to the gateway's logs.
func resetKeepingRequestID(ctx *fasthttp.RequestCtx) {
	id := ctx.Response.Header.Peek("X-Request-Id")
	if len(id) == 0 {
		ctx.Response.Reset()
		return
	}
	anthropic := len(ctx.Response.Header.Peek("Request-Id")) > 0
	var buf [64]byte
	saved := append(buf[:0], id...)
	ctx.Response.Reset()
	ctx.Response.Header.SetBytesV("X-Request-Id", saved)
	if anthropic {
		ctx.Response.Header.SetBytesV("Request-Id", saved)
	}
}

// anthropicClient reports whether the request's errors (and model list) take
// Anthropic's shape: the Messages endpoints always, the OpenAI endpoints
// never, and the others (/v1/models, unknown paths) when the client sent an
// anthropic-version or x-api-key header, which OpenAI clients never send.
func anthropicClient(ctx *fasthttp.RequestCtx) bool {
	return anthropicRequest(ctx.Path(), &ctx.Request.Header)
}

// anthropicHeader is anthropicClient from a request head alone (its path
// from the request URI), for when fasthttp has not built the request yet.
func anthropicHeader(h *fasthttp.RequestHeader) bool {
	p := h.RequestURI()
	if i := bytes.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	return anthropicRequest(p, h)
}

// anthropicPath reports whether path p is one of Anthropic's (/v1/messages…).
func anthropicPath(p []byte) bool {
	return bytes.HasPrefix(p, pathMessages) || bytes.HasPrefix(p, pathMessages[3:])
}

// anthropicRequest decides by path, then by Anthropic's headers.
func anthropicRequest(p []byte, h *fasthttp.RequestHeader) bool {
	switch {
	case anthropicPath(p):
		return true
	case bytes.HasPrefix(p, pathChat) || bytes.HasPrefix(p, pathChat[3:]) ||
		bytes.HasPrefix(p, pathResponses) || bytes.HasPrefix(p, pathResponses[3:]),
		bytes.HasPrefix(p, pathAdmin): // the admin API answers in OpenAI's shape (docs/admin-api.md)
		return false
	}
	return len(h.PeekBytes(headerAnthropicVersion)) > 0 || len(h.PeekBytes(headerAPIKey)) > 0
}

var (
	pathMessages           = []byte("/v1/messages")
	pathAdmin              = []byte("/api/admin/")
	pathChat               = []byte("/v1/chat/completions")
	pathResponses          = []byte("/v1/responses")
	headerAnthropicVersion = []byte("anthropic-version")
)

// anthropicErrorType is the Anthropic error type of an HTTP status, as the
// API uses them (https://docs.claude.com/en/api/errors): 400
// invalid_request_error, 401 authentication_error, 402 billing_error, 403
// permission_error, 404 not_found_error, 413 request_too_large, 429
// rate_limit_error, 503 and 529 overloaded_error, 504 timeout_error, other
// 5xx api_error, other 4xx invalid_request_error.
func anthropicErrorType(status int) string {
	if t := translate.AnthropicStatusType(status); t != "" {
		return t
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// appendAnthropicError appends Anthropic's error body
// {"type":"error","error":{"type","message"},"request_id"} (request_id
// omitted when empty).
func appendAnthropicError(b []byte, status int, msg, requestID string) []byte {
	b = append(b, `{"type":"error","error":{"type":`...)
	b = translate.AppendString(b, anthropicErrorType(status))
	b = append(b, `,"message":`...)
	b = translate.AppendString(b, msg)
	b = append(b, '}')
	if requestID != "" {
		b = append(b, `,"request_id":`...)
		b = translate.AppendString(b, requestID)
	}
	return append(b, "}\n"...)
}
