package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

// maxEvent bounds one upstream SSE event (a Responses "response.completed"
// carries the whole answer, so it is generous).
const maxEvent = 32 << 20

var heartbeat = []byte(": keep-alive\n\n")

// stream is one upstream SSE answer on its way to the client. It is first
// held (hold) until its first content event, so that a failure before that
// point can still fail over invisibly; then fasthttp drives it as the
// response body: WriteTo writes the held events and relays the rest, the
// events in hand at once being one flushed HTTP chunk (relay), and Close
// runs once when the body is done or the connection failed, so the lease is
// released exactly once.
type stream struct {
	s      *Server
	c      *call
	up     translate.Protocol // the protocol the upstream streams in
	tr     streamTranslator   // converts upstream events to the client's protocol; nil: bytes pass through
	out    []byte             // scratch for translated events
	lease  *actors.Lease
	status int                // the upstream's HTTP status (200 for an upstream WebSocket)
	body   io.Closer          // the upstream answer: closing it ends the upstream call
	src    source             // the upstream events
	sc     *translate.Scanner // src for an SSE answer (pooled); nil otherwise
	rdy    readier            // src, when it can tell that its next event is in hand; nil otherwise
	// frames: src is an upstream WebSocket (wsSource), whose error events
	// may carry an HTTP status and whose codex.rate_limits events the
	// gateway reports (over HTTP the account's transport does).
	frames bool
	// end ends this attempt's context, which cancels its upstream call;
	// its attemptCtx (end.a), when the attempt is on its request's timer
	// (reqCtx), is what hold bounds the first token with (nil: hold arms
	// a timer of its own, holdTimer).
	end attemptEnd
	// rctx (an HTTP request's, set when the stream is committed) or
	// rcancel (a Responses WebSocket turn's) is the request's context,
	// ended with the stream (cancel). Fields rather than a chained
	// closure: those were two allocations a stream.
	rctx    *reqCtx
	rcancel context.CancelFunc
	start   time.Time // when the attempt started

	held  []byte // raw events read while holding, not yet written
	ttft  time.Duration
	usage translate.Usage // from the upstream's events, in its protocol
	// usageFinal: the upstream reported the stream's whole usage (Chat's
	// usage chunk, Responses' terminal event, Messages' message_delta);
	// without it the record is estimated (gateway/estimate.go).
	usageFinal bool
	content    contentCount // the content observed, for an estimate of the output
	respID     string       // Responses id from response.created, for a synthesized response.failed
	// output is what a Responses stream relayed as it came has produced,
	// for a response.failed the gateway adds (nil until its first item).
	output *respOutput
	// nextSeq is the sequence_number after the last Responses event
	// relayed as it came, for the events the gateway adds (appendStreamError).
	nextSeq int64
	clean   bool             // the stream ended with its protocol's terminal event
	failed  upstream.Verdict // an error event arrived after commit
	// untranslatable: an upstream event could not be translated after commit
	// (translate.ErrBadEvent, a malformed upstream event); the client got a
	// stream error and the account is charged a broken stream.
	untranslatable bool
	werr           error // a write to the client failed: the client went away
	rerr           error // the upstream stream broke (after a clean end: only the reader noticing the end)
	// eof: the relay read the upstream's body to its end (io.EOF), so
	// finish closes it before ending the attempt's context and its
	// connection goes back to the pool (see finish).
	eof bool
	// left, when set, reports whether the client has gone (the Responses
	// WebSocket's connection ended): a stream cut short by that is the
	// client's doing, not the account's.
	left func() bool
	// gone: the client watch found the client's connection closed while
	// the stream was relayed (streamGone).
	gone  atomic.Bool
	began bool // fasthttp called WriteTo (false: the head could not even be sent)
	// dropUsage: the gateway added include_usage for billing; the usage-only
	// chunk it brings is observed but not relayed.
	dropUsage bool
	conn      net.Conn  // the client connection, for per-write deadlines
	deadline  time.Time // under mu: the write deadline set on conn (setDeadline)

	mu     sync.Mutex // serializes writes to the client between WriteTo and the heartbeat (beat)
	events atomic.Uint64
	// traced is how much of the request span's response body (traceSent)
	// had reached the client at the relay's last write: a write that fails
	// takes back what was traced after it.
	traced int
	// sink is WriteTo's: the HTTP response body the relay and the
	// heartbeat write to (part of the stream: a sink of its own escaped,
	// an allocation a stream).
	sink sseSink
	// hbLast is the events count at the last heartbeat check, and hbDone
	// set once WriteTo returned (the heartbeat must not write); under mu.
	hbLast  uint64
	hbDone  bool
	closed  sync.Once
	release sync.Once
}

// cancel ends the attempt's context and, once the stream is committed,
// the request's: the upstream call stops, and with it the relay's read.
func (st *stream) cancel() {
	st.end.end()
	if st.rctx != nil {
		st.rctx.cancel()
	}
	if st.rcancel != nil {
		st.rcancel()
	}
}

var scanners = sync.Pool{New: func() any { return translate.NewScanner(nil, maxEvent) }}

