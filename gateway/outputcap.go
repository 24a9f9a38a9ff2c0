package gateway

import (
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
// value and how many times it occurs.
type outputCaps struct {
	v     [len(capKeys)]gjson.Result
	count [len(capKeys)]int
}

// read records top-level member k with value v when k is a cap key, and
// reports whether it was.
func (o *outputCaps) read(k string, v gjson.Result) bool {
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
// client's protocol) and returns the output cap the upstream is held to, in
// tokens (0: none): for Chat the larger of max_tokens and
// max_completion_tokens, since an upstream given both may honour either
// (the body goes to an openai_compat upstream as it is); for Responses
// max_output_tokens; for Messages max_tokens. A cap key of another
// protocol is no cap: its upstream ignores it or refuses it.
func (o *outputCaps) check(ep translate.Protocol) (int64, *APIError) {
	for i, n := range o.count {
		if n > 1 {
			return 0, errBadParam(capKeys[i], "Duplicate key '"+capKeys[i]+"' in the request body.")
		}
	}
	switch ep {
	case translate.Chat:
		return max(capValue(o.v[capMaxTokens]), capValue(o.v[capMaxCompletion])), nil
	case translate.Responses:
		return capValue(o.v[capMaxOutput]), nil
	case translate.Messages:
		return capValue(o.v[capMaxTokens]), nil
	}
	return 0, nil
}

// capValue is the cap v holds, in tokens; 0 when it is absent or not a number.
func capValue(v gjson.Result) int64 {
	if v.Type != gjson.Number {
		return 0
	}
	return max(v.Int(), 0)
}
