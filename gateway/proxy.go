package gateway

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/billing"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

// Bounds on upstream bodies the gateway reads whole.
const (
	maxErrorBody    = 1 << 20  // an upstream error body kept for classification and the client
	maxResponseBody = 64 << 20 // a non-stream answer
	// maxJSONDepth bounds nesting in bodies the gateway validates; deeper
	// JSON is refused before any recursive parser sees it.
	maxJSONDepth = 512
)

func (s *Server) chat(ctx *fasthttp.RequestCtx)      { s.proxy(ctx, translate.Chat) }
func (s *Server) responses(ctx *fasthttp.RequestCtx) { s.proxy(ctx, translate.Responses) }

// messages serves POST /v1/messages (Anthropic Messages,
// https://docs.claude.com/en/api/messages); "?beta=true", which the
// Anthropic SDKs and Claude Code add, changes nothing.
func (s *Server) messages(ctx *fasthttp.RequestCtx) { s.proxy(ctx, translate.Messages) }

// call is one client request on its way through the gateway.
type call struct {
	id       string
	endpoint translate.Protocol
	stream   bool
	// key is the client's key: the key cache's entry, shared and never
	// written (authKey); noKey until the request is authenticated.
	key      *storage.APIKey
	model    string // as the client named it
	target   string // after alias resolution
	body     []byte
	header   http.Header
	start    time.Time
	attempts int

	// Set by the policy's route() (gateway/route.go).
	group       string           // routing group: the key's, or route()'s for default-group keys
	provider    storage.Provider // only accounts of this provider ("" = any)
	tags        []string         // only accounts with every tag
	sticky      string           // stickiness key
	clientUsage bool             // a chat stream asked for stream_options.include_usage itself
	prevResp    string           // Responses previous_response_id
	cacheKey    string           // the body's prompt_cache_key ("" when none)
	prefer      string           // the account that served prevResp, from the affinity cache
	maxAttempts int              // attempts for this request (0 = the gateway's setting)
	// native limits candidates to providers speaking the client's protocol
	// themselves: a previous_response_id names state only a Responses
	// upstream holds.
	native bool
	// interleaved: a Messages request's anthropic-beta header asks for
	// interleaved thinking, under which thinking.budget_tokens may pass
	// max_tokens (checkMessagesParams). Set before parseBody.
	interleaved bool
	// translated caches the request body per upstream protocol (indexed by
	// translate.Protocol): translated, or patched in the client's protocol
	// (gateway/patch.go), so failovers make it once; usageBody is the
	// client's protocol's body that asks for include_usage.
	translated [4][]byte
	usageBody  []byte
	// stateless caches the bodies above without account-bound state
	// (gateway/state.go), indexed by protocol; the last slot is usageBody's.
	stateless [5][]byte
	// owner is the account known to hold the account-bound state the
	// client's body may carry ("" when unknown): previous_response_id's,
	// else the session's last account (gateway/state.go).
	owner string
	// stripState: an upstream refused the body's account-bound state, so
	// every attempt from then on goes without it.
	stripState bool
	compact    bool   // POST /v1/responses/compact (gateway/compact.go)
	rawQuery   string // the client's query string (Messages clients send beta=true)
	hook       func(*call) *APIError
	// Where the body's model value (quotes included) is, for patchBody;
	// modelAt is -1 when unknown. streamOptions: the body has the member.
	modelAt, modelLen int
	streamOptions     bool

	errors []storage.ErrorEvent // failed attempts, recorded when the failover loop ends

	maxOutput int64           // the body's output cap in tokens (outputCaps.check); 0 when none
	choices   int64           // the choices the body asks for, each up to maxOutput (Chat's n; outputCaps.choices): at least 1
	ticket    *billing.Ticket // a user's admitted request, settled by logRequest (billing.go); nil: none

	// The attempt that served the client (Server.served), for its request-log record.
	servedBy string          // account id ("" while none served)
	usage    translate.Usage // tokens served and billed
	// estimated: usage is the gateway's estimate (a stream cut before the
	// upstream reported it; gateway/estimate.go).
	estimated bool
	// authed: the client was authenticated, so the request is logged
	// (Server.logRequest). Beside estimated, as ws is beside trace and
	// canary below, and stream beside endpoint: a bool between two words
	// takes a word of its own, and call with its 8-byte allocation header
	// fills its 1,408-byte size class to the byte (issue 21).
	authed bool
	// broke: why the serving attempt's committed stream ended without its
	// protocol's terminal event (the upstream read's error, or
	// errNoTerminal), for the failed request's log line; nil otherwise.
	broke error
	// brokeClass: the failure class of the serving attempt when its
	// committed stream ended in a failure (status 502: the upstream cut it,
	// sent an error event, or it could not be translated), for the request
	// log's error_class; ClassNone otherwise.
	brokeClass upstream.Class
	latency    time.Duration // serving attempt: start to last byte
	ttft       time.Duration // serving attempt: time to first content

	// Affinity and the Responses WebSocket (gateway/affinity.go, gateway/wssession.go).
	only       string // the only account that may serve it: the owner of prevResp's state
	session    string // the client's session key (session headers, prompt_cache_key)
	sessionKey string // its affinity entry's cache key (sessionEntry)
	wsCont     []byte // the client's own continuation, sent on an upstream connection holding prevResp
	wsUp       []byte // wsCont with the target model (continuation), made once

	// decision is why the last attempt's account was chosen
	// (gateway/decision.go), nil before an account was: the Decision of that
	// attempt's lease, which nothing changes once granted. A pointer and not
	// a copy, since its 224 bytes put call in the 1,792-byte size class
	// instead of 1,408 (issue 21: the bytes a request allocates set how
	// often the collector runs).
	decision *actors.Decision
	trace    bool // an admin key asked for the decision in the answer
	canary   bool // the canary policy routes this request (route.go, inCanary)
	ws       bool // the client is on the Responses WebSocket

	tr *callTrace // the request's spans (gateway/tracing.go); nil when tracing is off

	// rctx is the request's context and actx its first attempt's, when it
	// came over HTTP (requestContext, Server.attempt): embedded, they cost
	// no allocation of their own.
	rctx reqCtx
	actx attemptCtx
}