// source yields the events of one upstream answer: a translate.Scanner over
// an SSE body, or an upstream WebSocket's frames (wsSource).
type source interface {
	// Next returns the next event, valid until the next call; io.EOF after
	// the last.
	Next() (translate.Event, error)
	// Raw returns the last event's SSE bytes, nil when it did not come as
	// SSE (a WebSocket frame).
	Raw() []byte
}

// readier is a source that can tell, without waiting, whether its next
// event is already in hand (translate.Scanner.Ready, wsSource.Ready): the
// relay then gathers the events it has and writes them together.
type readier interface {
	// Ready reports whether the next Next returns without waiting for
	// the upstream.
	Ready() bool
}

// newStream wraps an upstream SSE answer in protocol up.
func (s *Server) newStream(c *call, up translate.Protocol, l *actors.Lease, resp *upstream.Response, start time.Time, end attemptEnd) *stream {
	sc := scanners.Get().(*translate.Scanner)
	sc.Reset(resp.Body)
	return s.newStreamFrom(c, up, l, resp.Status, resp.Body, sc, start, end)
}

// newStreamFrom wraps upstream events src in protocol up, whose answer body
// (closed when the stream ends) had HTTP status status; when up is not the
// client's protocol, the events are translated. end ends the attempt.
func (s *Server) newStreamFrom(c *call, up translate.Protocol, l *actors.Lease, status int, body io.Closer, src source, start time.Time, end attemptEnd) *stream {
	st := &stream{s: s, c: c, up: up, lease: l, status: status, body: body, src: src, start: start, end: end}
	st.sc, _ = src.(*translate.Scanner)
	st.rdy, _ = src.(readier)
	_, st.frames = src.(*wsSource)
	if up != c.endpoint {
		st.tr = newStreamTranslator(c, up)
	}
	return st
}

// hold reads events until the first content event (or a terminal event, or
// HoldBufferCap bytes). An error event, an empty or broken stream, or a first
// token slower than FirstTokenTimeout is a failure: the stream is closed, the
// lease released with the failure's class, and the failure returned, so the
// caller can try another account.
func (st *stream) hold() *failure {
	var ht *holdTimer
	if st.end.a != nil {
		st.end.a.holdBound(st.s.cfg.FirstTokenTimeout)
	} else {
		ht = startHoldTimer(st.s.cfg.FirstTokenTimeout, st.end.fn())
	}
	defer st.endHold(ht)
	for {
		ev, err := st.src.Next()
		if err != nil {
			f := &failure{err: err, verdict: upstream.Verdict{Class: upstream.ClassTransient}}
			switch {
			case st.endHold(ht):
				f.err = fmt.Errorf("no first token within %v", st.s.cfg.FirstTokenTimeout)
			case errors.Is(err, io.EOF):
				f.err = upstream.ErrEmptyStream
			case upstream.KindOf(err) == upstream.KindCanceled:
				f.verdict.Class = upstream.ClassCanceled
			}
			st.abort(f.verdict)
			return f
		}
		if v, msg, isErr := upstream.ClassifyEvent(st.up, ev.Name, ev.Data); isErr {
			if st.frames {
				if f := st.statusFailure(ev); f != nil {
					return f
				}
			}
			f := &failure{verdict: v, msg: msg, up: st.up, err: errors.New("error event before content")}
			st.abort(v)
			return f
		}
		m := st.observe(ev)
		if st.dropUsage && st.usageChunk(ev, m) {
			continue
		}
		if st.tr == nil {
			st.held = st.appendEvent(st.held, ev)
		} else if st.held, err = st.tr.Event(st.held, ev); err != nil {
			// An event that is not what its protocol promises
			// (translate.ErrBadEvent): a broken upstream stream, so fail over.
			st.s.log.Warn("stream translation failed", "request_id", st.c.id, "from", st.up.Route(), "to", st.c.endpoint.Route(), "err", err)
			f := &failure{verdict: upstream.Verdict{Class: upstream.ClassTransient}, up: st.up, err: err}
			st.abort(f.verdict)
			return f
		}
		if st.ttft > 0 || st.clean || len(st.held) >= st.s.cfg.HoldBufferCap {
			if st.endHold(ht) {
				// The first-token bound was reached just as content arrived
				// and has already cancelled the upstream call.
				f := &failure{verdict: upstream.Verdict{Class: upstream.ClassTransient}, err: errors.New("first-token timeout")}
				st.abort(f.verdict)
				return f
			}
			return nil
		}
	}
}

// holdTimer is the first-token bound of a hold whose attempt is not on
// its request's timer (a Responses WebSocket session's turn): a timer that
// cancels the attempt.
type holdTimer struct {
	t   *time.Timer
	hit atomic.Bool
}

// startHoldTimer cancels the attempt (cancel) after d.
func startHoldTimer(d time.Duration, cancel context.CancelFunc) *holdTimer {
	h := new(holdTimer)
	h.t = time.AfterFunc(d, func() { h.hit.Store(true); cancel() })
	return h
}

