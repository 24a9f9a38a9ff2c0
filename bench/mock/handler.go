package mock

import (
	"bytes"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// route is one endpoint of the fleet.
type route uint8

const (
	routeUnknown     route = iota
	routeChat              // POST /v1/chat/completions
	routeResponses         // POST /v1/responses
	routeCodex             // POST /backend-api/codex/responses
	routeModels            // GET /v1/models
	routeCodexModels       // GET /backend-api/codex/models
	routeMessages          // POST /v1/messages (kind anthropic)
	routeCountTokens       // POST /v1/messages/count_tokens (kind anthropic)
	// routeAnthropicModels is GET /v1/models asked with x-api-key: an
	// anthropic account's model list, in Anthropic's shapes.
	routeAnthropicModels
	routeCompact      // POST /v1/responses/compact (kind openai; compact.go)
	routeCodexCompact // POST /backend-api/codex/responses/compact (kind codex)
)

// codexProtocol reports whether errors on rt use the Codex backend's
// {"detail": ...} shape rather than the OpenAI envelope.
func (rt route) codexProtocol() bool {
	return rt == routeCodex || rt == routeCodexModels || rt == routeCodexCompact
}

// anthropicProtocol reports whether rt speaks Anthropic's API: x-api-key
// auth, its error envelope and headers.
func (rt route) anthropicProtocol() bool {
	return rt == routeMessages || rt == routeCountTokens || rt == routeAnthropicModels
}

// isModels reports whether rt is a model listing.
func (rt route) isModels() bool {
	return rt == routeModels || rt == routeCodexModels || rt == routeAnthropicModels
}

func (rt route) method() string {
	if rt.isModels() {
		return fasthttp.MethodGet
	}
	return fasthttp.MethodPost
}

func routeOf(path []byte) route {
	switch string(path) {
	case "/v1/chat/completions":
		return routeChat
	case "/v1/responses":
		return routeResponses
	case "/backend-api/codex/responses":
		return routeCodex
	case "/v1/models":
		return routeModels
	case "/backend-api/codex/models":
		return routeCodexModels
	case "/v1/messages":
		return routeMessages
	case "/v1/messages/count_tokens":
		return routeCountTokens
	case "/v1/responses/compact":
		return routeCompact
	case "/backend-api/codex/responses/compact":
		return routeCodexCompact
	}
	return routeUnknown
}

// request holds what the mock reads from a request body.
type request struct {
	model         string // decoded
	modelJSON     string // the model as a JSON string, as sent
	cacheKeyJSON  string // prompt_cache_key as a JSON string, as sent; "" if absent
	stream        bool
	store         bool // "store" value; default true
	storeSet      bool // "store" present
	includeUsage  bool // stream_options.include_usage
	noObfuscation bool // stream_options.include_obfuscation == false
	inputTokens   int  // len(body)/4
	cacheHint     bool // the body asks for prompt caching ("cache_control" anywhere)
	maxTokensSet  bool // "max_tokens" is a number (Messages requires it)
	messagesSet   bool // "messages" is an array (Messages requires it)
	// inputSet: "input" is present and not null, or "prompt" or
	// "conversation", which supply it, is (Responses requires one).
	inputSet bool
	// maxOutput is the output token limit the route honours (outputLimit);
	// 0: none.
	maxOutput int
	// outputBelowMin: "max_output_tokens" is a number below
	// minOutputTokens, which the Responses API refuses (see
	// failOutputBelowMin); outputGot is that number as the refusal quotes it.
	outputBelowMin bool
	outputGot      string
	// noTools: tool_choice is "none" (Chat, Responses) or {"type":"none"}
	// (Messages): the answer never calls a tool.
	noTools bool
	// force is a tool_choice that makes the answer call a tool (forcedTool).
	force toolChoice
	// codexRefused is the first top-level key the Codex backend refuses
	// (codexAccepts); "" when none.
	codexRefused string
	script       script
}

// parseRequest fills r from body, a JSON object sent on route rt, scanning
// it twice (validate, then top-level keys) without decoding nested values.
// It reports false if body is not a valid JSON object.
func parseRequest(body []byte, rt route, r *request) bool {
	// The string aliases body only for the duration of this call; everything
	// kept is cloned.
	s := unsafe.String(unsafe.SliceData(body), len(body))
	if !gjson.Valid(s) {
		return false
	}
	root := gjson.Parse(s)
	if !root.IsObject() {
		return false
	}
	r.store = true
	var tools, conv gjson.Result
	var lim outputLimits
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "tools":
			tools = v
		case "tool_choice":
			r.noTools = v.Str == "none" || v.Get("type").Str == "none"
			r.force = parseToolChoice(v)
		case "max_completion_tokens":
			lim.maxCompletionTokens = limitOf(v)
		case "max_output_tokens":
			lim.maxOutputTokens = limitOf(v)
			if v.Type == gjson.Number && v.Num < minOutputTokens {
				r.outputBelowMin, r.outputGot = true, strconv.FormatFloat(v.Num, 'f', -1, 64)
			}
		case "messages":
			conv = v
			r.messagesSet = v.IsArray()
		case "input":
			conv = v
			r.inputSet = r.inputSet || v.Type != gjson.Null
		case "prompt", "conversation":
			r.inputSet = r.inputSet || v.Type != gjson.Null
		case "max_tokens":
			r.maxTokensSet = v.Type == gjson.Number
			lim.maxTokens = limitOf(v)
		case "model":
			if v.Type == gjson.String {
				r.model = strings.Clone(v.Str)
				r.modelJSON = strings.Clone(v.Raw)
			}
		case "stream":
			r.stream = v.Type == gjson.True
		case "store":
			r.storeSet = true
			r.store = v.Type == gjson.True
		case "stream_options":
			if v.IsObject() {
				r.includeUsage = v.Get("include_usage").Type == gjson.True
				r.noObfuscation = v.Get("include_obfuscation").Type == gjson.False
			}
		case "prompt_cache_key":
			if v.Type == gjson.String {
				r.cacheKeyJSON = strings.Clone(v.Raw)
			}
		}
		if r.codexRefused == "" && !codexAccepts(k.Str) {
			r.codexRefused = strings.Clone(k.Str)
		}
		return true
	})
	r.script = parseScript(tools, conv)
	if r.force.forced {
		if sc, ok := forcedScript(r.force, tools, r.script); ok {
			r.script = sc
		}
	}
	r.maxOutput = lim.of(rt)
	if r.script.kind == scriptToolCall && (r.noTools || r.maxOutput > 0 && r.maxOutput < toolFragments) {
		// tool_choice "none" forbids the call; a limit too small for its
		// arguments gets the account's text, cut at the limit, instead.
		r.script = script{}
	}
	r.inputTokens = len(body) / 4
	r.cacheHint = bytes.Contains(body, cacheControlKey)
	return true
}

