package upstream

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/troupe-gw/troupe/internal/sock"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// DefaultHeaderTimeout is how long a streaming call waits for the upstream's
// response head when Options.HeaderTimeout is 0: 60 s. Streaming upstreams
// send their head before generating, so a longer wait means a stuck upstream.
const DefaultHeaderTimeout = 60 * time.Second

// DefaultUserAgent is the User-Agent sent to openai and openai_compat
// upstreams unless Options.UserAgent replaces it.
const DefaultUserAgent = "troupe"

// Options configures the Transport New returns for one account.
type Options struct {
	// Client sends the requests. nil means SharedClient(): one connection pool
	// (and HTTP/2 connections) shared by every account of the process. A
	// client given here should not follow redirects (see NewHTTPClient).
	Client *http.Client
	// HeaderTimeout bounds the wait from sending a request to receiving the
	// upstream's response head (status line and headers); the body may then
	// stream for as long as ctx allows. > 0 applies to every call. 0 means
	// DefaultHeaderTimeout for calls that stream upstream (Request.Stream,
	// and every codex call) and no limit for non-streaming calls, whose head
	// only arrives once the whole answer is generated. < 0 means no limit.
	// A call that hits it fails with an *Error of KindTimeout wrapping
	// ErrHeaderTimeout.
	HeaderTimeout time.Duration
	// UserAgent replaces the provider's default User-Agent (DefaultUserAgent
	// for openai and openai_compat, DefaultCodexUserAgent for codex); "" keeps it.
	UserAgent string

	// Codex accounts only. Identity, when set, gives each account its own
	// installation id, session ids and prompt_cache_key (see Identity).
	Identity *Identity
	// Clients, when set and Client is nil, supplies the account's round
	// tripper: TLSProfile's ClientHello ("" is DefaultTLSProfile) through
	// the account's Credentials.Proxy, else Proxy ("" for none).
	Clients    *Clients
	TLSProfile string
	Proxy      string

	// ClientMode chooses between net/http and fasthttp for an account
	// without an Options.Client of its own (openai, openai_compat and
	// anthropic; codex always uses net/http). The zero value is ClientAuto.
	ClientMode ClientMode
}