// endHold lifts the first-token bound of the hold (ht, or st.end.a's when
// ht is nil) and reports whether it was reached (the attempt was cancelled
// for it). Calling it again reports the same.
func (st *stream) endHold(ht *holdTimer) bool {
	if ht == nil {
		return st.end.a.unbound()
	}
	return !ht.t.Stop() && ht.hit.Load()
}

// appendEvent appends upstream event ev as SSE: its raw bytes when it came
// as SSE, else encoded.
func (st *stream) appendEvent(dst []byte, ev translate.Event) []byte {
	if raw := st.src.Raw(); raw != nil {
		return appendRaw(dst, raw)
	}
	return translate.AppendEvent(dst, b2s(ev.Name), ev.Data)
}

// statusFailure is the failure of an upstream WebSocket error frame that
// carries an HTTP status ({"type":"error","status":429,"error":{…},
// "headers":{…}}, upstream.WebSocketErrorResponse) before content: the same
// failure as that status over HTTP, classified and answered the same way.
// nil when the frame has no status.
func (st *stream) statusFailure(ev translate.Event) *failure {
	r, ok := upstream.WebSocketErrorResponse(ev.Data, st.src.(*wsSource).header)
	if !ok {
		return nil
	}
	body, _ := io.ReadAll(r.Body)
	v := upstream.Classify(r.Status, r.Header, body)
	st.status = r.Status
	st.abort(v)
	return &failure{verdict: v, status: r.Status, header: r.Header, body: body, up: st.up}
}

// appendRaw appends an event's raw bytes, adding the blank line an event the
// upstream ended without one is missing.
func appendRaw(dst, raw []byte) []byte {
	dst = append(dst, raw...)
	if !bytes.HasSuffix(raw, []byte("\n\n")) && !bytes.HasSuffix(raw, []byte("\r\n\r\n")) && !bytes.HasSuffix(raw, []byte("\r\r")) {
		dst = append(dst, '\n')
	}
	return dst
}

// abort ends a held stream that failed before commit.
func (st *stream) abort(v upstream.Verdict) {
	st.cancel()
	st.body.Close()
	st.putScanner()
	st.release.Do(func() { st.s.release(st.c, st.lease, st.status, v, st.start, 0) })
}

func (st *stream) putScanner() {
	if st.sc != nil {
		scanners.Put(st.sc)
		st.sc, st.rdy = nil, nil
	}
}

// observe takes what the gateway needs from an event: time to first content,
// usage, the response id, and whether the stream ended properly. For a
// Chat upstream it returns the marks of its one pass over the chunk
// (scanChat), for the relay's usageChunk; the zero marks otherwise.
func (st *stream) observe(ev translate.Event) (m chatMarks) {
	st.events.Add(1)
	if st.up == translate.Chat {
		m = scanChat(ev.Data) // one pass for the searches below and the relay's usageChunk
	}
	if st.frames && st.lease.Provider == storage.ProviderCodex && eventType(ev) == "codex.rate_limits" {
		// Over HTTP the account's transport reports these (actors/windows.go).
		now := st.s.now()
		if rl, ok := upstream.ParseRateLimitsEvent(ev.Data, now); ok {
			st.s.sys.ReportRateLimits(st.lease.AccountID, st.c.target, rl, now)
		}
	}
	if st.ttft == 0 && isContent(st.up, ev) {
		st.ttft = max(st.s.now().Sub(st.start), 1)
	}
	if st.up == translate.Chat {
		if m.usageRead && st.usage.AddChatUsage(ev.Data) {
			st.usageFinal = true
		}
		st.content.countChatDelta(ev.Data, m.delta)
	} else {
		if st.usage.AddEvent(st.up, ev.Name, ev.Data) && (st.up != translate.Messages || eventType(ev) == "message_delta") {
			st.usageFinal = true // Messages' message_start has the input side only
		}
		st.content.countEvent(st.up, ev)
	}
	if st.c.tr != nil {
		st.c.tr.traceEvent(st.up, ev)
	}
	switch st.up {
	case translate.Chat:
		if m.finish || bytes.Equal(ev.Data, doneMarker) {
			// [DONE] ends OpenAI streams; some compatible upstreams stop at the
			// chunk carrying finish_reason instead.
			st.clean = true
		}
	case translate.Responses:
		if st.tr == nil {
			if n, ok := sequenceNumber(ev.Data); ok {
				st.nextSeq = n + 1
			}
		}
		if st.tr == nil && st.c.endpoint == translate.Responses {
			switch name := eventType(ev); name {
			case "response.output_item.added", "response.output_item.done", "response.output_text.delta",
				"response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
				if st.output == nil {
					st.output = new(respOutput)
				}
				st.output.observe(name, ev.Data)
			}
		}
		switch string(ev.Name) {
		case "response.created":
			st.respID = gjson.GetBytes(ev.Data, "response.id").String()
		case "response.completed", "response.incomplete":
			st.clean = true
			// Remembered before the event is relayed: the client may name the
			// response in its next request at once, on any instance. Only a
			// Responses client sees this id (others get a translation).
			if st.c.endpoint == translate.Responses {
				st.s.remember(st.respID, st.lease.AccountID, st.c.key.ID)
			}
		case "response.failed", "error":
			st.clean = true
			v, _, _ := upstream.ClassifyEvent(st.up, ev.Name, ev.Data)
			st.failed = v
		}
	case translate.Messages:
		switch upstream.MessagesEventKind(ev.Name, ev.Data) {
		case upstream.MessagesStop:
			st.clean = true
		case upstream.MessagesError:
			st.clean = true
			v, _, _ := upstream.ClassifyEvent(st.up, ev.Name, ev.Data)
			st.failed = v
		}
	}
	if st.up == translate.Chat && st.failed.Class == upstream.ClassNone && m.err {
		if v, _, isErr := upstream.ClassifyEvent(st.up, ev.Name, ev.Data); isErr {
			st.failed = v
			st.clean = true
		}
	}
	return m
}

