package gateway

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// wsSession is one client connection on the Responses WebSocket. Its run
// goroutine (the one fasthttp hijacked the connection to) serves the
// response.create frames one at a time and is the only writer of data
// frames; a reader goroutine feeds it frames. It holds the connection's
// transcript, so continuations work on any account (gateway/transcript.go).
type wsSession struct {
	s        *Server
	conn     *websocket.Conn
	key      storage.APIKey
	header   http.Header // client headers passed upstream, from the upgrade request
	clientIP string
	session  string        // session key from the upgrade's headers
	closing  chan struct{} // closed when the server shuts down
	tr       transcript
	// traceParent is the W3C trace context of the upgrade request: each
	// response's span continues it (nil when tracing is off).
	traceParent context.Context

	ctx    context.Context // ends when the client leaves or the server aborts
	cancel context.CancelFunc
	once   sync.Once
	// active is when the client last sent something (a frame, a ping, a
	// pong) or its last response ended, in UnixNano: the idle timeout
	// counts from it.
	active atomic.Int64
}

// touch notes client activity now.
func (ss *wsSession) touch() { ss.active.Store(time.Now().UnixNano()) }

// run serves the connection until the client closes it, breaks it, or the
// server shuts down (close 1001 once the response in flight has ended).
func (ss *wsSession) run() {
	s := ss.s
	ss.ctx, ss.cancel = context.WithCancel(s.life) // Shutdown cancels it when its grace ends
	defer ss.cancel()
	if !s.ws.add(ss) {
		ss.closeWith(websocket.CloseGoingAway, "server shutting down")
		return
	}
	defer s.ws.remove(ss)
	defer ss.tr.reset() // its bytes go back to the instance's budget
	s.metrics.wsConns.Inc()
	defer s.metrics.wsConns.Dec()
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("websocket session panic", "panic", r, "stack", string(debug.Stack()))
			ss.closeWith(websocket.CloseInternalServerErr, "internal error")
		}
	}()
	_ = ss.conn.NetConn().SetDeadline(time.Time{}) // the HTTP read timeout does not apply to a socket
	limit := s.cfg.WebSocket.MaxMessage
	if limit <= 0 {
		limit = s.cfg.MaxBodySize
	}
	ss.conn.SetReadLimit(int64(limit))
	ss.touch()
	ss.conn.SetPingHandler(ss.ping)
	ss.conn.SetPongHandler(func(string) error { ss.touch(); return nil })
	idle := time.NewTimer(s.cfg.WebSocket.IdleTimeout)
	defer idle.Stop()

	frames := make(chan clientFrame, 4)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		ss.read(frames)
	}()
	// fasthttp releases the hijacked connection as soon as run returns: the
	// reader must be gone by then, not still inside ReadMessage on it.
	defer func() {
		ss.cancel()         // a reader handing over a frame gives up
		_ = ss.conn.Close() // a reader inside ReadMessage fails
		<-readerDone
	}()
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				return // the client closed or broke the connection (a too-big frame got 1009)
			}
			ss.create(f) // a binary frame is refused there, and recorded
			ss.touch()   // the idle time counts from the response's end
		case <-idle.C:
			if left := s.cfg.WebSocket.IdleTimeout - time.Since(time.Unix(0, ss.active.Load())); left > 0 {
				idle.Reset(left)
				continue
			}
			ss.end("idle_timeout", websocket.CloseGoingAway, "idle timeout")
			return
		case <-ss.closing:
			ss.closeWith(websocket.CloseGoingAway, "server shutting down")
			return
		case <-ss.ctx.Done():
			return
		}
	}
}

// clientFrame is one message a client sent: its payload, and whether it
// came as a binary frame (RFC 6455 opcode 0x2) rather than a text one.
type clientFrame struct {
	data   []byte
	binary bool
}