var cacheControlKey = []byte(`"cache_control"`)

// codexAccepts reports whether the ChatGPT Codex backend takes top-level
// request member key: what the Codex CLI sends (fixtures clients/codex-cli,
// 0.169.0: model, instructions, input, tools, tool_choice,
// parallel_tool_calls, reasoning, store, stream, include,
// prompt_cache_key, text, client_metadata; on the WebSocket also
// previous_response_id and generate), and service_tier, which the Codex
// CLI sends in its fast mode (codex-rs/codex-api/src/common.rs
// ResponsesApiRequest: "priority", or "flex"). The backend refuses the rest with
// 400 {"detail":"Unsupported parameter: <key>"} (max_output_tokens,
// temperature, …), and so does the mock, so a gateway that forwards them
// fails its tests as it would fail in production. Kept apart from
// Troupe's own list on purpose: the mock is the judge.
func codexAccepts(key string) bool {
	switch key {
	case "model", "instructions", "input", "tools", "tool_choice", "parallel_tool_calls", "reasoning", "store",
		"stream", "include", "prompt_cache_key", "text", "client_metadata", "previous_response_id", "generate",
		"service_tier":
		return true
	}
	return false
}

// handle is the fasthttp handler of the fleet.
func (f *Fleet) handle(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	rt := routeOf(path)
	if rt == routeModels && len(ctx.Request.Header.Peek("X-Api-Key")) > 0 {
		rt = routeAnthropicModels
	}
	if rt == routeUnknown {
		rtProto := routeChat
		switch {
		case bytes.HasPrefix(path, []byte("/backend-api/")):
			rtProto = routeCodex
		case bytes.HasPrefix(path, []byte("/v1/messages")), len(ctx.Request.Header.Peek("X-Api-Key")) > 0:
			rtProto = routeMessages
		}
		writeFailure(ctx, &failure{kind: failNotFound, arg: string(ctx.Method()) + " " + string(path)}, rtProto)
		return
	}
	if isWebSocket(ctx, rt) {
		f.serveWebSocket(ctx, rt) // websocket.go
		return
	}
	if string(ctx.Method()) != rt.method() {
		writeFailure(ctx, &failure{kind: failMethod, arg: string(ctx.Method()) + " " + string(path)}, rt)
		return
	}
	acc, fail := f.authenticate(ctx, rt)
	if fail != nil {
		writeFailure(ctx, fail, rt)
		return
	}
	if rt == routeCountTokens {
		f.serveCountTokens(ctx, acc)
		return
	}
	if rt == routeCompact || rt == routeCodexCompact {
		f.serveCompact(ctx, acc, rt) // compact.go
		return
	}
	if rt.isModels() {
		if fs := acc.modelsFault(); fs != nil {
			s := getStream(f, acc, rt)
			s.p.fault = fs
			s.writeFaultStatus(ctx, time.Now())
			putStream(s)
			return
		}
		f.serveModels(ctx, acc, rt)
		return
	}
	acc.stats.request()
	f.total.request()

	s := getStream(f, acc, rt)
	if fail := s.prepare(ctx); fail != nil {
		acc.stats.reject()
		f.total.reject()
		writeFailure(ctx, fail, rt)
		putStream(s)
		return
	}

	acc.stats.begin()
	f.total.begin()
	s.start = time.Now()
	s.created = s.start.Unix()
	if s.p.fault != nil {
		s.serveFault(ctx) // ends the answer and releases s, now or later
		return
	}
	s.writeHeaders(ctx)
	if s.req.stream {
		s.serveStream(ctx)
		return
	}
	s.serveJSON(ctx)
}