// usageChunk is isUsageChunk of ev, whose marks observe returned.
func (st *stream) usageChunk(ev translate.Event, m chatMarks) bool {
	if st.up == translate.Chat {
		return m.usageChunk()
	}
	return isUsageChunk(ev.Data)
}

// isUsageChunk reports whether a chat chunk is the usage-only final chunk
// of include_usage ({"choices":[],…,"usage":{…}}).
func isUsageChunk(data []byte) bool {
	return bytes.Contains(data, usageKey) && bytes.Contains(data, []byte(`"choices":[]`))
}

var (
	doneMarker = []byte("[DONE]")
	usageKey   = []byte(`"usage":{`)
)

// SupportsBodyWriteTo tells fasthttp to call WriteTo rather than Read.
func (st *stream) SupportsBodyWriteTo() bool { return true }

// Read is never used by fasthttp (WriteTo is); it exists to satisfy io.Reader.
func (st *stream) Read([]byte) (int, error) {
	return 0, errors.New("gateway: stream is written with WriteTo")
}

// sink is where a committed stream's client events go: the HTTP response
// body (sseSink) or the Responses WebSocket (wsSink). A sink is used by one
// relay at a time. A sink may gather what event and sse give it rather
// than write it at once; flush writes what it gathered.
type sink interface {
	// event writes one upstream event passed through unchanged; raw is its
	// SSE bytes as the upstream sent them. It does not keep ev or raw.
	event(ev translate.Event, raw []byte) error
	// sse writes client events given as SSE bytes: the held events, a
	// translator's output, the stream's end. It does not keep b.
	sse(b []byte) error
	// flush writes what event and sse gathered and not yet wrote.
	flush() error
}

// relay is the one relay of a committed stream, whatever the sink: it
// writes the held events, then each event as it arrives (translated when
// the upstream speaks another protocol), then the end in the client's
// protocol: a translated stream's Finish or Fail, and for a stream that
// broke after commit a well-formed error rather than a silent truncation
// (never another account's output). A failed write means the client went
// away: the upstream call is cancelled and the error returned.
//
// The events in hand are written together: the sink flushes only when the
// source's next event is not yet in hand (the source is no readier, or its
// Ready says so), so before every read that may wait for the upstream, and
// at the end; a sink bounds what it gathers itself. An event is never held
// back while the gateway waits on the upstream, and a burst of events that
// came in one read goes out as one write (one chunk, one syscall) instead
// of one each.
func (st *stream) relay(k sink) error {
	if st.c.tr != nil {
		st.traced = len(st.c.tr.content)
	}
	held := st.held
	st.held = nil
	if err := st.put(k.sse(held)); err != nil {
		return st.untrace(err)
	}
	st.traceSent(held)
	for {
		if st.rdy == nil || !st.rdy.Ready() {
			if err := st.flush(k); err != nil {
				return err
			}
		}
		ev, err := st.src.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				st.rerr = err
			} else {
				st.eof = true
			}
			break
		}
		m := st.observe(ev)
		if st.dropUsage && st.usageChunk(ev, m) {
			continue
		}
		var sent []byte
		if st.tr == nil {
			if sent = st.src.Raw(); sent == nil {
				sent = ev.Data
			}
			err = k.event(ev, st.src.Raw())
		} else if st.out, err = st.tr.Event(st.out[:0], ev); err != nil {
			st.s.log.Warn("stream translation failed", "request_id", st.c.id, "from", st.up.Route(), "to", st.c.endpoint.Route(), "err", err)
			st.untranslatable = true
			break
		} else {
			sent = st.out
			err = k.sse(st.out)
		}
		if err := st.put(err); err != nil {
			return st.untrace(err)
		}
		st.traceSent(sent)
	}
	tail := st.tail()
	if err := st.put(k.sse(tail)); err != nil {
		return st.untrace(err)
	}
	st.traceSent(tail)
	return st.flush(k)
}

// flush writes what sink k gathered (see relay).
func (st *stream) flush(k sink) error {
	if err := st.put(k.flush()); err != nil {
		return st.untrace(err)
	}
	if st.c.tr != nil {
		st.traced = len(st.c.tr.content)
	}
	return nil
}

// untrace takes back from the request span's response body what was traced
// since the relay's last successful flush, which the client may not have
// got: a write failed with err, which it returns.
func (st *stream) untrace(err error) error {
	if st.c.tr != nil && len(st.c.tr.content) > st.traced {
		st.c.tr.content = st.c.tr.content[:st.traced]
	}
	return err
}