// read feeds the client's frames to frames until the connection fails; a
// client gone mid-response cancels it. A binary frame is fed with its
// payload, which create answers with an error frame (ignoring it would
// leave the client waiting for an answer that never comes) and records
// with the model the payload names.
func (ss *wsSession) read(frames chan<- clientFrame) {
	defer close(frames)
	for {
		typ, data, err := ss.conn.ReadMessage()
		ss.touch()
		if err != nil {
			if !errors.Is(err, websocket.ErrReadLimit) {
				ss.cancel() // a too-big frame was answered with 1009; anything else: the client is gone
			}
			return
		}
		binary := typ == websocket.BinaryMessage
		switch {
		case binary:
		case !utf8.Valid(data):
			// RFC 6455 §8.1: a text frame that is not UTF-8 fails the
			// connection, with 1007.
			ss.closeWith(websocket.CloseInvalidFramePayloadData, "text frame is not valid UTF-8")
			ss.cancel()
			return
		case data == nil:
			data = []byte{} // an empty text frame is bad JSON, not a binary frame
		}
		select {
		case frames <- clientFrame{data: data, binary: binary}:
		case <-ss.ctx.Done():
			return
		}
	}
}

// abort ends the session now (shutdown deadline): in-flight upstream calls
// are cancelled and the connection closed.
func (ss *wsSession) abort() {
	ss.closeWith(websocket.CloseGoingAway, "server shutting down")
	if ss.cancel != nil {
		ss.cancel()
	}
}

// closeWith sends a close frame once and closes the connection; it
// reports whether this call did it.
func (ss *wsSession) closeWith(code int, text string) bool {
	done := false
	ss.once.Do(func() {
		done = true
		_ = ss.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
		_ = ss.conn.Close()
	})
	return done
}

// end closes the connection with code and text for reason (a label of
// troupe_websocket_closed_total, counted once) and ends the session.
func (ss *wsSession) end(reason string, code int, text string) {
	if ss.closeWith(code, text) {
		ss.s.metrics.wsClosed.WithLabelValues(reason).Inc()
		if ok, held := ss.s.logs.wsClosed.Take(ss.ctx, ss.s.log, slog.LevelInfo); ok {
			ss.s.log.Info("websocket closed", "reason", reason, "code", code, "key", ss.key.Name, "ip", ss.clientIP, "suppressed", held)
		}
	}
	ss.cancel()
}

// write sends one text frame. A client that has not taken it within the
// write timeout is not reading: the connection is closed with 1008; any
// other failure means the client is gone.
func (ss *wsSession) write(b []byte) error {
	_ = ss.conn.SetWriteDeadline(time.Now().Add(ss.s.cfg.WebSocket.WriteTimeout))
	err := ss.conn.WriteMessage(websocket.TextMessage, b)
	if err != nil {
		ss.writeFailed(err)
	}
	return err
}

// writeFailed ends the session after a failed write (see write).
func (ss *wsSession) writeFailed(err error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		ss.end("write_timeout", websocket.ClosePolicyViolation, "client not reading")
		return
	}
	ss.cancel()
}

// ping answers a client's ping with its pong, as RFC 6455 §5.5.2 asks,
// within the write timeout (the library's own handler gives up after a
// second and ignores it, so a client flooding pings and reading nothing
// kept its connection). It is the reader's activity too.
func (ss *wsSession) ping(data string) error {
	ss.touch()
	err := ss.conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(ss.s.cfg.WebSocket.WriteTimeout))
	if err == nil || errors.Is(err, websocket.ErrCloseSent) {
		return nil
	}
	ss.writeFailed(err)
	return err // ends the read loop
}

// writeError sends an error frame {"type":"error","status":…,"error":{…}}
// (fixtures responses-websocket/server.error.*.json); the connection stays.
func (ss *wsSession) writeError(e *APIError) error {
	return ss.write(appendErrorFrame(nil, e.Status, appendErrorObject(nil, e)))
}

// errBinaryFrame answers a binary frame: the Responses WebSocket speaks JSON
// text frames only (https://developers.openai.com/api/docs/guides/websocket-mode).
func errBinaryFrame() *APIError {
	return &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid_type", Param: "type",
		Message: "Binary frames are not supported: send response.create as a JSON text frame."}
}

// appendErrorObject appends e as OpenAI's error object {message,type,param,code}.
func appendErrorObject(b []byte, e *APIError) []byte {
	b = append(b, `{"message":`...)
	b = translate.AppendString(b, e.Message)
	b = append(b, `,"type":`...)
	b = translate.AppendString(b, e.Type)
	b = append(b, `,"param":`...)
	b = appendNullable(b, e.Param)
	b = append(b, `,"code":`...)
	b = appendNullable(b, e.Code)
	return append(b, '}')
}

