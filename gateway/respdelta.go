package gateway

import (
	"bytes"

	"github.com/tidwall/gjson"
)

// deltaMembers is outputMembers(data, "delta") for a delta event in the
// shape OpenAI sends (response.output_text.delta and the argument and
// input deltas):
//
//	{"type":"T","sequence_number":N,"item_id":"I","output_index":O,["content_index":C,]"delta":"D"
//
// followed by ',' or '}', where T and I hold no backslash and N, O and C
// are 1 to 15 digits. There the first member named output_index is O and
// the first named delta is D, as gjson's pass reads them, and reading them
// directly skips gjson's float parse of every number member it passes
// (three an event; docs/benchmarks.md, issue 21, cpu3). ok is false for
// any other shape: the caller asks outputMembers. FuzzOutputMembers checks
// it against outputMembers on any bytes. What it returns refers to data,
// as outputMembers' results do: read it at once.
func deltaMembers(data []byte) (index, delta gjson.Result, ok bool) {
	rest, ok := cutPrefix(data, deltaHead)
	if !ok {
		return index, delta, false
	}
	if rest, ok = skipPlainString(rest); !ok { // the type
		return index, delta, false
	}
	if rest, ok = cutPrefix(rest, deltaSeq); !ok {
		return index, delta, false
	}
	if _, rest, ok = cutDigits(rest); !ok {
		return index, delta, false
	}
	if rest, ok = cutPrefix(rest, deltaItem); !ok {
		return index, delta, false
	}
	if rest, ok = skipPlainString(rest); !ok { // the item id
		return index, delta, false
	}
	if rest, ok = cutPrefix(rest, deltaIndex); !ok {
		return index, delta, false
	}
	at := len(data) - len(rest)
	o, rest, ok := cutDigits(rest)
	if !ok {
		return index, delta, false
	}
	index = gjson.Result{Type: gjson.Number, Raw: b2s(data[at : at+len(o)]), Num: float64(digitsValue(o)), Index: at}
	if r, ok := cutPrefix(rest, deltaContent); ok {
		if _, rest, ok = cutDigits(r); !ok {
			return index, delta, false
		}
	}
	if rest, ok = cutPrefix(rest, deltaKeyRest); !ok {
		return index, delta, false
	}
	at = len(data) - len(rest)
	end := jsonStringEnd(rest)
	if end < 0 || end == len(rest) || (rest[end] != ',' && rest[end] != '}') {
		return index, delta, false
	}
	raw := data[at : at+end]
	if bytes.IndexByte(raw, '\\') >= 0 {
		delta = gjson.Parse(b2s(raw)) // unescapes as gjson's pass does
		delta.Index = at
	} else {
		s := b2s(raw)
		delta = gjson.Result{Type: gjson.String, Raw: s, Str: s[1 : len(s)-1], Index: at}
	}
	return index, delta, true
}

// The bytes of a delta event's shape between its values.
var (
	deltaHead    = []byte(`{"type":"`)
	deltaSeq     = []byte(`,"sequence_number":`)
	deltaItem    = []byte(`,"item_id":"`)
	deltaIndex   = []byte(`,"output_index":`)
	deltaContent = []byte(`,"content_index":`)
	deltaKeyRest = []byte(`,"delta":`)
)

func cutPrefix(b, prefix []byte) ([]byte, bool) {
	if !bytes.HasPrefix(b, prefix) {
		return b, false
	}
	return b[len(prefix):], true
}

// skipPlainString skips the rest of a string whose opening quote is cut
// and which holds no backslash: through its closing quote.
func skipPlainString(b []byte) ([]byte, bool) {
	q := bytes.IndexByte(b, '"')
	if q < 0 || bytes.IndexByte(b[:q], '\\') >= 0 {
		return b, false
	}
	return b[q+1:], true
}

// cutDigits cuts 1 to 15 leading digits (a value a float64 holds exactly).
func cutDigits(b []byte) (digits, rest []byte, ok bool) {
	i := 0
	for i < len(b) && i < 15 && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	if i == 0 || (i < len(b) && '0' <= b[i] && b[i] <= '9') {
		return nil, b, false
	}
	return b[:i], b[i:], true
}

func digitsValue(d []byte) int64 {
	var n int64
	for _, c := range d {
		n = n*10 + int64(c-'0')
	}
	return n
}

// jsonStringEnd is the index just past the closing quote of the string b
// begins with, -1 when b begins with no quote or the string does not end.
func jsonStringEnd(b []byte) int {
	if len(b) == 0 || b[0] != '"' {
		return -1
	}
	if end, _, ok := gjsonStringEnd(b, 1); ok {
		return end
	}
	return -1
}