// traceSent keeps b, relayed to the client, for the request span's
// troupe.response.body when content is recorded (gateway/tracing.go).
func (st *stream) traceSent(b []byte) {
	if st.c.tr != nil && st.s.tracing.ContentBytes > 0 {
		st.c.tr.traceSent(b, st.s.tracing.ContentBytes)
	}
}

// put notes a failed write to the client: the client went away, so the
// upstream call stops. It returns err.
func (st *stream) put(err error) error {
	if err != nil {
		st.werr = err
		st.cancel()
	}
	return err
}

// tail is the end of a relayed stream in the client's protocol, nil when
// the upstream's own events ended it.
func (st *stream) tail() []byte {
	switch {
	case st.untranslatable:
		return st.tr.Fail(st.out[:0], "server_error", "upstream_error", "The upstream answer could not be translated into this protocol.")
	case !st.clean && st.tr != nil:
		return st.tr.Fail(st.out[:0], "server_error", "upstream_error", msgStreamBroke)
	case !st.clean:
		return appendStreamError(st.out[:0], st.c.endpoint, st.respID, st.c.id, msgStreamBroke, st.nextSeq, st.output)
	case st.tr != nil:
		return st.tr.Finish(st.out[:0])
	}
	return nil
}

const msgStreamBroke = "The upstream stream ended unexpectedly."

// errNoTerminal is why a stream broke when the upstream closed it cleanly
// but before its protocol's terminal event.
var errNoTerminal = errors.New("upstream stream closed before its terminal event")

// WriteTo relays the stream into the HTTP response body (see relay): the
// events in hand at once are one flushed chunk. During upstream silences
// longer than HeartbeatInterval it writes SSE comments, so the connection
// stays alive and a client that left is noticed.
func (st *stream) WriteTo(w io.Writer) (n int64, err error) {
	k := &st.sink
	*k = sseSink{st: st, w: w}
	defer k.release()
	defer func() {
		if r := recover(); r != nil {
			st.s.log.Error("stream panic", "request_id", st.c.id, "panic", r, "stack", string(debug.Stack()))
			st.rerr = fmt.Errorf("panic: %v", r)
			err = st.rerr
		}
		n = k.n
	}()
	st.began = true
	st.startHeartbeat()
	defer st.stopHeartbeat()
	defer st.clearDeadline()
	// A client that hangs up while the upstream is silent is noticed within
	// the watch's poll, not at the next token or heartbeat written: the
	// lease and the user's concurrency slot go back at once.
	defer st.s.watch.stop(st.s.watch.watch(st.conn, streamGone{st}))
	return k.n, st.relay(k)
}

// streamGone is what the client watch calls when a relayed stream's client
// has closed its connection: the stream notes it (finish then records the
// request as the client's doing, 499, billed for what was relayed) and
// cancels the upstream call, which ends the relay's read. A struct of one
// pointer: converting it to a canceler does not allocate.
type streamGone struct{ st *stream }

func (g streamGone) cancel() {
	g.st.gone.Store(true)
	g.st.cancel()
}

// sseSink writes client events into an HTTP response body. It gathers
// them in a batch, written as one chunk (one flush, one syscall) under the
// stream's write lock (the heartbeat writes too, so only between batches)
// when relay flushes or the batch reaches batchMax; an event of batchMax
// or more is written as its own chunk without being copied.
type sseSink struct {
	st    *stream
	w     io.Writer
	n     int64   // bytes written
	batch *[]byte // events gathered, not yet written (from batches); nil until the first
}

// batchMax bounds the bytes a stream gathers before it writes them: a fast
// upstream cannot grow a stream's memory past it, and a client gets a large
// burst in pieces of this size.
const batchMax = 32 << 10

// batches holds the sinks' batch buffers between streams.
var batches = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// event writes ev's own SSE bytes, or its encoding when it came otherwise.
func (k *sseSink) event(ev translate.Event, raw []byte) error {
	if raw == nil {
		raw = translate.AppendEvent(k.st.out[:0], b2s(ev.Name), ev.Data)
		k.st.out = raw
	}
	return k.sse(raw)
}

// sse adds b to the batch, ending it with the blank line SSE needs when the
// upstream left it out; it writes the batch first when b would take it
// past batchMax, and writes b at once when b alone is that large.
func (k *sseSink) sse(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if k.batch == nil {
		k.batch = batches.Get().(*[]byte)
	}
	if len(*k.batch)+len(b) > batchMax {
		if err := k.flush(); err != nil {
			return err
		}
		if len(b) >= batchMax && endsEvent(b) {
			return k.write(b)
		}
	}
	buf := append(*k.batch, b...)
	if last := b[len(b)-1]; last != '\n' && last != '\r' {
		buf = append(buf, '\n', '\n')
	} else if !endsEvent(b) {
		buf = append(buf, '\n')
	}
	*k.batch = buf
	return nil
}

// endsEvent reports whether b ends with the blank line that ends an SSE
// event (as sseSink.sse checks it).
func endsEvent(b []byte) bool {
	return bytes.HasSuffix(b, []byte("\n\n")) || bytes.HasSuffix(b, []byte("\r\n\r\n"))
}

