package translate

// Server-Sent Events codec: one decoder (Scanner) and append-style encoders
// shared by every stream Troupe reads or writes.
//
// Wire format: https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation

import (
	"bytes"
	"errors"
	"io"
	"strings"
)

// DefaultMaxEvent is the event size limit, in bytes, NewScanner uses when it
// is given maxEvent <= 0: 16 MiB. The scanner's buffer starts small and only
// grows towards the limit when an event needs it.
const DefaultMaxEvent = 16 << 20

// initialBufSize is the scanner's first buffer, in bytes. Most Responses and
// Chat events fit; bigger ones (a response.completed with a long output) grow
// the buffer once and it is reused after that.
const initialBufSize = 4096

// maxEmptyReads is how many (0, nil) reads in a row the scanner tolerates
// before it gives up with io.ErrNoProgress, as bufio does.
const maxEmptyReads = 100

// ErrEventTooLarge is returned by Scanner.Next when one event, counted in raw
// bytes from its first line through the blank line that ends it, exceeds the
// scanner's maxEvent. The scanner is unusable afterwards: the stream cannot be
// resynchronised safely.
var ErrEventTooLarge = errors.New("translate: SSE event exceeds the size limit")

// errNegativeRead reports a broken io.Reader.
var errNegativeRead = errors.New("translate: reader returned an invalid count")

// utf8BOM is stripped once at the start of a stream, as the spec requires.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// Event is one dispatched Server-Sent Event.
//
// Ownership: like fasthttp's request and response views, every slice points
// into the Scanner's own buffers and is valid only until the next call to
// Next or Reset on the Scanner that returned it. Copy what you need to keep.
// The slices have their capacity clipped to their length, so appending to one
// copies rather than overwriting the scanner's buffer.
type Event struct {
	// Name is the value of the event's last "event:" field, nil when the event
	// had none (the spec's default type is then "message"; Chat Completions
	// streams never name their events, Responses and Anthropic streams always do).
	Name []byte
	// Data is the values of the event's "data:" fields joined with "\n" (LF),
	// without a trailing LF. It may be empty (a bare "data" line) but an event
	// is only dispatched if it had at least one data field.
	Data []byte
	// ID is the value of the event's last valid "id:" field, nil when none.
	// Unlike a browser's lastEventId it does not carry over to later events.
	// A value containing U+0000 is ignored, as the spec says.
	ID []byte
	// Retry is the value of the event's last "retry:" field (a reconnection
	// delay in milliseconds, as ASCII digits), nil when none. Values that are
	// not all ASCII digits are ignored, as the spec says.
	Retry []byte
}

// Scanner decodes a Server-Sent Events stream from an io.Reader, one event per
// call to Next, without allocating once its buffers have grown to the
// stream's largest event.
//
// It follows the WHATWG event stream interpretation
// (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):
// lines end in LF, CRLF or a lone CR (a CRLF split across two reads is still
// one line end); a leading UTF-8 BOM is skipped; "field: value" loses exactly
// one space after the colon; a line without a colon is a field with an empty
// value; "data" values are joined with LF; lines starting with ":" are
// comments; unknown fields are ignored; a blank line dispatches the pending
// event if it has any data. One deliberate difference from the spec: at a
// clean end of stream (io.EOF) a pending event that was not followed by a
// blank line is still dispatched, because real upstreams do end that way.
//
// Bytes are passed through untouched (no UTF-8 decoding), so a multi-byte
// character split across reads needs no special handling.
//
// A Scanner is not safe for concurrent use.
type Scanner struct {
	rd   io.Reader
	rerr error // the error the reader returned (io.EOF at a clean end); no more reads after it
	err  error // sticky error returned by Next

	buf  []byte
	r, w int // buf[r:w] is buffered and not yet consumed
	scan int // buf[r:scan] is known to hold no CR or LF
	ev   int // start of the current event's raw bytes in buf; everything before it may be discarded
	max  int

	bomDone      bool
	skipLF       bool // the last line ended in a CR at the end of the buffered bytes: drop a following LF
	emitComments bool

	// The pending event; offsets are relative to ev so that compaction does not disturb them.
	pending            bool // a field line was seen since ev
	hasName            bool
	nameOff, nameEnd   int
	hasID              bool
	idOff, idEnd       int
	hasRetry           bool
	retryOff, retryEnd int
	nData              int
	dataOff, dataEnd   int    // the only data value when nData == 1
	data               []byte // joined data values when nData > 1

	// The last value returned by Next.
	rawStart, rawEnd int // absolute offsets in buf
	isComment        bool
	cOff, cEnd       int // comment text, absolute offsets in buf
	comments         int64
}