// New returns the Transport for account a, by a.Provider:
//
//   - openai: POST {BaseURL}/chat/completions or {BaseURL}/responses
//     (BaseURL defaults to DefaultOpenAIBaseURL); needs Credentials.APIKey.
//   - openai_compat: POST {BaseURL}/chat/completions only; needs BaseURL and
//     Credentials.APIKey.
//   - codex: POST {BaseURL}/responses (BaseURL defaults to
//     DefaultCodexBaseURL); needs Credentials.AccessToken, and sends
//     ChatGPT-Account-ID from Credentials.AccountID or, when that is empty,
//     from the chatgpt_account_id claim of the id_token or access token.
//   - anthropic: POST {BaseURL}/v1/messages (BaseURL defaults to
//     DefaultAnthropicBaseURL and, like ANTHROPIC_BASE_URL, has no /v1; a
//     BaseURL that ends in /v1 is not doubled); needs Credentials.APIKey.
//     Its Transport is also a TokenCounter: POST
//     {BaseURL}/v1/messages/count_tokens.
//
// A trailing slash on BaseURL is tolerated and a query string on it is kept.
// Credentials are captured now: after an OAuth refresh, build a new Transport
// (New is cheap; the connection pool lives in the http.Client, not here).
//
// What Do sends. openai and openai_compat: "Authorization: Bearer <APIKey>",
// "Content-Type: application/json", "Accept: text/event-stream" when
// Request.Stream (else application/json), the User-Agent, the body unchanged,
// and of the client's headers only Idempotency-Key, X-Client-Request-Id and
// X-Request-Id (account-level headers such as OpenAI-Organization are the
// account's business; OpenAI-Beta and X-Stainless-* are dropped). Protocols:
// https://platform.openai.com/docs/api-reference/chat/create and
// https://platform.openai.com/docs/api-reference/responses/create.
//
// codex, as the Codex CLI does (https://github.com/openai/codex,
// codex-rs/core/src/client.rs): "Authorization: Bearer <AccessToken>",
// ChatGPT-Account-ID, "originator: codex_cli_rs", a Codex User-Agent,
// "version", "Accept: text/event-stream", "Content-Type: application/json",
// and the client's session headers when present (session-id, session_id,
// thread-id, conversation_id, x-client-request-id, x-codex-turn-metadata,
// x-codex-window-id, x-codex-beta-features, x-codex-turn-state,
// x-openai-subagent). The backend requires "stream": true and "store":
// false: the body gets them (via sjson, only when they differ, so every other
// byte is unchanged; Request.Body itself is never modified). When
// Request.Stream is false, Do reads the upstream stream and answers as the
// Responses API does without stream: status 200 with the "response" object of
// the terminal response.completed or response.incomplete event as the JSON
// body; for response.failed (or an "error" event the stream ended on) a
// non-2xx OpenAI error body {"error":{"message","type","param","code"}} whose
// status follows the code (429 for rate and usage limits, 400 for context
// length and invalid requests, 503 for overload, else 500). A stream that ends
// without a terminal event fails with KindProtocol wrapping ErrTruncated, or
// ErrEmptyStream when it had no event at all. The upstream's response headers
// (x-codex-* rate limits) are kept on the assembled answer.
//
// anthropic (https://docs.anthropic.com/en/api/messages,
// https://docs.anthropic.com/en/api/messages-count-tokens): "x-api-key:
// <APIKey>", "anthropic-version" (the client's single non-empty value, else
// DefaultAnthropicVersion), the client's "anthropic-beta" when present,
// "Content-Type: application/json", "Accept: text/event-stream" when
// Request.Stream (else application/json), the User-Agent, the body
// unchanged, and the query beta=true when the client's Request.RawQuery has
// it (Claude Code calls /v1/messages?beta=true). Other client headers
// (X-Stainless-*, X-App, X-Claude-Code-Session-Id, the client's own
// x-api-key or Authorization) are dropped. Upstream errors are Anthropic's
// {"type":"error","error":{"type","message"},"request_id"} bodies with
// their status, returned as Responses like any other.
//
// Client headers are looked up by canonical key, as http.Header.Set and Add
// store them. Non-2xx upstream answers are returned as Responses with the
// upstream's status, headers and body, stream or not. A 2xx answer whose
// Content-Type contradicts the request (JSON for a stream, SSE for JSON) fails
// with KindProtocol wrapping ErrWrongContentType. An endpoint the provider
// does not speak (see Supports) fails with KindRequest wrapping
// ErrUnsupportedEndpoint before anything is sent. Other errors are *Error
// values classified by phase (KindDial, KindTLS, KindTimeout, KindCanceled,
// KindConn); reads of a returned Body fail with *Error too.
//
// Errors from New (the text names the account, never its secrets):
// ErrUnknownProvider for a provider without a transport,
// ErrMissingCredentials, ErrInvalidBaseURL; test them with errors.Is.
func New(a storage.Account, opts Options) (Transport, error) {
	b := base{client: opts.Client, headerTimeout: opts.HeaderTimeout, mode: opts.ClientMode}
	if b.client == nil {
		// The shared client has no jar, no timeout and no redirects, so its
		// transport is called directly, without http.Client's per-request
		// header copies.
		b.rt = SharedClient().Transport
	}
	switch a.Provider {
	case storage.ProviderOpenAI, storage.ProviderOpenAICompat:
		t, err := newOpenAI(a, b, opts.UserAgent)
		if err != nil {
			return nil, err // not t: a nil *openAI would make a non-nil Transport
		}
		return t, nil
	case storage.ProviderCodex:
		t, err := newCodex(a, b, opts)
		if err != nil {
			return nil, err // not t: a nil *codex would make a non-nil Transport
		}
		return t, nil
	case storage.ProviderAnthropic:
		t, err := newAnthropic(a, b, opts.UserAgent)
		if err != nil {
			return nil, err // not t: a nil *anthropic would make a non-nil Transport
		}
		return t, nil
	}
	return nil, fmt.Errorf("upstream: account %q: provider %q: %w", a.Name, a.Provider, ErrUnknownProvider)
}

// HTTPConfig tunes NewHTTPClient. Zero fields take the defaults given.
type HTTPConfig struct {
	DialTimeout           time.Duration // TCP connect including DNS; default 10 s
	KeepAlive             time.Duration // TCP keep-alive probe interval; default 30 s
	TLSHandshakeTimeout   time.Duration // default 10 s
	ResponseHeaderTimeout time.Duration // transport-wide wait for a response head after the request is written; default none (Options.HeaderTimeout is the per-account knob)
	MaxIdleConnsPerHost   int           // idle keep-alive connections kept per upstream host; default 256
	IdleConnTimeout       time.Duration // how long an idle connection is kept; default 90 s
	TLSClientConfig       *tls.Config   // cloned; nil means the system roots
}

