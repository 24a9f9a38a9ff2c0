package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// servedHead turns a recorded .http response head into answer headers.
func servedHead(t *testing.T, name string) map[string]string {
	t.Helper()
	_, h, _ := parseHTTPHead(t, testdata(t, name))
	m := make(map[string]string, len(h))
	for k := range h {
		m[k] = h.Get(k)
	}
	return m
}

func TestAnthropicStreamRequest(t *testing.T) {
	sse := testdata(t, "messages-stream-text.sse")
	srv, got := recordServer(t, answer{status: 200, header: servedHead(t, "messages-response-headers.stream.http"), body: sse})
	tr := mustNew(t, account(storage.ProviderAnthropic, srv.URL), Options{})
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	// The client's head as Claude Code sends it, plus the Go SDK's telemetry.
	client := headersFromFixture(t, "messages-request-headers.sdk.http")
	client.Set("X-Api-Key", "client-key")
	client.Set("Authorization", "Bearer client-key")
	client.Set("Anthropic-Version", "2026-10-21")
	client.Set("Anthropic-Beta", "claude-code-20250219,interleaved-thinking-2025-05-14")
	client.Set("X-App", "cli")
	client.Set("X-Claude-Code-Session-Id", "sess-1")
	client.Set("Anthropic-Dangerous-Direct-Browser-Access", "true")
	resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Messages, Stream: true, Body: body, Header: client, RawQuery: "beta=true"})
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); !bytes.Equal(b, sse) || resp.Status != 200 {
		t.Fatalf("status %d, body differs from the served stream", resp.Status)
	}
	if resp.Header.Get("Anthropic-Ratelimit-Tokens-Remaining") != "279000" || resp.Header.Get("Request-Id") == "" {
		t.Errorf("upstream headers not kept: %v", resp.Header)
	}
	r := got()[0]
	if r.Method != http.MethodPost || r.Path != "/v1/messages" || r.Query != "beta=true" {
		t.Errorf("%s %s?%s", r.Method, r.Path, r.Query)
	}
	if !bytes.Equal(r.Body, body) {
		t.Errorf("body changed: %s", r.Body)
	}
	want := map[string]string{
		"X-Api-Key":                secretKey,
		"Anthropic-Version":        "2026-10-21",
		"Anthropic-Beta":           "claude-code-20250219,interleaved-thinking-2025-05-14",
		"Content-Type":             "application/json",
		"Accept":                   "text/event-stream",
		"User-Agent":               DefaultUserAgent,
		"Authorization":            "",
		"X-Stainless-Os":           "",
		"X-App":                    "",
		"X-Claude-Code-Session-Id": "",
		"Anthropic-Dangerous-Direct-Browser-Access": "",
	}
	for k, v := range want {
		if g := r.Header.Get(k); g != v {
			t.Errorf("header %s = %q, want %q", k, g, v)
		}
	}
	if n := len(r.Header.Values("X-Api-Key")); n != 1 {
		t.Errorf("%d x-api-key headers", n)
	}
}

func TestAnthropicJSONRequest(t *testing.T) {
	ans := testdata(t, "messages-nonstream-text.response.json")
	srv, got := recordServer(t, jsonAnswer(200, ans))
	for _, tc := range []struct {
		base, query   string
		path, wantQry string
	}{
		{srv.URL, "", "/v1/messages", ""},
		{srv.URL + "/", "beta=false", "/v1/messages", ""},
		{srv.URL + "/v1", "", "/v1/messages", ""},  // an OpenAI-style base with /v1 is not doubled
		{srv.URL + "/v1/", "", "/v1/messages", ""}, // nor with a trailing slash
		{srv.URL + "/proxy?t=1", "", "/proxy/v1/messages", "t=1"},
		{srv.URL + "/proxy?t=1", "x=2&beta=true", "/proxy/v1/messages", "t=1&beta=true"},
	} {
		tr := mustNew(t, account(storage.ProviderAnthropic, tc.base), Options{UserAgent: "my-agent/1"})
		resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Messages, Body: []byte(`{"model":"m"}`), RawQuery: tc.query})
		if err != nil {
			t.Fatal(err)
		}
		if b := readAll(t, resp); !bytes.Equal(b, ans) {
			t.Errorf("body %s", b)
		}
		all := got()
		r := all[len(all)-1]
		if r.Path != tc.path || r.Query != tc.wantQry {
			t.Errorf("base %q query %q: sent %s?%s, want %s?%s", tc.base, tc.query, r.Path, r.Query, tc.path, tc.wantQry)
		}
		if r.Header.Get("Accept") != "application/json" || r.Header.Get("User-Agent") != "my-agent/1" ||
			r.Header.Get("Anthropic-Version") != DefaultAnthropicVersion || r.Header.Get("Anthropic-Beta") != "" {
			t.Errorf("headers %v", r.Header)
		}
	}
}

