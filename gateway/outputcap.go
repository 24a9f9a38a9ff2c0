package gateway

import (
	"math"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/translate"
)

// capKeys are the body members that cap a request's output tokens, in every
// protocol: Chat's max_tokens and max_completion_tokens, Responses'
// max_output_tokens, Messages' max_tokens. A body repeating one is refused
// (outputCaps.check): gjson reads the first occurrence and upstream decoders
// the last, so the estimate would read one cap and the upstream honour
// another.
var capKeys = [...]string{"max_tokens", "max_completion_tokens", "max_output_tokens"}

// The indexes of capKeys.
const (
	capMaxTokens = iota
	capMaxCompletion
	capMaxOutput
)

// outputCaps is what parseBody reads of a body's output caps: each cap key's
// value and how many times it occurs, and Chat's n (the choices asked for,
// each up to the cap).
type outputCaps struct {
	v      [len(capKeys)]gjson.Result
	count  [len(capKeys)]int
	n      gjson.Result
	nCount int
}

// read records top-level member k with value v when k is a cap key, and
// reports whether it was.
func (o *outputCaps) read(k string, v gjson.Result) bool {
	if k == "n" {
		o.n = v
		o.nCount++
		return true
	}
	for i, name := range capKeys {
		if k == name {
			o.v[i] = v
			o.count[i]++
			return true
		}
	}
	return false
}

// check refuses a body that repeats a cap key (400, naming it, in the
// client's protocol) or whose protocol's cap is not a positive integer, and
// returns the output cap the upstream is held to, in tokens (0: none): for
// Chat the larger of max_tokens and max_completion_tokens, since an
// upstream given both may honour either (the body goes to an openai_compat
// upstream as it is); for Responses max_output_tokens; for Messages
// max_tokens (checkMaxTokens: Anthropic's words). A cap key of another
// protocol is no cap: its upstream ignores it or refuses it.
//
// A cap of 0 or below is refused as OpenAI and Anthropic refuse it (both
// require at least 1) rather than passed on: translated, it meant no cap,
// so a Chat max_tokens 0 went to an anthropic account as max_tokens 16384
// while the estimate counted 1,024 output tokens.
func (o *outputCaps) check(ep translate.Protocol) (int64, *APIError) {
	for i, n := range o.count {
		if n > 1 {
			return 0, errBadParam(capKeys[i], "Duplicate key '"+capKeys[i]+"' in the request body.")
		}
	}
	var keys []int
	switch ep {
	case translate.Chat:
		keys = []int{capMaxTokens, capMaxCompletion}
	case translate.Responses:
		keys = []int{capMaxOutput}
	case translate.Messages:
		if aerr := checkMaxTokens(o.v[capMaxTokens]); aerr != nil {
			return 0, aerr
		}
		return capValue(o.v[capMaxTokens]), nil
	}
	var cap int64
	for _, i := range keys {
		if aerr := checkCap(capKeys[i], o.v[i]); aerr != nil {
			return 0, aerr
		}
		cap = max(cap, capValue(o.v[i]))
	}
	return cap, nil
}

// choices returns the choices a request asks for, each up to the output
// cap: Chat's n (forwarded to OpenAI and openai_compat upstreams; a
// translation refuses n other than 1), 1 when it is absent or null and for
// the other protocols, which have none. A repeated n, or one that is not an
// integer of at least 1, is refused 400 in OpenAI's words.
func (o *outputCaps) choices(ep translate.Protocol) (int64, *APIError) {
	if o.nCount > 1 {
		return 0, errBadParam("n", "Duplicate key 'n' in the request body.")
	}
	if ep != translate.Chat {
		return 1, nil
	}
	if aerr := checkCap("n", o.n); aerr != nil {
		return 0, aerr
	}
	return max(capValue(o.n), 1), nil
}

// maxCap is the largest output cap or n OpenAI's API takes: its integer
// parameters are 32-bit (2^31-1); a larger one is refused there with
// integer_above_max_value, and here before it is billed or translated.
const maxCap = math.MaxInt32

// checkCap refuses an OpenAI output cap (max_tokens, max_completion_tokens,
// max_output_tokens) or Chat's n that is not null, absent or an integer
// from 1 to maxCap, in OpenAI's words.
func checkCap(name string, v gjson.Result) *APIError {
	switch {
	case !v.Exists() || v.Type == gjson.Null:
		return nil
	case !isInteger(v):
		return errBadParam(name, "Invalid type for '"+name+"': expected an integer.")
	case v.Num < 1:
		return &APIError{Status: 400, Type: "invalid_request_error", Code: "integer_below_min_value", Param: name,
			Message: "Invalid '" + name + "': integer below minimum value. Expected a value >= 1, but got " + strconv.FormatFloat(v.Num, 'f', -1, 64) + " instead."}
	case v.Num > maxCap:
		return &APIError{Status: 400, Type: "invalid_request_error", Code: "integer_above_max_value", Param: name,
			Message: "Invalid '" + name + "': integer above maximum value. Expected a value <= " + strconv.Itoa(maxCap) + ", but got " + v.Raw + " instead."}
	}
	return nil
}

// isInteger reports whether v is a JSON number with an integral value (1e3
// and 2.0 are; 1.5 and "2" are not).
func isInteger(v gjson.Result) bool {
	return v.Type == gjson.Number && !math.IsInf(v.Num, 0) && v.Num == math.Trunc(v.Num)
}

// capValue is the cap v holds, in tokens: 0 when it is absent, not a
// number or below 1; math.MaxInt64 past int64's range.
func capValue(v gjson.Result) int64 {
	switch {
	case v.Type != gjson.Number || v.Num < 1:
		return 0
	case v.Num >= math.MaxInt64:
		return math.MaxInt64
	}
	return int64(v.Num)
}
