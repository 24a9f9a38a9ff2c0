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

// counterFields maps each counter field to its account view field (whose
// Lua name, accountFields, is the counter's).
var counterFields = [...]struct {
	f  Fields
	vf int
}{
	{FieldInFlight, vfInFlight},
	{FieldRequests, vfRequests},
	{FieldSuccesses, vfSuccesses},
	{FieldFailures, vfFailures},
	{FieldSuccessStreak, vfSuccessStreak},
	{FieldFailureStreak, vfFailureStreak},
	{FieldEWMASuccess, vfEWMASuccess},
	{FieldEWMALatency, vfEWMALatency},
	{FieldEWMATTFT, vfEWMATTFT},
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

// sourceNames is what a policy's source names of the account view, from one
// scan (scanSource).
type sourceNames struct {
	reads Fields     // the counter fields it may read (Policy.Reads)
	view  viewFields // the view fields a fill writes up front (accountTable)
}

// scanSource scans source (which has already parsed) for the account view
// fields it names, as a name or inside a string literal.
//
// reads: see Policy.Reads. view: the named fields; a source that iterates
// tables generically (pairs, next) or reads them raw (rawget) bypasses the
// table's __index, so it gets every field up front.
func scanSource(source string) sourceNames {
	all := sourceNames{FieldsAll, viewFieldsAll}
	sc := parse.NewScanner(strings.NewReader(source), "")
	lx := &parse.Lexer{}
	var (
		named         viewFields
		rawget        bool
		dynamicIndex  bool
		buildsStrings bool
		prev, prev2   int
	)
	for {
		tok, err := sc.Scan(lx)
		if err != nil {
			return all // cannot happen for parsed source; be safe
		}
		if tok.Type < 0 {
			break
		}
		switch tok.Type {
		case parse.TIdent, parse.TString:
			for f, name := range accountFields {
				if tok.Str == name {
					named |= 1 << f
				}
			}
			if tok.Type == parse.TIdent {
				switch tok.Str {
				case "pairs", "next":
					return all
				case "rawget":
					rawget = true
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
	out := sourceNames{view: named}
	if rawget {
		out.view = viewFieldsAll
	}
	if dynamicIndex && buildsStrings {
		out.reads = FieldsAll
		return out
	}
	for _, c := range counterFields {
		if named&(1<<c.vf) != 0 {
			out.reads |= c.f
		}
	}
	return out
}

// String lists the fields by their Lua names, comma-separated ("none" for
// the empty set).
func (f Fields) String() string {
	if f == 0 {
		return "none"
	}
	var b strings.Builder
	for _, c := range counterFields {
		if f&c.f != 0 {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			b.WriteString(accountFields[c.vf])
		}
	}
	return b.String()
}
