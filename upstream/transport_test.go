package upstream

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// Secrets used by every test account; no error string may contain them.
const (
	secretKey     = "sk-test-SECRET-api-key-0123456789"
	secretAccess  = "eyJ-SECRET-access-token"
	secretRefresh = "rt-SECRET-refresh-token"
)

var secrets = []string{secretKey, secretAccess, secretRefresh, "SECRET"}

func assertNoSecret(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error text %q contains a secret", err.Error())
		}
	}
}

func creds() storage.Credentials {
	return storage.Credentials{APIKey: secretKey, AccessToken: secretAccess, RefreshToken: secretRefresh, AccountID: "acct-0001"}
}

func account(p storage.Provider, baseURL string) storage.Account {
	return storage.Account{ID: "a1", Name: "test-" + string(p), Provider: p, BaseURL: baseURL, Credentials: creds()}
}

func mustNew(t testing.TB, a storage.Account, opts Options) Transport {
	t.Helper()
	if opts.ClientMode == ClientAuto {
		opts.ClientMode = suiteClientMode
	}
	tr, err := New(a, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// captured is what a test server saw of one request.
type captured struct {
	Method, Path, Query string
	Header              http.Header
	Body                []byte
	ProtoMajor          int
	RemoteAddr          string
}

// answer is what a test server replies.
type answer struct {
	status int
	header map[string]string
	body   []byte
}

// recordServer serves ans to every request and records each request.
func recordServer(t testing.TB, ans answer) (*httptest.Server, func() []captured) {
	t.Helper()
	var mu sync.Mutex
	var got []captured
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, captured{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), b, r.ProtoMajor, r.RemoteAddr})
		mu.Unlock()
		for k, v := range ans.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(ans.status)
		w.Write(ans.body)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []captured {
		mu.Lock()
		defer mu.Unlock()
		return append([]captured(nil), got...)
	}
}

func sseAnswer(body []byte) answer {
	return answer{status: 200, header: map[string]string{"Content-Type": "text/event-stream; charset=utf-8"}, body: body}
}

func jsonAnswer(status int, body []byte) answer {
	return answer{status: status, header: map[string]string{"Content-Type": "application/json"}, body: body}
}

func testdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readAll(t *testing.T, resp *Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNewErrors(t *testing.T) {
	withCreds := func(a storage.Account, c storage.Credentials) storage.Account { a.Credentials = c; return a }
	noKey := creds()
	noKey.APIKey = ""
	noToken := creds()
	noToken.AccessToken = ""
	tests := []struct {
		name string
		a    storage.Account
		want error
	}{
		{"unknown provider", account("gemini", "https://example.com"), ErrUnknownProvider},
		{"empty provider", account("", ""), ErrUnknownProvider},
		{"anthropic without key", withCreds(account(storage.ProviderAnthropic, ""), noKey), ErrMissingCredentials},
		{"openai without key", withCreds(account(storage.ProviderOpenAI, ""), noKey), ErrMissingCredentials},
		{"compat without key", withCreds(account(storage.ProviderOpenAICompat, "http://127.0.0.1:1/v1"), noKey), ErrMissingCredentials},
		{"codex without access token", withCreds(account(storage.ProviderCodex, ""), noToken), ErrMissingCredentials},
		{"compat without base URL", account(storage.ProviderOpenAICompat, ""), ErrInvalidBaseURL},
		{"relative base URL", account(storage.ProviderOpenAI, "api.openai.com/v1"), ErrInvalidBaseURL},
		{"ftp base URL", account(storage.ProviderOpenAI, "ftp://example.com/v1"), ErrInvalidBaseURL},
		{"unparsable base URL with a secret", account(storage.ProviderCodex, "https://u:SECRET@exa mple.com:x/%zz"), ErrInvalidBaseURL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := New(tc.a, Options{})
			if !errors.Is(err, tc.want) || tr != nil {
				t.Fatalf("New = %v, %v; want %v", tr, err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.a.Name) {
				t.Errorf("error %q does not name the account", err)
			}
			assertNoSecret(t, err)
		})
	}
}

func TestDefaultBaseURLs(t *testing.T) {
	o := mustNew(t, account(storage.ProviderOpenAI, ""), Options{}).(*openAI)
	if o.chatURL.String() != "https://api.openai.com/v1/chat/completions" || o.respURL.String() != "https://api.openai.com/v1/responses" {
		t.Errorf("openai URLs %q %q", o.chatURL, o.respURL)
	}
	c := mustNew(t, account(storage.ProviderCodex, ""), Options{}).(*codex)
	if c.url.String() != "https://chatgpt.com/backend-api/codex/responses" {
		t.Errorf("codex URL %q", c.url)
	}
	for base, want := range map[string]string{
		"https://h.example/v1":              "https://h.example/v1/chat/completions",
		"https://h.example/v1/":             "https://h.example/v1/chat/completions",
		"https://h.example/v1//":            "https://h.example/v1/chat/completions",
		"https://h.example":                 "https://h.example/chat/completions",
		"https://h.example/openai/v1?k=v&x": "https://h.example/openai/v1/chat/completions?k=v&x",
	} {
		cc := mustNew(t, account(storage.ProviderOpenAICompat, base), Options{}).(*openAI)
		if cc.chatURL.String() != want || cc.respURL != nil {
			t.Errorf("compat %q: chat %q (want %q), responses %q", base, cc.chatURL, want, cc.respURL)
		}
	}
}

func TestOpenAIChatRequest(t *testing.T) {
	sse := testdata(t, "chat-stream-text.sse")
	srv, got := recordServer(t, sseAnswer(sse))
	tr := mustNew(t, account(storage.ProviderOpenAI, srv.URL+"/v1/"), Options{})
	body := []byte(`{"model":"gpt-5-nano","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	client := http.Header{}
	client.Set("Authorization", "Bearer client-key")
	client.Set("Idempotency-Key", "idem-1")
	client.Set("X-Client-Request-Id", "creq-1")
	client.Set("OpenAI-Beta", "assistants=v2")
	client.Set("OpenAI-Organization", "org-client")
	client.Set("X-Stainless-Os", "Linux")
	client.Set("Cookie", "a=b")
	resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Chat, Stream: true, Body: body, Header: client})
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); !bytes.Equal(b, sse) || resp.Status != 200 {
		t.Fatalf("status %d, body differs from the served stream", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("Content-Type %q", ct)
	}
	r := got()[0]
	if r.Method != http.MethodPost || r.Path != "/v1/chat/completions" {
		t.Errorf("%s %s", r.Method, r.Path)
	}
	if !bytes.Equal(r.Body, body) {
		t.Errorf("body changed: %s", r.Body)
	}
	want := map[string]string{
		"Authorization":       "Bearer " + secretKey,
		"Content-Type":        "application/json",
		"Accept":              "text/event-stream",
		"User-Agent":          DefaultUserAgent,
		"Idempotency-Key":     "idem-1",
		"X-Client-Request-Id": "creq-1",
		"OpenAI-Beta":         "",
		"OpenAI-Organization": "",
		"X-Stainless-Os":      "",
		"Cookie":              "",
	}
	for k, v := range want {
		if g := r.Header.Get(k); g != v {
			t.Errorf("header %s = %q, want %q", k, g, v)
		}
	}
	if n := len(r.Header.Values("Authorization")); n != 1 {
		t.Errorf("%d Authorization headers", n)
	}
}

func TestOpenAIResponsesRequest(t *testing.T) {
	srv, got := recordServer(t, jsonAnswer(200, []byte(`{"id":"resp_1","object":"response"}`)))
	tr := mustNew(t, account(storage.ProviderOpenAI, srv.URL+"/v1?tenant=x"), Options{UserAgent: "my-agent/1"})
	body := []byte(`{"model":"gpt-5","input":"hi"}`)
	resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Responses, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); string(b) != `{"id":"resp_1","object":"response"}` {
		t.Errorf("body %s", b)
	}
	r := got()[0]
	if r.Path != "/v1/responses" || r.Query != "tenant=x" {
		t.Errorf("path %q query %q", r.Path, r.Query)
	}
	if r.Header.Get("Accept") != "application/json" || r.Header.Get("User-Agent") != "my-agent/1" {
		t.Errorf("headers %v", r.Header)
	}
}

func TestOpenAIErrorStatusPassesThrough(t *testing.T) {
	errBody := []byte(`{"error":{"message":"Rate limit reached","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`)
	srv, _ := recordServer(t, answer{status: 429, header: map[string]string{"Content-Type": "application/json", "Retry-After": "3"}, body: errBody})
	tr := mustNew(t, account(storage.ProviderOpenAI, srv.URL), Options{})
	resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Chat, Stream: true, Body: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); resp.Status != 429 || !bytes.Equal(b, errBody) || resp.Header.Get("Retry-After") != "3" {
		t.Fatalf("status %d body %s", resp.Status, b)
	}
}

func TestWrongContentType(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ans    answer
		stream bool
	}{
		{"JSON for a stream", jsonAnswer(200, []byte(`{"id":"x"}`)), true},
		{"SSE for JSON", sseAnswer([]byte("data: {}\n\n")), false},
		{"problem+json for a stream", answer{status: 200, header: map[string]string{"Content-Type": "application/problem+json"}, body: []byte(`{}`)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := recordServer(t, tc.ans)
			tr := mustNew(t, account(storage.ProviderOpenAI, srv.URL), Options{})
			_, err := tr.Do(context.Background(), &Request{Endpoint: translate.Chat, Stream: tc.stream, Body: []byte(`{}`)})
			if KindOf(err) != KindProtocol || !errors.Is(err, ErrWrongContentType) {
				t.Fatalf("got %v", err)
			}
		})
	}
}

func TestUnsupportedEndpoint(t *testing.T) {
	srv, got := recordServer(t, jsonAnswer(200, []byte(`{}`)))
	for _, tc := range []struct {
		p storage.Provider
		e translate.Protocol
	}{
		{storage.ProviderOpenAICompat, translate.Responses},
		{storage.ProviderOpenAICompat, translate.Messages},
		{storage.ProviderOpenAI, translate.Messages},
		{storage.ProviderOpenAI, 0},
		{storage.ProviderCodex, translate.Chat},
		{storage.ProviderCodex, translate.Messages},
	} {
		tr := mustNew(t, account(tc.p, srv.URL), Options{})
		_, err := tr.Do(context.Background(), &Request{Endpoint: tc.e, Body: []byte(`{}`)})
		var ue *Error
		if !errors.As(err, &ue) || ue.Kind != KindRequest || !errors.Is(err, ErrUnsupportedEndpoint) || ue.Sent() {
			t.Errorf("%s %s: got %v", tc.p, tc.e, err)
		}
		if err != nil && (!strings.Contains(err.Error(), "not supported") || !strings.Contains(err.Error(), string(tc.p))) {
			t.Errorf("error text %q should say the endpoint is unsupported by %s", err, tc.p)
		}
		if Supports(tc.p, tc.e) {
			t.Errorf("Supports(%s, %s) disagrees", tc.p, tc.e)
		}
	}
	if n := len(got()); n != 0 {
		t.Errorf("%d requests reached the server", n)
	}
}

func TestCodexRequest(t *testing.T) {
	srv, got := recordServer(t, sseAnswer(testdata(t, "responses-stream-text.sse")))
	tr := mustNew(t, account(storage.ProviderCodex, srv.URL+"/backend-api/codex/"), Options{})
	client := headersFromFixture(t, "codex-request-headers.http")
	client.Set("X-Codex-Turn-State", "turn-state-1")
	client.Set("X-Openai-Subagent", "review")
	client.Set("Session_id", "legacy-session")
	client.Set("Chatgpt-Account-Id", "client-account") // must not win over the account's
	client.Set("Cookie", "a=b")
	body := testdata(t, "codex-request-body.json")
	resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Responses, Stream: true, Body: body, Header: client})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	r := got()[0]
	if r.Method != http.MethodPost || r.Path != "/backend-api/codex/responses" {
		t.Errorf("%s %s", r.Method, r.Path)
	}
	if !bytes.Equal(r.Body, body) {
		t.Errorf("a body that already has stream:true and store:false was changed")
	}
	want := map[string]string{
		"Authorization":         "Bearer " + secretAccess,
		"Chatgpt-Account-Id":    "acct-0001",
		"Originator":            "codex_cli_rs",
		"User-Agent":            DefaultCodexUserAgent,
		"Version":               CodexClientVersion,
		"Accept":                "text/event-stream",
		"Content-Type":          "application/json",
		"Session-Id":            "0199a0b1-0000-7000-8000-00000000c0de",
		"Session_id":            "legacy-session",
		"Thread-Id":             "0199a0b1-0000-7000-8000-00000000c0de",
		"X-Client-Request-Id":   "0199a0b1-0000-7000-8000-00000000c0de",
		"X-Codex-Beta-Features": "terminal_resize_reflow",
		"X-Codex-Turn-Metadata": client.Get("X-Codex-Turn-Metadata"),
		"X-Codex-Window-Id":     "0199a0b1-0000-7000-8000-00000000c0de:0",
		"X-Codex-Turn-State":    "turn-state-1",
		"X-Openai-Subagent":     "review",
		"Cookie":                "",
	}
	for k, v := range want {
		if g := r.Header.Get(k); g != v {
			t.Errorf("header %s = %q, want %q", k, g, v)
		}
	}
	if !strings.HasPrefix(DefaultCodexUserAgent, "codex_cli_rs/") {
		t.Errorf("DefaultCodexUserAgent %q is not Codex-like", DefaultCodexUserAgent)
	}
}