// appendErrorFrame appends the Responses WebSocket error frame of an HTTP
// status and an error object.
func appendErrorFrame(b []byte, status int, errObj []byte) []byte {
	b = append(b, `{"type":"error","status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"error":`...)
	b = append(b, errObj...)
	return append(b, '}')
}

// create serves one client frame: a warm-up, or a response through the
// normal path (limits, affinity, routing, failover before first content),
// relayed as frames. Every frame of a key
// still valid is a request that ends in finish, so it is counted and
// recorded: a frame refused as malformed (bad JSON, a type other than
// response.create, a duplicate key, no model, binary) gets its 400 error
// frame and the request-log record an HTTP 400 gets, as a limit's or the
// billing gate's refusal does.
func (ss *wsSession) create(frame clientFrame) {
	s := ss.s
	// The key was checked at the upgrade; one deleted, disabled or expired
	// since serves nothing more on the connection, as HTTP refuses it.
	key, aerr := s.recheckKey(ss.ctx, &ss.key)
	switch {
	case aerr != nil && aerr.Status == 401:
		_ = ss.writeError(aerr)
		ss.end("key_revoked", websocket.ClosePolicyViolation, "api key no longer valid")
		return
	case aerr != nil:
		_ = ss.writeError(aerr)
		return
	}
	ss.key = *key
	c := &call{id: newRequestID(), endpoint: translate.Responses, start: s.now(), key: key, authed: true, stream: true, ws: true, header: ss.header}
	if ss.traceParent != nil {
		s.startTrace(ss.traceParent, c, "/v1/responses")
	}
	s.metrics.inflight.Inc()
	s.serving.Add(1)
	status := ss.serve(c, frame)
	if status != 0 {
		s.finish(c, status)
	}
}

// serve answers frame and returns the status it answered with, or 0 when
// the relayed stream counted itself.
func (ss *wsSession) serve(c *call, cf clientFrame) int {
	frame := cf.data
	if cf.binary {
		aerr := errBinaryFrame()
		_ = ss.writeError(aerr)
		// Refused before any response began: nothing streamed. The record
		// names the model the payload does, as a refused text frame's
		// does; only from UTF-8 (what a text frame must be), so no
		// invalid bytes reach the request log.
		c.stream = false
		if utf8.Valid(frame) {
			c.model = namedModel(frame)
		}
		return aerr.Status
	}
	f, aerr := parseCreateFrame(frame)
	if aerr != nil {
		_ = ss.writeError(aerr)
		// The record says what is known of the refused frame, as the same
		// body's over HTTP does: the model it names, and no stream (none
		// began; a parsed frame's request is a stream, this one is not one).
		c.stream, c.model = false, namedModel(frame)
		return aerr.Status
	}
	body, input, prev, aerr := ss.resolve(c, f)
	if aerr == nil && f.warmup {
		return ss.warmup(c, f, input)
	}
	if aerr == nil {
		aerr = ss.prepare(c, f, body, prev)
	}
	if aerr != nil {
		_ = ss.writeError(aerr)
		return aerr.Status
	}
	return ss.runTurn(c, input)
}

// resolve resolves frame f's continuation against this connection's
// transcript: when the transcript holds f's previous response (prev), the
// body carries the whole conversation (the turn's items after the
// transcript's) instead of previous_response_id, and the client's own
// frame is kept for an upstream connection that holds the previous
// response (c.wsCont). input is the conversation as the transcript will
// record it.
func (ss *wsSession) resolve(c *call, f createFrame) (body, input []byte, prev *turn, aerr *APIError) {
	input, body = f.input, f.body
	if f.prevResp != "" {
		prev = ss.tr.get(f.prevResp)
	}
	if prev == nil {
		return body, input, nil, nil
	}
	input = appendItems(append([]byte(nil), prev.items...), f.input)
	b, err := sjson.DeleteBytes(body, "previous_response_id")
	if err == nil {
		b, err = sjson.SetRawBytes(b, "input", input)
	}
	if err != nil {
		return nil, nil, nil, errBadJSON()
	}
	c.wsCont = f.body
	return b, input, prev, nil
}

