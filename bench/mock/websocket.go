package mock

import (
	"bufio"
	"bytes"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"
)

// The Responses API WebSocket mode on GET /v1/responses (openai accounts)
// and GET /backend-api/codex/responses (codex accounts), as the shared
// fixtures testdata/responses-websocket/* show: each client text frame is
// {"type":"response.create", …the POST body fields…}; the answer is the
// JSON of the SSE events, one text frame each, with no `event:` line and no
// sentinel; the socket stays open after response.completed for the next
// response. generate:false (a warm-up) is answered with response.created and
// a completed response with empty output. previous_response_id must name
// the connection's last response (the state lives on the connection, store
// false or not); otherwise an error frame previous_response_not_found (400)
// answers. Codex upgrades must carry OpenAI-Beta:
// responses_websockets=2026-02-06. A frame above the fleet's WebSocket read
// limit (SetWebSocketReadLimit) gets close 1009. Status faults answer as
// error frames {"type":"error","status":…,"error":{…}}; the other faults
// drop the connection.

// wsBeta is the OpenAI-Beta value of the Responses WebSocket mode, v2.
const wsBeta = "responses_websockets=2026-02-06"

// wsState is the fleet's WebSocket knobs and counters.
type wsState struct {
	readLimit atomic.Int64 // bytes per client frame; 0: maxRequestBody
	upgrades  atomic.Int64 // connections upgraded
	open      atomic.Int64 // connections open now
	frames    atomic.Int64 // response.create frames received
}

// SetWebSocketReadLimit sets the largest client frame the fleet's WebSocket
// mode accepts, in bytes; a larger one is answered with close 1009 (message
// too big). n <= 0 restores the default (64 MiB).
func (f *Fleet) SetWebSocketReadLimit(n int) { f.ws.readLimit.Store(int64(n)) }

// WebSocketStats returns how many WebSocket connections the fleet upgraded
// in total, how many are open now, and how many response.create frames it
// received.
func (f *Fleet) WebSocketStats() (upgrades, open, creates int64) {
	return f.ws.upgrades.Load(), f.ws.open.Load(), f.ws.frames.Load()
}

var wsUpgrader = websocket.FastHTTPUpgrader{
	ReadBufferSize:  16 << 10,
	WriteBufferSize: 16 << 10,
	CheckOrigin:     func(*fasthttp.RequestCtx) bool { return true },
}

// isWebSocket reports whether ctx is a WebSocket upgrade of a Responses route.
func isWebSocket(ctx *fasthttp.RequestCtx, rt route) bool {
	return (rt == routeResponses || rt == routeCodex) && ctx.IsGet() && websocket.FastHTTPIsWebSocketUpgrade(ctx)
}

