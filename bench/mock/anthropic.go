package mock

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// The Anthropic API surface of kind anthropic accounts, beyond the Messages
// rendering of messages.go: authentication (x-api-key and a required
// anthropic-version header), Anthropic's error envelope
// {"type":"error","error":{"type","message"},"request_id"}, the
// request-id and anthropic-ratelimit-* headers, the model list and
// count_tokens. Sources: https://docs.anthropic.com/en/api/errors,
// https://docs.anthropic.com/en/api/rate-limits and the recorded heads in
// testdata/anthropic-messages.

// anthropicError is one Anthropic error: status, error.type, error.message.
type anthropicError struct {
	status  int
	typ     string
	message string
}

// anthropic renders the failure the way the Anthropic API does.
func (f *failure) anthropic() anthropicError {
	switch f.kind {
	case failMissingKey:
		return anthropicError{401, "authentication_error", "x-api-key header is required"}
	case failInvalidKey:
		return anthropicError{401, "authentication_error", "invalid x-api-key"}
	case failMissingVersion:
		return anthropicError{400, "invalid_request_error", "anthropic-version: header is required"}
	case failNotFound:
		return anthropicError{404, "not_found_error", "Not Found"}
	case failMethod:
		return anthropicError{405, "invalid_request_error", "Method Not Allowed"}
	case failMalformed:
		return anthropicError{400, "invalid_request_error", "There was an issue with the format of your request: the body is not a JSON object"}
	case failEncoding:
		return anthropicError{400, "invalid_request_error", "The request body could not be decoded (unsupported or corrupt Content-Encoding)."}
	case failMissingModel:
		return anthropicError{400, "invalid_request_error", "model: Field required"}
	case failMissingMaxTokens:
		return anthropicError{400, "invalid_request_error", "max_tokens: Field required"}
	case failMissingMessages:
		return anthropicError{400, "invalid_request_error", "messages: Field required"}
	case failModelNotFound:
		return anthropicError{404, "not_found_error", "model: " + f.arg}
	case failShutdown:
		return anthropicError{529, "overloaded_error", "Overloaded"}
	}
	return anthropicError{500, "api_error", "Internal server error"}
}

// appendAnthropicError appends the Anthropic error envelope of e; reqID,
// when not empty, is the request_id member.
func appendAnthropicError(dst []byte, e anthropicError, reqID []byte) []byte {
	dst = append(dst, `{"type":"error","error":{"type":`...)
	dst = appendJSONString(dst, e.typ)
	dst = append(dst, `,"message":`...)
	dst = appendJSONString(dst, e.message)
	dst = append(dst, '}')
	if len(reqID) > 0 {
		dst = append(dst, `,"request_id":"`...)
		dst = append(dst, reqID...)
		dst = append(dst, '"')
	}
	return append(dst, '}')
}

// anthropicVersionHeader is the header every Anthropic request must carry
// (https://docs.anthropic.com/en/api/versioning); any value is accepted.
const anthropicVersionHeader = "Anthropic-Version"

// authenticateAnthropic finds the anthropic account of the request's
// x-api-key and checks the anthropic-version header the API requires.
func (f *Fleet) authenticateAnthropic(ctx *fasthttp.RequestCtx, rt route) (*account, *failure) {
	key := ctx.Request.Header.Peek("X-Api-Key")
	if len(key) == 0 {
		return nil, &failure{kind: failMissingKey}
	}
	acc := f.lookup(key)
	if acc == nil || !acc.servesRoute(rt) {
		return nil, &failure{kind: failInvalidKey}
	}
	if len(ctx.Request.Header.Peek(anthropicVersionHeader)) == 0 {
		return nil, &failure{kind: failMissingVersion}
	}
	return acc, nil
}

// anthropicLimit is one anthropic-ratelimit family: its header names and
// the generous, never-exhausted budget every anthropic answer reports.
type anthropicLimit struct {
	limitName, remainingName, resetName string
	limit, remaining                    string
	output                              bool // the output-token family, the one a rate-limit fault exhausts
}

