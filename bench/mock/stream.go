package mock

import (
	"bufio"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// stream is the state of one answer, from the accepted request to its last
// event. It is pooled; for a streamed answer the fasthttp stream writer owns
// it after the handler returns and releases it when the answer ends.
type stream struct {
	f       *Fleet
	acc     *account
	route   route
	req     request
	p       plan
	start   time.Time // when the request was accepted
	created int64     // start in unix seconds
	id      [32]byte  // hex id suffix shared by chatcmpl-, resp_, msg_ and req_ ids
	head    []byte    // chat: the common prefix of every chunk
	buf     []byte    // the event being rendered
	wire    []byte    // hijacked faults: the response head, then chunk framing
	body    []byte    // hijacked faults: a JSON answer to cut
	timer   *time.Timer
	hdr     *fasthttp.ResponseHeader // hijacked faults: the response head to send
	gone    <-chan struct{}          // hijacked faults: closed when the client goes away; nil otherwise
	settled bool                     // the outcome is counted (settle)
}

var streamPool = sync.Pool{New: func() any {
	return &stream{buf: make([]byte, 0, 2048), head: make([]byte, 0, 256)}
}}

func getStream(f *Fleet, acc *account, rt route) *stream {
	s := streamPool.Get().(*stream)
	s.f, s.acc, s.route = f, acc, rt
	f.nextID(s.id[:0])
	return s
}

func putStream(s *stream) {
	if s.timer != nil {
		s.timer.Stop()
	}
	if cap(s.buf) > 64<<10 {
		s.buf = make([]byte, 0, 2048)
	}
	if cap(s.wire) > 64<<10 {
		s.wire = nil
	}
	if cap(s.body) > 64<<10 {
		s.body = nil
	}
	if s.hdr != nil {
		s.hdr.Reset()
	}
	*s = stream{buf: s.buf[:0], head: s.head[:0], wire: s.wire[:0], body: s.body[:0], timer: s.timer, hdr: s.hdr}
	streamPool.Put(s)
}

// sleep waits d, or returns false at once if the fleet closes first (or, on
// a hijacked connection, the client goes away).
func (s *stream) sleep(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-s.f.done:
			return false
		case <-s.gone:
			return false
		default:
			return true
		}
	}
	if s.timer == nil {
		s.timer = time.NewTimer(d)
	} else {
		s.timer.Reset(d)
	}
	select {
	case <-s.timer.C:
		return true
	case <-s.f.done:
	case <-s.gone:
	}
	s.timer.Stop()
	return false
}

// untilToken waits until delta i is due: Latency after the start, then one
// interval per token (scheduled from the start, so pacing does not drift).
func (s *stream) untilToken(i int) bool {
	due := s.start.Add(s.p.latency + time.Duration(i)*s.p.interval)
	return s.sleep(time.Until(due))
}

// emit writes one event and flushes it to the client. False means the
// client went away (or the connection failed).
func (s *stream) emit(w *bufio.Writer, b []byte) bool {
	s.buf = b
	if _, err := w.Write(b); err != nil {
		return false
	}
	return w.Flush() == nil
}

// finish ends an answer: counts its outcome (unless settle has) and
// releases s. delivered reports whether the whole answer reached the client.
func (s *stream) finish(delivered bool) {
	s.settle(delivered)
	putStream(s)
}

// settle counts the answer's outcome, once, and so drops InFlight. A
// streamed or hijacked answer settles as delivered just before its last
// bytes are written (emitLast, rawAnswer): a client holding the whole
// answer must never find it still in flight, or a gateway that frees a
// max_concurrency slot when an answer ends, and at once sends the next
// request on it, is counted over its limit (MaxInFlight). An answer whose
// last write then fails stays counted Completed.
func (s *stream) settle(delivered bool) {
	if s.settled {
		return
	}
	s.settled = true
	o := s.outcome(delivered)
	s.acc.stats.end(o)
	s.f.total.end(o)
}

// emitLast writes an answer's last event, settled as delivered first.
func (s *stream) emitLast(w *bufio.Writer, b []byte) bool {
	s.settle(true)
	return s.emit(w, b)
}

