package mock

import (
	"bufio"
	"sync"
	"time"
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
	timer   *time.Timer
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
	*s = stream{buf: s.buf[:0], head: s.head[:0], timer: s.timer}
	streamPool.Put(s)
}

// sleep waits d, or returns false at once if the fleet closes first.
func (s *stream) sleep(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-s.f.done:
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
		s.timer.Stop()
		return false
	}
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

// finish ends a streamed answer: counts it and releases s.
func (s *stream) finish(completed bool) {
	s.acc.stats.end(completed)
	s.f.total.end(completed)
	putStream(s)
}

// streamChat is the stream writer of a Chat Completions answer.
func (s *stream) streamChat(w *bufio.Writer) {
	completed := false
	defer func() { s.finish(completed) }()

	s.head = s.appendChatHead(s.head[:0])
	if !s.untilToken(0) || !s.emit(w, s.appendChatRole(s.buf[:0])) {
		return
	}
	n := s.p.tokens
	for i := range n {
		if i > 0 && !s.untilToken(i) {
			return
		}
		if !s.emit(w, s.appendChatDelta(s.buf[:0], i)) {
			return
		}
	}
	if !s.emit(w, s.appendChatFinish(s.buf[:0])) {
		return
	}
	if s.req.includeUsage && !s.emit(w, s.appendChatUsageChunk(s.buf[:0])) {
		return
	}
	completed = s.emit(w, append(s.buf[:0], "data: [DONE]\n\n"...))
}

// streamResponses is the stream writer of a Responses (and Codex) answer:
// response.created and response.in_progress at once, the message after
// Latency, one output_text.delta per token, then response.completed.
func (s *stream) streamResponses(w *bufio.Writer) {
	completed := false
	defer func() { s.finish(completed) }()

	seq := 0
	if !s.emit(w, s.appendRespLifecycle(s.buf[:0], "response.created", seq, false)) {
		return
	}
	seq++
	if !s.emit(w, s.appendRespLifecycle(s.buf[:0], "response.in_progress", seq, false)) {
		return
	}
	seq++
	if !s.untilToken(0) {
		return
	}
	if !s.emit(w, s.appendRespItemAdded(s.buf[:0], seq)) {
		return
	}
	seq++
	if !s.emit(w, s.appendRespPart(s.buf[:0], "response.content_part.added", seq, false)) {
		return
	}
	seq++
	n := s.p.tokens
	for i := range n {
		if i > 0 && !s.untilToken(i) {
			return
		}
		if !s.emit(w, s.appendRespDelta(s.buf[:0], seq, i)) {
			return
		}
		seq++
	}
	if !s.emit(w, s.appendRespTextDone(s.buf[:0], seq)) {
		return
	}
	seq++
	if !s.emit(w, s.appendRespPart(s.buf[:0], "response.content_part.done", seq, true)) {
		return
	}
	seq++
	if !s.emit(w, s.appendRespItemDone(s.buf[:0], seq)) {
		return
	}
	seq++
	completed = s.emit(w, s.appendRespLifecycle(s.buf[:0], "response.completed", seq, true))
}