func newAnthropicLimit(family, limit, remaining string) anthropicLimit {
	n := "Anthropic-Ratelimit-" + family
	return anthropicLimit{n + "-Limit", n + "-Remaining", n + "-Reset", limit, remaining, family == "Output-Tokens"}
}

var anthropicLimits = [...]anthropicLimit{
	newAnthropicLimit("Requests", "4000", "3999"),
	newAnthropicLimit("Input-Tokens", "2000000", "1999000"),
	newAnthropicLimit("Output-Tokens", "400000", "400000"),
	newAnthropicLimit("Tokens", "2400000", "2399000"),
}

// setAnthropicHeaders sets request-id and the anthropic-ratelimit-* set
// (resets one minute from now; with exhausted, the output-token family at 0
// resetting at that time instead). b is scratch space, returned grown.
func setAnthropicHeaders(h *fasthttp.ResponseHeader, reqID []byte, now time.Time, exhausted time.Time, b []byte) []byte {
	h.SetBytesV("Request-Id", reqID)
	reset := now.Add(time.Minute).UTC().Truncate(time.Second)
	for _, l := range anthropicLimits {
		h.Set(l.limitName, l.limit)
		rem, at := l.remaining, reset
		if l.output && !exhausted.IsZero() {
			rem, at = "0", exhausted.UTC()
		}
		h.Set(l.remainingName, rem)
		b = at.AppendFormat(b[:0], time.RFC3339)
		h.SetBytesV(l.resetName, b)
	}
	return b[:0]
}

// appendRequestID appends the answer's request id ("req_…").
func (s *stream) appendRequestID(dst []byte) []byte {
	dst = append(dst, "req_"...)
	return append(dst, s.id[:24]...)
}

// serveAnthropicModels answers GET /v1/models for an anthropic account in
// Anthropic's list shape
// (https://docs.anthropic.com/en/api/models-list):
//
//	{"data":[{"type":"model","id","display_name","created_at"}…],"has_more":false,"first_id","last_id"}
func (f *Fleet) serveAnthropicModels(ctx *fasthttp.RequestCtx, acc *account) {
	models := acc.listedModels()
	created := time.Unix(modelsCreated, 0).UTC().Format(time.RFC3339)
	b := make([]byte, 0, 64+128*len(models))
	b = append(b, `{"data":[`...)
	for i, m := range models {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":"model","id":`...)
		b = appendJSONString(b, m)
		b = append(b, `,"display_name":`...) // the id: the mock knows no marketing names
		b = appendJSONString(b, m)
		b = append(b, `,"created_at":"`...)
		b = append(b, created...)
		b = append(b, `"}`...)
	}
	b = append(b, `],"has_more":false,"first_id":`...)
	b = appendNullableString(b, models[0])
	b = append(b, `,"last_id":`...)
	b = appendNullableString(b, models[len(models)-1])
	b = append(b, '}')
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// serveCountTokens answers POST /v1/messages/count_tokens
// (https://docs.anthropic.com/en/api/messages-count-tokens) with
// {"input_tokens": N}, N being the mock's input count (body bytes / 4).
// The request needs a model the account serves and messages. A status
// fault (429, 401, 403, 5xx kinds) refuses it as it refuses answers; other
// faults only hit answers. Counting is not an answer: it is not in the
// stats.
func (f *Fleet) serveCountTokens(ctx *fasthttp.RequestCtx, acc *account) {
	s := getStream(f, acc, routeCountTokens)
	defer putStream(s)
	fl := s.readRequest(ctx)
	if fl == nil && !s.req.messagesSet {
		fl = &failure{kind: failMissingMessages}
	}
	if fl == nil {
		var answered bool
		if fl, answered = s.statusRefusal(ctx, acc); answered {
			return
		}
	}
	if fl != nil {
		writeFailure(ctx, fl, routeCountTokens)
		return
	}
	s.head = s.appendRequestID(s.head[:0])
	s.buf = setAnthropicHeaders(&ctx.Response.Header, s.head, time.Now(), time.Time{}, s.buf[:0])
	b := append(s.buf[:0], `{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(s.req.inputTokens), 10)
	b = append(b, '}')
	s.buf = b
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}
