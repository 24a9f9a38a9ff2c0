package gateway

import (
	"bytes"

	"github.com/tidwall/gjson"
)

// sequenceNumber is a Responses event's top-level "sequence_number" as
// gjson reads it: gjson.GetBytes(data, "sequence_number").Int(), ok when
// that is a number. The shape every OpenAI event has is read directly
// (leadingSequenceNumber); any other asks gjson. A stream's relay reads it
// from every event it passes through (stream.nextSeq), and gjson's walk
// and its float parse of the number cost more than the rest of the
// event's observation (docs/benchmarks.md, issue 21, cpu3).
func sequenceNumber(data []byte) (n int64, ok bool) {
	if n, ok := leadingSequenceNumber(data); ok {
		return n, true
	}
	r := gjson.GetBytes(data, "sequence_number")
	return r.Int(), r.Type == gjson.Number
}

// The bytes before an OpenAI Responses event's type and after it, up to
// its sequence_number's digits.
var (
	seqHead = []byte(`{"type":"`)
	seqKey  = []byte(`,"sequence_number":`)
)

// leadingSequenceNumber reads the number N of data shaped
// {"type":"T","sequence_number":N followed by ',' or '}', where T holds no
// backslash and N is 1 to 18 digits: there the first top-level member
// named sequence_number is the second, and N fits an int64 exactly, so N
// is what gjson reads. ok is false for any other shape (FuzzSequenceNumber
// checks it against gjson on any bytes).
func leadingSequenceNumber(data []byte) (n int64, ok bool) {
	if !bytes.HasPrefix(data, seqHead) {
		return 0, false
	}
	rest := data[len(seqHead):]
	q := bytes.IndexByte(rest, '"')
	if q < 0 || bytes.IndexByte(rest[:q], '\\') >= 0 {
		return 0, false // no end, or an escape: the type may not end at this quote
	}
	rest = rest[q+1:]
	if !bytes.HasPrefix(rest, seqKey) {
		return 0, false
	}
	rest = rest[len(seqKey):]
	i := 0
	for ; i < len(rest) && i < 18 && '0' <= rest[i] && rest[i] <= '9'; i++ {
		n = n*10 + int64(rest[i]-'0')
	}
	if i == 0 || i == len(rest) || (rest[i] != ',' && rest[i] != '}') {
		return 0, false
	}
	return n, true
}