// headersFromFixture reads the header lines of a recorded .http request.
func headersFromFixture(t testing.TB, name string) http.Header {
	h := http.Header{}
	lines := strings.Split(string(testdata(t, name)), "\n")
	for _, l := range lines[1:] {
		if l == "" {
			break
		}
		k, v, _ := strings.Cut(l, ":")
		h.Add(k, strings.TrimSpace(v))
	}
	return h
}

func TestCodexBodyRewriteOnTheWire(t *testing.T) {
	srv, got := recordServer(t, sseAnswer(testdata(t, "responses-stream-text.sse")))
	tr := mustNew(t, account(storage.ProviderCodex, srv.URL), Options{})
	fixture := testdata(t, "codex-request-body.json")
	in := bytes.Replace(fixture, []byte(`"store": false`), []byte(`"store": true`), 1)
	orig := bytes.Clone(in)
	resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Responses, Stream: true, Body: in})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if sent := got()[0].Body; !bytes.Equal(sent, fixture) {
		t.Errorf("sent body differs from the fixture beyond store/stream:\n%s", sent)
	}
	if !bytes.Equal(in, orig) {
		t.Error("Request.Body was modified")
	}
	_, err = tr.Do(context.Background(), &Request{Endpoint: translate.Responses, Body: []byte("[]")})
	if KindOf(err) != KindRequest {
		t.Errorf("non-object body: %v", err)
	}
}

