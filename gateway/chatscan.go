package gateway

import "bytes"

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
// over its quotes.
func scanChat(data []byte) chatMarks {
	m := chatMarks{delta: -1}
	for i := 0; i < len(data); {
		q := bytes.IndexByte(data[i:], '"')
		if q < 0 {
			break
		}
		at := i + q
		rest := data[at+1:]
		i = at + 1
		if len(rest) == 0 {
			break
		}
		switch rest[0] {
		case 'u':
			if bytes.HasPrefix(rest, scanUsage) {
				m.usage = true
				if !bytes.HasPrefix(rest[len(scanUsage):], scanNull) {
					m.usageRead = true
				}
				if !m.usageObj && bytes.HasPrefix(rest, scanUsageObj) {
					m.usageObj = true
				}
			}
		case 'c':
			if !m.noChoices && bytes.HasPrefix(rest, scanChoices) {
				m.noChoices = true
			}
		case 'f':
			if !m.finish && bytes.HasPrefix(rest, scanFinish) {
				m.finish = true
			}
		case 'e':
			if !m.err && bytes.HasPrefix(rest, scanError) {
				m.err = true
			}
		case 'd':
			if m.delta < 0 && bytes.HasPrefix(rest, scanDeltaRest) {
				m.delta = at
			}
		}
	}
	if m.usage && !m.usageRead && bytes.IndexByte(data, '\\') >= 0 {
		m.usageRead = true
	}
	return m
}

// usageChunk is isUsageChunk from the marks.
func (m chatMarks) usageChunk() bool { return m.usageObj && m.noChoices }
