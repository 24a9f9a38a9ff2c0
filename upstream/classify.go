package upstream

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/translate"
)

// Class is a failure class: what a failed upstream attempt means for the
// account and for the request. The table lives in docs/architecture.md
// ("Failure classes"); Classify is the one place that decides it.
type Class uint8

// Failure classes. ClassNone is a success.
const (
	ClassNone      Class = iota
	ClassQuota           // quota or usage limit exhausted: cool until the reset the upstream gave
	ClassRate            // rate limited: short cooldown with capped exponential backoff
	ClassAuth            // credentials rejected (401)
	ClassBanned          // account deactivated or forbidden: out of the pool
	ClassTransient       // 5xx, network errors, timeouts, broken streams: penalty and backoff
	ClassRequest         // the request itself is bad (400/404/413/422): returned to the client, no penalty
	ClassCanceled        // the client went away: nobody's fault
	numClasses
)

// NumClasses is the number of classes, for arrays indexed by Class.
const NumClasses = int(numClasses)

var classNames = [...]string{"", "quota", "rate", "auth", "banned", "transient", "request", "canceled"}

// String returns the class's metric/label name ("quota", "rate", …; "" for ClassNone).
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "unknown"
}

// AccountFault reports whether the class says something about the account
// (and so warrants failover to another account).
func (c Class) AccountFault() bool {
	switch c {
	case ClassQuota, ClassRate, ClassAuth, ClassBanned, ClassTransient:
		return true
	}
	return false
}

// Verdict is a classified failure: its class and, when the upstream said, how
// long the account should rest (Retry-After, resets_in_seconds).
type Verdict struct {
	Class      Class
	RetryAfter time.Duration // 0 when the upstream gave no hint
	// StateRefused: the upstream could not read account-bound state the
	// request carried (OpenAI's 400 invalid_encrypted_content; Anthropic's
	// invalid thinking signature) — state made by another account. The
	// class is ClassRequest; the gateway answers it with one retry without
	// that state (translate.StripAccountState), never with the 400.
	StateRefused bool
}

// Markers of an upstream refusing account-bound state: OpenAI's error code
// (Responses API: "The encrypted content for item rs_… could not be
// verified.") and Anthropic's message for a thinking block whose signature
// it cannot verify.
var (
	stateRefusedCode = "invalid_encrypted_content"
	stateRefusedText = "Invalid `signature` in `thinking` block"
)

// stateRefused reports whether an error with code and message refuses
// account-bound state.
func stateRefused(code, msg string) bool {
	return code == stateRefusedCode || strings.Contains(msg, stateRefusedText)
}

// Classify decides the failure class of an upstream answer with the given
// status, headers and (possibly truncated) body. A 2xx status is ClassNone.
// Sources for the shapes: https://platform.openai.com/docs/guides/error-codes,
// the Codex backend's usage_limit_reached body (resets_in_seconds), and
// https://docs.anthropic.com/en/api/errors with
// https://docs.anthropic.com/en/api/rate-limits (429 rate_limit_error with
// retry-after and anthropic-ratelimit-*-reset headers; 529
// overloaded_error; a 400 invalid_request_error saying "Your credit balance
// is too low" or "You have reached your specified API usage limits. You
// will regain access on <date> at <time> UTC." is a quota, the latter with
// its reset; one saying "This organization has been disabled." is a ban,
// as Claude Code users see it: anthropics/claude-code issues #19028,
// #72457).
func Classify(status int, h http.Header, body []byte) Verdict {
	if status >= 200 && status < 300 {
		return Verdict{}
	}
	v := Verdict{RetryAfter: retryAfter(h)}
	if v.RetryAfter == 0 && status == http.StatusTooManyRequests {
		v.RetryAfter = anthropicRateReset(h, time.Now())
	}
	switch {
	case status == http.StatusBadRequest && bytes.Contains(body, orgDisabledText):
		v.Class = ClassBanned
	case status == http.StatusBadRequest && isBillingRefusal(body):
		v.Class = ClassQuota
		v.RetryAfter = regainAccessIn(body, time.Now())
	case status == http.StatusTooManyRequests:
		if isQuota(body) {
			v.Class = ClassQuota
			if d := resetsIn(body); d > 0 {
				v.RetryAfter = d
			} else if d := resetsAt(body); d > 0 {
				v.RetryAfter = d
			}
		} else {
			v.Class = ClassRate
		}
	case status == http.StatusUnauthorized:
		v.Class = ClassAuth
	case status == http.StatusPaymentRequired:
		if bytes.Contains(body, []byte("deactivated")) {
			v.Class = ClassBanned
		} else {
			v.Class = ClassQuota
		}
	case status == http.StatusForbidden:
		v.Class = ClassBanned
	case status == http.StatusRequestTimeout || status >= 500:
		v.Class = ClassTransient
	case status >= 400:
		v.Class = ClassRequest
		if status == http.StatusBadRequest && (bytes.Contains(body, []byte(stateRefusedCode)) || bytes.Contains(body, []byte(stateRefusedText))) {
			e := gjson.GetBytes(body, "error")
			v.StateRefused = stateRefused(e.Get("code").Str, e.Get("message").Str) ||
				strings.Contains(gjson.GetBytes(body, "detail").Str, stateRefusedCode) // the Codex backend's FastAPI shape
		}
	default:
		v.Class = ClassTransient
	}
	return v
}

