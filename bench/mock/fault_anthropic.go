package mock

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// The fault statuses of kind anthropic accounts, in Anthropic's shapes
// (https://docs.anthropic.com/en/api/errors): every body is
// {"type":"error","error":{"type","message"},"request_id"} and every answer
// carries request-id and the anthropic-ratelimit-* headers.
//
//	rate_limit_reset        400 invalid_request_error "You have reached your specified API usage
//	                        limits. You will regain access on <date> at <HH:MM> UTC." (the reset
//	                        rounded up to the minute)
//	rate_limit_retry_after  429 rate_limit_error, retry-after, output tokens at 0 until the wait ends
//	unauthorized            401 authentication_error "invalid x-api-key"
//	deactivated             400 invalid_request_error "This organization has been disabled."
//	server_error            500 api_error; bad_gateway 502 api_error; unavailable 529 overloaded_error

// Fixed Anthropic fault bodies and events.
var anthropicOverloaded = anthropicError{529, "overloaded_error", "Overloaded"}

// messagesOverloadedEvent is the `event: error` Anthropic ends a failed
// stream with (testdata/anthropic-messages/stream-error-overloaded.sse).
const messagesOverloadedEvent = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"

// writeAnthropicFaultStatus renders the status fault of an anthropic route.
func (s *stream) writeAnthropicFaultStatus(ctx *fasthttp.RequestCtx, now time.Time) {
	fs := s.p.fault
	h := &ctx.Response.Header
	s.head = s.appendRequestID(s.head[:0])
	var exhausted time.Time
	var e anthropicError
	switch fs.Kind {
	case FaultRateLimitReset:
		at := fs.resetAt.UTC().Add(time.Minute - time.Nanosecond).Truncate(time.Minute)
		e = anthropicError{400, "invalid_request_error", "You have reached your specified API usage limits. You will regain access on " +
			at.Format("2006-01-02 at 15:04") + " UTC."}
	case FaultRateLimitRetryAfter:
		wait := fs.RetryAfter
		if wait < 0 {
			wait = DefaultRetryAfter
		} else {
			h.Set("Retry-After", strconv.FormatInt(max(ceilSeconds(wait), 1), 10))
		}
		exhausted = now.Add(wait).Truncate(time.Second)
		e = anthropicError{429, "rate_limit_error", "This request would exceed the rate limit for your organization (org-troupe-mock) of 400,000 output tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits."}
	case FaultUnauthorized:
		e = (&failure{kind: failInvalidKey}).anthropic()
	case FaultDeactivated:
		// As banned organizations get it (anthropics/claude-code issues
		// #19028, #72457): a 400, told from a bad request by its wording.
		e = anthropicError{400, "invalid_request_error", "This organization has been disabled."}
	case FaultServerError:
		e = anthropicError{500, "api_error", "Internal server error"}
	case FaultBadGateway:
		e = anthropicError{502, "api_error", "Bad gateway"}
	case FaultUnavailable:
		e = anthropicOverloaded
	default:
		e = anthropicError{500, "api_error", "mock: unknown fault kind " + strconv.Quote(string(fs.Kind))}
	}
	s.buf = setAnthropicHeaders(h, s.head, now, exhausted, s.buf[:0])
	s.buf = appendAnthropicError(s.buf[:0], e, s.head)
	ctx.SetStatusCode(e.status)
	ctx.SetContentType("application/json")
	ctx.SetBody(s.buf)
}
