package scripts

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// Error kinds, matched with errors.Is on an *Error.
var (
	// ErrSyntax: the source does not parse or compile.
	ErrSyntax = errors.New("syntax error")
	// ErrRuntime: the Lua code raised an error (including sandbox refusals
	// such as calling a removed function or exceeding a string limit).
	ErrRuntime = errors.New("runtime error")
	// ErrBudget: a call ran past its instruction or time budget and was
	// stopped, or a self-test ran past its time budget.
	ErrBudget = errors.New("budget exceeded")
	// ErrResult: a function returned values of the wrong type or range.
	ErrResult = errors.New("bad result")
	// ErrKnobs: the policy table is malformed, or score is missing.
	ErrKnobs = errors.New("bad policy definition")
)

// Error is a policy failure with its source position. Its text reads like a
// Lua error: "policy smart:12: attempt to call a nil value".
type Error struct {
	Policy string // the policy's name
	Line   int    // 1-based source line; 0 when unknown
	Msg    string // what went wrong, without the position
	Kind   error  // ErrSyntax, ErrRuntime, ErrBudget, ErrResult or ErrKnobs
}

// Error formats the error as "policy NAME:LINE: MSG" ("policy NAME: MSG" without a line).
func (e *Error) Error() string {
	if e.Line > 0 {
		return "policy " + e.Policy + ":" + strconv.Itoa(e.Line) + ": " + e.Msg
	}
	return "policy " + e.Policy + ": " + e.Msg
}

// Unwrap returns the error's kind.
func (e *Error) Unwrap() error { return e.Kind }

// chunkName is the Lua source name of a policy; gopher-lua prefixes runtime
// errors with it ("policy smart:12:").
func chunkName(policy string) string { return "policy " + policy }

// syntaxError converts a parse or compile error of source. An error at
// the end of the file (a block left open, an unterminated string) is put
// on the source's last line that is not blank: where the missing end or
// quote belongs, and where an editor should mark it.
func syntaxError(policy, source string, err error) *Error {
	e := &Error{Policy: policy, Kind: ErrSyntax}
	var pe *parse.Error
	var ce *lua.CompileError
	switch {
	case errors.As(err, &pe):
		e.Line, e.Msg = pe.Pos.Line, strings.TrimSpace(pe.Message)
		switch {
		case pe.Pos.Line == parse.EOF:
			e.Line = lastLine(source)
			e.Msg += " at end of file"
		case pe.Token != "":
			e.Msg += " near '" + pe.Token + "'"
		}
	case errors.As(err, &ce):
		e.Line, e.Msg = ce.Line, ce.Message
	default:
		e.Msg = strings.TrimSpace(err.Error())
	}
	return e
}

// lastLine returns the 1-based number of the last line of source that is
// not blank (1 for a blank source).
func lastLine(source string) int {
	return 1 + strings.Count(strings.TrimRight(source, " \t\r\n\f\v"), "\n")
}

// runtimeError converts an error returned by PCall. A position prefix
// ("policy smart:12: ") becomes Line; without one, the first frame of the
// policy in the Lua traceback gives the line.
func runtimeError(policy string, err error) *Error {
	e := &Error{Policy: policy, Kind: ErrRuntime}
	msg, trace := err.Error(), ""
	var ae *lua.ApiError
	if errors.As(err, &ae) {
		if ae.Object != nil {
			msg = ae.Object.String()
			if _, ok := ae.Object.(lua.LString); !ok {
				msg = "error object is a " + ae.Object.Type().String()
			}
		}
		trace = ae.StackTrace
	}
	prefix := chunkName(policy) + ":"
	if line, rest, ok := cutLine(msg, prefix); ok {
		e.Line, e.Msg = line, clipMsg(rest)
		return e
	}
	e.Msg = clipMsg(msg)
	if i := strings.Index(trace, prefix); i >= 0 {
		if line, _, ok := cutLine(trace[i:], prefix); ok {
			e.Line = line
		}
	}
	return e
}

// maxErrorMsg bounds the text of a policy's runtime error: error() may be
// given a string of any size, and the message goes to logs and the API.
const maxErrorMsg = 1024

// clipMsg cuts msg to maxErrorMsg bytes (at a UTF-8 boundary), saying so.
func clipMsg(msg string) string {
	if len(msg) <= maxErrorMsg {
		return msg
	}
	cut := maxErrorMsg
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + fmt.Sprintf("… (%d bytes in all)", len(msg))
}

// cutLine parses "PREFIX<digits>:<rest>" and returns the line and the trimmed rest.
func cutLine(s, prefix string) (int, string, bool) {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return 0, "", false
	}
	digits, after, ok := strings.Cut(rest, ":")
	if !ok {
		return 0, "", false
	}
	n, err := strconv.Atoi(digits)
	if err != nil {
		return 0, "", false
	}
	return n, strings.TrimSpace(after), true
}

// resultError reports a bad return value of fn, at the line fn is defined on.
func resultError(policy string, fn *lua.LFunction, format string, args ...any) *Error {
	return &Error{Policy: policy, Line: definedAt(fn), Msg: fmt.Sprintf(format, args...), Kind: ErrResult}
}

// definedAt is the source line a Lua function is defined on (0 for Go functions).
func definedAt(fn *lua.LFunction) int {
	if fn == nil || fn.Proto == nil {
		return 0
	}
	return fn.Proto.LineDefined
}

// tokenLine is the line of the first name or string literal in source
// that reads name (the key of a policy-table entry), 0 when there is none.
func tokenLine(source, name string) int {
	sc := parse.NewScanner(strings.NewReader(source), "")
	lx := &parse.Lexer{}
	for {
		tok, err := sc.Scan(lx)
		if err != nil || tok.Type < 0 {
			return 0
		}
		if (tok.Type == parse.TIdent || tok.Type == parse.TString) && tok.Str == name {
			return tok.Pos.Line
		}
		lx.PrevTokenType = tok.Type
	}
}