// flush writes the batch as one chunk.
func (k *sseSink) flush() error {
	if k.batch == nil || len(*k.batch) == 0 {
		return nil
	}
	err := k.write(*k.batch)
	*k.batch = (*k.batch)[:0]
	return err
}

// write writes b as one chunk.
func (k *sseSink) write(b []byte) error {
	m, err := k.st.writeLocked(k.w, b)
	k.n += int64(m)
	return err
}

// release gives the batch buffer back for another stream, unless an event
// made it grow past what a batch needs.
func (k *sseSink) release() {
	if k.batch != nil && cap(*k.batch) <= 2*batchMax {
		*k.batch = (*k.batch)[:0]
		batches.Put(k.batch)
	}
	k.batch = nil
}

// writeLocked writes b to w under the write lock, with a fresh deadline.
func (st *stream) writeLocked(w io.Writer, b []byte) (int, error) {
	st.mu.Lock()
	defer st.mu.Unlock() // a panicking writer must not leave it held: clearDeadline takes it after
	st.setDeadline()
	return w.Write(b)
}

// clientWriteTimeout bounds one write to the client: a client that accepts
// nothing for this long is gone (or hostile), and must not hold its lease.
const clientWriteTimeout = 30 * time.Second

// setDeadline arms the connection's write deadline for the next write.
// It moves the deadline at most once per deadlineSlack: a stream writes
// many events a second, and each move is a runtime timer change (on some
// connections an allocation), while a deadline up to deadlineSlack early
// changes nothing for a client that accepts nothing for half a minute.
// Called under mu.
func (st *stream) setDeadline() {
	if st.conn == nil {
		return
	}
	now := time.Now()
	if st.deadline.Sub(now) > clientWriteTimeout-deadlineSlack {
		return
	}
	st.deadline = now.Add(clientWriteTimeout)
	_ = st.conn.SetWriteDeadline(st.deadline)
}

// deadlineSlack is how much earlier than clientWriteTimeout after a write a
// write deadline may fall (setDeadline).
const deadlineSlack = time.Second

// clearDeadline removes the write deadline, so it does not outlive the
// response on a kept-alive connection.
func (st *stream) clearDeadline() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.conn != nil {
		_ = st.conn.SetWriteDeadline(time.Time{})
		st.deadline = time.Time{}
	}
}

// startHeartbeat makes the stream its request's beater (reqCtx.setBeat):
// every HeartbeatInterval the request's timer calls beat, which writes a
// comment when no event was relayed since the last call. The request's one
// timer serves it, where a timer and a closure of its own were three
// allocations a stream. A stream with no request context (none in the
// gateway's HTTP path) has no heartbeat.
func (st *stream) startHeartbeat() {
	if st.rctx == nil {
		return
	}
	st.mu.Lock()
	st.hbLast = st.events.Load()
	st.mu.Unlock()
	st.rctx.setBeat(st, st.s.cfg.HeartbeatInterval)
}

// beat is the heartbeat (beater): a comment written to the client when no
// event was relayed for a whole HeartbeatInterval; a write that fails
// means the client went away, and the upstream call is cancelled.
func (st *stream) beat() time.Duration {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.hbDone {
		return 0
	}
	if now := st.events.Load(); now != st.hbLast {
		st.hbLast = now
		return st.s.cfg.HeartbeatInterval
	}
	st.setDeadline()
	if _, err := st.sink.w.Write(heartbeat); err != nil {
		st.werr = err
		st.cancel() // unblocks the relay's read
		return 0
	}
	return st.s.cfg.HeartbeatInterval
}

// stopHeartbeat ends the heartbeat: a beat in progress has written when
// it returns, and none writes after.
func (st *stream) stopHeartbeat() {
	st.mu.Lock()
	st.hbDone = true
	st.mu.Unlock()
	if st.rctx != nil {
		st.rctx.setBeat(nil, 0)
	}
}

// Close ends the stream once: it closes the upstream body, releases the lease
// with the outcome and records usage. fasthttp calls it when the body is
// written or the connection failed.
func (st *stream) Close() error {
	st.closed.Do(func() { st.finish(true) })
	return nil
}

