package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/troupe-gw/troupe/internal/sock"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// ResponsesWebSocketBeta is the OpenAI-Beta value of the Responses WebSocket
// mode the Codex backend speaks (v2; the obsolete v1 was
// "responses_websockets=2026-02-04"). Source: the Codex CLI 0.169.0 upgrade
// request (fixtures clients/codex-cli/ws-plain__01) and
// codex-rs/codex-api/src/endpoint/responses_websocket.rs.
const ResponsesWebSocketBeta = "responses_websockets=2026-02-06"

// MaxWebSocketMessage bounds one frame read from an upstream Responses
// WebSocket: 64 MiB (a response.completed repeats the whole output).
const MaxWebSocketMessage = 64 << 20

// ErrMessageTooBig is the cause of a read failing because the upstream
// closed the WebSocket with status 1009 (message too big, RFC 6455 7.4.1):
// it refused the request frame. Before any content the gateway sends the
// request once more over HTTP on the same lease.
var ErrMessageTooBig = errors.New("upstream closed the websocket: message too big (1009)")

// WebSocketDialer is the optional capability of a Transport whose provider
// speaks the Responses API WebSocket mode (codex and openai): one upgraded
// connection carries many responses, one at a time, each started by a
// {"type":"response.create",…} text frame and answered by the same JSON
// events as the SSE stream, one text frame each
// (https://developers.openai.com/api/docs/guides/websocket-mode). Find it with
// a type assertion on the Transport.
type WebSocketDialer interface {
	// DialWebSocket upgrades GET {base}/responses with the account's
	// credentials and the client headers worth passing (as Do sends them).
	// A refused upgrade returns a *Response with the upstream's status,
	// headers and (bounded) body, and a nil conn; other failures are *Error.
	DialWebSocket(ctx context.Context, header http.Header) (*websocket.Conn, *Response, error)
	// CreateFrame returns the response.create frame for a Responses request
	// body: the body's fields with "type":"response.create" first and, for
	// providers that require it, "store": false. body is not modified.
	CreateFrame(body []byte) ([]byte, error)
}

// wsDialer is shared by every upstream WebSocket: no compression (the
// Responses WebSocket servers work without it), a 30 s handshake bound and
// proxies from the environment, like the HTTP client.
var wsDialer = &websocket.Dialer{
	Proxy:            http.ProxyFromEnvironment,
	NetDialContext:   sock.Dial(&net.Dialer{}),
	HandshakeTimeout: 30 * time.Second,
	ReadBufferSize:   16 << 10,
	WriteBufferSize:  16 << 10,
}

// wsURL turns an http(s) endpoint URL into its ws(s) twin.
func wsURL(u *url.URL) string {
	w := *u
	switch w.Scheme {
	case "https":
		w.Scheme = "wss"
	default:
		w.Scheme = "ws"
	}
	return w.String()
}

// dialWS upgrades target with h; a refused upgrade becomes a *Response.
func dialWS(ctx context.Context, target string, h http.Header) (*websocket.Conn, *Response, error) {
	return dialWSWith(ctx, wsDialer, target, h)
}

// dialWSWith is dialWS through dialer d (a codex account's TLS profile and
// proxy, see Clients.WebSocketDialer).
func dialWSWith(ctx context.Context, d *websocket.Dialer, target string, h http.Header) (*websocket.Conn, *Response, error) {
	conn, resp, err := d.DialContext(ctx, target, h)
	if err == nil {
		conn.SetReadLimit(MaxWebSocketMessage)
		return conn, &Response{Status: resp.StatusCode, Header: resp.Header}, nil
	}
	if resp != nil && errors.Is(err, websocket.ErrBadHandshake) {
		var body []byte
		if resp.Body != nil {
			body = readBounded(resp.Body, 1<<20)
			resp.Body.Close()
		}
		status := resp.StatusCode
		if status >= 200 && status <= 299 {
			// 2xx without an upgrade: the endpoint does not speak WebSocket.
			return nil, nil, &Error{Kind: KindProtocol, Err: fmt.Errorf("websocket upgrade refused with status %d", status)}
		}
		return nil, &Response{Status: status, Header: resp.Header, Body: nopCloser{bytes.NewReader(body)}}, nil
	}
	return nil, nil, classifyErr(ctx, err, false)
}

// DialWebSocket upgrades {base}/responses of the Codex backend with the
// headers Do sends (Authorization, ChatGPT-Account-ID, originator, version,
// User-Agent, the client's session headers) plus OpenAI-Beta:
// ResponsesWebSocketBeta, as the Codex CLI does.
func (t *codex) DialWebSocket(ctx context.Context, header http.Header) (*websocket.Conn, *Response, error) {
	h := make(http.Header, 12)
	t.setHeader(h, &Request{Endpoint: translate.Responses, Stream: true, Header: header})
	if t.identity != nil { // the account's session ids, as on HTTP (codex_identity.go)
		setIdentityHeaders(h, header, codexIDs{session: t.identity.Session(t.identityKey, sessionInput(nil, header))})
	}
	delete(h, "Accept")
	delete(h, "Content-Type")
	h.Set("Openai-Beta", ResponsesWebSocketBeta)
	if t.ws != nil {
		return dialWSWith(ctx, t.ws, wsURL(t.url), h)
	}
	return dialWS(ctx, wsURL(t.url), h)
}

