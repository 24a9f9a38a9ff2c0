package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

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

	ctx    context.Context // ends when the client leaves or the server aborts
	cancel context.CancelFunc
	once   sync.Once
}

// wsWriteTimeout bounds one frame written to the client.
const wsWriteTimeout = 30 * time.Second

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

	frames := make(chan []byte, 4)
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
			if f == nil {
				_ = ss.writeError(errBinaryFrame())
				continue
			}
			ss.create(f)
		case <-ss.closing:
			ss.closeWith(websocket.CloseGoingAway, "server shutting down")
			return
		case <-ss.ctx.Done():
			return
		}
	}
}

// read feeds text frames to frames until the connection fails; a client
// gone mid-response cancels it. A binary frame is fed as nil, which run
// answers with an error frame: ignoring it would leave the client waiting
// for an answer that never comes.
func (ss *wsSession) read(frames chan<- []byte) {
	defer close(frames)
	for {
		typ, data, err := ss.conn.ReadMessage()
		if err != nil {
			if !errors.Is(err, websocket.ErrReadLimit) {
				ss.cancel() // a too-big frame was answered with 1009; anything else: the client is gone
			}
			return
		}
		switch {
		case typ == websocket.BinaryMessage:
			data = nil
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
		case frames <- data:
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

// closeWith sends a close frame once and closes the connection.
func (ss *wsSession) closeWith(code int, text string) {
	ss.once.Do(func() {
		_ = ss.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
		_ = ss.conn.Close()
	})
}

// write sends one text frame.
func (ss *wsSession) write(b []byte) error {
	_ = ss.conn.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
	return ss.conn.WriteMessage(websocket.TextMessage, b)
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
// relayed as frames.
func (ss *wsSession) create(frame []byte) {
	s := ss.s
	f, aerr := parseCreateFrame(frame)
	if aerr != nil {
		_ = ss.writeError(aerr)
		return
	}
	c := &call{id: newRequestID(), endpoint: translate.Responses, start: s.now(), key: ss.key, authed: true, stream: true, ws: true, header: ss.header}
	s.metrics.inflight.Inc()
	s.serving.Add(1)
	status := ss.serve(c, f)
	if status != 0 {
		s.finish(c, status)
	}
}

// serve returns the status it answered with, or 0 when the relayed stream
// counted itself.
func (ss *wsSession) serve(c *call, f createFrame) int {
	s := ss.s
	// The continuation, resolved against this connection's transcript.
	input := f.input
	var prev *turn
	if f.prevResp != "" {
		prev = ss.tr.get(f.prevResp)
	}
	body := f.body
	if prev != nil {
		input = appendItems(append([]byte(nil), prev.items...), f.input)
		b, err := sjson.DeleteBytes(body, "previous_response_id")
		if err == nil {
			b, err = sjson.SetRawBytes(b, "input", input)
		}
		if err != nil {
			_ = ss.writeError(errBadJSON())
			return 400
		}
		c.wsCont = f.body
		body = b
	}
	if f.warmup {
		return ss.warmup(c, f, input)
	}
	if gjson.GetBytes(body, "stream").Type != gjson.True {
		b, err := sjson.SetBytes(body, "stream", true)
		if err != nil {
			_ = ss.writeError(errBadJSON())
			return 400
		}
		body = b
	}
	if aerr := s.parseBody(c, body); aerr != nil {
		_ = ss.writeError(aerr)
		return aerr.Status
	}
	c.stream = true
	if c.wsCont != nil && c.target != c.model {
		if b, err := sjson.SetBytes(append([]byte(nil), c.wsCont...), "model", c.target); err == nil {
			c.wsCont = b
		}
	}
	if aerr := s.admit(ss.ctx, &c.key); aerr != nil {
		_ = ss.writeError(aerr)
		return aerr.Status
	}
	c.group = c.key.Group
	c.session = ss.session
	if c.session == "" {
		c.session = gjson.GetBytes(body, "prompt_cache_key").String()
	}
	switch {
	case prev != nil:
		// The connection holds the transcript: prefer the account that
		// holds the upstream state; any other can take the full input.
		c.prevResp = f.prevResp
		c.prefer = prev.account
		if c.prefer == "" {
			c.prefer = s.sessionAccount(ss.ctx, c.session)
		}
	default:
		c.prevResp = f.prevResp
		if aerr := s.pin(ss.ctx, c); aerr != nil {
			_ = ss.writeError(aerr)
			return aerr.Status
		}
	}
	if aerr := s.routeWith(c, c.session, ss.clientIP); aerr != nil {
		_ = ss.writeError(aerr)
		return aerr.Status
	}
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
	st.cancel = chainCancel(st.cancel, cancel)
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

// relay writes the held stream's events, then the rest, as text frames (the
// event's JSON, no SSE framing), and ends the stream (release, usage). A
// stream from an upstream of another protocol is translated event by event
// (the held events already are). It returns the output items of
// response.completed ("[]" when none) and the response id the client saw.
func (ss *wsSession) relay(st *stream) ([]byte, string) {
	st.began = true
	output := []byte("[]")
	respID := st.respID
	send := func(ev translate.Event) bool {
		switch typ := gjson.GetBytes(ev.Data, "type").Str; {
		case string(ev.Name) == "response.completed" || typ == "response.completed":
			if o := gjson.GetBytes(ev.Data, "response.output"); o.IsArray() {
				output = []byte(o.Raw)
			}
		case st.tr != nil && (string(ev.Name) == "response.created" || typ == "response.created"):
			respID = gjson.GetBytes(ev.Data, "response.id").Str
		}
		if len(bytes.TrimSpace(ev.Data)) == 0 {
			return true
		}
		if err := ss.write(ev.Data); err != nil {
			st.werr = err
			st.cancel()
			return false
		}
		return true
	}
	// sendAll sends every event of SSE bytes b.
	sendAll := func(b []byte) bool {
		sc := translate.NewScanner(bytes.NewReader(b), maxEvent)
		for {
			ev, err := sc.Next()
			if err != nil {
				return true
			}
			if !send(ev) {
				return false
			}
		}
	}
	ok := true
	if len(st.held) > 0 {
		ok = sendAll(st.held)
		st.held = nil
	}
	for ok {
		ev, err := st.sc.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				st.rerr = err
			}
			break
		}
		st.observe(ev)
		if st.tr == nil {
			ok = send(ev)
			continue
		}
		if st.out, err = st.tr.Event(st.out[:0], ev); err != nil {
			st.s.log.Warn("stream translation failed", "request_id", st.c.id, "from", st.up.Route(), "to", st.c.endpoint.Route(), "err", err)
			st.untranslatable = true
			break
		}
		ok = sendAll(st.out)
	}
	if ok {
		// The end in the client's protocol: a translated stream's Finish or
		// Fail; a passthrough stream that broke after commit gets error then
		// response.failed, as the HTTP stream does.
		// Nothing follows the end: a failed write is already kept in st.werr.
		switch {
		case st.untranslatable:
			sendAll(st.tr.Fail(st.out[:0], "server_error", "upstream_error", "The upstream answer could not be translated into this protocol."))
		case !st.clean && st.tr != nil:
			sendAll(st.tr.Fail(st.out[:0], "server_error", "upstream_error", msgStreamBroke))
		case !st.clean:
			sendAll(appendStreamError(nil, translate.Responses, st.respID, st.c.id, msgStreamBroke))
		case st.tr != nil:
			sendAll(st.tr.Finish(st.out[:0]))
		}
	}
	_ = st.Close()
	return output, respID
}

// warmup answers generate:false itself, as the Responses WebSocket does:
// response.created then response.completed with no output and zero usage
// (fixtures clients/codex-cli/ws-plain__02 served_frames). Nothing goes
// upstream; the warm-up's input joins the transcript, so the next frame
// can continue it with previous_response_id.
func (ss *wsSession) warmup(c *call, f createFrame, input []byte) int {
	if !modelAllowed(&ss.key, f.model) {
		aerr := errModelNotAllowed(f.model)
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