// finish releases and records; count says whether this stream also ends the
// client request's metrics (false when a pending body does that).
//
// A body read to its end is closed before the attempt's context ends:
// ending the context first runs the transport's AfterFunc, which closes
// the connection, so every stream dialled its upstream anew (a connect, an
// accept and a close on both sides, a TLS handshake for https, two
// goroutines; docs/benchmarks.md, issue 21, wake). Any other body is
// closed after: the cancel unblocks a read still in progress.
func (st *stream) finish(count bool) {
	if st.eof {
		st.body.Close()
		st.cancel()
	} else {
		st.cancel()
		st.body.Close()
	}
	st.putScanner()
	s, c := st.s, st.c
	v := st.failed
	switch {
	case st.werr != nil || !st.began || (!st.clean && (st.gone.Load() || st.left != nil && st.left())):
		// The client went away: a failed write, a connection that broke
		// before the head was even sent (fasthttp then never calls WriteTo),
		// a connection the client watch found closed (streamGone), or a
		// WebSocket client that left before the end.
		v = upstream.Verdict{Class: upstream.ClassCanceled}
	case st.untranslatable:
		v = upstream.Verdict{Class: upstream.ClassTransient}
	case v.Class != upstream.ClassNone:
	case !st.clean:
		v = upstream.Verdict{Class: upstream.ClassTransient}
		if c.broke = st.rerr; c.broke == nil {
			c.broke = errNoTerminal
		}
	}
	// A read error after the protocol's terminal event (st.clean; the
	// client closing its WebSocket right after response.completed cancels
	// the read of the upstream's end) is no failure: the answer was whole.
	// What was served is billed, also when the client closed early or the
	// stream broke (the upstream counted those tokens too): estimated when
	// the upstream's usage never came. Its tokens are counted with the
	// attempt, unless the lease was released before.
	u, estimated := st.billedUsage()
	tk, counted := statsTokens(u), false
	st.release.Do(func() {
		s.releaseAt(c, st.lease, st.status, v, st.start, st.ttft, s.now(), &tk)
		counted = true
	})
	if st.ttft > 0 {
		s.metrics.ttft.WithLabelValues(c.endpoint.Route()).Observe(st.ttft.Seconds())
		if c.tr != nil {
			c.tr.ttfc = st.start.Sub(c.start) + st.ttft
		}
	}
	if counted {
		s.noteServed(c, st.lease, u, s.now().Sub(st.start), st.ttft)
	} else {
		s.served(c, st.lease, u, s.now().Sub(st.start), st.ttft)
	}
	c.estimated = estimated
	s.settle(c, st.lease.AccountID, "", v.Class == upstream.ClassNone) // the response's affinity was recorded before its end was relayed
	status := st.status
	switch {
	case v.Class == upstream.ClassNone:
	case v.Class == upstream.ClassCanceled:
		status = statusClientClosed
	default:
		status, c.brokeClass = 502, v.Class
	}
	if count {
		s.finish(c, status)
	}
}

// billedUsage is the usage to bill: the upstream's when it reported the
// stream's whole usage; else, when the client got content (or a clean end
// without usage), the upstream's input count when it sent one or an
// estimate from the request, and at least the output estimated from the
// content relayed, with estimated true, at most the output the upstream
// could produce (heldOutputCap). A stream whose head never reached the
// client bills what the upstream reported, if anything.
func (st *stream) billedUsage() (translate.Usage, bool) {
	u := st.usage
	if st.usageFinal || !st.began {
		return u, false
	}
	out := st.content.tokens()
	if out == 0 && !st.clean {
		return u, false // cut before any content reached the client
	}
	if u.InputTokens == 0 {
		u.InputTokens = estimateRequestTokens(st.c.endpoint, st.c.body)
	}
	if limit := heldOutputCap(st.c, st.lease.Provider); limit > 0 {
		out = min(out, limit)
	}
	u.OutputTokens = max(u.OutputTokens, out)
	return u, true
}

// heldOutputCap is the most output tokens an upstream of provider p can
// produce for c: its output cap times its choices, when the request has a
// cap and p is one whose API is known to hold it (openai, anthropic:
// docs/billing.md, "Which caps hold"); 0 otherwise (no cap; codex drops it;
// an openai_compat server may not honour it). The estimate of a cut
// stream's output weighs text by its bytes and can exceed what the model
// produced (long words), so it is held to this: the upstream never counted
// more, and a user's billing estimate, which counts the cap, is then never
// exceeded through output — the overdraft bound docs/billing.md promises.
func heldOutputCap(c *call, p storage.Provider) int64 {
	if c.maxOutput <= 0 || (p != storage.ProviderOpenAI && p != storage.ProviderAnthropic) {
		return 0
	}
	limit := c.maxOutput
	if p == storage.ProviderOpenAI && c.endpoint == translate.Messages {
		// Translated to Responses, whose least cap is above a small one.
		limit = max(limit, translate.MinResponsesOutputTokens)
	}
	return limit * max(c.choices, 1) // each below 2^31 (outputCaps.check)
}