// prepare makes c the stream request of body (the WebSocket always
// streams) and runs the prelude an HTTP request runs: parse, limits and
// affinity in one cache round trip, route(). A continuation the transcript
// holds prefers the account that holds its upstream state (else the
// session's); any other account can take the full input.
func (ss *wsSession) prepare(c *call, f createFrame, body []byte, prev *turn) *APIError {
	s := ss.s
	if gjson.GetBytes(body, "stream").Type != gjson.True {
		b, err := sjson.SetBytes(body, "stream", true)
		if err != nil {
			return errBadJSON()
		}
		body = b
	}
	if aerr := s.parseBody(c, body); aerr != nil {
		c.stream = false // refused before any response began, as the same HTTP body's record says
		return aerr
	}
	c.stream = true
	if c.tr != nil {
		s.traceParsed(c)
	}
	c.group = c.key.Group
	c.session = ss.session
	if c.session == "" {
		c.session = c.cacheKey
	}
	c.prevResp = f.prevResp
	entry := pinKey(c)
	if prev != nil {
		entry = ""
		if c.prefer = prev.account; c.prefer == "" {
			entry = c.sessionEntry()
		}
	}
	if aerr := s.admitBilling(ss.ctx, c); aerr != nil {
		return aerr
	}
	entry, aerr := s.admit(ss.ctx, c.key, entry) // limits and affinity: one cache round trip
	switch {
	case aerr != nil:
		return aerr
	case prev != nil:
		if c.prefer == "" {
			c.prefer = entry
		}
		c.owner = c.prefer // the transcript's account-bound state is its account's (gateway/state.go)
	default:
		if aerr := s.pin(c, entry); aerr != nil {
			return aerr
		}
	}
	return s.routeWith(c, c.session, ss.clientIP)
}

// runTurn runs prepared request c through the failover loop and relays its
// stream as frames; a stream that completed joins the transcript (input
// and its output), so the next frame can continue it. It returns the status
// answered, or 0 when the relayed stream counted itself.
func (ss *wsSession) runTurn(c *call, input []byte) int {
	s := ss.s
	rctx, cancel := context.WithTimeout(ss.ctx, s.cfg.RequestTimeout)
	defer cancel()
	o := s.run(rctx, c)
	switch {
	case o.aerr != nil:
		_ = ss.writeError(o.aerr)
		return o.aerr.Status
	case o.fail != nil:
		return ss.writeFailure(o.fail)
	case o.res.stream == nil:
		// run only returns held streams for stream calls; a body here is a bug.
		_ = ss.writeError(&APIError{Status: 500, Type: "server_error", Message: "The server had an error while processing your request."})
		return 500
	}
	st := o.res.stream
	st.rcancel = cancel
	output, respID := ss.relay(st)
	if st.clean && st.failed.Class == upstream.ClassNone && respID != "" {
		ss.tr.add(respID, appendItems(append([]byte(nil), input...), output), st.lease.AccountID)
	}
	return 0
}

// writeFailure answers a request whose attempts all failed, as an error
// frame: a request-class error as the upstream wrote it, else the
// gateway's own (see answerFailure).
func (ss *wsSession) writeFailure(f *failure) int {
	if f != nil && f.verdict.Class == upstream.ClassRequest && f.status != 0 {
		if e := gjson.GetBytes(f.body, "error"); e.IsObject() {
			_ = ss.write(appendErrorFrame(nil, f.status, []byte(e.Raw)))
			return f.status
		}
	}
	aerr := clientError(f)
	_ = ss.writeError(aerr)
	return aerr.Status
}

// relay relays the held stream to the client as text frames (see
// stream.relay) and ends it (release, usage). It returns the output items
// of response.completed ("[]" when none) and the response id the client
// saw, for the transcript.
func (ss *wsSession) relay(st *stream) ([]byte, string) {
	st.began = true
	st.left = func() bool { return ss.ctx.Err() != nil }
	k := wsSink{ss: ss, sc: scanners.Get().(*translate.Scanner), output: []byte("[]")}
	_ = st.relay(&k)
	scanners.Put(k.sc)
	_ = st.Close()
	return k.output, k.respID
}

// wsSink writes client events to the Responses WebSocket, one text frame
// per event: its JSON data, without SSE framing. It notes what the
// connection's transcript needs from the events it writes.
type wsSink struct {
	ss     *wsSession
	sc     *translate.Scanner // splits SSE bytes into events
	rd     bytes.Reader
	output []byte // response.completed's output items
	respID string // response.created's id
}