func TestCodexAccountIDFromJWT(t *testing.T) {
	srv, got := recordServer(t, sseAnswer(testdata(t, "responses-stream-text.sse")))
	claims := `{"https://api.openai.com/auth":{"chatgpt_account_id":"from-jwt","chatgpt_plan_type":"pro"}}`
	jwt := "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".sig"
	for _, tc := range []struct {
		name string
		c    storage.Credentials
		want string
	}{
		{"account id wins", storage.Credentials{AccessToken: secretAccess, AccountID: "explicit", IDToken: jwt}, "explicit"},
		{"from id_token", storage.Credentials{AccessToken: secretAccess, IDToken: jwt}, "from-jwt"},
		{"from access token", storage.Credentials{AccessToken: jwt}, "from-jwt"},
		{"unknown", storage.Credentials{AccessToken: secretAccess, IDToken: "not.a-jwt"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := account(storage.ProviderCodex, srv.URL)
			a.Credentials = tc.c
			resp, err := mustNew(t, a, Options{}).Do(context.Background(), &Request{Endpoint: translate.Responses, Stream: true, Body: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			all := got()
			h := all[len(all)-1].Header
			if g := h.Get("Chatgpt-Account-Id"); g != tc.want || (tc.want == "" && len(h.Values("Chatgpt-Account-Id")) != 0) {
				t.Errorf("Chatgpt-Account-Id = %q, want %q", g, tc.want)
			}
		})
	}
}

func TestCodexNonStream(t *testing.T) {
	text := testdata(t, "responses-stream-text.sse")
	unnamed := regexpRemoveEventLines(text)
	cut := bytes.Index(text, []byte("event: response.output_text.delta"))
	rateHeader := map[string]string{"Content-Type": "text/event-stream", "X-Codex-Primary-Used-Percent": "22"}
	tests := []struct {
		name       string
		ans        answer
		status     int
		check      func(t *testing.T, body string)
		wantErr    error
		wantErrKnd ErrorKind
	}{
		{name: "completed", ans: answer{status: 200, header: rateHeader, body: text}, status: 200, check: func(t *testing.T, body string) {
			want := terminalResponse(t, text)
			if body != want {
				t.Errorf("body is not the completed event's response object:\n%s", body)
			}
		}},
		{name: "unnamed events", ans: sseAnswer(unnamed), status: 200, check: func(t *testing.T, body string) {
			if !strings.Contains(body, `"status":"completed"`) {
				t.Errorf("body %s", body)
			}
		}},
		{name: "CRLF stream", ans: sseAnswer(bytes.ReplaceAll(text, []byte("\n"), []byte("\r\n"))), status: 200},
		{name: "incomplete", ans: sseAnswer(testdata(t, "responses-stream-incomplete.sse")), status: 200, check: func(t *testing.T, body string) {
			if !strings.Contains(body, `"status":"incomplete"`) || !strings.Contains(body, `"reason":"max_output_tokens"`) {
				t.Errorf("body %s", body)
			}
		}},
		{name: "failed rate limit", ans: sseAnswer(testdata(t, "responses-stream-failed.sse")), status: 429, check: func(t *testing.T, body string) {
			wantError(t, body, "rate_limit_exceeded", "rate_limit_exceeded", "Please try again in 11.054s")
		}},
		{name: "error event then failed", ans: sseAnswer(testdata(t, "responses-stream-error-event.sse")), status: 429, check: func(t *testing.T, body string) {
			wantError(t, body, "insufficient_quota", "insufficient_quota", "You exceeded your current quota")
		}},
		{name: "failed context length", ans: sseAnswer(testdata(t, "responses-stream-failed-context-length.sse")), status: 400, check: func(t *testing.T, body string) {
			wantError(t, body, "context_length_exceeded", "invalid_request_error", "exceeds the context window")
		}},
		{name: "stream ends on an error event", ans: sseAnswer([]byte("event: response.created\ndata: {\"type\":\"response.created\"}\n\nevent: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"boom\",\"param\":null}\n\n")), status: 500, check: func(t *testing.T, body string) {
			wantError(t, body, "server_error", "server_error", "boom")
		}},
		{name: "truncated", ans: sseAnswer(text[:cut]), wantErr: ErrTruncated, wantErrKnd: KindProtocol},
		{name: "empty", ans: sseAnswer(nil), wantErr: ErrEmptyStream, wantErrKnd: KindProtocol},
		{name: "only keep-alives", ans: sseAnswer([]byte(": ping\n\n: ping\n\n")), wantErr: ErrEmptyStream, wantErrKnd: KindProtocol},
		{name: "terminal event without response", ans: sseAnswer([]byte("event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n")), wantErrKnd: KindProtocol},
		{name: "JSON where SSE expected", ans: jsonAnswer(200, []byte(`{"id":"resp_1"}`)), wantErr: ErrWrongContentType, wantErrKnd: KindProtocol},
		{name: "upstream 400 passes through", ans: jsonAnswer(400, testdata(t, "codex-error-400-store.json")), status: 400, check: func(t *testing.T, body string) {
			if body != string(testdata(t, "codex-error-400-store.json")) {
				t.Errorf("body %s", body)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, got := recordServer(t, tc.ans)
			tr := mustNew(t, account(storage.ProviderCodex, srv.URL), Options{})
			in := []byte(`{"model":"gpt-5.4","input":"hi","stream":false,"store":true}`)
			resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Responses, Stream: false, Body: in})
			if sent := got(); len(sent) != 1 || string(sent[0].Body) != `{"model":"gpt-5.4","input":"hi","stream":true,"store":false}` {
				t.Fatalf("sent %+v", sent)
			}
			if tc.wantErrKnd != KindUnknown {
				if KindOf(err) != tc.wantErrKnd || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
					t.Fatalf("got %v, want kind %s / %v", err, tc.wantErrKnd, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			if resp.Status != tc.status {
				t.Fatalf("status %d, want %d; body %s", resp.Status, tc.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if cl := resp.Header.Get("Content-Length"); cl != strconv.Itoa(len(body)) {
				t.Errorf("Content-Length %q for %d bytes", cl, len(body))
			}
			if tc.name == "completed" && resp.Header.Get("X-Codex-Primary-Used-Percent") != "22" {
				t.Errorf("upstream rate-limit headers dropped")
			}
			if tc.check != nil {
				tc.check(t, string(body))
			}
		})
	}
}

// terminalResponse returns the "response" object of the last event of an SSE fixture.
func terminalResponse(t *testing.T, sse []byte) string {
	events := bytes.Split(bytes.TrimSpace(sse), []byte("\n\n"))
	last := events[len(events)-1]
	_, data, _ := bytes.Cut(last, []byte("data: "))
	const key = `"response":`
	i := bytes.Index(data, []byte(key))
	return string(data[i+len(key) : len(data)-1])
}

func regexpRemoveEventLines(sse []byte) []byte {
	var out []byte
	for _, l := range bytes.SplitAfter(sse, []byte("\n")) {
		if !bytes.HasPrefix(l, []byte("event:")) {
			out = append(out, l...)
		}
	}
	return out
}

func wantError(t *testing.T, body, code, typ, msg string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	if e.Error.Code == nil || *e.Error.Code != code || e.Error.Type != typ || !strings.Contains(e.Error.Message, msg) {
		t.Errorf("error body %s; want code %q type %q message ~%q", body, code, typ, msg)
	}
	for _, k := range []string{`"message":`, `"type":`, `"param":`, `"code":`} {
		if !strings.Contains(body, k) {
			t.Errorf("error body lacks %s: %s", k, body)
		}
	}
}

func TestCodexStreamPassthrough(t *testing.T) {
	text := testdata(t, "responses-stream-text.sse")
	srv, _ := recordServer(t, sseAnswer(text))
	tr := mustNew(t, account(storage.ProviderCodex, srv.URL), Options{})
	resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Responses, Stream: true, Body: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); !bytes.Equal(b, text) {
		t.Fatal("streamed body differs from the upstream's")
	}
}

// foreverServer streams an event every few milliseconds until the client goes
// away; sent is closed once the first event is written, gone when the
// handler sees the disconnect.
func foreverServer(t *testing.T, eventName string) (srv *httptest.Server, sent, gone chan struct{}) {
	sent, gone = make(chan struct{}), make(chan struct{})
	var first, once sync.Once
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		f := w.(http.Flusher)
		for {
			if _, err := io.WriteString(w, "event: "+eventName+"\ndata: {\"type\":\""+eventName+"\",\"delta\":\"x\"}\n\n"); err != nil {
				break
			}
			f.Flush()
			first.Do(func() { close(sent) })
			select {
			case <-r.Context().Done():
				once.Do(func() { close(gone) })
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		once.Do(func() { close(gone) })
	}))
	t.Cleanup(srv.Close)
	return srv, sent, gone
}

// within runs fn and fails t if it has not returned after d: a bound on
// what would otherwise hang the test, not a measure of speed.
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still running after %v", what, d)
	}
}

// The body of a stream that never ends ends with the caller's cancel.
func TestCancelMidStream(t *testing.T) {
	for _, p := range []storage.Provider{storage.ProviderOpenAI, storage.ProviderCodex} {
		t.Run(string(p), func(t *testing.T) {
			srv, _, gone := foreverServer(t, "response.output_text.delta")
			tr := mustNew(t, account(p, srv.URL), Options{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			resp, err := tr.Do(ctx, &Request{Endpoint: translate.Responses, Stream: true, Body: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			if _, err := br.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
			cancel()
			within(t, 30*time.Second, "the body read after cancel", func() { _, err = io.Copy(io.Discard, br) })
			if KindOf(err) != KindCanceled || !errors.Is(err, context.Canceled) {
				t.Errorf("read error %v (kind %s), want canceled", err, KindOf(err))
			}
			select {
			case <-gone:
			case <-time.After(30 * time.Second):
				t.Fatal("server did not see the disconnect")
			}
		})
	}
}

// A non-stream answer being assembled from a stream that never ends ends
// with the caller's cancel.
func TestCancelDuringAssembly(t *testing.T) {
	srv, sent, gone := foreverServer(t, "response.output_text.delta")
	tr := mustNew(t, account(storage.ProviderCodex, srv.URL), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-sent // the transport is reading the stream
		cancel()
	}()
	var err error
	within(t, 30*time.Second, "Do after cancel", func() {
		_, err = tr.Do(ctx, &Request{Endpoint: translate.Responses, Stream: false, Body: []byte(`{}`)})
	})
	if KindOf(err) != KindCanceled {
		t.Fatalf("got %v", err)
	}
	select {
	case <-gone:
	case <-time.After(30 * time.Second):
		t.Fatal("server did not see the disconnect")
	}
}

// stallServer sends its head only after release is closed (or the client goes away).
func stallServer(t *testing.T) (srv *httptest.Server, release func()) {
	ch := make(chan struct{})
	var once sync.Once
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {}\n\n")
	}))
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(func() { release(); srv.Close() })
	return srv, release
}

// A head that does not come within HeaderTimeout ends the call (the server
// never sends one: only the timeout can end it).
func TestHeaderTimeout(t *testing.T) {
	srv, _ := stallServer(t)
	for _, p := range []storage.Provider{storage.ProviderOpenAI, storage.ProviderCodex} {
		tr := mustNew(t, account(p, srv.URL), Options{HeaderTimeout: 100 * time.Millisecond})
		var err error
		within(t, 30*time.Second, string(p)+": Do", func() {
			_, err = tr.Do(context.Background(), &Request{Endpoint: translate.Responses, Stream: true, Body: []byte(`{}`)})
		})
		if KindOf(err) != KindTimeout || !errors.Is(err, ErrHeaderTimeout) {
			t.Fatalf("%s: got %v", p, err)
		}
		assertNoSecret(t, err)
	}
}

func TestHeaderTimeoutDoesNotCutTheBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		time.Sleep(300 * time.Millisecond)
		io.WriteString(w, "data: late\n\n")
	}))
	defer srv.Close()
	tr := mustNew(t, account(storage.ProviderOpenAI, srv.URL), Options{HeaderTimeout: 100 * time.Millisecond})
	resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Chat, Stream: true, Body: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); string(b) != "data: late\n\n" {
		t.Fatalf("body %q", b)
	}
}

