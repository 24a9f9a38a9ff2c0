package upstream

import (
	"bytes"
	"net/http"
	"strconv"
	"time"
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
}

// Classify decides the failure class of an upstream answer with the given
// status, headers and (possibly truncated) body. A 2xx status is ClassNone.
// Sources for the shapes: https://platform.openai.com/docs/guides/error-codes
// and the Codex backend's usage_limit_reached body (resets_in_seconds).
func Classify(status int, h http.Header, body []byte) Verdict {
	if status >= 200 && status < 300 {
		return Verdict{}
	}
	v := Verdict{RetryAfter: retryAfter(h)}
	switch {
	case status == http.StatusTooManyRequests:
		if isQuota(body) {
			v.Class = ClassQuota
			if d := resetsIn(body); d > 0 {
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
