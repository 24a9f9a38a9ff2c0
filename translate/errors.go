package translate

import (
	"github.com/tidwall/gjson"
)

// Error bodies in each protocol's shape:
//   - OpenAI (Chat, Responses): {"error":{"message","type","param","code"}}
//     (https://platform.openai.com/docs/guides/error-codes);
//   - Anthropic: {"type":"error","error":{"type","message"}}
//     (https://docs.anthropic.com/en/api/errors).

// AnthropicStatusType is the Anthropic error type that an HTTP status names
// on its own (https://docs.claude.com/en/api/errors): 400 and 422
// invalid_request_error, 401 authentication_error, 402 billing_error, 403
// permission_error, 404 not_found_error, 413 request_too_large, 429
// rate_limit_error, 503 and 529 overloaded_error, 504 timeout_error; "" for
// any other status, whose type the caller decides (api_error for other 5xx).
func AnthropicStatusType(status int) string {
	switch status {
	case 400, 422:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 402:
		return "billing_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 504:
		return "timeout_error"
	case 503, 529:
		return "overloaded_error"
	}
	return ""
}

// anthropicType is the Anthropic error type for an OpenAI type or code and
// an HTTP status (0 when unknown).
func anthropicType(typ, code string, status int) string {
	switch typ {
	case "invalid_request_error", "authentication_error", "permission_error", "not_found_error",
		"request_too_large", "rate_limit_error", "api_error", "overloaded_error", "billing_error", "timeout_error":
		if !(typ == "invalid_request_error" && status != 0 && status != 400 && status != 422) {
			return typ
		}
	}
	switch code {
	case "invalid_api_key", "missing_api_key":
		return "authentication_error"
	case "rate_limit_exceeded":
		return "rate_limit_error"
	case "insufficient_quota":
		return "billing_error"
	case "model_not_found", "not_found":
		return "not_found_error"
	case "overloaded":
		return "overloaded_error"
	case "timeout":
		return "timeout_error"
	case "request_too_large":
		return "request_too_large"
	}
	if t := AnthropicStatusType(status); t != "" {
		return t
	}
	switch typ {
	case "insufficient_quota":
		return "billing_error"
	case "tokens", "requests", "rate_limit_exceeded":
		return "rate_limit_error"
	case "server_error", "":
		return "api_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// openAIType is the OpenAI error type and code for an Anthropic error type.
func openAIType(typ string, status int) (otype, code string) {
	switch typ {
	case "invalid_request_error":
		return "invalid_request_error", ""
	case "authentication_error":
		return "invalid_request_error", "invalid_api_key"
	case "permission_error":
		return "permission_error", ""
	case "not_found_error":
		return "invalid_request_error", "not_found"
	case "request_too_large":
		return "invalid_request_error", "request_too_large"
	case "rate_limit_error":
		return "rate_limit_error", "rate_limit_exceeded"
	case "billing_error":
		return "insufficient_quota", "insufficient_quota"
	case "overloaded_error":
		return "server_error", "overloaded"
	case "timeout_error":
		return "server_error", "timeout"
	case "api_error":
		return "server_error", ""
	}
	if status >= 500 || status == 0 {
		return "server_error", ""
	}
	return "invalid_request_error", ""
}

// errorParts reads an error body or stream error event of protocol p.
func errorParts(p Protocol, body []byte) (typ, code, param, message string) {
	if !gjson.ValidBytes(body) {
		return "", "", "", ""
	}
	e := getB(body, "error")
	if p == Responses && !e.Exists() {
		// A response.failed event or failed response object.
		e = getB(body, "response.error")
	}
	if e.Type == gjson.String {
		return "", "", "", e.Str
	}
	typ, message = e.Get("type").Str, e.Get("message").Str
	code, param = e.Get("code").String(), e.Get("param").Str
	if e.Get("code").Type == gjson.Null {
		code = ""
	}
	if typ == "" && p == Responses {
		typ = getB(body, "code").Str
		if message == "" {
			message = getB(body, "message").Str
		}
	}
	if message == "" {
		// The Codex backend answers some errors as {"detail":"…"}.
		message = getB(body, "detail").Str
	}
	return typ, code, param, message
}

// TranslateError converts an upstream non-2xx error body of protocol from
// into the error body of protocol to, keeping the status semantics: types
// and codes are mapped (docs/translation.md), the message is kept. A body
// that is not a recognisable error gets a generic message for its status.
// The result is always a complete, valid error body of protocol to.
func TranslateError(from, to Protocol, status int, body []byte) []byte {
	typ, code, param, msg := errorParts(from, body)
	if msg == "" {
		msg = genericMessage(status)
	}
	if from == Messages && to != Messages {
		if code == "" {
			typ, code = openAIType(typ, status)
		} else {
			typ, _ = openAIType(typ, status)
		}
	}
	if typ == "" && to != Messages {
		typ, code = openAIType(anthropicType("", code, status), status)
	}
	return AppendErrorBody(make([]byte, 0, 96+len(msg)), to, status, typ, code, param, msg)
}

// genericMessage is the message for an error body without one.
func genericMessage(status int) string {
	switch {
	case status == 429:
		return "The upstream is rate limiting requests; please retry later."
	case status >= 500:
		return "The upstream server had an error while processing the request."
	case status == 401 || status == 403:
		return "The upstream refused the credentials."
	}
	return "The upstream rejected the request."
}

// AppendErrorBody appends an error body in protocol p's shape built from the
// parts and returns the extended slice. code and param render null when
// empty (OpenAI shapes); for Messages, typ is mapped to Anthropic's error
// types when it is an OpenAI one (using code and status), and code and param
// are not part of the shape.
func AppendErrorBody(dst []byte, p Protocol, status int, typ, code, param, message string) []byte {
	if p == Messages {
		dst = append(dst, `{"type":"error","error":{`...)
		dst = kStr(dst, "type", anthropicType(typ, code, status))
		dst = kStr(dst, "message", message)
		return append(dst, "}}"...)
	}
	if typ == "" {
		typ, _ = openAIType("", status)
	}
	dst = append(dst, `{"error":{`...)
	dst = kStr(dst, "message", message)
	dst = kStr(dst, "type", typ)
	dst = kStrNull(dst, "param", param)
	dst = kStrNull(dst, "code", code)
	return append(dst, "}}"...)
}
