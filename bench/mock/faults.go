package mock

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// FaultKind names one way an upstream account fails a request. Every kind
// renders in the shapes of the account's Kind and route (the Codex
// backend's, OpenAI's, or Anthropic's: the kind docs below give the OpenAI
// and Codex shapes, fault_anthropic.go the Anthropic statuses; an anthropic
// stream's pre-content event is message_start and its error event
// Anthropic's overloaded_error) and works on every route the account
// serves. "Pre-content"
// kinds (see PreContent) fail before the client has seen any answer text, so
// a gateway can still serve the request from another account.
type FaultKind string

// The fault kinds. The "stream" and "JSON" notes say what a streamed
// ("stream": true) and a non-streamed request get; codex accounts only take
// streamed requests.
const (
	// FaultRateLimitReset is a used-up quota with a known reset. Codex: 429
	// {"error":{"type":"usage_limit_reached","message","plan_type",
	// "resets_at","resets_in_seconds"}} with the x-codex-* headers showing the
	// window at 100%. openai: 429 insufficient_quota (OpenAI's body carries no
	// reset time). openai_compat: 429 {"error":{"message":"…insufficient
	// balance… quota exceeded…","type":"exceeded_current_quota_error"}}, the
	// wording-only quota signal of compatible providers. The quota comes back
	// Fault.ResetsIn after the fault was armed: from then on the fault no
	// longer fires and the account answers normally.
	FaultRateLimitReset FaultKind = "rate_limit_reset"
	// FaultRateLimitRetryAfter is a plain rate limit: 429 with
	// code rate_limit_exceeded ("…Please try again in 12s…"), a Retry-After
	// header in whole seconds (Fault.RetryAfter rounded up) and, on openai
	// kinds, x-ratelimit-* headers with the token budget at 0 and
	// X-Ratelimit-Reset-Tokens set to RetryAfter; codex accounts send their
	// usual x-codex-* headers (below 100%) instead.
	FaultRateLimitRetryAfter FaultKind = "rate_limit_retry_after"
	// FaultUnauthorized is a credential the upstream no longer accepts: 401.
	// Codex: {"error":{…,"code":"token_invalidated"},"status":401}; openai:
	// invalid_api_key with the masked key. The model listings refuse it too.
	FaultUnauthorized FaultKind = "unauthorized"
	// FaultDeactivated is an account that is gone for good. Codex: 402
	// {"detail":{"code":"deactivated_workspace"}}; openai: 403 with code
	// account_deactivated. The model listings refuse it too.
	FaultDeactivated FaultKind = "deactivated"
	// FaultServerError is 500 with the OpenAI server_error envelope.
	FaultServerError FaultKind = "server_error"
	// FaultBadGateway is 502 with the OpenAI server_error envelope.
	FaultBadGateway FaultKind = "bad_gateway"
	// FaultUnavailable is 503 with the OpenAI server_error envelope.
	FaultUnavailable FaultKind = "unavailable"
	// FaultResetBeforeHeaders closes the connection with a TCP reset before
	// any byte of a response: the client's read fails ("connection reset by
	// peer").
	FaultResetBeforeHeaders FaultKind = "reset_before_headers"
	// FaultDisconnectBeforeContent cuts the connection before any answer
	// text. Stream: 200, the SSE headers and the events that precede content
	// (Chat: the role chunk; Responses/Codex: response.created and
	// response.in_progress), then, when the first content would have been due
	// (Account.Latency) plus Fault.Delay, the connection closes mid-body (the
	// chunked body never ends: the client reads io.ErrUnexpectedEOF). JSON:
	// the 200 headers with the full Content-Length and no body.
	FaultDisconnectBeforeContent FaultKind = "disconnect_before_content"
	// FaultDisconnectAfterContent cuts the connection after content was sent,
	// so it is NOT pre-content for a stream. Stream: the normal events up to
	// and including the first half of the text deltas (at least one), paced
	// as usual, then the connection closes mid-body; there is no finish
	// event, response.completed or [DONE]. JSON: the 200 headers and the
	// first half of the body bytes, then the connection closes.
	FaultDisconnectAfterContent FaultKind = "disconnect_after_content"
	// FaultEmptyStream is a 200 with nothing in it, cleanly ended. Stream:
	// text/event-stream with no events at all. JSON: application/json with
	// an empty body (Content-Length: 0).
	FaultEmptyStream FaultKind = "empty_stream"
	// FaultErrorEventFirst is a 200 whose answer is an error. Stream, Chat:
	// one `data: {"error":{…server_error…}}` event and the end (no [DONE]).
	// Stream, Responses/Codex: `event: error` (sequence_number 0, a nested
	// error{type,code,message,param} with code server_error), then
	// `event: response.failed` (status failed, error{code,message}), then
	// the end. JSON, Chat: the server_error envelope with status 200. JSON,
	// Responses: a response object with status "failed".
	FaultErrorEventFirst FaultKind = "error_event_first"
	// FaultJSONWhenStream answers in the wrong shape, a complete normal
	// answer otherwise (AnswerText). Stream: 200 application/json with the
	// chat.completion or response object. JSON (the reverse): 200
	// text/event-stream with the complete normal event stream.
	FaultJSONWhenStream FaultKind = "json_when_stream"
	// FaultSlowFirstToken delays the first content by Fault.Delay (on top of
	// Account.Latency; default DefaultSlowFirstToken), then answers normally.
	// Stream: the 200 headers (and Responses' created/in_progress events) at
	// once, then silence, then the usual events. JSON: the usual answer,
	// Delay later. The answer carries "Connection: close" (the mock serves it
	// on a connection taken over from the server, to notice at once a client
	// that gives up waiting: that request counts as a fault, one that waits
	// it out as Completed).
	FaultSlowFirstToken FaultKind = "slow_first_token"
	// FaultHang never answers. Stream: the 200 SSE headers, then silence.
	// JSON: nothing at all, not even headers. The connection stays open until
	// the client closes it (or the fleet closes).
	FaultHang FaultKind = "hang"
)