// proxy runs one client request: parse what routing needs, acquire a lease,
// call upstream, fail over before anything reached the client, then answer.
func (s *Server) proxy(ctx *fasthttp.RequestCtx, ep translate.Protocol) { s.proxyWith(ctx, ep, nil) }

// proxyWith is proxy with a hook that adjusts (or refuses) the parsed call
// before limits and routing apply.
func (s *Server) proxyWith(ctx *fasthttp.RequestCtx, ep translate.Protocol, hook func(*call) *APIError) {
	c := &call{id: newRequestID(), endpoint: ep, start: s.now(), hook: hook, key: &noKey}
	setRequestID(ctx, c.id, ep == translate.Messages)
	if s.tracing.Tracer != nil {
		s.traceHTTP(ctx, c)
	}
	s.metrics.inflight.Inc()
	s.serving.Add(1)
	status := s.serve(ctx, c)
	if status != 0 { // 0: a stream is running; it counts itself when it ends
		s.finish(c, status)
	}
}

// noKey is the key of a call not (yet) authenticated: none, all fields
// zero. Never written.
var noKey storage.APIKey

// statusClientClosed is the status a request is counted and logged with when
// the client closed the connection before its answer was complete (nginx's
// 499; never sent, there is nobody to send it to).
const statusClientClosed = 499

// finish ends client request c with the status it was answered with: counts
// it and queues its request-log record. It runs once per request.
func (s *Server) finish(c *call, status int) {
	s.logRequest(c, status)
	s.logEnd(c, status)
	s.countPolicy(c, status)
	s.metrics.inflight.Dec()
	s.serving.Add(-1)
	s.metrics.request(c.endpoint, status)
	end := s.now()
	s.metrics.requestLatency(c.endpoint, end.Sub(c.start))
	if c.tr != nil {
		s.traceFinish(c, status, end)
	}
}

