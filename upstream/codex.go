package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// DefaultCodexBaseURL is the base URL of provider codex accounts that set none.
const DefaultCodexBaseURL = "https://chatgpt.com/backend-api/codex"

// CodexClientVersion is the Codex CLI version Troupe presents itself as, in
// the "version" header and DefaultCodexUserAgent (the newest captured client,
// see the fixtures' clients/codex-cli).
const CodexClientVersion = "0.169.0"

// CodexOriginator is the "originator" header sent to the Codex backend: the
// interactive CLI's value (codex-rs/login/src/auth/default_client.rs).
const CodexOriginator = "codex_cli_rs"

// DefaultCodexUserAgent is the User-Agent sent to the Codex backend unless
// Options.UserAgent replaces it, in Codex's own format
// "<originator>/<version> (<os> <os version>; <arch>) <terminal>".
const DefaultCodexUserAgent = CodexOriginator + "/" + CodexClientVersion + " (Ubuntu 24.04; x86_64) xterm-256color"

// maxAssembledEvent bounds one SSE event while a non-stream answer is
// assembled from a Codex stream: 64 MiB (the final response.completed
// repeats the whole output).
const maxAssembledEvent = 64 << 20

// codexPassHeaders are the client headers (canonical form) a codex upstream
// receives when the client sent them: Codex CLI's session and turn headers,
// current and legacy (codex-rs/codex-api/src/requests/headers.rs,
// codex-rs/core/src/client.rs). The backend derives prompt-cache affinity
// from session-id and sticky routing from x-codex-turn-state.
var codexPassHeaders = canonical(
	"session-id", "session_id", "thread-id", "conversation_id",
	"x-client-request-id", "x-codex-turn-metadata", "x-codex-window-id",
	"x-codex-beta-features", "x-codex-turn-state", "x-openai-subagent",
)

var (
	hvOriginator = []string{CodexOriginator}
	hvVersion    = []string{CodexClientVersion}
)

func canonical(keys ...string) []string {
	for i, k := range keys {
		keys[i] = textproto.CanonicalMIMEHeaderKey(k)
	}
	return keys
}

// codex is the transport of provider codex: ChatGPT OAuth accounts on the
// Codex backend, which speaks the Responses protocol over SSE only, with
// "stream": true and "store": false required (anything else is a 400 with a
// {"detail": …} body).
//
// Protocol: codex-rs/core/src/client.rs and codex-rs/codex-api in
// https://github.com/openai/codex; headers as captured from Codex CLI.
type codex struct {
	base
	url       *url.URL
	auth      []string // "Bearer <access token>"
	accountID []string // ChatGPT-Account-ID; nil when unknown
	userAgent []string
	// identity, when set, replaces the client's session ids and
	// prompt_cache_key with the account's own (codex_identity.go).
	identity     *Identity
	identityKey  string // the account's ID, the HMAC input that makes ids per account
	installation string // identity.Installation(identityKey), computed once
	// ws dials upstream WebSockets with the account's TLS profile and
	// proxy; nil uses the shared dialer.
	ws *websocket.Dialer
}

func newCodex(a storage.Account, b base, opts Options) (*codex, error) {
	ua := opts.UserAgent
	u, err := parseBaseURL(a, DefaultCodexBaseURL)
	if err != nil {
		return nil, err
	}
	if a.Credentials.AccessToken == "" {
		return nil, fmt.Errorf("upstream: account %q (codex): %w: no access token", a.Name, ErrMissingCredentials)
	}
	if ua == "" {
		ua = DefaultCodexUserAgent
	}
	t := &codex{
		base:      b,
		url:       endpointURL(u, "responses"),
		auth:      []string{"Bearer " + a.Credentials.AccessToken},
		userAgent: []string{ua},
	}
	if id := chatGPTAccountID(a.Credentials); id != "" {
		t.accountID = []string{id}
	}
	if opts.Identity != nil {
		t.identity, t.identityKey = opts.Identity, a.ID
		if t.identityKey == "" {
			t.identityKey = a.Name
		}
		t.installation = opts.Identity.Installation(t.identityKey)
	}
	if opts.Clients != nil && opts.Client == nil {
		proxy := a.Credentials.Proxy
		if proxy == "" {
			proxy = opts.Proxy
		}
		rt, err := opts.Clients.RoundTripper(opts.TLSProfile, proxy)
		if err != nil {
			return nil, fmt.Errorf("upstream: account %q (codex): %w", a.Name, err)
		}
		t.base.rt = rt
		if t.ws, err = opts.Clients.WebSocketDialer(opts.TLSProfile, proxy); err != nil {
			return nil, fmt.Errorf("upstream: account %q (codex): %w", a.Name, err)
		}
	}
	return t, nil
}