// faultKinds lists every kind, pre-content ones first.
var faultKinds = [...]FaultKind{
	FaultRateLimitReset, FaultRateLimitRetryAfter, FaultUnauthorized, FaultDeactivated,
	FaultServerError, FaultBadGateway, FaultUnavailable,
	FaultResetBeforeHeaders, FaultDisconnectBeforeContent, FaultEmptyStream,
	FaultErrorEventFirst, FaultJSONWhenStream, FaultSlowFirstToken, FaultHang,
	FaultDisconnectAfterContent,
}

// FaultKinds returns every fault kind.
func FaultKinds() []FaultKind { return append([]FaultKind(nil), faultKinds[:]...) }

// PreContentMix returns the fault kinds that strike before the client has
// seen any answer text: every kind except FaultDisconnectAfterContent. A
// gateway can serve a request that meets one of them from another account.
// (slow_first_token and hang only count as failures for a gateway that
// gives up on a first token after a bounded wait.)
func PreContentMix() []FaultKind {
	return append([]FaultKind(nil), faultKinds[:len(faultKinds)-1]...)
}

// Valid reports whether k is one of the kinds above.
func (k FaultKind) Valid() bool {
	for _, v := range faultKinds {
		if k == v {
			return true
		}
	}
	return false
}

// PreContent reports whether k strikes before any answer text reaches the
// client (see PreContentMix).
func (k FaultKind) PreContent() bool {
	return k.Valid() && k != FaultDisconnectAfterContent
}

// ParseFaultKind returns the kind named s (e.g. "rate_limit_reset").
func ParseFaultKind(s string) (FaultKind, error) {
	if k := FaultKind(s); k.Valid() {
		return k, nil
	}
	return "", fmt.Errorf("mock: unknown fault kind %q", s)
}

// Defaults of the Fault options.
const (
	// DefaultSlowFirstToken is the Delay of a slow_first_token fault whose
	// Delay is 0.
	DefaultSlowFirstToken = 30 * time.Second
	// DefaultResetsIn is the ResetsIn of a rate_limit_reset fault whose
	// ResetsIn is 0.
	DefaultResetsIn = time.Hour
	// DefaultRetryAfter is the RetryAfter of a rate_limit_retry_after fault
	// whose RetryAfter is 0.
	DefaultRetryAfter = 12 * time.Second
)

// Fault makes an account fail some or all of its requests. A request the
// account refuses for a reason of its own (unknown model, codex stream/store
// rules, bad JSON) is refused as usual; on every other request the fault
// fires with probability Rate and replaces the normal answer. Requests it
// fires on are counted in AccountStats.Faults.
type Fault struct {
	// Kind is what happens (see FaultKind). An unknown kind answers 500.
	Kind FaultKind
	// Rate is the probability that the fault fires on a request, drawn
	// independently per request. 0 (the zero value), negative values and
	// values >= 1 mean always.
	Rate float64
	// Delay is how long after the request the fault strikes (default 0): the
	// wait before an error status, the reset, an empty or error stream, or a
	// wrong-shape answer; the wait after the pre-content events (plus
	// Account.Latency) or after the last content delta before a disconnect.
	// For slow_first_token it is the extra wait before the first content
	// (default DefaultSlowFirstToken). hang ignores it.
	Delay time.Duration
	// ResetsIn is, for rate_limit_reset, how long after the fault is armed
	// (Fleet.New/Add, or SetFault) the quota comes back; default
	// DefaultResetsIn. The codex body's resets_in_seconds counts down to it
	// (rounded up to a whole second) and resets_at is that instant in unix
	// seconds (rounded up).
	ResetsIn time.Duration
	// RetryAfter is, for rate_limit_retry_after, the wait the 429 asks for:
	// Retry-After in whole seconds (rounded up), X-Ratelimit-Reset-Tokens and
	// the message's "try again in". Default DefaultRetryAfter; negative means
	// no Retry-After header (the rest says DefaultRetryAfter).
	RetryAfter time.Duration
}