// serveWebSocket authenticates the upgrade like a POST (failures are HTTP
// answers, no upgrade), then serves response.create frames until the client
// closes or the fleet does.
func (f *Fleet) serveWebSocket(ctx *fasthttp.RequestCtx, rt route) {
	acc, fail := f.authenticate(ctx, rt)
	if fail != nil {
		writeFailure(ctx, fail, rt)
		return
	}
	if rt == routeCodex && string(ctx.Request.Header.Peek("Openai-Beta")) != wsBeta {
		ctx.SetStatusCode(400)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"detail":"Missing or unsupported OpenAI-Beta header for websocket responses"}`)
		return
	}
	h := &ctx.Response.Header
	if rt == routeCodex {
		l := acc.codexLimits(time.Now(), f.started)
		setCodexLimitHeaders(h, &l, nil)
		h.Set("X-Reasoning-Included", "true")
		h.Set("X-Models-Etag", modelsETag)
	}
	err := wsUpgrader.Upgrade(ctx, func(conn *websocket.Conn) {
		f.ws.upgrades.Add(1)
		f.ws.open.Add(1)
		defer f.ws.open.Add(-1)
		defer conn.Close()
		done := make(chan struct{})
		defer close(done)
		go func() { // the fleet closing ends the connection
			select {
			case <-f.done:
				_ = conn.Close()
			case <-done:
			}
		}()
		(&wsSession{f: f, acc: acc, rt: rt, conn: conn}).serve()
	})
	if err != nil {
		f.log.Debug("websocket upgrade failed", "err", err)
	}
}

// wsSession is one mock WebSocket connection.
type wsSession struct {
	f    *Fleet
	acc  *account
	rt   route
	conn *websocket.Conn
	last string // id of the last response completed on this connection
}

func (w *wsSession) serve() {
	limit := w.f.ws.readLimit.Load()
	if limit <= 0 {
		limit = maxRequestBody
	}
	w.conn.SetReadLimit(limit)
	for {
		typ, frame, err := w.conn.ReadMessage()
		if err != nil {
			return // a frame over the limit was answered with close 1009 by the library
		}
		if typ != websocket.TextMessage {
			continue
		}
		if !w.create(frame) {
			return
		}
	}
}

// create answers one client frame; false drops the connection.
func (w *wsSession) create(frame []byte) bool {
	if !gjson.ValidBytes(frame) || gjson.GetBytes(frame, "type").Str != "response.create" {
		return w.errorFrame(400, `{"type":"invalid_request_error","code":"invalid_request","message":"Expected a response.create frame.","param":"type"}`)
	}
	w.f.ws.frames.Add(1)
	body, _ := sjson.DeleteBytes(frame, "type")
	if prev := gjson.GetBytes(body, "previous_response_id").Str; prev != "" && prev != w.last {
		return w.errorFrame(400, `{"type":"invalid_request_error","code":"previous_response_not_found","message":"Previous response with id '`+
			string(appendJSONEscaped(nil, prev))+`' not found.","param":"previous_response_id"}`)
	}
	s := getStream(w.f, w.acc, w.rt)
	if !parseRequest(body, w.rt, &s.req) {
		putStream(s)
		return w.errorFrame(400, `{"type":"invalid_request_error","code":"invalid_json","message":"The frame is not a JSON object.","param":null}`)
	}
	if s.req.model == "" {
		putStream(s)
		return w.errorFrame(400, `{"type":"invalid_request_error","code":"missing_required_parameter","message":"you must provide a model parameter","param":"model"}`)
	}
	if w.rt == routeCodex && s.req.store {
		putStream(s)
		return w.errorFrame(400, `{"type":"invalid_request_error","code":null,"message":"Store must be set to false","param":"store"}`)
	}
	if w.rt == routeCodex && s.req.codexRefused != "" {
		k := string(appendJSONEscaped(nil, s.req.codexRefused))
		putStream(s)
		return w.errorFrame(400, `{"type":"invalid_request_error","code":"unsupported_parameter","message":"Unsupported parameter: `+k+`","param":"`+k+`"}`)
	}
	if w.rt == routeResponses && s.req.outputBelowMin {
		b, status := appendFailure(nil, &failure{kind: failOutputBelowMin, arg: s.req.outputGot}, routeResponses, nil)
		putStream(s)
		return w.errorFrame(status, gjson.GetBytes(b, "error").Raw)
	}
	s.req.stream = true
	if gjson.GetBytes(body, "generate").Type == gjson.False {
		return w.warmup(s)
	}
	w.acc.stats.request()
	w.f.total.request()
	s.p = w.acc.plan(&s.req)
	if s.p.reject != nil {
		w.acc.stats.reject()
		w.f.total.reject()
		b, status := appendFailure(nil, s.p.reject, routeResponses, nil)
		putStream(s)
		return w.errorFrame(status, gjson.GetBytes(b, "error").Raw)
	}
	w.acc.stats.begin()
	w.f.total.begin()
	s.start = time.Now()
	s.created = s.start.Unix()
	if fs := s.p.fault; fs != nil {
		if !fs.isStatus() {
			s.finish(false)
			return false // resets, hangs, empty streams: the connection breaks
		}
		rc := &fasthttp.RequestCtx{}
		s.sleep(fs.Delay)
		s.writeFaultStatus(rc, time.Now())
		status, eb := rc.Response.StatusCode(), rc.Response.Body()
		e := gjson.GetBytes(eb, "error").Raw
		if e == "" {
			e = `{"type":"server_error","message":` + string(appendJSONString(nil, gjson.GetBytes(eb, "detail").String())) + `}`
		}
		s.finish(false)
		return w.errorFrame(status, e)
	}
	fw := &frameWriter{conn: w.conn}
	bw := bufio.NewWriterSize(fw, 4096)
	ok := s.writeResponses(bw) && bw.Flush() == nil && fw.err == nil
	id := "resp_" + string(s.id[:])
	s.finish(ok)
	if ok {
		w.last = id
	}
	return ok
}

// warmup answers generate:false: response.created, then response.completed
// with empty output and zero usage (fixtures clients/codex-cli/ws-plain__02).
func (w *wsSession) warmup(s *stream) bool {
	s.created = time.Now().Unix()
	id := "resp_" + string(s.id[:])
	head := `{"id":"` + id + `","object":"response","created_at":` + strconv.FormatInt(s.created, 10)
	tail := `,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":` + s.req.modelJSON +
		`,"output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled"`
	created := `{"type":"response.created","response":` + head + `,"status":"in_progress"` + tail + `,"usage":null,"user":null,"metadata":{}},"sequence_number":0}`
	completed := `{"type":"response.completed","response":` + head + `,"status":"completed"` + tail +
		`,"usage":{"input_tokens":0,"input_tokens_details":{"cached_tokens":0},"output_tokens":0,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":0},"user":null,"metadata":{}},"sequence_number":1}`
	putStream(s)
	if w.conn.WriteMessage(websocket.TextMessage, []byte(created)) != nil || w.conn.WriteMessage(websocket.TextMessage, []byte(completed)) != nil {
		return false
	}
	w.last = id
	return true
}

// errorFrame sends {"type":"error","status":status,"error":errJSON}; the
// connection stays open, as the Responses WebSocket servers keep it.
func (w *wsSession) errorFrame(status int, errJSON string) bool {
	b := []byte(`{"type":"error","status":` + strconv.Itoa(status) + `,"error":` + errJSON + `}`)
	return w.conn.WriteMessage(websocket.TextMessage, b) == nil
}

// frameWriter turns the SSE bytes the stream renderers write into one text
// frame per event, carrying the event's data line.
type frameWriter struct {
	conn *websocket.Conn
	buf  []byte
	err  error
}

func (fw *frameWriter) Write(p []byte) (int, error) {
	if fw.err != nil {
		return 0, fw.err
	}
	fw.buf = append(fw.buf, p...)
	for {
		i := bytes.Index(fw.buf, []byte("\n\n"))
		if i < 0 {
			return len(p), nil
		}
		ev := fw.buf[:i]
		for _, line := range bytes.Split(ev, []byte("\n")) {
			if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				if fw.err = fw.conn.WriteMessage(websocket.TextMessage, d); fw.err != nil {
					return 0, fw.err
				}
			}
		}
		fw.buf = append(fw.buf[:0], fw.buf[i+2:]...)
	}
}

// appendJSONEscaped appends s escaped for a JSON string, without quotes.
func appendJSONEscaped(dst []byte, s string) []byte {
	q := appendJSONString(nil, s)
	return append(dst, q[1:len(q)-1]...)
}