func TestHeaderTimeoutDefaults(t *testing.T) {
	for _, tc := range []struct {
		opt    time.Duration
		stream bool
		want   time.Duration
	}{
		{0, true, DefaultHeaderTimeout},
		{0, false, 0},
		{-1, true, 0},
		{time.Second, false, time.Second},
		{time.Second, true, time.Second},
	} {
		b := base{headerTimeout: tc.opt}
		if got := b.timeoutFor(tc.stream); got != tc.want {
			t.Errorf("timeoutFor(%v, stream=%v) = %v, want %v", tc.opt, tc.stream, got, tc.want)
		}
	}
}

func TestCallerDeadline(t *testing.T) {
	srv, _ := stallServer(t)
	tr := mustNew(t, account(storage.ProviderOpenAI, srv.URL), Options{HeaderTimeout: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := tr.Do(ctx, &Request{Endpoint: translate.Chat, Stream: true, Body: []byte(`{}`)})
	if KindOf(err) != KindTimeout || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
}

func TestCanceledBeforeDo(t *testing.T) {
	srv, got := recordServer(t, sseAnswer(nil))
	tr := mustNew(t, account(storage.ProviderOpenAI, srv.URL), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := tr.Do(ctx, &Request{Endpoint: translate.Chat, Stream: true, Body: []byte(`{}`)})
	if KindOf(err) != KindCanceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	if len(got()) != 0 {
		t.Error("request sent with a cancelled ctx")
	}
}

func TestDialError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, p := range []storage.Provider{storage.ProviderOpenAI, storage.ProviderCodex} {
		tr := mustNew(t, account(p, "http://"+addr+"/v1"), Options{})
		_, err := tr.Do(context.Background(), &Request{Endpoint: translate.Responses, Stream: true, Body: []byte(`{}`)})
		var ue *Error
		if !errors.As(err, &ue) || ue.Kind != KindDial || ue.Sent() {
			t.Fatalf("%s: got %v", p, err)
		}
		assertNoSecret(t, err)
	}
}

func TestTLSError(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake failure is expected
	srv.StartTLS()
	defer srv.Close()
	tr := mustNew(t, account(storage.ProviderOpenAI, srv.URL), Options{}) // the shared client does not trust the test CA
	_, err := tr.Do(context.Background(), &Request{Endpoint: translate.Chat, Body: []byte(`{}`)})
	if KindOf(err) != KindTLS {
		t.Fatalf("got %v (kind %s)", err, KindOf(err))
	}
	assertNoSecret(t, err)
}

func TestHTTP2AndConnectionReuse(t *testing.T) {
	var mu sync.Mutex
	var protos []int
	var addrs []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		protos = append(protos, r.ProtoMajor)
		addrs = append(addrs, r.RemoteAddr)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {}\n\n")
	})
	tlsSrv := httptest.NewUnstartedServer(h)
	tlsSrv.EnableHTTP2 = true
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	plain := httptest.NewServer(h)
	defer plain.Close()

	pool := x509.NewCertPool()
	pool.AddCert(tlsSrv.Certificate())
	client := NewHTTPClient(HTTPConfig{TLSClientConfig: &tls.Config{RootCAs: pool}})
	for _, tc := range []struct {
		url   string
		proto int
	}{{tlsSrv.URL, 2}, {plain.URL, 1}} {
		mu.Lock()
		protos, addrs = nil, nil
		mu.Unlock()
		tr := mustNew(t, account(storage.ProviderOpenAI, tc.url), Options{Client: client})
		for range 3 {
			resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Chat, Stream: true, Body: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
		}
		mu.Lock()
		for i := range protos {
			if protos[i] != tc.proto || addrs[i] != addrs[0] {
				t.Errorf("%s: request %d over HTTP/%d from %s (first from %s)", tc.url, i, protos[i], addrs[i], addrs[0])
			}
		}
		mu.Unlock()
	}
}