var quotaMarkers = [][]byte{
	[]byte("usage_limit_reached"), []byte("insufficient_quota"), []byte("usage_not_included"),
	[]byte("quota"), []byte("balance"), []byte("billing"),
}

func isQuota(body []byte) bool {
	for _, m := range quotaMarkers {
		if bytes.Contains(body, m) {
			return true
		}
	}
	return false
}

// Anthropic's wordings of an exhausted balance or spend limit, answered as
// 400 invalid_request_error (https://docs.anthropic.com/en/api/errors and
// the API's own messages): "Your credit balance is too low to access the
// Anthropic API…" and "You have reached your specified API usage limits.
// You will regain access on 2025-08-01 at 00:00 UTC."
var (
	creditBalanceText = []byte("credit balance is too low")
	usageLimitsText   = []byte("reached your specified API usage limits")
	regainAccessText  = []byte("regain access on ")
	// orgDisabledText is Anthropic's ban: 400 invalid_request_error "This
	// organization has been disabled."
	orgDisabledText = []byte("organization has been disabled")
)

// isBillingRefusal reports whether a 400 body refuses for money, not for
// the request: Anthropic's balance and spend-limit wordings, an Anthropic
// billing_error type, or OpenAI's billing_hard_limit_reached code.
func isBillingRefusal(body []byte) bool {
	if bytes.Contains(body, creditBalanceText) || bytes.Contains(body, usageLimitsText) {
		return true
	}
	e := gjson.GetBytes(body, "error")
	return e.Get("type").Str == "billing_error" || e.Get("code").Str == "billing_hard_limit_reached"
}

// isBillingMessage reports whether an error message carries Anthropic's
// balance or spend-limit wording (the error type is then
// invalid_request_error, which alone would be ClassRequest).
func isBillingMessage(msg string) bool {
	return strings.Contains(msg, string(creditBalanceText)) || strings.Contains(msg, string(usageLimitsText))
}

// regainAccessIn reads "regain access on 2025-08-01 at 00:00 UTC" from an
// Anthropic spend-limit body and returns the time left until then from now
// (0 when absent, unparsable or past).
func regainAccessIn(body []byte, now time.Time) time.Duration {
	i := bytes.Index(body, regainAccessText)
	if i < 0 {
		return 0
	}
	const layout = "2006-01-02 at 15:04 MST" // as long as the values it parses
	rest := body[i+len(regainAccessText):]
	if len(rest) < len(layout) {
		return 0
	}
	at, err := time.Parse(layout, string(rest[:len(layout)]))
	if err != nil {
		return 0
	}
	return max(at.Sub(now), 0)
}

// anthropicRateFamilies are the limits Anthropic reports on every answer as
// anthropic-ratelimit-<family>-{limit,remaining,reset}
// (https://docs.anthropic.com/en/api/rate-limits#response-headers).
var anthropicRateFamilies = [...]struct{ remaining, reset string }{
	{"Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"},
	{"Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"},
	{"Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset"},
	{"Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset"},
}

// anthropicRateReset returns, for a 429 without Retry-After, the wait until
// the latest reset (RFC 3339) of the Anthropic limits that are used up
// (remaining "0"); 0 when there is none in the future.
func anthropicRateReset(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	var d time.Duration
	for _, f := range anthropicRateFamilies {
		if h.Get(f.remaining) != "0" {
			continue
		}
		at, err := time.Parse(time.RFC3339, h.Get(f.reset))
		if err == nil {
			d = max(d, at.Sub(now))
		}
	}
	return d
}

// resetsIn reads "resets_in_seconds": N from a Codex usage-limit body.
func resetsIn(body []byte) time.Duration {
	key := []byte(`"resets_in_seconds":`)
	i := bytes.Index(body, key)
	if i < 0 {
		return 0
	}
	rest := bytes.TrimLeft(body[i+len(key):], " ")
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	n, err := strconv.Atoi(string(rest[:j]))
	if err != nil {
		return 0
	}
	return time.Duration(n) * time.Second
}