// NewScanner returns a Scanner reading from r. maxEvent limits the raw size in
// bytes of one event (all of its lines, their line ends and the blank line
// that ends it); Next fails with ErrEventTooLarge past it. maxEvent <= 0 means
// DefaultMaxEvent. The scanner allocates a small buffer up front (4 KiB or
// maxEvent, whichever is smaller) and grows it by doubling only as needed.
func NewScanner(r io.Reader, maxEvent int) *Scanner {
	if maxEvent <= 0 {
		maxEvent = DefaultMaxEvent
	}
	s := &Scanner{rd: r, max: maxEvent}
	s.buf = make([]byte, min(initialBufSize, maxEvent))
	return s
}

// Reset makes s read a new stream from r, keeping its buffers (and so their
// grown capacity), its size limit and its EmitComments setting, so Scanners
// can be pooled. It clears the error state and the comment count; slices
// returned earlier become invalid.
func (s *Scanner) Reset(r io.Reader) {
	buf, data, max, emit := s.buf, s.data, s.max, s.emitComments
	*s = Scanner{rd: r, buf: buf, data: data[:0], max: max, emitComments: emit}
}

// EmitComments controls what Next does with comment lines (": keep-alive").
// Off (the default), comments are skipped and only counted (see Comments).
// On, a comment line that arrives between events makes Next return at once
// with a zero Event; IsComment then reports true, Comment gives its text and
// Raw its bytes, so a proxy can forward keep-alives as they come. Comment lines
// in the middle of an event are never returned separately: they stay part of
// that event's Raw bytes.
func (s *Scanner) EmitComments(on bool) { s.emitComments = on }

// Comments returns the number of comment lines read so far, emitted or not.
func (s *Scanner) Comments() int64 { return s.comments }

// IsComment reports whether the last Next returned a comment line rather than
// an event. It is only ever true with EmitComments(true).
func (s *Scanner) IsComment() bool { return s.isComment }

// Comment returns the text of the comment line the last Next returned (after
// the ":" and at most one space), or nil when it returned an event. The slice
// is valid until the next call to Next or Reset.
func (s *Scanner) Comment() []byte {
	if !s.isComment {
		return nil
	}
	return s.buf[s.cOff:s.cEnd:s.cEnd]
}

// Raw returns the bytes of the event (or comment) the last Next returned,
// exactly as read, line ends included: for an event, from its first line
// through the blank line that dispatched it (comment lines inside the event
// included; blank and comment lines before it and blocks that were never
// dispatched are not). Writing every Raw of a stream in order reproduces the
// stream's events byte for byte, so a passthrough proxy can forward them.
//
// Two edge cases: an event dispatched at end of stream has no trailing blank
// line in Raw (none was read); and when a stream uses CRLF and the CR of the
// dispatching blank line is the last byte of one read, the LF that follows it
// is dropped rather than delayed, so that Raw ends in a lone CR, still a valid
// line end. The slice is valid until the next call to Next or Reset, and nil
// before the first event or after an error.
func (s *Scanner) Raw() []byte {
	if s.rawEnd == 0 {
		return nil
	}
	return s.buf[s.rawStart:s.rawEnd:s.rawEnd]
}