// NewHTTPClient returns an *http.Client for transports: one *http.Transport
// with connection reuse, HTTP/2 for https upstreams (negotiated with ALPN;
// plain http stays HTTP/1.1), HTTP/2 health-check pings after 30 s without a
// frame, proxies from the environment (HTTPS_PROXY, NO_PROXY), no overall
// timeout (streams last as long as ctx allows) and no redirects (a 3xx is
// returned as the Response, since a redirected POST would lose its body).
func NewHTTPClient(c HTTPConfig) *http.Client {
	d := &net.Dialer{
		Timeout:   orDefault(c.DialTimeout, 10*time.Second),
		KeepAlive: orDefault(c.KeepAlive, 30*time.Second),
	}
	t := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           sock.Dial(d),
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       orDefault(c.IdleConnTimeout, 90*time.Second),
		TLSHandshakeTimeout:   orDefault(c.TLSHandshakeTimeout, 10*time.Second),
		ResponseHeaderTimeout: c.ResponseHeaderTimeout,
		ExpectContinueTimeout: time.Second,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 30 * time.Second,
			PingTimeout:     15 * time.Second,
		},
	}
	if c.MaxIdleConnsPerHost > 0 {
		t.MaxIdleConnsPerHost = c.MaxIdleConnsPerHost
	}
	if c.TLSClientConfig != nil {
		t.TLSClientConfig = c.TLSClientConfig.Clone()
	}
	return &http.Client{
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

var sharedClient = sync.OnceValue(func() *http.Client { return NewHTTPClient(HTTPConfig{}) })

// SharedClient returns the process-wide client that New uses when
// Options.Client is nil: NewHTTPClient(HTTPConfig{}), built once.
func SharedClient() *http.Client { return sharedClient() }

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Header values shared by every request. Requests only read them.
var (
	hvJSON = []string{"application/json"}
	hvSSE  = []string{"text/event-stream"}
)

// headerSetter fills the upstream request's headers for req.
type headerSetter interface {
	setHeader(h http.Header, req *Request)
}

// base is what every provider's transport shares: the client and the timeouts.
type base struct {
	client        *http.Client         // used when rt is nil
	rt            http.RoundTripper    // the shared client's transport, or nil
	fast          *fasthttp.HostClient // when set, used instead of both (see ClientMode)
	mode          ClientMode
	headerTimeout time.Duration

	// Tests only, on the fasthttp path: probe replaces idleAlive, clock
	// replaces time.Now for a pooled connection's idle time (probeDue).
	probe func(net.Conn) bool
	clock func() time.Time
}

// pickClient sets b.fast when the account, whose endpoints are on u, sends
// with fasthttp (see ClientMode): no client of its own and a mode and URL
// that allow it.
func (b *base) pickClient(u *url.URL) {
	if b.client == nil && useFast(u, b.mode) {
		b.fast = sharedFast().host(u)
	}
}

// timeoutFor returns the header timeout for a call that streams upstream or not; 0 is none.
func (b *base) timeoutFor(stream bool) time.Duration {
	switch {
	case b.headerTimeout > 0:
		return b.headerTimeout
	case b.headerTimeout == 0 && stream:
		return DefaultHeaderTimeout
	}
	return 0
}

// send POSTs body to url and returns the response with its Body wrapped so
// that read errors are *Error and Close releases the call's resources. stream
// says whether the call streams upstream (for the header timeout).
func (b *base) send(ctx context.Context, target *url.URL, body []byte, stream bool, hs headerSetter, req *Request) (*http.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, classifyErr(ctx, err, false)
	}
	if b.fast != nil {
		return b.sendFast(ctx, target, body, stream, hs, req)
	}
	rctx := ctx
	var cancel context.CancelCauseFunc
	var timer *time.Timer
	if d := b.timeoutFor(stream); d > 0 {
		rctx, cancel = context.WithCancelCause(ctx)
		timer = time.AfterFunc(d, func() { cancel(ErrHeaderTimeout) })
	}
	// The URL is parsed once, in New; each request gets its own copy.
	hreq, err := http.NewRequestWithContext(rctx, http.MethodPost, "", bytes.NewReader(body))
	if err == nil {
		u := *target
		hreq.URL, hreq.Host = &u, u.Host
	} else {
		if cancel != nil {
			timer.Stop()
			cancel(nil)
		}
		return nil, &Error{Kind: KindRequest, Err: err}
	}
	hs.setHeader(hreq.Header, req)
	var resp *http.Response
	if b.rt != nil {
		if resp, err = b.rt.RoundTrip(hreq); err != nil {
			err = &url.Error{Op: "Post", URL: hreq.URL.Redacted(), Err: err} // as http.Client.Do reports it
		}
	} else {
		resp, err = b.client.Do(hreq)
	}
	timedOut := timer != nil && !timer.Stop()
	if err != nil || timedOut {
		if resp != nil {
			resp.Body.Close()
		}
		if cancel != nil {
			cancel(nil)
		}
		if err == nil {
			err = ErrHeaderTimeout
		}
		return nil, classifyErr(ctx, err, timedOut)
	}
	resp.Body = &respBody{rc: resp.Body, parent: ctx, cancel: cancel}
	return resp, nil
}