// serveStream starts a streamed answer: SSE headers, then the route's stream
// writer, which ends the answer and releases s.
func (s *stream) serveStream(ctx *fasthttp.RequestCtx) {
	s.setSSEHeaders(ctx)
	if s.p.latency > 0 {
		ctx.Response.ImmediateHeaderFlush = true // the client sees 200 at once, content after Latency
	}
	switch s.route {
	case routeChat:
		ctx.SetBodyStreamWriter(s.streamChat)
	case routeMessages:
		ctx.SetBodyStreamWriter(s.streamMessages)
	default:
		ctx.SetBodyStreamWriter(s.streamResponses)
	}
}

// setSSEHeaders sets the content headers of an event stream.
func (s *stream) setSSEHeaders(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/event-stream; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
}

// authenticate finds the account of the request's bearer token that serves rt.
func (f *Fleet) authenticate(ctx *fasthttp.RequestCtx, rt route) (*account, *failure) {
	if rt.anthropicProtocol() {
		return f.authenticateAnthropic(ctx, rt)
	}
	tok, ok := bearer(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization))
	if !ok {
		return nil, &failure{kind: failMissingKey}
	}
	acc := f.lookup(tok)
	if acc == nil || !acc.servesRoute(rt) {
		return nil, &failure{kind: failInvalidKey, arg: maskKey(tok)}
	}
	if acc.cfg.Kind == KindCodex && acc.cfg.ChatGPTAccountID != "" {
		id := ctx.Request.Header.Peek("Chatgpt-Account-Id")
		if len(id) == 0 {
			return nil, &failure{kind: failAccountID}
		}
		if string(id) != acc.cfg.ChatGPTAccountID {
			return nil, &failure{kind: failWorkspace}
		}
	}
	return acc, nil
}

// bearer extracts the token of an "Authorization: Bearer <token>" value.
func bearer(h []byte) ([]byte, bool) {
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(string(h[:len(prefix)]), prefix) {
		return nil, false
	}
	tok := bytes.TrimSpace(h[len(prefix):])
	return tok, len(tok) > 0
}

// readRequest decodes the body (Content-Encoding, up to maxRequestBody) and
// parses it into s.req; a body that cannot be decoded or parsed, or names no
// model, is the failure returned.
func (s *stream) readRequest(ctx *fasthttp.RequestCtx) *failure {
	body := ctx.PostBody()
	if ce := ctx.Request.Header.ContentEncoding(); len(ce) > 0 && string(ce) != "identity" {
		var err error
		if body, err = ctx.Request.BodyUncompressedWithLimit(maxRequestBody); err != nil {
			return &failure{kind: failEncoding}
		}
	}
	if !parseRequest(body, s.route, &s.req) {
		return &failure{kind: failMalformed}
	}
	if s.req.model == "" {
		return &failure{kind: failMissingModel}
	}
	return nil
}

