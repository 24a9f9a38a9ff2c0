package scripts

import (
	"strings"

	"github.com/yuin/gopher-lua/parse"
)

// Fields is a set of the account view's counter fields: the ones that
// change with every lease (inflight, requests) or every outcome. The
// scheduler rescores an account when one of them changes only if the policy
// may read it (Policy.Reads), so a policy that never looks at, say,
// inflight is not run again for every lease granted.
type Fields uint16

// The counter fields of the account view, by their Lua names.
const (
	FieldInFlight      Fields = 1 << iota // inflight
	FieldRequests                         // requests
	FieldSuccesses                        // successes
	FieldFailures                         // failures
	FieldSuccessStreak                    // success_streak
	FieldFailureStreak                    // failure_streak
	FieldEWMASuccess                      // ewma_success
	FieldEWMALatency                      // ewma_latency_ms
	FieldEWMATTFT                         // ewma_ttft_ms

	// FieldsAll is every counter field.
	FieldsAll Fields = 1<<iota - 1
)

var fieldNames = [...]struct {
	name string
	f    Fields
}{
	{"inflight", FieldInFlight},
	{"requests", FieldRequests},
	{"successes", FieldSuccesses},
	{"failures", FieldFailures},
	{"success_streak", FieldSuccessStreak},
	{"failure_streak", FieldFailureStreak},
	{"ewma_success", FieldEWMASuccess},
	{"ewma_latency_ms", FieldEWMALatency},
	{"ewma_ttft_ms", FieldEWMATTFT},
}

// Reads returns the counter fields the policy's code may read. It is
// decided from the source once, at compile time, and errs on the side of
// reading: a field counts as read when its name appears in the source as a
// name or inside a string literal (a.inflight, a["inflight"],
// local k = "inflight"), and every field counts as read when the source
// iterates a table generically (pairs, next) or may build a key at run time
// (a non-constant index such as a[k] together with string building: ..,
// the string library, tostring, or a method call).
func (p *Policy) Reads() Fields { return p.reads }

// readsOf scans source (which has already parsed) and returns the counter
// fields it may read; see Policy.Reads.
func readsOf(source string) Fields {
	sc := parse.NewScanner(strings.NewReader(source), "")
	lx := &parse.Lexer{}
	var (
		reads         Fields
		dynamicIndex  bool
		buildsStrings bool
		prev, prev2   int
	)
	for {
		tok, err := sc.Scan(lx)
		if err != nil {
			return FieldsAll // cannot happen for parsed source; be safe
		}
		if tok.Type < 0 {
			break
		}
		switch tok.Type {
		case parse.TIdent, parse.TString:
			for _, n := range fieldNames {
				if tok.Str == n.name {
					reads |= n.f
				}
			}
			if tok.Type == parse.TIdent {
				switch tok.Str {
				case "pairs", "next":
					return FieldsAll
				case "string", "tostring":
					buildsStrings = true
				}
			}
		case parse.T2Comma:
			buildsStrings = true
		case ':':
			buildsStrings = true // s:sub(…), s:format(…), …
		case ']':
			// Constant keys are "[" String "]" and "[" Number "]"; the
			// long-string form [[…]] is a single String token.
			if !(prev2 == '[' && (prev == parse.TString || prev == parse.TNumber)) {
				dynamicIndex = true
			}
		}
		prev2, prev = prev, tok.Type
		lx.PrevTokenType = tok.Type
	}
	if dynamicIndex && buildsStrings {
		return FieldsAll
	}
	return reads
}

// viewFieldsOf returns the account view's fields that source names (as a
// name or inside a string literal), which every fill writes up front; the
// others are written when a call first reads them (accountTable.index).
// A source that iterates tables generically (pairs, next) or reads them raw
// (rawget) bypasses __index, so it gets every field up front.
func viewFieldsOf(source string) viewFields {
	sc := parse.NewScanner(strings.NewReader(source), "")
	lx := &parse.Lexer{}
	var want viewFields
	for {
		tok, err := sc.Scan(lx)
		if err != nil {
			return viewFieldsAll
		}
		if tok.Type < 0 {
			return want
		}
		if tok.Type == parse.TIdent || tok.Type == parse.TString {
			switch tok.Str {
			case "pairs", "next", "rawget":
				if tok.Type == parse.TIdent {
					return viewFieldsAll
				}
			}
			for f, name := range accountFields {
				if tok.Str == name {
					want |= 1 << f
				}
			}
		}
		lx.PrevTokenType = tok.Type
	}
}

// String lists the fields by their Lua names, comma-separated ("none" for
// the empty set).
func (f Fields) String() string {
	if f == 0 {
		return "none"
	}
	var b strings.Builder
	for _, n := range fieldNames {
		if f&n.f != 0 {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			b.WriteString(n.name)
		}
	}
	return b.String()
}