// resetsAt reads "resets_at": UNIX-SECONDS from a Codex usage-limit body and
// returns the time left until then (0 when absent or past).
func resetsAt(body []byte) time.Duration {
	at := gjson.GetBytes(body, "error.resets_at")
	if !at.Exists() {
		at = gjson.GetBytes(body, "resets_at")
	}
	if at.Type != gjson.Number || at.Int() <= 0 {
		return 0
	}
	return max(time.Until(time.Unix(at.Int(), 0)), 0)
}

// retryAfter parses Retry-After in seconds or as an HTTP date (RFC 9110 §10.2.3).
func retryAfter(h http.Header) time.Duration {
	s := h.Get("Retry-After")
	if s == "" {
		return 0
	}
	if n, err := strconv.Atoi(s); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(s); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// ClassifyError decides the failure class of a transport error (Do returned
// no usable answer): the client going away is ClassCanceled, everything else
// (dial, TLS, timeouts, broken connections, wrong or truncated streams) is
// ClassTransient.
func ClassifyError(err error) Verdict {
	if KindOf(err) == KindCanceled {
		return Verdict{Class: ClassCanceled}
	}
	return Verdict{Class: ClassTransient}
}

// ClassifyCode decides the class of an error given by code and type strings,
// as they appear in OpenAI error objects ({"error":{"type","code"}}), in
// Responses `error`/`response.failed` events (error.code), in the Codex
// backend's bodies (error.type) and in Anthropic error objects (error.type:
// https://docs.anthropic.com/en/api/errors#error-shapes). Unknown codes are
// ClassTransient: another account may well succeed. An Anthropic
// invalid_request_error that is really about money is told apart by its
// message (see ClassifyEvent), not here.
func ClassifyCode(code, typ string) Class {
	for _, s := range [2]string{code, typ} {
		switch s {
		case "insufficient_quota", "usage_limit_reached", "usage_not_included", "billing_hard_limit_reached", "quota_exceeded":
			return ClassQuota
		case "rate_limit_exceeded", "rate_limit_error", "requests", "tokens":
			return ClassRate
		case "invalid_api_key", "authentication_error", "token_invalidated", "token_expired", "unauthorized":
			return ClassAuth
		case "account_deactivated", "deactivated_workspace", "permission_error", "account_disabled":
			return ClassBanned
		case "billing_error":
			return ClassQuota
		case "context_length_exceeded", "invalid_prompt", "invalid_request_error", "invalid_value",
			"not_found_error", "request_too_large",
			"unsupported_parameter", "unsupported_value", "model_not_found", "previous_response_not_found", stateRefusedCode,
			"string_above_max_length", "invalid_image", "content_policy_violation", "content_filter":
			return ClassRequest
		case "server_error", "overloaded_error", "api_error", "internal_error", "service_unavailable", "overloaded",
			"timeout_error":
			return ClassTransient
		}
	}
	return ClassTransient
}

// tryAgainIn reads "try again in 11.054s" from an OpenAI rate-limit message.
func tryAgainIn(msg string) time.Duration {
	const key = "try again in "
	i := strings.Index(msg, key)
	if i < 0 {
		return 0
	}
	rest := msg[i+len(key):]
	j := strings.IndexAny(rest, " .\n")
	for j >= 0 && j+1 < len(rest) && rest[j] == '.' && rest[j+1] >= '0' && rest[j+1] <= '9' {
		k := strings.IndexAny(rest[j+1:], " \n")
		if k < 0 {
			j = len(rest)
			break
		}
		j += 1 + k
	}
	if j < 0 {
		j = len(rest)
	}
	d, err := time.ParseDuration(strings.TrimSuffix(rest[:j], "."))
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// ClassifyEvent inspects one SSE event of a 2xx stream in endpoint ep's
// protocol. It reports whether the event is an error (Chat: a data object
// with an "error" key, as the OpenAI SDKs treat it; Responses: an `error` or
// `response.failed` event; Messages: an `error` event,
// {"type":"error","error":{"type","message"}}, after which Anthropic ends the
// stream) and, if so, its verdict and message. A Messages overloaded_error
// or api_error is ClassTransient, rate_limit_error ClassRate, an
// invalid_request_error with Anthropic's balance wording ClassQuota.
// Sources: https://platform.openai.com/docs/api-reference/responses-streaming/error,
// openai-python's _streaming.py and
// https://docs.anthropic.com/en/docs/build-with-claude/streaming#error-events.
func ClassifyEvent(ep translate.Protocol, name, data []byte) (v Verdict, msg string, isError bool) {
	var e gjson.Result
	switch ep {
	case translate.Messages:
		if MessagesEventKind(name, data) != MessagesError {
			return Verdict{}, "", false
		}
		return messagesErrorVerdict(gjson.GetBytes(data, "error"))
	case translate.Chat:
		if !bytes.Contains(data, []byte(`"error"`)) {
			return Verdict{}, "", false
		}
		e = gjson.GetBytes(data, "error")
	case translate.Responses:
		switch string(name) {
		case "error":
			e = gjson.GetBytes(data, "error")
			if !e.Exists() {
				e = gjson.ParseBytes(data) // {"type":"error","code","message"}
			}
		case "response.failed":
			e = gjson.GetBytes(data, "response.error")
		default:
			return Verdict{}, "", false
		}
	default:
		return Verdict{}, "", false
	}
	if !e.IsObject() {
		if ep == translate.Chat {
			return Verdict{}, "", false
		}
	}
	msg = e.Get("message").String()
	v.Class = ClassifyCode(e.Get("code").String(), e.Get("type").String())
	v.StateRefused = v.Class == ClassRequest && stateRefused(e.Get("code").String(), msg)
	if v.Class == ClassRate {
		v.RetryAfter = tryAgainIn(msg)
	}
	if v.Class == ClassQuota {
		if n := e.Get("resets_in_seconds").Int(); n > 0 {
			v.RetryAfter = time.Duration(n) * time.Second
		}
	}
	return v, msg, true
}

// ClassifyBody inspects a 2xx non-stream answer that may still be an error:
// a top-level "error" object (some upstreams answer 200 with an error body),
// a Responses object whose status is "failed", or, for Messages, an
// Anthropic error object ({"type":"error","error":{…}}) instead of a message. It reports whether the body
// is an error and, if so, its verdict and message.
//
// The body is parsed where it lies, not copied (every non-stream answer
// passes here: gjson.ParseBytes copied each one whole); the message is
// cloned, so nothing returned refers to body.
func ClassifyBody(ep translate.Protocol, body []byte) (v Verdict, msg string, isError bool) {
	v, msg, isError = classifyRoot(ep, gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body))))
	return v, strings.Clone(msg), isError
}