// CreateFrame returns body as a response.create frame the Codex backend
// takes: "type":"response.create" first, "store": false, only the members
// it accepts (codexAcceptsFrame: no "stream", which the WebSocket mode does
// not use), and the account's identity, as on HTTP — in one pass
// (requestBody).
func (t *codex) CreateFrame(body []byte) ([]byte, error) {
	out, _, err := t.requestBody(body, nil, true)
	if err != nil {
		return nil, &Error{Kind: KindRequest, Err: err}
	}
	return out, nil
}

// DialWebSocket upgrades {base}/responses of the OpenAI API with the
// account's key, as the websocket-mode guide shows (only Authorization is
// required). openai_compat accounts do not speak it.
func (t *openAI) DialWebSocket(ctx context.Context, header http.Header) (*websocket.Conn, *Response, error) {
	if t.respURL == nil {
		return nil, nil, unsupported(t.provider, translate.Responses)
	}
	h := make(http.Header, 6)
	t.setHeader(h, &Request{Endpoint: translate.Responses, Stream: true, Header: header})
	delete(h, "Accept")
	delete(h, "Content-Type")
	return dialWS(ctx, wsURL(t.respURL), h)
}

// CreateFrame returns body as a response.create frame, otherwise unchanged.
func (t *openAI) CreateFrame(body []byte) ([]byte, error) { return createFrame(body) }

// SupportsWebSocket reports whether tr speaks the Responses WebSocket mode:
// codex and openai transports do, openai_compat ones do not.
func SupportsWebSocket(tr Transport) bool {
	switch t := tr.(type) {
	case *codex:
		return true
	case *openAI:
		return t.respURL != nil
	case WebSocketDialer:
		return true
	}
	return false
}

// createFrame puts "type":"response.create" first in the JSON object body
// and drops "stream" and "background", which the WebSocket mode does not use.
func createFrame(body []byte) ([]byte, error) {
	b := bytes.TrimLeft(body, " \t\r\n")
	if len(b) == 0 || b[0] != '{' {
		return nil, &Error{Kind: KindRequest, Err: errors.New("request body is not a JSON object")}
	}
	rest := bytes.TrimLeft(b[1:], " \t\r\n")
	out := make([]byte, 0, len(body)+32)
	out = append(out, `{"type":"response.create"`...)
	if len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	out = append(out, rest...)
	var err error
	for _, k := range []string{"stream", "background"} {
		if gjson.GetBytes(out, k).Exists() {
			if out, err = sjson.DeleteBytes(out, k); err != nil {
				return nil, &Error{Kind: KindRequest, Err: fmt.Errorf("drop %s: %w", k, err)}
			}
		}
	}
	return out, nil
}

// WebSocketReadError converts an error from reading an upstream WebSocket
// into an *Error: a close 1009 is KindProtocol wrapping ErrMessageTooBig,
// other closes are KindConn, and the rest is classified like an HTTP body
// read (timeouts, cancellation, resets).
func WebSocketReadError(ctx context.Context, err error) error {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		if ce.Code == websocket.CloseMessageTooBig {
			return &Error{Kind: KindProtocol, Err: ErrMessageTooBig}
		}
		return &Error{Kind: KindConn, Err: fmt.Errorf("upstream closed the websocket: %w", err)}
	}
	if errors.Is(err, websocket.ErrReadLimit) {
		return &Error{Kind: KindProtocol, Err: fmt.Errorf("upstream websocket frame larger than %d bytes", MaxWebSocketMessage)}
	}
	return bodyErr(ctx, err)
}

// WebSocketErrorResponse turns a Responses WebSocket error frame
// {"type":"error","status":<http>,"error":{…},"headers":{…}} (fixtures
// responses-websocket/server.error.*.json) into the Response the same
// failure has over HTTP: that status, the frame's headers, and the body
// {"error":{…}}. ok is false when the frame has no status (Codex does not
// map those either); such a frame stays an error event in the stream.
func WebSocketErrorResponse(frame []byte, hdr http.Header) (resp *Response, ok bool) {
	root := gjson.ParseBytes(frame)
	st := root.Get("status")
	if st.Type != gjson.Number || st.Int() < 400 || st.Int() > 599 {
		return nil, false
	}
	h := hdr.Clone()
	if h == nil {
		h = http.Header{}
	}
	root.Get("headers").ForEach(func(k, v gjson.Result) bool {
		h.Set(k.String(), v.String())
		return true
	})
	h.Set("Content-Type", "application/json")
	body := make([]byte, 0, len(frame))
	body = append(body, `{"error":`...)
	if e := root.Get("error"); e.IsObject() {
		body = append(body, e.Raw...)
	} else {
		body = append(body, `{"message":"upstream error","type":"server_error"}`...)
	}
	body = append(body, '}')
	return &Response{Status: int(st.Int()), Header: h, Body: nopCloser{bytes.NewReader(body)}}, true
}

// ProviderSpeaksWebSocket reports whether accounts of provider p can use the
// Responses WebSocket mode upstream (codex and openai).
func ProviderSpeaksWebSocket(p storage.Provider) bool {
	return p == storage.ProviderCodex || p == storage.ProviderOpenAI
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

func readBounded(r io.Reader, n int64) []byte {
	b, _ := io.ReadAll(io.LimitReader(r, n))
	return b
}