// AssignFaults gives a fault to round(fraction × len(accounts)) of the
// accounts, chosen by a pseudo-random permutation seeded with seed: the same
// arguments always choose the same accounts and kinds. The kinds of mix are
// dealt in turn over the chosen accounts (so each kind gets an equal share,
// ±1); an empty mix means PreContentMix(). Each chosen account gets its own
// &Fault{Kind: k, Rate: 1} (other options at their defaults; change them on
// the returned accounts if needed); the other accounts keep their Fault.
// fraction is clamped to [0, 1].
func AssignFaults(accounts []Account, fraction float64, mix []FaultKind, seed int64) {
	if len(mix) == 0 {
		mix = PreContentMix()
	}
	if !(fraction > 0) || len(accounts) == 0 { // also NaN
		return
	}
	fraction = min(fraction, 1)
	n := int(math.Round(fraction * float64(len(accounts))))
	rng := rand.New(rand.NewPCG(uint64(seed), 0x74726f7570652d66)) // "troupe-f"
	for i, idx := range rng.Perm(len(accounts))[:n] {
		accounts[idx].Fault = &Fault{Kind: mix[i%len(mix)], Rate: 1}
	}
}

// faultState is an armed Fault: the options with their defaults, and what is
// derived from the time it was armed. It is immutable; Fleet.SetFault swaps
// in a new one.
type faultState struct {
	Fault
	resetAt time.Time // rate_limit_reset: when the quota comes back
}

func newFaultState(f Fault, now time.Time) *faultState {
	if f.Rate <= 0 || f.Rate > 1 {
		f.Rate = 1
	}
	f.Delay = max(f.Delay, 0)
	fs := &faultState{}
	switch f.Kind {
	case FaultSlowFirstToken:
		if f.Delay == 0 {
			f.Delay = DefaultSlowFirstToken
		}
	case FaultRateLimitReset:
		if f.ResetsIn <= 0 {
			f.ResetsIn = DefaultResetsIn
		}
		fs.resetAt = now.Add(f.ResetsIn)
	case FaultRateLimitRetryAfter:
		if f.RetryAfter == 0 {
			f.RetryAfter = DefaultRetryAfter
		}
	}
	fs.Fault = f
	return fs
}

// fires decides whether the fault strikes a request arriving at now.
func (fs *faultState) fires(now time.Time) bool {
	if fs.Kind == FaultRateLimitReset && !now.Before(fs.resetAt) {
		return false // the quota is back
	}
	return fs.Rate >= 1 || rand.Float64() < fs.Rate
}

// isStatus reports whether the fault answers with an error status.
func (fs *faultState) isStatus() bool {
	switch fs.Kind {
	case FaultResetBeforeHeaders, FaultDisconnectBeforeContent, FaultDisconnectAfterContent,
		FaultHang, FaultEmptyStream, FaultErrorEventFirst, FaultJSONWhenStream, FaultSlowFirstToken:
		return false
	}
	return true // the status kinds, and unknown kinds (500)
}

// Fixed texts of the fault answers.
const (
	msgServerError       = "The server had an error while processing your request. Sorry about that!"
	msgBadGateway        = "Bad gateway."
	msgUnavailable       = "The server is overloaded or not ready yet."
	msgInsufficientQuota = "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."
	msgDeactivated       = "Your OpenAI account has been deactivated, please check your email for more information. If you feel this is an error, contact us through our help center at help.openai.com."

	// bodyCompatQuota is a compatible provider's quota refusal: no OpenAI
	// code, the signal is in the type and wording.
	bodyCompatQuota = `{"error":{"message":"Your account has insufficient balance: current quota exceeded. Please recharge and try again.","type":"exceeded_current_quota_error"}}`
	// bodyTokenInvalidated is the codex backend's 401 for a revoked token
	// (testdata/codex-backend/error-401-token-invalidated.json).
	bodyTokenInvalidated = `{"error":{"message":"Your authentication token has been invalidated. Please try signing in again.","type":"invalid_request_error","code":"token_invalidated","param":null},"status":401}`
	// bodyDeactivatedWorkspace is the codex backend's 402 for a deactivated
	// ChatGPT workspace.
	bodyDeactivatedWorkspace = `{"detail":{"code":"deactivated_workspace"}}`

	// chatErrorEvent is a Chat stream's error event
	// (testdata/openai-chat/stream-midstream-error.sse).
	chatErrorEvent = `data: {"error":{"message":"` + msgServerError + `","type":"server_error","param":null,"code":null}}` + "\n\n"
)

// serverError is the envelope of 500, 502 and 503.
func serverError(status int, msg string) openAIError {
	return openAIError{status: status, message: msg, typ: "server_error"}
}

// ceilSeconds returns d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// appendSeconds appends d in seconds the way OpenAI writes a wait ("12s",
// "11.054s").
func appendSeconds(dst []byte, d time.Duration) []byte {
	dst = strconv.AppendFloat(dst, math.Round(d.Seconds()*1000)/1000, 'f', -1, 64)
	return append(dst, 's')
}