// serve returns the status it answered with, or 0 when it handed the answer to a stream.
func (s *Server) serve(ctx *fasthttp.RequestCtx, c *call) int {
	key, aerr := s.authKey(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return aerr.Status
	}
	c.key, c.authed = key, true
	c.trace = wantsTrace(ctx, c)
	if aerr := s.parse(ctx, c); aerr != nil {
		writeError(ctx, aerr)
		return aerr.Status
	}
	if c.tr != nil {
		s.traceParsed(c)
	}
	if c.hook != nil {
		if aerr := c.hook(c); aerr != nil {
			writeError(ctx, aerr)
			return aerr.Status
		}
	}
	c.group = c.key.Group
	if c.session = sessionKey(ctx, nil); c.session == "" {
		c.session = c.cacheKey
	}
	if aerr := s.admitBilling(ctx, c); aerr != nil {
		writeError(ctx, aerr)
		return aerr.Status
	}
	entry, aerr := s.admit(ctx, c.key, pinKey(c)) // limits and affinity: one cache round trip
	if aerr == nil {
		aerr = s.pin(c, entry)
	}
	if aerr != nil {
		writeError(ctx, aerr)
		return aerr.Status
	}
	c.canary = s.inCanary(c)
	if aerr := s.route(ctx, c); aerr != nil {
		writeError(ctx, aerr)
		return aerr.Status
	}

	rctx := s.requestContext(c)
	if c.stream {
		return s.serveStream(ctx, c, rctx)
	}
	defer rctx.cancel()
	return s.answer(ctx, c, s.runWatched(rctx, ctx.Conn(), c, rctx))
}

// answer writes the outcome of the failover loop: the answer, or why there is none.
func (s *Server) answer(ctx *fasthttp.RequestCtx, c *call, o outcome) int {
	switch {
	case o.aerr != nil:
		writeError(ctx, o.aerr)
		return o.aerr.Status
	case o.fail != nil:
		return s.answerFailure(ctx, c, o.fail)
	}
	s.traceHeader(ctx, c)
	s.commitBody(ctx, c, o.res) // copies the body into the response
	o.res.free()
	return o.res.status
}

// parse reads what routing needs from the body without decoding it whole.
func (s *Server) parse(ctx *fasthttp.RequestCtx, c *call) *APIError {
	body, aerr := s.requestBody(ctx)
	if aerr != nil {
		return aerr
	}
	if c.endpoint == translate.Messages {
		c.interleaved = bytes.Contains(ctx.Request.Header.Peek("anthropic-beta"), []byte("interleaved-thinking"))
	}
	if aerr := s.parseBody(c, body); aerr != nil {
		return aerr
	}
	c.header = passHeaders(ctx)
	if q := ctx.URI().QueryString(); len(q) > 0 {
		c.rawQuery = string(q)
	}
	return nil
}

// requestBody returns the request body decompressed per its Content-Encoding
// (gzip, deflate, br, zstd; none or identity: as sent): 413 past
// MaxBodySize decompressed, 415 for another encoding, 400 when it does not
// decompress. Codex sends zstd bodies to the ChatGPT backend; any client may
// gzip. The limit caps the decompressed size, so a small bomb cannot blow up.
func (s *Server) requestBody(ctx *fasthttp.RequestCtx) ([]byte, *APIError) {
	body := ctx.PostBody()
	if ce := ctx.Request.Header.ContentEncoding(); len(ce) > 0 && !bytes.EqualFold(ce, []byte("identity")) {
		b, err := ctx.Request.BodyUncompressedWithLimit(s.cfg.MaxBodySize)
		switch {
		case errors.Is(err, fasthttp.ErrBodyTooLarge):
			return nil, errTooLarge(s.cfg.MaxBodySize)
		case errors.Is(err, fasthttp.ErrContentEncodingUnsupported):
			return nil, &APIError{Status: 415, Type: "invalid_request_error", Code: "unsupported_content_encoding",
				Message: "Unsupported Content-Encoding: use gzip, deflate, br or zstd, or none."}
		case err != nil:
			return nil, &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid_body_encoding",
				Message: "The request body could not be decompressed."}
		}
		body = b
	}
	return body, nil
}