// Next reads until the next event is complete and returns it. Its slices (and
// Raw, Comment) are valid until the next call to Next or Reset.
//
// Errors: io.EOF once the stream has ended cleanly and every event has been
// returned; ErrEventTooLarge when an event exceeds maxEvent; io.ErrNoProgress
// when the reader keeps returning no data and no error; otherwise the
// reader's own error (an event pending when a read fails is dropped, since it
// may be truncated). Errors are sticky: every later call returns the same one.
func (s *Scanner) Next() (Event, error) {
	if s.err != nil {
		return Event{}, s.err
	}
	s.isComment = false
	s.rawStart, s.rawEnd = 0, 0
	s.ev = s.r
	s.resetPending()
	for {
		start, end, ok := s.line()
		if ok {
			if ev, done := s.process(start, end); done {
				return ev, nil
			}
			continue
		}
		if s.rerr == nil {
			if err := s.fill(); err != nil {
				s.err = err
				return Event{}, err
			}
			continue
		}
		if s.rerr != io.EOF {
			s.err = s.rerr
			return Event{}, s.err
		}
		// Clean end of stream: the last line may lack its line end.
		if s.r < s.w {
			start, end = s.r, s.w
			s.r, s.scan = s.w, s.w
			if ev, done := s.process(start, end); done {
				return ev, nil
			}
		}
		if s.nData > 0 {
			return s.dispatch(), nil
		}
		s.err = io.EOF
		return Event{}, io.EOF
	}
}

// Ready reports whether the next call to Next will return without reading
// from the reader: the bytes already buffered hold a complete event (or,
// with EmitComments, a comment line between events), or the reader has
// already ended or failed, or Next's error is sticky. A relay uses it to
// gather the events in hand and write them together, but never to hold one
// back while Next waits for the upstream. False is also the answer before
// the first Next. Ready changes nothing; it scans the buffered bytes up to
// the end of the next event, without allocating.
func (s *Scanner) Ready() bool {
	if s.err != nil || s.rerr != nil {
		return true
	}
	if !s.bomDone {
		return false
	}
	b := s.buf[s.r:s.w]
	if s.skipLF && len(b) > 0 && b[0] == '\n' {
		b = b[1:]
	}
	// Lines are found as line does, each byte looked at a bounded number of
	// times (lf is the next LF at or after i, or -1 when none is left).
	pending, data := false, false
	lf := bytes.IndexByte(b, '\n')
	for i := 0; i < len(b); {
		if lf >= 0 && lf < i {
			if lf = bytes.IndexByte(b[i:], '\n'); lf >= 0 {
				lf += i
			}
		}
		end := len(b)
		if lf >= 0 {
			end = lf
		}
		var line []byte
		if cr := bytes.IndexByte(b[i:end], '\r'); cr >= 0 {
			line = b[i : i+cr]
			i += cr + 1
			if i < len(b) && b[i] == '\n' {
				i++
			}
		} else if lf >= 0 {
			line = b[i:lf]
			i = lf + 1
		} else {
			return false // an incomplete line
		}
		switch {
		case len(line) == 0:
			if data {
				return true
			}
			pending = false
		case line[0] == ':':
			if !pending && s.emitComments {
				return true
			}
		default:
			pending = true
			if bytes.HasPrefix(line, []byte("data")) && (len(line) == 4 || line[4] == ':') {
				data = true
			}
		}
	}
	return false
}

// resetPending forgets the pending event's fields.
func (s *Scanner) resetPending() {
	s.pending, s.hasName, s.hasID, s.hasRetry = false, false, false, false
	s.nData = 0
}