func (k *wsSink) event(ev translate.Event, _ []byte) error {
	if len(bytes.TrimSpace(ev.Data)) == 0 {
		return nil
	}
	switch eventType(ev) {
	case "response.completed":
		if o := gjson.GetBytes(ev.Data, "response.output"); o.IsArray() {
			k.output = []byte(o.Raw)
		}
	case "response.created":
		k.respID = gjson.GetBytes(ev.Data, "response.id").Str
	}
	return k.ss.write(ev.Data)
}

// flush has nothing to do: every event is its own frame, written at once.
// (Gathering frames into one write would need a buffered connection under
// the WebSocket library, whose pongs other goroutines write.)
func (k *wsSink) flush() error { return nil }

// sse writes every event of SSE bytes b.
func (k *wsSink) sse(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	k.rd.Reset(b)
	k.sc.Reset(&k.rd)
	for {
		ev, err := k.sc.Next()
		if err != nil {
			return nil
		}
		if err := k.event(ev, nil); err != nil {
			return err
		}
	}
}

// eventType is a Responses event's type: its SSE name, else its data's
// "type" (the API sets both; a WebSocket frame has only the latter).
func eventType(ev translate.Event) string {
	if len(ev.Name) > 0 {
		return b2s(ev.Name)
	}
	return gjson.Get(b2s(ev.Data), "type").Str
}

// b2s views b as a string without copying it: valid while b is and not
// changed, so only for strings compared or parsed at once, never kept.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// warmup answers generate:false itself, as the Responses WebSocket does:
// response.created then response.completed with no output and zero usage
// (fixtures clients/codex-cli/ws-plain__02 served_frames). Nothing goes
// upstream; the warm-up's input joins the transcript, so the next frame
// can continue it with previous_response_id.
//
// A warm-up is a request of the key like any other (docs/websocket.md,
// "Warm-ups"): it is charged to the key's requests per minute and per day
// and refused by them, and by a spent daily token budget, with the same
// 429 an HTTP request gets, in the same cache round trip (admit). It
// writes its request-log row, with no tokens and no cost. So a client
// cannot send warm-ups past its limits: each one costs the gateway a
// frame's parse, two frames and a transcript entry.
func (ss *wsSession) warmup(c *call, f createFrame, input []byte) int {
	c.model, c.target = f.model, f.model // the request log names the warm-up's model
	if !modelAllowed(&ss.key, f.model) {
		aerr := errModelNotAllowed(f.model)
		_ = ss.writeError(aerr)
		return aerr.Status
	}
	if _, aerr := ss.s.admit(ss.ctx, &ss.key, ""); aerr != nil {
		_ = ss.writeError(aerr)
		return aerr.Status
	}
	id := "resp_" + c.id[len("req_"):]
	now := strconv.FormatInt(ss.s.now().Unix(), 10)
	resp := func(dst []byte, status string) []byte {
		dst = append(dst, `{"id":"`...)
		dst = append(dst, id...)
		dst = append(dst, `","object":"response","created_at":`...)
		dst = append(dst, now...)
		dst = append(dst, `,"status":"`...)
		dst = append(dst, status...)
		dst = append(dst, `","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":`...)
		dst = translate.AppendString(dst, f.model)
		dst = append(dst, `,"output":[],"parallel_tool_calls":true,"previous_response_id":`...)
		dst = appendNullable(dst, f.prevResp)
		dst = append(dst, `,"store":false,"tool_choice":"auto","tools":[],"usage":`...)
		if status == "completed" {
			dst = append(dst, `{"input_tokens":0,"input_tokens_details":{"cached_tokens":0},"output_tokens":0,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":0}`...)
		} else {
			dst = append(dst, "null"...)
		}
		return append(dst, `,"metadata":{}}`...)
	}
	b := append([]byte(nil), `{"type":"response.created","response":`...)
	b = resp(b, "in_progress")
	b = append(b, `,"sequence_number":0}`...)
	if ss.write(b) != nil {
		return 499
	}
	b = append(b[:0], `{"type":"response.completed","response":`...)
	b = resp(b, "completed")
	b = append(b, `,"sequence_number":1}`...)
	if ss.write(b) != nil {
		return 499
	}
	ss.tr.add(id, append([]byte(nil), input...), "")
	return 200
}