// parseBody reads what routing needs from a request body (decompressed) in
// one pass over its top-level members, without decoding it, and resolves
// the model alias. The body is not copied: an alias is written into the
// body each upstream gets (upstreamBody).
func (s *Server) parseBody(c *call, body []byte) *APIError {
	// One pass validates body and looks for a repeated key (refused
	// below, whichever key sends the body).
	valid, mayRepeat := translate.ValidWithinKeys(body, maxJSONDepth)
	if !valid {
		return errBadJSON()
	}
	root := gjson.Parse(b2s(body)) // strings kept past the request are cloned
	if !root.IsObject() {
		return errBadJSON()
	}
	// gjson reads the first of duplicate keys, upstream decoders the last:
	// a body that repeats a key the gateway routes on would be routed (and
	// allowed, and billed) as one thing and served as another.
	var models, streams, msgCount int
	var estimated [len(estimatedKeys)]int // how often each of estimatedKeys appears
	var m, st, msgs, prev, cacheKey, input gjson.Result
	var caps outputCaps
	var mp messagesParams // tools and tool_choice: checkToolChoice; the rest Messages only (checkMessagesParams)
	root.ForEach(func(k, v gjson.Result) bool {
		if caps.read(k.Str, v) {
			return true
		}
		switch k.Str {
		case "model":
			models++
			m = v
		case "stream":
			streams++
			st = v
		case "stream_options":
			c.clientUsage = v.Get("include_usage").Type == gjson.True
			c.streamOptions = true
		case "messages":
			msgCount++
			msgs = v
		case "previous_response_id":
			prev = v
		case "prompt_cache_key":
			cacheKey = v
		case "tool_choice":
			mp.toolChoice = v
		case "thinking":
			mp.thinking = v
		default:
			if i := slices.Index(estimatedKeys[:], k.Str); i >= 0 {
				estimated[i]++
			}
			switch k.Str {
			case "input":
				input = v
			case "tools":
				mp.tools = v
			}
		}
		return true
	})
	if models > 1 || streams > 1 || msgCount > 1 {
		param := "model"
		switch {
		case streams > 1:
			param = "stream"
		case msgCount > 1:
			// The estimates (count_tokens, message_start) read the first,
			// an upstream the last: a repeated conversation is refused.
			param = "messages"
		}
		return errBadParam(param, "Duplicate key '"+param+"' in the request body.")
	}
	for i, n := range estimated {
		if n > 1 {
			return errBadParam(estimatedKeys[i], "Duplicate key '"+estimatedKeys[i]+"' in the request body.")
		}
	}
	// A key repeated deeper (a message's content) is read first by the
	// estimates and last by an upstream too: refused for every key, named
	// by its path (duplicateKeyPath runs only when the scan saw a repeat).
	if mayRepeat {
		if p, dup := duplicateKeyPath(body); dup {
			return errBadParam(p, "Duplicate key '"+p+"' in the request body.")
		}
	}
	switch {
	case !m.Exists() || m.Type == gjson.Null || (m.Type == gjson.String && m.Str == ""):
		return errMissingModel()
	case m.Type != gjson.String:
		return errBadParam("model", "Invalid type for 'model': expected a string.")
	}
	c.model = strings.Clone(m.Str)
	c.modelAt, c.modelLen = -1, 0
	if at := len(body) - len(root.Raw) + m.Index; m.Index > 0 && at+len(m.Raw) <= len(body) && b2s(body[at:at+len(m.Raw)]) == m.Raw {
		c.modelAt, c.modelLen = at, len(m.Raw)
	}
	if c.endpoint == translate.Chat || c.endpoint == translate.Messages {
		if aerr := checkMessages(c.endpoint, msgs); aerr != nil {
			return aerr
		}
	}
	maxOutput, aerr := caps.check(c.endpoint)
	if aerr != nil {
		return aerr
	}
	c.maxOutput = maxOutput
	if c.endpoint == translate.Messages {
		if aerr := checkMessagesParams(&mp, maxOutput, c.interleaved); aerr != nil {
			return aerr
		}
	} else if aerr := checkToolChoice(c.endpoint, &mp); aerr != nil {
		return aerr
	}
	if c.choices, aerr = caps.choices(c.endpoint); aerr != nil {
		return aerr
	}
	for _, f := range [...]struct {
		name string
		v    gjson.Result
	}{{"previous_response_id", prev}, {"prompt_cache_key", cacheKey}} {
		// Routed on (affinity, the continuation's account): anything but a
		// string or null is refused as OpenAI refuses it, not read as its
		// text.
		if f.v.Exists() && f.v.Type != gjson.Null && f.v.Type != gjson.String {
			return errBadParam(f.name, "Invalid type for '"+f.name+"': expected a string.")
		}
	}
	if c.endpoint == translate.Responses {
		// As the Responses WebSocket refuses it (wsframe.go), whichever
		// account would serve it: an openai one got it as sent, a
		// translation refused it in other words.
		if input.Exists() && input.Type != gjson.Null && input.Type != gjson.String && !input.IsArray() {
			return errBadParam("input", "Invalid type for 'input': expected a string or an array of input items.")
		}
		c.prevResp = strings.Clone(prev.Str)
	}
	c.cacheKey = strings.Clone(cacheKey.Str)
	if st.Exists() && st.Type != gjson.Null {
		if st.Type != gjson.True && st.Type != gjson.False {
			return errBadParam("stream", "Invalid type for 'stream': expected a boolean.")
		}
		c.stream = st.Type == gjson.True
	}
	if !modelAllowed(c.key, c.model) {
		return errModelNotAllowed(c.model)
	}
	c.target = c.model
	if t, ok := s.cfg.Aliases[c.model]; ok {
		c.target = t
	}
	c.body = body
	c.native = needsNative(c)
	return nil
}