// line returns the next complete line in the buffer as absolute offsets of its
// content (line end excluded) and consumes it with its line end. ok is false
// when more bytes are needed.
func (s *Scanner) line() (start, end int, ok bool) {
	if !s.bomDone {
		b := s.buf[s.r:s.w]
		if len(b) < len(utf8BOM) && s.rerr == nil && bytes.HasPrefix(utf8BOM, b) {
			return 0, 0, false
		}
		if bytes.HasPrefix(b, utf8BOM) {
			s.r += len(utf8BOM)
			s.ev, s.scan = s.r, s.r
		}
		s.bomDone = true
	}
	if s.skipLF {
		if s.r == s.w {
			return 0, 0, false
		}
		s.skipLF = false
		if s.buf[s.r] == '\n' {
			s.r++
			if !s.pending {
				s.ev = s.r
			}
		}
	}
	from := max(s.scan, s.r)
	b := s.buf[from:s.w]
	seg := b
	lf := bytes.IndexByte(b, '\n')
	if lf >= 0 {
		seg = b[:lf]
	}
	if cr := bytes.IndexByte(seg, '\r'); cr >= 0 {
		start, end = s.r, from+cr
		next := end + 1
		if next < s.w {
			if s.buf[next] == '\n' {
				next++
			}
		} else {
			s.skipLF = true
		}
		s.r, s.scan = next, next
		return start, end, true
	}
	if lf >= 0 {
		start, end = s.r, from+lf
		s.r = end + 1
		s.scan = s.r
		return start, end, true
	}
	s.scan = s.w
	return 0, 0, false
}

// process interprets one line, buf[start:end], already consumed. It returns
// done when Next should return ev (an event or an emitted comment).
func (s *Scanner) process(start, end int) (ev Event, done bool) {
	line := s.buf[start:end]
	if len(line) == 0 {
		if s.nData > 0 {
			return s.dispatch(), true
		}
		// A blank line before any field, or ending a block without data: nothing
		// to dispatch, and its bytes are not part of the next event.
		s.resetPending()
		s.ev = s.r
		return Event{}, false
	}
	if line[0] == ':' {
		s.comments++
		if s.pending {
			return Event{}, false // stays inside the event's raw bytes
		}
		if s.emitComments {
			s.isComment = true
			s.cOff, s.cEnd = start+1, end
			if s.cOff < end && s.buf[s.cOff] == ' ' {
				s.cOff++
			}
			s.rawStart, s.rawEnd = start, s.r
			return Event{}, true
		}
		s.ev = s.r
		return Event{}, false
	}
	s.pending = true
	field, vs := line, end
	if colon := bytes.IndexByte(line, ':'); colon >= 0 {
		field = line[:colon]
		vs = start + colon + 1
		if vs < end && s.buf[vs] == ' ' {
			vs++
		}
	}
	switch string(field) {
	case "data":
		s.appendData(vs, end)
	case "event":
		s.hasName, s.nameOff, s.nameEnd = true, vs-s.ev, end-s.ev
	case "id":
		if bytes.IndexByte(s.buf[vs:end], 0) < 0 {
			s.hasID, s.idOff, s.idEnd = true, vs-s.ev, end-s.ev
		}
	case "retry":
		if allDigits(s.buf[vs:end]) {
			s.hasRetry, s.retryOff, s.retryEnd = true, vs-s.ev, end-s.ev
		}
	}
	return Event{}, false
}

// appendData records one data value, buf[vs:ve]. A single value stays in buf;
// from the second on, the values are joined in s.data.
func (s *Scanner) appendData(vs, ve int) {
	switch s.nData {
	case 0:
		s.dataOff, s.dataEnd = vs-s.ev, ve-s.ev
	case 1:
		s.data = append(s.data[:0], s.buf[s.ev+s.dataOff:s.ev+s.dataEnd]...)
		fallthrough
	default:
		s.data = append(s.data, '\n')
		s.data = append(s.data, s.buf[vs:ve]...)
	}
	s.nData++
}

// dispatch builds the pending event and marks its raw bytes.
func (s *Scanner) dispatch() Event {
	var ev Event
	b := s.ev
	if s.hasName {
		ev.Name = s.buf[b+s.nameOff : b+s.nameEnd : b+s.nameEnd]
	}
	if s.nData == 1 {
		ev.Data = s.buf[b+s.dataOff : b+s.dataEnd : b+s.dataEnd]
	} else {
		ev.Data = s.data[:len(s.data):len(s.data)]
	}
	if s.hasID {
		ev.ID = s.buf[b+s.idOff : b+s.idEnd : b+s.idEnd]
	}
	if s.hasRetry {
		ev.Retry = s.buf[b+s.retryOff : b+s.retryEnd : b+s.retryEnd]
	}
	s.rawStart, s.rawEnd = s.ev, s.r
	s.resetPending()
	return ev
}

