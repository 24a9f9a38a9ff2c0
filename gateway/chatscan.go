package gateway

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// chatMarks is what one pass over a Chat chunk's bytes (scanChat) finds of
// the strings the relay looks for in each event. Each of them begins with
// a quote, so the pass stops only at the chunk's quotes and compares what
// follows with each string, where the relay made a separate bytes.Contains
// (or bytes.Index) over the whole chunk for each: four or five searches an
// event, each stopping at every quote of the chunk for its first byte
// (docs/benchmarks.md, issue 21, cpu2). Every quote is looked at, so a
// mark is set exactly when bytes.Contains would have found its string.
type chatMarks struct {
	usage     bool // `"usage"`: translate.Usage.AddEvent's test before it reads the usage
	usageRead bool // the usage must be read: see below
	usageObj  bool // `"usage":{` (isUsageChunk)
	noChoices bool // `"choices":[]` (isUsageChunk)
	finish    bool // `"finish_reason":"`: the chunk that ends some compatible upstreams' streams
	err       bool // `"error"`: the chunk may be an error (upstream.ClassifyEvent's test)
	// delta is the index of the first `"delta":` (deltaOf's), -1 when none.
	delta int
}

// usageRead says that a chunk's usage must be read (gjson), not known
// absent: some `"usage"` in it is not followed by `:null`, or it holds a
// backslash (a key may be escaped). Without either, every key gjson could
// take for "usage" is `"usage"` as it stands, with a null after it, so
// AddEvent finds no usage object: the mock's chunks and OpenAI's with
// include_usage carry "usage":null on every chunk but the last, and each
// was a walk of the chunk's top level. FuzzScanChat checks it against
// AddEvent.

// The strings scanChat looks for, without their opening quote.
var (
	scanUsage     = []byte(`usage"`)
	scanUsageObj  = []byte(`usage":{`)
	scanChoices   = []byte(`choices":[]`)
	scanFinish    = []byte(`finish_reason":"`)
	scanError     = []byte(`error"`)
	scanDeltaRest = []byte(`delta":`)
	scanNull      = []byte(`:null`)
)

// scanChat marks which of the relay's strings data holds, in one pass
// over its quotes. It finds the quotes eight bytes a step (quotesIn) rather
// than with a bytes.IndexByte call a quote (a chunk's quotes are a few
// bytes apart, and each call's set-up cost more than the bytes it passed
// over), and compares only after a quote followed by the first letter of
// one of the strings (scanFirst): most quotes close a key or a value
// (docs/benchmarks.md, issue 21, cpu3).
func scanChat(data []byte) chatMarks {
	m := chatMarks{delta: -1}
	i := 0
	for ; len(data)-i >= 8; i += 8 {
		for q := quotesIn(binary.LittleEndian.Uint64(data[i:])); q != 0; q &= q - 1 {
			at := i + bits.TrailingZeros64(q)>>3
			if at+1 < len(data) && scanFirst[data[at+1]] {
				m.mark(data, at)
			}
		}
	}
	for ; i+1 < len(data); i++ { // the last bytes, fewer than eight
		if data[i] == '"' && scanFirst[data[i+1]] {
			m.mark(data, i)
		}
	}
	if m.usage && !m.usageRead && bytes.IndexByte(data, '\\') >= 0 {
		m.usageRead = true
	}
	return m
}

// scanFirst holds the bytes that follow the opening quote of the strings
// scanChat looks for.
var scanFirst = [256]bool{'u': true, 'c': true, 'f': true, 'e': true, 'd': true}

// mark sets the marks of the string data holds at index at, a quote,
// comparing the eight bytes after it as one word (word8) with each
// string's first eight (prefixWord) before any byte compare: a call of
// bytes.HasPrefix (runtime.memequal) a string cost more than the rest of
// mark.
func (m *chatMarks) mark(data []byte, at int) {
	rest := data[at+1:]
	w := word8(rest)
	switch rest[0] {
	case 'u':
		if wordUsage.in(w) {
			m.usage = true
			if !bytes.HasPrefix(rest[len(scanUsage):], scanNull) {
				m.usageRead = true
			}
			if !m.usageObj && wordUsageObj.in(w) {
				m.usageObj = true
			}
		}
	case 'c':
		if !m.noChoices && wordChoices.in(w) && bytes.HasPrefix(rest[8:], scanChoices[8:]) {
			m.noChoices = true
		}
	case 'f':
		if !m.finish && wordFinish.in(w) && bytes.HasPrefix(rest[8:], scanFinish[8:]) {
			m.finish = true
		}
	case 'e':
		if !m.err && wordError.in(w) {
			m.err = true
		}
	case 'd':
		if m.delta < 0 && wordDelta.in(w) {
			m.delta = at
		}
	}
}

// word8 is b's first eight bytes in little-endian order, zero past b's
// end.
func word8(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.LittleEndian.Uint64(b)
	}
	var t [8]byte
	copy(t[:], b)
	return binary.LittleEndian.Uint64(t[:])
}

// prefixWord is the first bytes (up to eight) of a string as word8 reads
// them, and the mask of those bytes. None of the strings holds a zero
// byte, so a word8 of fewer bytes than the string never matches it.
type prefixWord struct{ w, mask uint64 }

func newPrefixWord(s []byte) prefixWord {
	n := min(len(s), 8)
	mask := ^uint64(0)
	if n < 8 {
		mask = 1<<(8*n) - 1
	}
	return prefixWord{word8(s[:n]), mask}
}

// in reports whether w, a word8, begins with p's bytes.
func (p prefixWord) in(w uint64) bool { return w&p.mask == p.w }

// The first eight bytes (or all) of the strings mark compares; the
// strings of more than eight compare the rest as bytes.
var (
	wordUsage    = newPrefixWord(scanUsage)     // 6 bytes
	wordUsageObj = newPrefixWord(scanUsageObj)  // 8
	wordChoices  = newPrefixWord(scanChoices)   // 8 of 11
	wordFinish   = newPrefixWord(scanFinish)    // 8 of 16
	wordError    = newPrefixWord(scanError)     // 6
	wordDelta    = newPrefixWord(scanDeltaRest) // 7
)

// quotesIn returns w, eight bytes of a chunk in little-endian order, with
// 0x80 in each byte that is a double quote and 0 in every other byte:
// exact (no carry crosses a byte), so each set bit is one quote, the
// lowest the first.
func quotesIn(w uint64) uint64 {
	const (
		ones  = 0x0101010101010101
		low7  = 0x7f7f7f7f7f7f7f7f
		quote = ones * '"'
	)
	x := w ^ quote                           // a quote's byte is now zero
	return ^(((x & low7) + low7) | x | low7) // 0x80 where x's byte is zero
}

// usageChunk is isUsageChunk from the marks.
func (m chatMarks) usageChunk() bool { return m.usageObj && m.noChoices }

// backslashesIn is quotesIn for the backslash.
func backslashesIn(w uint64) uint64 {
	const (
		ones      = 0x0101010101010101
		low7      = 0x7f7f7f7f7f7f7f7f
		backslash = ones * '\\'
	)
	x := w ^ backslash
	return ^(((x & low7) + low7) | x | low7)
}