// estimatedKeys are the top-level keys besides messages that the input
// estimate reads (estimateRequestTokens, estimateInputTokens): the balance
// hold, count_tokens and a cut stream's bill. The estimate reads the first
// of a repeated key and an upstream's decoder the last, so a body that
// repeats one is refused (400, naming it), or a user could be held on "hi"
// and served, and charged, a 100k-token input past its balance.
var estimatedKeys = [...]string{"input", "instructions", "system", "tools"}

// checkMessages answers 400 for a Chat Completions or Messages request
// whose messages are missing, not an array, or empty, as OpenAI and
// Anthropic do (the messages in their wording), rather than spending an
// upstream attempt, or a translation, on it. What the messages hold is the
// upstream's to judge.
func checkMessages(ep translate.Protocol, v gjson.Result) *APIError {
	chat := ep == translate.Chat
	switch {
	case !v.Exists() || v.Type == gjson.Null:
		if chat {
			return &APIError{Status: 400, Type: "invalid_request_error", Code: "missing_required_parameter", Param: "messages",
				Message: "Missing required parameter: 'messages'."}
		}
		return errBadParam("messages", "messages: Field required")
	case !v.IsArray():
		if chat {
			return errBadParam("messages", "Invalid type for 'messages': expected an array of objects.")
		}
		return errBadParam("messages", "messages: Input should be a valid list")
	case emptyArray(v.Raw):
		if chat {
			return &APIError{Status: 400, Type: "invalid_request_error", Code: "empty_array", Param: "messages",
				Message: "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead."}
		}
		return errBadParam("messages", "messages: at least one message is required")
	}
	return nil
}

