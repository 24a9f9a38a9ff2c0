package mock

import "strings"

// DefaultOutputTokens is the number of output tokens (words) in an answer
// when Account.OutputTokens is 0 or negative.
const DefaultOutputTokens = 12

// answerCycle is the repeating part of every answer; the account name
// followed by "." closes each cycle.
var answerCycle = [...]string{"This", "is", "a", "mock", "answer", "from"}

// obfAlphabet supplies the "obfuscation" padding of streamed deltas.
const obfAlphabet = "nXUCLcdzdJdMMgDHt6k0OJwIIfWhAMKFR1KZpbS4aIEacCRfN26pXQdNwPP14L3TH0"

// AnswerText returns the exact output text an account named name produces
// with tokens output tokens (tokens <= 0 means DefaultOutputTokens).
//
// The text is tokens words separated by single spaces, with no trailing space:
// "Hello from NAME. This is a mock answer from NAME. This is …" — the
// sentence "This is a mock answer from NAME." repeats and is cut off at
// exactly tokens words. The name appears once tokens >= 3. Streamed answers
// send one word per delta, each followed by a space except the last, so the
// deltas concatenate to AnswerText and their count is the output token count.
func AnswerText(name string, tokens int) string {
	if tokens <= 0 {
		tokens = DefaultOutputTokens
	}
	nameDot := name + "."
	var b strings.Builder
	for i := range tokens {
		w, _ := wordAt(i, nameDot)
		b.WriteString(w)
		if i < tokens-1 {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// wordAt returns word i of an answer whose name word is nameDot, and whether
// that word is the name word (which may need JSON escaping).
func wordAt(i int, nameDot string) (string, bool) {
	switch i {
	case 0:
		return "Hello", false
	case 1:
		return "from", false
	case 2:
		return nameDot, true
	}
	j := (i - 3) % (len(answerCycle) + 1)
	if j == len(answerCycle) {
		return nameDot, true
	}
	return answerCycle[j], false
}

// answer renders an account's answer text into JSON without allocating.
// It is computed once per account.
type answer struct {
	nameDot     string // name + "."
	nameDotJSON string // nameDot JSON-escaped, without quotes
}

func newAnswer(name string) answer {
	nd := name + "."
	return answer{nameDot: nd, nameDotJSON: string(appendJSONStringBody(nil, nd))}
}

// word returns word i JSON-escaped (without quotes).
func (a *answer) word(i int) string {
	w, isName := wordAt(i, a.nameDot)
	if isName {
		return a.nameDotJSON
	}
	return w
}

// appendDelta appends delta i of an answer of tokens words, JSON-escaped and
// without quotes: the word plus a space unless it is the last one.
func (a *answer) appendDelta(dst []byte, i, tokens int) []byte {
	dst = append(dst, a.word(i)...)
	if i < tokens-1 {
		dst = append(dst, ' ')
	}
	return dst
}

// obfuscation returns the padding value sent with delta i, shaped like the
// real "obfuscation" field (a short opaque string of varying length).
func obfuscation(i int) string {
	off := (i * 7) % 32
	n := 2 + (i*5)%14
	return obfAlphabet[off : off+n]
}

// appendDelta appends delta i of the stream's answer text, JSON-escaped and
// without quotes: the account's AnswerText, or for a scripted tool result
// ToolResultText (see script.go).
func (s *stream) appendDelta(dst []byte, i int) []byte {
	if s.req.script.kind != scriptResult {
		return s.acc.ans.appendDelta(dst, i, s.p.tokens)
	}
	switch {
	case i < 3: // "Hello from NAME."
		dst = append(dst, s.acc.ans.word(i)...)
	case i < 3+len(resultPrefix):
		dst = append(dst, resultPrefix[i-3]...)
	default:
		dst = append(dst, s.req.script.words[i-3-len(resultPrefix)]...)
	}
	if i < s.p.tokens-1 {
		dst = append(dst, ' ')
	}
	return dst
}

// appendText appends the stream's whole answer text, JSON-escaped and
// without quotes.
func (s *stream) appendText(dst []byte) []byte {
	for i := range s.p.tokens {
		dst = s.appendDelta(dst, i)
	}
	return dst
}