// Do sends req to {base}/responses with the account's access token and
// ChatGPT-Account-ID, Codex's identity headers (originator, User-Agent,
// version) and the client's session headers (codexPassHeaders). The body
// carries only the members the Codex backend accepts, with "stream": true
// and "store": false (requestBody, codexbody.go: one pass, no copy when
// nothing changes; req.Body itself is never modified).
//
// When req.Stream, a 2xx answer is the upstream SSE stream as is. Otherwise
// Do reads the stream and answers like the Responses API without stream:
// status 200 and the "response" object of the terminal response.completed or
// response.incomplete event as a JSON body; for response.failed (or an
// "error" event the stream ended on) a non-2xx OpenAI error body
// {"error":{"message","type","param","code"}} whose status follows the code
// (429 for rate and usage limits, 400 for context length and invalid
// requests, 500 otherwise). A stream that ends without a terminal event
// fails with KindProtocol wrapping ErrTruncated, or ErrEmptyStream when it
// had no event at all. Non-2xx upstream answers are returned as they are,
// stream or not.
func (t *codex) Do(ctx context.Context, req *Request) (*Response, error) {
	if req.Endpoint != translate.Responses {
		return nil, unsupported(storage.ProviderCodex, req.Endpoint)
	}
	body, ids, err := t.requestBody(req.Body, req.Header, false)
	if err != nil {
		return nil, &Error{Kind: KindRequest, Err: err}
	}
	var hs headerSetter = t
	if t.identity != nil {
		hs = &codexCall{t: t, ids: ids}
	}
	resp, err := t.send(ctx, t.url, body, true, hs, req)
	if err != nil {
		return nil, err
	}
	if err := checkShape(resp, true); err != nil {
		return nil, err
	}
	if req.Stream || resp.StatusCode < 200 || resp.StatusCode > 299 {
		return response(resp), nil
	}
	return assembleResponse(ctx, resp)
}

func (t *codex) setHeader(h http.Header, req *Request) {
	h["Authorization"] = t.auth
	if t.accountID != nil {
		h["Chatgpt-Account-Id"] = t.accountID
	}
	h["Originator"] = hvOriginator
	h["User-Agent"] = t.userAgent
	h["Version"] = hvVersion
	h["Accept"] = hvSSE
	h["Content-Type"] = hvJSON
	copyHeaders(h, req.Header, codexPassHeaders)
}

// codexCall sets one request's headers: the account's, then its derived
// session identity over the client's session headers.
type codexCall struct {
	t   *codex
	ids codexIDs
}

func (c *codexCall) setHeader(h http.Header, req *Request) {
	c.t.setHeader(h, req)
	setIdentityHeaders(h, req.Header, c.ids)
}

// chatGPTAccountID returns the ChatGPT-Account-ID for c: AccountID, or else
// the https://api.openai.com/auth.chatgpt_account_id claim of the id_token
// or the access token, as Codex does (codex-rs/login/src/token_data.rs).
func chatGPTAccountID(c storage.Credentials) string {
	if c.AccountID != "" {
		return c.AccountID
	}
	for _, tok := range []string{c.IDToken, c.AccessToken} {
		if id := jwtAccountID(tok); id != "" {
			return id
		}
	}
	return ""
}

// jwtAccountID reads the ChatGPT account id claim from a JWT's payload
// without verifying it (the backend does that).
func jwtAccountID(tok string) string {
	c, _ := ParseTokenClaims(tok)
	return c.AccountID
}

// assembleResponse reads a Codex SSE stream to its terminal event and
// returns the non-stream answer; see codex.Do. It closes resp.Body.
func assembleResponse(ctx context.Context, resp *http.Response) (*Response, error) {
	defer resp.Body.Close()
	sc := translate.NewScanner(resp.Body, maxAssembledEvent)
	events := 0
	var errEvent []byte // data of the last "error" event
	for {
		ev, err := sc.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if errors.Is(err, translate.ErrEventTooLarge) {
				return nil, &Error{Kind: KindProtocol, Err: err}
			}
			return nil, classifyErr(ctx, err, false)
		}
		events++
		switch eventType(ev) {
		case "response.completed", "response.incomplete":
			r := gjson.GetBytes(ev.Data, "response")
			if !r.IsObject() {
				return nil, &Error{Kind: KindProtocol, Err: errors.New("codex: terminal event without a response object")}
			}
			return jsonResponse(resp.Header, http.StatusOK, []byte(r.Raw)), nil
		case "response.failed":
			return failedResponse(resp.Header, gjson.GetBytes(ev.Data, "response.error"), errEvent), nil
		case "error":
			errEvent = append(errEvent[:0], ev.Data...)
		}
	}
	if errEvent != nil {
		return failedResponse(resp.Header, gjson.Result{}, errEvent), nil
	}
	if events == 0 {
		return nil, &Error{Kind: KindProtocol, Err: ErrEmptyStream}
	}
	return nil, &Error{Kind: KindProtocol, Err: ErrTruncated}
}

