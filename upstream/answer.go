package upstream

import (
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/translate"
)

// Answer is what the gateway reads from a non-stream 2xx answer before
// passing it on (ReadAnswer): whether it is an error in a 2xx's clothing
// (ClassifyBody's verdict, message and isError), else its usage
// (translate.BodyUsage) and, for Responses, the response's id.
type Answer struct {
	// Verdict, Msg and IsError are ClassifyBody's results; Msg is the
	// caller's to keep (it does not refer to the body).
	Verdict Verdict
	Msg     string
	IsError bool
	// Usage and HasUsage are translate.BodyUsage's results; both zero when
	// IsError.
	Usage    translate.Usage
	HasUsage bool
	// id is the first top-level "id" member (Responses only), read
	// where it lies in the body: ResponseID copies it.
	id gjson.Result
}

// ResponseID returns the answer's top-level "id" as gjson's String gives
// it (what gjson.GetBytes(body, "id").String() returned), copied out of
// the body; "" when it has none, the answer is not a Responses object or
// IsError. It must be called before the body's buffer is reused.
func (a *Answer) ResponseID() string { return strings.Clone(a.id.String()) }

// ReadAnswer reads a non-stream 2xx answer of protocol ep in one pass over
// its top-level members, where ClassifyBody, translate.BodyUsage and the
// gateway's lookup of a Responses id each walked them (for Chat, whose
// answers have no "error", ClassifyBody walked all of them): it returns
// what those three return, read from the first member of each name as
// their gjson paths read it (FuzzReadAnswer compares them on any JSON
// text). body must be valid JSON (the gateway checks it first,
// translate.ValidWithin); it is parsed where it lies, not copied. Usage is
// read only when the answer is no error, as the gateway read it.
func ReadAnswer(ep translate.Protocol, body []byte) (a Answer) {
	root := gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body)))
	var m answerMembers
	var usage gjson.Result
	if root.IsObject() {
		const (
			seenType = 1 << iota
			seenErr
			seenStatus
			seenUsage
			seenID
		)
		var seen uint8
		root.ForEach(func(k, v gjson.Result) bool {
			var bit uint8
			var dst *gjson.Result
			switch k.Str {
			case "type":
				bit, dst = seenType, &m.typ
			case "error":
				bit, dst = seenErr, &m.err
			case "status":
				bit, dst = seenStatus, &m.status
			case "usage":
				bit, dst = seenUsage, &usage
			case "id":
				bit, dst = seenID, &a.id
			default:
				return true
			}
			if seen&bit == 0 {
				seen |= bit
				*dst = v
			}
			return true
		})
	}
	if ep != translate.Responses {
		a.id = gjson.Result{}
	}
	if a.Verdict, a.Msg, a.IsError = m.classify(ep); a.IsError {
		a.Msg = strings.Clone(a.Msg)
		a.id = gjson.Result{}
		return a
	}
	a.Usage, a.HasUsage = translate.UsageOf(ep, usage)
	return a
}