// respBody wraps an upstream response body: read errors become *Error, and Close
// releases the call's context.
type respBody struct {
	rc     io.ReadCloser
	parent context.Context
	cancel context.CancelCauseFunc // nil without a header timer
}

func (b *respBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF {
		err = bodyErr(b.parent, err)
	}
	return n, err
}

func (b *respBody) Close() error {
	err := b.rc.Close()
	if b.cancel != nil {
		b.cancel(nil)
	}
	return err
}

// checkShape fails a 2xx answer whose Content-Type contradicts the request:
// JSON where an SSE stream was asked for, or SSE where JSON was. Other or
// missing types pass, since OpenAI-compatible servers vary. On failure it
// closes the body.
func checkShape(resp *http.Response, stream bool) error {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil
	}
	ct := resp.Header.Get("Content-Type")
	if stream && isJSONType(ct) || !stream && isSSEType(ct) {
		resp.Body.Close()
		want := "application/json"
		if stream {
			want = "text/event-stream"
		}
		return &Error{Kind: KindProtocol, Err: fmt.Errorf("%w %q, want %s", ErrWrongContentType, ct, want)}
	}
	return nil
}

// mediaType returns ct without parameters and surrounding spaces.
func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.TrimSpace(ct)
}

func isSSEType(ct string) bool { return strings.EqualFold(mediaType(ct), "text/event-stream") }

func isJSONType(ct string) bool {
	mt := mediaType(ct)
	return strings.EqualFold(mt, "application/json") || len(mt) > 5 && strings.EqualFold(mt[len(mt)-5:], "+json")
}

// response converts an *http.Response to the package's Response.
func response(resp *http.Response) *Response {
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: resp.Body}
}

// copyHeaders copies the values of keys (canonical form) from src to dst.
// The value slices are shared, not copied: both sides only read them.
func copyHeaders(dst, src http.Header, keys []string) {
	if src == nil {
		return
	}
	for _, k := range keys {
		if v := src[k]; len(v) > 0 {
			dst[k] = v
		}
	}
}

// endpointURL joins base with path, keeping base's query string. The result
// is parsed back from its string form so that its path is absolute even when
// base has none ("https://host" + "responses"). It is shared with every
// account on the same endpoint (endpoints): it must never be modified.
func endpointURL(base *url.URL, path string) *url.URL {
	s := base.JoinPath(path).String()
	return endpoints.get(s, func() *url.URL {
		u, err := url.Parse(s)
		if err != nil { // cannot happen: base was parsed and path is a constant
			panic(err)
		}
		return u
	})
}

// parseBaseURL returns a.BaseURL (or def when it is empty) as an absolute
// http(s) URL. Errors name the account only: a URL may carry a secret.
func parseBaseURL(a storage.Account, def string) (*url.URL, error) {
	raw := a.BaseURL
	if raw == "" {
		if def == "" {
			return nil, fmt.Errorf("upstream: account %q: %w: provider %s needs a base URL", a.Name, ErrInvalidBaseURL, a.Provider)
		}
		raw = def
	}
	u, ok := absoluteHTTP(raw)
	if !ok {
		return nil, fmt.Errorf("upstream: account %q: %w: want an absolute http(s) URL", a.Name, ErrInvalidBaseURL)
	}
	return u, nil
}

// ValidBaseURL reports whether raw is usable as an account's base_url: an
// absolute http or https URL with a host ("https://api.example.com/v1").
func ValidBaseURL(raw string) bool {
	_, ok := absoluteHTTP(raw)
	return ok
}

func absoluteHTTP(raw string) (*url.URL, bool) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return nil, false
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, false
		}
	}
	return u, true
}

// unsupported is the error for an endpoint provider p does not speak.
func unsupported(p storage.Provider, e translate.Protocol) error {
	return &Error{Kind: KindRequest, Err: fmt.Errorf("%w: %s does not speak %s", ErrUnsupportedEndpoint, p, e.Route())}
}