// serveStream runs the failover loop for a streamed request. If it ends
// within HeartbeatInterval, the client gets a normal answer: the held stream
// with status 200, or an HTTP error with the right status. If it takes
// longer (slow first tokens, failovers), the headers are committed and a
// pending body keeps the connection alive with heartbeats until the loop
// ends; a failure then arrives as an error event in the client's protocol.
// rctx is the request's context: the loop runs under it, the client watch
// cancels it, and the stream or the pending body ends it.
func (s *Server) serveStream(ctx *fasthttp.RequestCtx, c *call, rctx *reqCtx) int {
	ch := make(outcomes, 1)
	conn := ctx.Conn() // read here: the loop outlives this handler's ctx when the head commits early
	// On a kept goroutine, whose stack has grown already (loopworkers.go).
	s.loops.start(func() {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("failover loop panic", "request_id", c.id, "panic", r, "stack", string(debug.Stack()))
				ch <- outcome{aerr: &APIError{Status: 500, Type: "server_error", Message: "The server had an error while processing your request."}}
			}
		}()
		ch <- s.runWatched(rctx, conn, c, rctx)
	})
	// The request's timer wakes this handler after HeartbeatInterval
	// (outcomes.beat) rather than a timer of its own (three allocations
	// and a runtime timer a stream); the stream's heartbeat takes the beat
	// over when it is relayed (startHeartbeat).
	rctx.setBeat(ch, s.cfg.HeartbeatInterval)
	o := <-ch
	if o.wake {
		s.commitStream(ctx, &pending{s: s, c: c, ch: ch, rctx: rctx, conn: ctx.Conn()}, true)
		return 0
	}
	if o.res.stream == nil {
		rctx.cancel()
		return s.answer(ctx, c, o)
	}
	o.res.stream.rctx = rctx
	o.res.stream.conn = ctx.Conn()
	s.traceHeader(ctx, c)
	// The held events are written as soon as WriteTo starts (relay),
	// and the head goes out with them in one write; a stream that
	// held nothing sends its head at once.
	s.commitStream(ctx, o.res.stream, len(o.res.stream.held) == 0)
	return 0
}

// outcomes carries a streamed request's failover loop's outcome to its
// handler (serveStream), and the wake-up the request's timer sends when
// the head must be committed before the loop has ended (beat).
type outcomes chan outcome

// beat sends the handler its wake-up (an outcome with wake set), unless
// the loop's outcome is already waiting; once.
func (ch outcomes) beat() time.Duration {
	select {
	case ch <- outcome{wake: true}:
	default:
	}
	return 0
}

// next receives the loop's outcome, passing over a wake-up.
func (ch outcomes) next() outcome {
	for {
		if o := <-ch; !o.wake {
			return o
		}
	}
}

// commitStream sets the SSE head; fasthttp then writes it and calls body's
// WriteTo. flushHead sends the head on its own, before the body's first
// write: clients see the stream start, and a hang-up is noticed at the
// first write rather than after the first event. Without it the head goes
// out with the body's first write, one syscall fewer, for a body that
// writes at once.
func (s *Server) commitStream(ctx *fasthttp.RequestCtx, body io.Reader, flushHead bool) {
	ctx.SetStatusCode(200)
	ctx.SetContentType("text/event-stream; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	ctx.Response.ImmediateHeaderFlush = flushHead
	ctx.SetBodyStream(body, -1)
}

// pending is the response body of a streamed request whose failover loop was
// still running when the head had to be committed.
type pending struct {
	s      *Server
	c      *call
	ch     outcomes
	rctx   *reqCtx  // the request's context: cancelling it cancels the whole request
	inner  *stream  // the stream the loop produced, once it has
	conn   net.Conn // the client connection, for write deadlines
	done   bool     // the loop's outcome was received
	closed sync.Once
	status int
}

// SupportsBodyWriteTo tells fasthttp to call WriteTo rather than Read.
func (p *pending) SupportsBodyWriteTo() bool { return true }

// Read is never used by fasthttp (WriteTo is); it exists to satisfy io.Reader.
func (p *pending) Read([]byte) (int, error) {
	return 0, errors.New("gateway: stream is written with WriteTo")
}

// WriteTo writes heartbeats until the failover loop ends, then relays its
// stream or writes its failure as an error event.
func (p *pending) WriteTo(w io.Writer) (int64, error) {
	tick := time.NewTicker(p.s.cfg.HeartbeatInterval)
	defer tick.Stop()
	if _, err := w.Write(heartbeat); err != nil {
		return 0, err
	}
	for {
		select {
		case o := <-p.ch:
			if o.wake {
				continue // serveStream's, sent as it took the one before
			}
			p.done = true
			if o.res.stream != nil {
				p.inner = o.res.stream
				p.inner.rctx = p.rctx
				p.inner.conn = p.conn
				return p.inner.WriteTo(w)
			}
			aerr := o.aerr
			if aerr == nil {
				aerr = clientError(o.fail)
			}
			msg := aerr.Message
			p.status = aerr.Status
			n, err := w.Write(appendStreamError(nil, p.c.endpoint, "", p.c.id, msg, 0, nil)) // only heartbeats came before: no output
			return int64(n), err
		case <-tick.C:
			if p.conn != nil {
				_ = p.conn.SetWriteDeadline(time.Now().Add(clientWriteTimeout))
			}
			if _, err := w.Write(heartbeat); err != nil {
				return 0, err
			}
		}
	}
}

// Close ends the request: a loop still running is cancelled and its result
// cleaned up, so no lease outlives the connection.
func (p *pending) Close() error {
	p.closed.Do(func() {
		if !p.done {
			p.rctx.cancel()
			o := p.ch.next()
			p.done = true
			if o.res.stream != nil {
				o.res.stream.werr = context.Canceled
				o.res.stream.finish(false)
			}
			p.status = statusClientClosed
		}
		if p.inner != nil {
			p.inner.closed.Do(func() { p.inner.finish(true) })
			return
		}
		p.rctx.cancel()
		p.s.finish(p.c, p.status)
	})
	return nil
}