// eventType returns the Responses event type: the SSE event name, or the
// data's "type" when the event is unnamed.
func eventType(ev translate.Event) string {
	if len(ev.Name) > 0 {
		switch string(ev.Name) {
		case "response.completed":
			return "response.completed"
		case "response.incomplete":
			return "response.incomplete"
		case "response.failed":
			return "response.failed"
		case "error":
			return "error"
		}
		return ""
	}
	return gjson.GetBytes(ev.Data, "type").String()
}

// jsonResponse builds a JSON Response on top of the upstream's headers (kept
// for their rate-limit information).
func jsonResponse(h http.Header, status int, body []byte) *Response {
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Del("Content-Encoding")
	return &Response{Status: status, Header: h, Body: io.NopCloser(bytes.NewReader(body))}
}

// apiError is the OpenAI error envelope
// (https://platform.openai.com/docs/guides/error-codes): all four keys are
// always present, param and code may be null.
type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// failedResponse turns a failed stream into the OpenAI error a non-stream
// call would have returned. respErr is response.error of response.failed
// ({code, message}); errEvent is the data of a preceding "error" event, whose
// fields are nested in "error" on the wire and top-level in the OpenAPI
// ResponseErrorEvent — both are read.
func failedResponse(h http.Header, respErr gjson.Result, errEvent []byte) *Response {
	var e gjson.Result
	if errEvent != nil {
		e = gjson.ParseBytes(errEvent)
		if nested := e.Get("error"); nested.IsObject() {
			e = nested
		}
	}
	code := firstString(respErr.Get("code"), e.Get("code"))
	msg := firstString(respErr.Get("message"), e.Get("message"))
	typ := firstString(respErr.Get("type"), e.Get("type"))
	if typ == "error" { // the event's own type, not an error type
		typ = ""
	}
	status := failureStatus(code, typ)
	var out apiError
	out.Error.Message = msg
	if msg == "" {
		out.Error.Message = "The upstream response failed."
	}
	out.Error.Type = typ
	if typ == "" {
		switch {
		case status == http.StatusBadRequest:
			out.Error.Type = "invalid_request_error"
		case status == http.StatusTooManyRequests && code != "":
			out.Error.Type = code
		case status == http.StatusTooManyRequests:
			out.Error.Type = "rate_limit_exceeded"
		default:
			out.Error.Type = "server_error"
		}
	}
	if code != "" {
		out.Error.Code = &code
	}
	if p := e.Get("param"); p.Type == gjson.String {
		param := p.Str
		out.Error.Param = &param
	}
	body, _ := json.Marshal(&out) // cannot fail: strings and pointers only
	return jsonResponse(h, status, body)
}

// failureStatus maps a Responses error code (or, failing that, type) to the
// HTTP status the non-stream API answers with.
func failureStatus(code, typ string) int {
	for _, s := range []string{code, typ} {
		switch s {
		case "rate_limit_exceeded", "insufficient_quota", "usage_limit_reached", "usage_not_included",
			"rate_limit_error", "tokens", "requests":
			return http.StatusTooManyRequests
		case "context_length_exceeded", "invalid_prompt", "invalid_request_error", "invalid_value",
			"invalid_image", "unsupported_parameter", "previous_response_not_found", "invalid_encrypted_content":
			return http.StatusBadRequest
		case "server_is_overloaded", "slow_down":
			return http.StatusServiceUnavailable
		case "server_error", "api_error":
			return http.StatusInternalServerError
		}
	}
	return http.StatusInternalServerError
}

// firstString returns the first of rs that is a non-empty JSON string.
func firstString(rs ...gjson.Result) string {
	for _, r := range rs {
		if r.Type == gjson.String && r.Str != "" {
			return r.Str
		}
	}
	return ""
}