func TestNoRedirects(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	tr := mustNew(t, account(storage.ProviderOpenAI, srv.URL), Options{})
	resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Chat, Body: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.Status != http.StatusTemporaryRedirect {
		t.Fatalf("status %d", resp.Status)
	}
}

func TestErrorKinds(t *testing.T) {
	if KindOf(nil) != KindUnknown || KindOf(errors.New("x")) != KindUnknown {
		t.Error("KindOf of a plain error")
	}
	wrapped := errors.Join(errors.New("ctx"), &Error{Kind: KindConn, Err: io.ErrUnexpectedEOF})
	if KindOf(wrapped) != KindConn || !errors.Is(wrapped, io.ErrUnexpectedEOF) {
		t.Error("KindOf through wrapping")
	}
	names := map[string]bool{}
	for k := KindUnknown; k <= KindProtocol; k++ {
		names[k.String()] = true
	}
	if len(names) != int(KindProtocol)+1 || ErrorKind(200).String() != "unknown" {
		t.Errorf("kind names %v", names)
	}
	e := &Error{Kind: KindDial, Err: errors.New("refused")}
	if e.Error() != "upstream dial: refused" {
		t.Errorf("Error() = %q", e.Error())
	}
	if got := bodyErr(context.Background(), io.ErrUnexpectedEOF); KindOf(got) != KindConn {
		t.Errorf("unexpected EOF in a body: %v", got)
	}
	if bodyErr(context.Background(), io.EOF) != io.EOF {
		t.Error("io.EOF must stay io.EOF")
	}
}