func TestAnthropicVersionFallback(t *testing.T) {
	srv, got := recordServer(t, jsonAnswer(200, []byte(`{}`)))
	tr := mustNew(t, account(storage.ProviderAnthropic, srv.URL), Options{})
	for _, v := range [][]string{nil, {""}, {"2023-06-01", "2099-01-01"}} {
		h := http.Header{}
		if v != nil {
			h["Anthropic-Version"] = v
		}
		resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Messages, Body: []byte(`{}`), Header: h})
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		all := got()
		if g := all[len(all)-1].Header.Values("Anthropic-Version"); len(g) != 1 || g[0] != DefaultAnthropicVersion {
			t.Errorf("client version %q: sent %q", v, g)
		}
	}
}

func TestAnthropicDefaultBaseURL(t *testing.T) {
	a := mustNew(t, account(storage.ProviderAnthropic, ""), Options{}).(*anthropic)
	if a.msgURL.String() != "https://api.anthropic.com/v1/messages" ||
		a.countURL.String() != "https://api.anthropic.com/v1/messages/count_tokens" ||
		a.msgBetaURL.String() != "https://api.anthropic.com/v1/messages?beta=true" {
		t.Errorf("URLs %q %q %q", a.msgURL, a.countURL, a.msgBetaURL)
	}
	if !Supports(storage.ProviderAnthropic, translate.Messages) || Supports(storage.ProviderAnthropic, translate.Chat) || Supports(storage.ProviderAnthropic, translate.Responses) {
		t.Error("anthropic must speak Messages only")
	}
}

func TestAnthropicCountTokens(t *testing.T) {
	srv, got := recordServer(t, jsonAnswer(200, []byte(`{"input_tokens":42}`)))
	tr := mustNew(t, account(storage.ProviderAnthropic, srv.URL), Options{})
	tc, ok := tr.(TokenCounter)
	if !ok {
		t.Fatal("the anthropic transport is not a TokenCounter")
	}
	h := http.Header{}
	h.Set("Anthropic-Beta", "token-counting-2024-11-01")
	body := []byte(`{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`)
	// Stream is ignored: counting always answers JSON.
	resp, err := tc.CountTokens(context.Background(), &Request{Endpoint: translate.Messages, Stream: true, Body: body, Header: h, RawQuery: "beta=true"})
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); string(b) != `{"input_tokens":42}` {
		t.Errorf("body %s", b)
	}
	r := got()[0]
	if r.Path != "/v1/messages/count_tokens" || r.Query != "beta=true" || !bytes.Equal(r.Body, body) {
		t.Errorf("sent %s?%s %s", r.Path, r.Query, r.Body)
	}
	if r.Header.Get("Accept") != "application/json" || r.Header.Get("X-Api-Key") != secretKey || r.Header.Get("Anthropic-Beta") != "token-counting-2024-11-01" {
		t.Errorf("headers %v", r.Header)
	}
	if _, err := tc.CountTokens(context.Background(), &Request{Endpoint: translate.Chat, Body: body}); !errors.Is(err, ErrUnsupportedEndpoint) {
		t.Errorf("count tokens for chat: %v", err)
	}
	for _, p := range []storage.Provider{storage.ProviderOpenAI, storage.ProviderCodex} {
		if _, ok := mustNew(t, account(p, srv.URL), Options{}).(TokenCounter); ok {
			t.Errorf("%s claims to count tokens", p)
		}
	}
}