// fill reads more bytes into the buffer, first making room by discarding the
// bytes before the current event or by growing the buffer up to the limit.
// A read error is kept in s.rerr; fill itself fails only on ErrEventTooLarge
// and io.ErrNoProgress.
func (s *Scanner) fill() error {
	if free := len(s.buf) - s.w; s.ev > 0 && free < len(s.buf)/2 {
		s.shift(s.buf)
	}
	if s.w == len(s.buf) {
		if s.w-s.ev >= s.max {
			return ErrEventTooLarge
		}
		nb := make([]byte, min(max(2*len(s.buf), initialBufSize), s.max))
		s.shift(nb)
	}
	for range maxEmptyReads {
		n, err := s.rd.Read(s.buf[s.w:])
		if n < 0 || n > len(s.buf)-s.w {
			s.rerr = errNegativeRead
			return nil
		}
		s.w += n
		if err != nil {
			s.rerr = err
			return nil
		}
		if n > 0 {
			return nil
		}
	}
	return io.ErrNoProgress
}

// shift moves buf[ev:w] to the start of dst (which may be s.buf) and makes
// dst the buffer.
func (s *Scanner) shift(dst []byte) {
	d := s.ev
	copy(dst, s.buf[d:s.w])
	s.buf = dst
	s.ev -= d
	s.r -= d
	s.w -= d
	s.scan = max(s.scan-d, s.r)
}

func allDigits(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// AppendEvent appends one event to dst and returns the extended slice:
// "event: name\n" (left out when name is empty), one "data: …\n" line per
// line of data, and the blank line that dispatches it. Lines of data are split
// on LF, CRLF and lone CR, so any bytes round-trip through Scanner except that
// CRLF and CR inside data come back as LF. A name is cut at its first CR or LF,
// which could not be encoded. Empty data encodes as one bare "data:" line, which
// the Scanner dispatches as an event with empty Data.
//
// Wire format: https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation
func AppendEvent(dst []byte, name string, data []byte) []byte {
	if name != "" {
		dst = append(dst, "event: "...)
		dst = append(dst, name[:lineLenString(name)]...)
		dst = append(dst, '\n')
	}
	return AppendData(dst, data)
}

// AppendData appends one unnamed event (no "event:" line, the Chat
// Completions framing "data: {…}\n\n") to dst and returns the extended slice.
// Data is split into lines as in AppendEvent.
func AppendData(dst, data []byte) []byte {
	for {
		n := lineLen(data)
		dst = append(dst, "data:"...)
		if n > 0 {
			dst = append(dst, ' ')
			dst = append(dst, data[:n]...)
		}
		dst = append(dst, '\n')
		if n == len(data) {
			return append(dst, '\n')
		}
		if data[n] == '\r' && n+1 < len(data) && data[n+1] == '\n' {
			n++
		}
		data = data[n+1:]
	}
}

// AppendComment appends text as comment lines (": text\n", one per line of
// text; ":\n" for empty text) to dst and returns the extended slice. Clients
// ignore comments; proxies send them as keep-alives. No blank line is added:
// a comment needs none.
func AppendComment(dst []byte, text string) []byte {
	for {
		n := lineLenString(text)
		dst = append(dst, ':')
		if n > 0 {
			dst = append(dst, ' ')
			dst = append(dst, text[:n]...)
		}
		dst = append(dst, '\n')
		if n == len(text) {
			return dst
		}
		if text[n] == '\r' && n+1 < len(text) && text[n+1] == '\n' {
			n++
		}
		text = text[n+1:]
	}
}

// lineLen returns the length of b's first line: the index of its first CR or
// LF, or len(b) when it has none.
func lineLen(b []byte) int {
	n := len(b)
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		n = i
	}
	if i := bytes.IndexByte(b[:n], '\r'); i >= 0 {
		n = i
	}
	return n
}

// lineLenString is lineLen for a string.
func lineLenString(s string) int {
	n := len(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		n = i
	}
	if i := strings.IndexByte(s[:n], '\r'); i >= 0 {
		n = i
	}
	return n
}