func BenchmarkOpenAIChatStream(b *testing.B) {
	sse := testdata(b, "chat-stream-text.sse")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.Write(sse)
	}))
	defer srv.Close()
	tr := mustNew(b, account(storage.ProviderOpenAI, srv.URL), Options{})
	body := []byte(`{"model":"gpt-5-nano","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	req := &Request{Endpoint: translate.Chat, Stream: true, Body: body}
	ctx := context.Background()
	buf := make([]byte, 32<<10)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := tr.Do(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{resp.Body}, buf); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}

func BenchmarkCodexNonStream(b *testing.B) {
	sse := testdata(b, "responses-stream-text.sse")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.Write(sse)
	}))
	defer srv.Close()
	tr := mustNew(b, account(storage.ProviderCodex, srv.URL), Options{})
	req := &Request{Endpoint: translate.Responses, Body: testdata(b, "codex-request-body.json")}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := tr.Do(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}

// roundTripFunc is an in-memory upstream.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// BenchmarkOpenAIChatStreamInMemory measures the transport's own cost per
// request: the upstream is an in-memory RoundTripper, so no sockets or server.
func BenchmarkOpenAIChatStreamInMemory(b *testing.B) {
	sse := testdata(b, "chat-stream-text.sse")
	hdr := http.Header{"Content-Type": {"text/event-stream"}}
	var rd bytes.Reader
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		rd.Reset(sse)
		return &http.Response{StatusCode: 200, Header: hdr, Body: io.NopCloser(&rd), Request: r}, nil
	})}
	acct := account(storage.ProviderOpenAI, "https://api.example.com/v1")
	req := &Request{Endpoint: translate.Chat, Stream: true, Body: []byte(`{"model":"m","stream":true}`)}
	buf := make([]byte, 32<<10)
	run := func(b *testing.B, tr Transport) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := tr.Do(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			io.CopyBuffer(io.Discard, struct{ io.Reader }{resp.Body}, buf)
			resp.Body.Close()
		}
	}
	b.Run("shared-transport-path", func(b *testing.B) {
		tr := mustNew(b, acct, Options{}).(*openAI)
		tr.rt = client.Transport // what New does with the shared client
		run(b, tr)
	})
	b.Run("options-client", func(b *testing.B) {
		run(b, mustNew(b, acct, Options{Client: client}))
	})
}

func TestConnErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Request-Id") == "hangup" { // close before any answer
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
			return
		}
		// Promise 1000 bytes, send a few, close: a body cut short.
		c, bw, _ := w.(http.Hijacker).Hijack()
		bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 1000\r\n\r\ndata: {}\n\n")
		bw.Flush()
		c.Close()
	}))
	defer srv.Close()
	tr := mustNew(t, account(storage.ProviderOpenAI, srv.URL), Options{})

	_, err := tr.Do(context.Background(), &Request{Endpoint: translate.Chat, Stream: true, Body: []byte(`{}`),
		Header: http.Header{"X-Request-Id": {"hangup"}}})
	if KindOf(err) != KindConn {
		t.Errorf("hang-up before the head: %v (kind %s)", err, KindOf(err))
	}

	resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Chat, Stream: true, Body: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	if KindOf(err) != KindConn || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("body cut short: %v (kind %s)", err, KindOf(err))
	}

	// The same cut through the codex assembler.
	ctr := mustNew(t, account(storage.ProviderCodex, srv.URL), Options{})
	_, err = ctr.Do(context.Background(), &Request{Endpoint: translate.Responses, Body: []byte(`{}`)})
	if KindOf(err) != KindConn {
		t.Errorf("codex body cut short: %v (kind %s)", err, KindOf(err))
	}
}