func TestAnthropicErrorsPassThrough(t *testing.T) {
	head := testdata(t, "errors/anthropic-messages/response-headers.429.http")
	status, h, _ := parseHTTPHead(t, head)
	errBody := testdata(t, "errors/anthropic-messages/error-429.json")
	hdr := map[string]string{}
	for k := range h {
		hdr[k] = h.Get(k)
	}
	srv, _ := recordServer(t, answer{status: status, header: hdr, body: errBody})
	tr := mustNew(t, account(storage.ProviderAnthropic, srv.URL), Options{})
	for _, stream := range []bool{true, false} {
		resp, err := tr.Do(context.Background(), &Request{Endpoint: translate.Messages, Stream: stream, Body: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		b := readAll(t, resp)
		if resp.Status != 429 || !bytes.Equal(b, errBody) || resp.Header.Get("Retry-After") != "17" {
			t.Fatalf("status %d body %s", resp.Status, b)
		}
		if v := Classify(resp.Status, resp.Header, b); v.Class != ClassRate || v.RetryAfter != 17*time.Second {
			t.Errorf("verdict %v/%v", v.Class, v.RetryAfter)
		}
	}
}

func TestAnthropicWrongContentType(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ans    answer
		stream bool
	}{
		{"JSON for a stream", jsonAnswer(200, testdata(t, "messages-nonstream-text.response.json")), true},
		{"SSE for JSON", sseAnswer(testdata(t, "messages-stream-text.sse")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := recordServer(t, tc.ans)
			tr := mustNew(t, account(storage.ProviderAnthropic, srv.URL), Options{})
			_, err := tr.Do(context.Background(), &Request{Endpoint: translate.Messages, Stream: tc.stream, Body: []byte(`{}`)})
			if KindOf(err) != KindProtocol || !errors.Is(err, ErrWrongContentType) {
				t.Fatalf("got %v", err)
			}
		})
	}
	srv, _ := recordServer(t, sseAnswer([]byte("data: {}\n\n")))
	tc := mustNew(t, account(storage.ProviderAnthropic, srv.URL), Options{}).(TokenCounter)
	if _, err := tc.CountTokens(context.Background(), &Request{Body: []byte(`{}`)}); !errors.Is(err, ErrWrongContentType) {
		t.Errorf("count tokens answered with SSE: %v", err)
	}
}

func TestAnthropicUnsupportedEndpoint(t *testing.T) {
	srv, got := recordServer(t, jsonAnswer(200, []byte(`{}`)))
	tr := mustNew(t, account(storage.ProviderAnthropic, srv.URL), Options{})
	for _, e := range []translate.Protocol{translate.Chat, translate.Responses, 0} {
		_, err := tr.Do(context.Background(), &Request{Endpoint: e, Body: []byte(`{}`)})
		var ue *Error
		if !errors.As(err, &ue) || ue.Kind != KindRequest || !errors.Is(err, ErrUnsupportedEndpoint) || ue.Sent() {
			t.Errorf("%s: got %v", e, err)
		}
	}
	if n := len(got()); n != 0 {
		t.Errorf("%d requests reached the server", n)
	}
}

func TestAnthropicNewErrors(t *testing.T) {
	a := account(storage.ProviderAnthropic, "")
	a.Credentials.APIKey = ""
	if _, err := New(a, Options{}); !errors.Is(err, ErrMissingCredentials) || !strings.Contains(err.Error(), a.Name) {
		t.Errorf("no key: %v", err)
	}
	b := account(storage.ProviderAnthropic, "https://u:SECRET@exa mple.com:x/%zz")
	_, err := New(b, Options{})
	if !errors.Is(err, ErrInvalidBaseURL) {
		t.Errorf("bad URL: %v", err)
	}
	assertNoSecret(t, err)
}

// The transport conventions every provider shares, for anthropic: header
// timeout, caller cancellation mid-stream, dial errors.
func TestAnthropicConformance(t *testing.T) {
	t.Run("header timeout", func(t *testing.T) {
		srv, _ := stallServer(t)
		tr := mustNew(t, account(storage.ProviderAnthropic, srv.URL), Options{HeaderTimeout: 100 * time.Millisecond})
		_, err := tr.Do(context.Background(), &Request{Endpoint: translate.Messages, Stream: true, Body: []byte(`{}`)})
		if KindOf(err) != KindTimeout || !errors.Is(err, ErrHeaderTimeout) {
			t.Fatalf("got %v", err)
		}
		assertNoSecret(t, err)
	})
	t.Run("cancel mid-stream", func(t *testing.T) {
		srv, _, gone := foreverServer(t, "content_block_delta")
		tr := mustNew(t, account(storage.ProviderAnthropic, srv.URL), Options{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp, err := tr.Do(ctx, &Request{Endpoint: translate.Messages, Stream: true, Body: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err = io.Copy(io.Discard, br); KindOf(err) != KindCanceled {
			t.Errorf("read error %v, want canceled", err)
		}
		select {
		case <-gone:
		case <-time.After(5 * time.Second):
			t.Fatal("server did not see the disconnect")
		}
	})
	t.Run("dial error", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		tr := mustNew(t, account(storage.ProviderAnthropic, "http://"+addr), Options{})
		_, err = tr.Do(context.Background(), &Request{Endpoint: translate.Messages, Stream: true, Body: []byte(`{}`)})
		var ue *Error
		if !errors.As(err, &ue) || ue.Kind != KindDial || ue.Sent() {
			t.Fatalf("got %v", err)
		}
		assertNoSecret(t, err)
	})
}

// BenchmarkAnthropicStreamInMemory is BenchmarkOpenAIChatStreamInMemory for
// the anthropic transport: its own cost per streamed Messages call (with the
// client's version and beta headers and ?beta=true), no sockets.
func BenchmarkAnthropicStreamInMemory(b *testing.B) {
	sse := testdata(b, "messages-stream-text.sse")
	hdr := http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}}
	var rd bytes.Reader
	rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		rd.Reset(sse)
		return &http.Response{StatusCode: 200, Header: hdr, Body: io.NopCloser(&rd), Request: r}, nil
	})
	tr := mustNew(b, account(storage.ProviderAnthropic, "https://api.example.com"), Options{}).(*anthropic)
	tr.rt = rt // what New does with the shared client
	client := http.Header{"Anthropic-Version": {"2023-06-01"}, "Anthropic-Beta": {"claude-code-20250219"}}
	req := &Request{Endpoint: translate.Messages, Stream: true, Body: []byte(`{"model":"m","stream":true}`), Header: client, RawQuery: "beta=true"}
	buf := make([]byte, 32<<10)
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