// emptyArray reports whether raw, the text of a JSON array of a validated
// body, holds no element: its first byte past '[' and whitespace is ']'.
// It is what !gjson.Get(raw, "0").Exists() says of such an array, without
// parsing the first element (issue 21).
func emptyArray(raw string) bool {
	for i := 1; i < len(raw); i++ {
		switch raw[i] {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return raw[i] == ']'
	}
	return true
}

// checkMaxTokens enforces what the Messages API requires of max_tokens, a
// positive integer (https://docs.claude.com/en/api/messages), whichever
// upstream serves the request: an anthropic account refuses a request
// without it and a translated one would accept it, so the same request
// must not succeed or fail by the account it happens to get. The messages
// are Anthropic's own.
func checkMaxTokens(v gjson.Result) *APIError {
	switch {
	case !v.Exists() || v.Type == gjson.Null:
		return errBadParam("max_tokens", "max_tokens: Field required")
	case v.Type != gjson.Number || v.Num != float64(int64(v.Num)):
		return errBadParam("max_tokens", "max_tokens: Input should be a valid integer")
	case v.Num < 1:
		return errBadParam("max_tokens", "max_tokens: Input should be greater than or equal to 1")
	}
	return nil
}

// passHeaders copies the client headers an upstream may use (Codex session and
// turn headers, idempotency keys); the transport decides what it sends. Of
// a header sent twice, the first counts (as Peek returns it). One pass over
// the request's headers, where a Peek per name cost 13 scans of them and
// 13 key normalizations (docs/benchmarks.md, issue 21); the names compared
// are fasthttp's normalized form, as Peek compares them.
func passHeaders(ctx *fasthttp.RequestCtx) http.Header {
	var h http.Header
	var seen uint32 // bit i: passThrough[i] was met
	for k, v := range ctx.Request.Header.All() {
		i := passIndex(k)
		if i < 0 || seen&(1<<i) != 0 {
			continue
		}
		seen |= 1 << i
		if len(v) > 0 {
			if h == nil {
				h = make(http.Header, 4)
			}
			h.Set(passThrough[i], string(v))
		}
	}
	return h
}

// passIndex is the index of header name k in passThrough, -1 when it is none.
func passIndex(k []byte) int {
	for i, name := range passThrough {
		if len(name) == len(k) && name == string(k) {
			return i
		}
	}
	return -1
}

// passThrough is the headers passHeaders copies, in fasthttp's normalized
// form (at most 32: passHeaders keeps a bit for each).
var passThrough = [...]string{
	"Idempotency-Key", "Session-Id", "Session_id", "Thread-Id", "Conversation_id", "X-Client-Request-Id",
	"X-Codex-Turn-Metadata", "X-Codex-Window-Id", "X-Codex-Beta-Features", "X-Codex-Turn-State", "Originator",
	"Anthropic-Version", "Anthropic-Beta", // Messages clients; an anthropic upstream decides what it sends
}

// commitBody writes a non-stream answer.
func (s *Server) commitBody(ctx *fasthttp.RequestCtx, c *call, r result) {
	ctx.SetStatusCode(r.status)
	ctx.SetContentType("application/json")
	ctx.SetBody(r.body)
}

// answerFailure tells the client why no attempt succeeded, in the client's
// protocol. Only a request-class error — the client's own — passes through
// as the upstream sent it (translated into the client's error shape when
// the upstream spoke another protocol); an account's refusal (its 401, its
// quota, its ban) never reaches the client, who would take it for their own
// key's problem.
func (s *Server) answerFailure(ctx *fasthttp.RequestCtx, c *call, f *failure) int {
	if f != nil && f.answer == nil && f.verdict.Class == upstream.ClassRequest && f.status != 0 && gjson.GetBytes(f.body, "error.message").Exists() {
		body := f.body
		if f.up != 0 && f.up != c.endpoint {
			body = translateErrorBody(c, f.up, f.status, body)
		}
		resetKeepingRequestID(ctx)
		ctx.SetStatusCode(f.status)
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
		return f.status
	}
	aerr := clientError(f)
	writeError(ctx, aerr)
	return aerr.Status
}

// clientError is the gateway's own answer for a request whose attempts all
// failed (f is the last failure; nil when none could start).
func clientError(f *failure) *APIError {
	if f == nil {
		return errNoAccount(time.Second)
	}
	if f.answer != nil {
		return f.answer
	}
	switch f.verdict.Class {
	case upstream.ClassRequest:
		msg := f.msg
		if msg == "" {
			msg = gjson.GetBytes(f.body, "error.message").String()
		}
		if msg == "" {
			msg = gjson.GetBytes(f.body, "detail").String()
		}
		if msg == "" {
			msg = "The upstream refused the request (status " + strconv.Itoa(f.status) + " " + http.StatusText(f.status) + ")."
		}
		status := f.status
		if status < 400 || status > 499 {
			status = 400
		}
		return &APIError{Status: status, Type: "invalid_request_error", Message: msg}
	case upstream.ClassRate, upstream.ClassQuota:
		retry := min(max(f.verdict.RetryAfter, time.Second), time.Minute)
		return &APIError{Status: 429, Type: "requests", Code: "rate_limit_exceeded", RetryAfter: retry,
			Message: "The upstream accounts tried for this request are rate limited right now. Please retry shortly."}
	case upstream.ClassCanceled:
		return &APIError{Status: 499, Type: "invalid_request_error", Code: "client_closed_request", Message: "The request was canceled."}
	case upstream.ClassTransient:
		return &APIError{Status: 502, Type: "server_error", Code: "upstream_error", RetryAfter: time.Second,
			Message: "The upstream failed to answer this request. Please retry."}
	}
	return errNoAccount(time.Second) // auth, banned: the accounts are unusable, not the client
}

func (s *Server) acquireError(c *call, err error) *APIError {
	if errors.Is(err, errNeverServable) {
		return errModelNotFound(c.model) // refused while parked (waitCheck)
	}
	var ae *actors.AcquireError
	if errors.As(err, &ae) {
		if errors.Is(ae.Err, actors.ErrNoAccount) {
			switch {
			case c.native && s.serves(c.target):
				return errNeedsNative(c)
			case s.servedElsewhere(c.target):
				return errNoAccount(time.Second) // another instance owns its accounts
			}
			return errModelNotFound(c.model)
		}
		if c.only != "" && errors.Is(ae.Err, actors.ErrUnavailable) {
			// The owner of previous_response_id cannot take the request (it
			// does not serve the model or group asked for, or it left the
			// pool after pin): only it holds the state, so no wait helps.
			// Before, this was a 503 "retry shortly" with Retry-After 60.
			return errPreviousResponseUnavailable(c.prevResp)
		}
		if s.neverServable(c.target) {
			// Only accounts that serve any model are candidates, and none of
			// them could ever serve this one: 404, not a 503 an Anthropic
			// client retries for ever (overloaded_error).
			return errModelNotFound(c.model)
		}
		return errNoAccount(max(ae.RetryAfter, time.Second))
	}
	return errNoAccount(time.Second)
}

// newRequestID returns "req_" and 32 hex digits: 48 bits of Unix milliseconds
// then 80 random bits, so ids sort by time (like UUIDv7), which keeps the
// usage table's primary-key inserts append-mostly.
func newRequestID() string {
	var b [16]byte
	ms := uint64(time.Now().UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	_, _ = rand.Read(b[6:])
	var id [4 + 2*len(b)]byte // built whole: one allocation, the string's
	copy(id[:], "req_")
	hex.Encode(id[4:], b[:])
	return string(id[:])
}