// classifyRoot is ClassifyBody on the parsed body: it reads the members
// ep's classification needs, each by its own path, and classifies them.
func classifyRoot(ep translate.Protocol, root gjson.Result) (v Verdict, msg string, isError bool) {
	var m answerMembers
	if ep == translate.Messages {
		if m.typ = root.Get("type"); m.typ.Str == "error" {
			m.err = root.Get("error")
		}
	} else {
		m.err = root.Get("error")
		if ep == translate.Responses {
			m.status = root.Get("status")
		}
	}
	return m.classify(ep)
}

// answerMembers are the top-level members of a non-stream answer that its
// classification reads: the first "type", "error" and "status" (the zero
// Result for one it lacks, or that ep's classification does not read).
type answerMembers struct {
	typ, err, status gjson.Result
}

// classify is ClassifyBody of an answer of protocol ep whose members are
// m; the message refers to the answer's bytes.
func (m *answerMembers) classify(ep translate.Protocol) (v Verdict, msg string, isError bool) {
	if ep == translate.Messages {
		if m.typ.Str != "error" {
			return Verdict{}, "", false
		}
		return messagesErrorVerdict(m.err)
	}
	e := m.err
	if ep == translate.Responses && m.status.String() == "failed" {
		isError = true
	} else if e.IsObject() && ep != translate.Responses {
		isError = true
	}
	if !isError {
		return Verdict{}, "", false
	}
	msg = e.Get("message").String()
	v.Class = ClassifyCode(e.Get("code").String(), e.Get("type").String())
	v.StateRefused = v.Class == ClassRequest && stateRefused(e.Get("code").String(), msg)
	if v.Class == ClassRate {
		v.RetryAfter = tryAgainIn(msg)
	}
	return v, msg, true
}

// messagesErrorVerdict classifies an Anthropic error object
// ({"type","message"}) and returns its message.
func messagesErrorVerdict(e gjson.Result) (Verdict, string, bool) {
	msg := e.Get("message").String()
	v := Verdict{Class: ClassifyCode("", e.Get("type").String())}
	if v.Class == ClassRequest && strings.Contains(msg, string(orgDisabledText)) {
		v.Class = ClassBanned
	} else if v.Class == ClassRequest && isBillingMessage(msg) {
		v.Class = ClassQuota
		v.RetryAfter = regainAccessIn([]byte(msg), time.Now())
	}
	v.StateRefused = v.Class == ClassRequest && stateRefused("", msg)
	return v, msg, true
}