// outcome classifies an ended answer: a fault that fired makes it Faults,
// except a slow_first_token answer delivered in full (the fault only delayed
// a normal answer).
func (s *stream) outcome(delivered bool) outcome {
	switch {
	case s.p.fault != nil && !(delivered && s.p.fault.Kind == FaultSlowFirstToken):
		return outFaulted
	case delivered:
		return outCompleted
	}
	return outCancelled
}

// streamChat is the stream writer of a Chat Completions answer.
func (s *stream) streamChat(w *bufio.Writer) { s.finish(s.writeChat(w)) }

// streamResponses is the stream writer of a Responses (and Codex) answer.
func (s *stream) streamResponses(w *bufio.Writer) { s.finish(s.writeResponses(w)) }

// writeStream writes the route's event stream to w and reports whether it
// was delivered in full.
func (s *stream) writeStream(w *bufio.Writer) bool {
	switch s.route {
	case routeChat:
		return s.writeChat(w)
	case routeMessages:
		return s.writeMessages(w)
	}
	return s.writeResponses(w)
}

// writeChat writes a Chat Completions event stream: the role chunk after
// Latency, one chunk per token, the finish chunk, the usage chunk if asked
// for, [DONE]. It stops early (false) when the client goes away, the fleet
// closes, or the plan cuts the stream after cutAfter deltas.
func (s *stream) writeChat(w *bufio.Writer) bool {
	s.head = s.appendChatHead(s.head[:0])
	if !s.untilToken(0) || !s.emit(w, s.appendChatRole(s.buf[:0])) {
		return false
	}
	n := s.p.tokens
	for i := range n {
		if i > 0 && !s.untilToken(i) {
			return false
		}
		if !s.emit(w, s.appendChatDelta(s.buf[:0], i)) || i+1 == s.p.cutAfter {
			return false
		}
	}
	if !s.emit(w, s.appendChatFinish(s.buf[:0])) {
		return false
	}
	if s.req.includeUsage && !s.emit(w, s.appendChatUsageChunk(s.buf[:0])) {
		return false
	}
	return s.emitLast(w, append(s.buf[:0], "data: [DONE]\n\n"...))
}

// writeResponses writes a Responses (and Codex) event stream:
// response.created and response.in_progress at once, the message after
// Latency, one output_text.delta per token, then response.completed
// (response.incomplete when the output limit cut it). It stops early like
// writeChat.
func (s *stream) writeResponses(w *bufio.Writer) bool {
	if s.req.script.kind == scriptToolCall {
		return s.writeResponsesToolCall(w)
	}
	seq := 0
	if !s.emit(w, s.appendRespLifecycle(s.buf[:0], "response.created", seq, false)) {
		return false
	}
	seq++
	if !s.emit(w, s.appendRespLifecycle(s.buf[:0], "response.in_progress", seq, false)) {
		return false
	}
	seq++
	if !s.untilToken(0) {
		return false
	}
	if !s.emit(w, s.appendRespItemAdded(s.buf[:0], seq)) {
		return false
	}
	seq++
	if !s.emit(w, s.appendRespPart(s.buf[:0], "response.content_part.added", seq, false)) {
		return false
	}
	seq++
	n := s.p.tokens
	for i := range n {
		if i > 0 && !s.untilToken(i) {
			return false
		}
		if !s.emit(w, s.appendRespDelta(s.buf[:0], seq, i)) || i+1 == s.p.cutAfter {
			return false
		}
		seq++
	}
	if !s.emit(w, s.appendRespTextDone(s.buf[:0], seq)) {
		return false
	}
	seq++
	if !s.emit(w, s.appendRespPart(s.buf[:0], "response.content_part.done", seq, true)) {
		return false
	}
	seq++
	if !s.emit(w, s.appendRespItemDone(s.buf[:0], seq)) {
		return false
	}
	seq++
	return s.emitLast(w, s.appendRespLifecycle(s.buf[:0], s.respFinalEvent(), seq, true))
}