// statusRefusal asks acc for its plan of s.req: the plan's refusal, or,
// when its fault is a status fault, that fault answered on ctx (answered
// is then true).
func (s *stream) statusRefusal(ctx *fasthttp.RequestCtx, acc *account) (fl *failure, answered bool) {
	p := acc.plan(&s.req)
	if p.reject == nil && p.fault != nil && p.fault.isStatus() {
		s.p.fault = p.fault
		s.writeFaultStatus(ctx, time.Now())
		return nil, true
	}
	return p.reject, false
}

// prepare reads and checks the request body and asks the account for its
// plan. A non-nil failure is the answer instead.
func (s *stream) prepare(ctx *fasthttp.RequestCtx) *failure {
	if fl := s.readRequest(ctx); fl != nil {
		return fl
	}
	if s.route == routeMessages {
		if !s.req.maxTokensSet {
			return &failure{kind: failMissingMaxTokens}
		}
		if !s.req.messagesSet {
			return &failure{kind: failMissingMessages}
		}
	}
	if s.route == routeResponses && !s.req.inputSet {
		// A Chat Completions body ("messages") sent to /v1/responses is
		// refused as the API refuses it, not answered.
		return &failure{kind: failMissingInput}
	}
	if s.route == routeResponses && s.req.outputBelowMin {
		return &failure{kind: failOutputBelowMin, arg: s.req.outputGot}
	}
	if s.route == routeCodex {
		if !s.req.stream {
			return &failure{kind: failStreamRequired}
		}
		if s.req.store {
			return &failure{kind: failStoreRequired}
		}
		if s.req.codexRefused != "" {
			return &failure{kind: failUnsupportedParam, arg: s.req.codexRefused}
		}
	}
	s.p = s.acc.plan(&s.req)
	return s.p.reject
}

// writeHeaders sets the headers every successful answer carries.
func (s *stream) writeHeaders(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	if s.route == routeMessages {
		s.head = s.appendRequestID(s.head[:0])
		s.buf = setAnthropicHeaders(h, s.head, time.Now(), time.Time{}, s.buf[:0])
		return
	}
	b := append(s.buf[:0], "req_"...)
	b = append(b, s.id[:]...)
	h.SetBytesV("X-Request-Id", b)
	if s.route == routeCodex {
		s.buf = s.writeCodexHeaders(h, b[:0])
		return
	}
	s.buf = b
	for _, hd := range openAIRateHeaders {
		h.Set(hd.name, hd.value)
	}
}

// serveJSON answers a non-streaming request after the plan's delay.
func (s *stream) serveJSON(ctx *fasthttp.RequestCtx) {
	delivered := false
	defer func() { s.finish(delivered) }()
	if !s.sleep(s.p.nonStreamDelay()) {
		ctx.Response.Header.Reset()
		writeFailure(ctx, &failure{kind: failShutdown}, s.route)
		return
	}
	s.buf = s.appendJSONAnswer(s.buf[:0])
	ctx.SetContentType("application/json")
	ctx.SetBody(s.buf)
	delivered = true
}

// appendJSONAnswer appends the non-streaming answer of the route: a
// chat.completion, a completed response object or a Messages message.
func (s *stream) appendJSONAnswer(dst []byte) []byte {
	switch s.route {
	case routeChat:
		return s.appendChatCompletion(dst)
	case routeMessages:
		return s.appendMessage(dst)
	}
	return s.appendResponse(dst, true)
}

// writeFailure answers with the error body of fl in rt's protocol.
func writeFailure(ctx *fasthttp.RequestCtx, fl *failure, rt route) {
	var reqID []byte
	if rt.anthropicProtocol() {
		// Anthropic names every answer, errors included: request-id and the
		// body's request_id. The connection and its request number make it
		// unique within the fleet.
		reqID = append(make([]byte, 0, 36), "req_"...)
		reqID = appendHex64(reqID, ctx.ConnID())
		reqID = appendHex64(reqID, ctx.ConnRequestNum())
		ctx.Response.Header.SetBytesV("Request-Id", reqID)
	}
	body, status := appendFailure(nil, fl, rt, reqID)
	for _, h := range fl.headers {
		ctx.Response.Header.Set(h.name, h.value)
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}
