package gateway

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

// testServerOf builds a Server over one account per provider given (ids
// p0, p1, …, all serving model "m"), every one answering with tr.
func testServerOf(t testing.TB, tr upstream.Transport, providers ...storage.Provider) (*Server, *actors.System, string) {
	t.Helper()
	s, sys, key := testServer(t, 0, tr)
	for i, p := range providers {
		sys.PutAccount(storage.Account{ID: "p" + string(rune('0'+i)), Name: "prov-" + string(rune('0'+i)),
			Provider: p, Models: []string{"m"}, MaxConcurrency: 1 << 20})
	}
	waitUntil(t, "the accounts to start", func() bool { return len(sys.Views()) >= len(providers) })
	return s, sys, key
}

// doWith runs one request with extra headers (no Authorization unless given).
func doWith(s *Server, method, path string, header map[string]string, body []byte) *fasthttp.Response {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(path)
	for k, v := range header {
		ctx.Request.Header.Set(k, v)
	}
	ctx.Request.SetBody(body)
	s.handle(&ctx)
	return writeOut(&ctx)
}

// isAnthropicError reports whether b is exactly Anthropic's error shape with
// the given error type.
func isAnthropicError(b []byte, typ string) bool {
	r := gjson.ParseBytes(b)
	return r.Get("type").Str == "error" && r.Get("error.type").Str == typ && r.Get("error.message").Type == gjson.String &&
		r.Get("error.message").Str != "" && !r.Get("error.code").Exists()
}

// recorder captures the upstream requests of a transport.
type recorder struct {
	inner upstream.Transport
	reqs  chan upstream.Request
}

func (r *recorder) Do(ctx context.Context, req *upstream.Request) (*upstream.Response, error) {
	select {
	case r.reqs <- *req:
	default:
	}
	return r.inner.Do(ctx, req)
}

func TestMessagesPassthrough(t *testing.T) {
	sse, err := os.ReadFile("testdata/messages-stream-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{inner: cannedTransport{200, "text/event-stream", sse}, reqs: make(chan upstream.Request, 1)}
	s, sys, key := testServerOf(t, rec, storage.ProviderAnthropic)
	body := []byte(`{"model":"m","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	resp := doWith(s, "POST", "/v1/messages?beta=true", map[string]string{
		"x-api-key": key, "anthropic-version": "2023-06-01", "anthropic-beta": "claude-code-20250219",
	}, body)
	if resp.StatusCode() != 200 || !bytes.Equal(resp.Body(), sse) {
		t.Fatalf("status %d, body differs from upstream bytes:\n%s", resp.StatusCode(), resp.Body())
	}
	if h := string(resp.Header.Peek("Request-Id")); !strings.HasPrefix(h, "req_") || h != string(resp.Header.Peek("X-Request-Id")) {
		t.Errorf("request-id %q, X-Request-Id %q", h, resp.Header.Peek("X-Request-Id"))
	}
	req := <-rec.reqs
	if req.Endpoint != translate.Messages || !bytes.Equal(req.Body, body) || req.RawQuery != "beta=true" {
		t.Errorf("upstream got endpoint %v query %q body %s", req.Endpoint, req.RawQuery, req.Body)
	}
	if req.Header.Get("Anthropic-Version") != "2023-06-01" || req.Header.Get("Anthropic-Beta") != "claude-code-20250219" {
		t.Errorf("anthropic headers not passed on: %v", req.Header)
	}
	waitIdle(t, sys)
}

func TestMessagesErrorsAreAnthropicShaped(t *testing.T) {
	s, sys, key := testServerOf(t, cannedTransport{200, "application/json", []byte(`{}`)}, storage.ProviderAnthropic)
	auth := map[string]string{"x-api-key": key, "anthropic-version": "2023-06-01"}
	bearer := map[string]string{"Authorization": "Bearer " + key}
	for _, tc := range []struct {
		name   string
		path   string
		header map[string]string
		body   string
		status int
		typ    string
	}{
		{"no key", "/v1/messages", nil, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 401, "authentication_error"},
		{"bad key", "/v1/messages", map[string]string{"x-api-key": "sk-troupe-nope"}, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 401, "authentication_error"},
		{"bad json", "/v1/messages", auth, `{"model":`, 400, "invalid_request_error"},
		{"no model", "/v1/messages", bearer, `{"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"unknown model", "/v1/messages", auth, `{"model":"nope","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`, 404, "not_found_error"},
		{"no max_tokens", "/v1/messages", auth, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"max_tokens a string", "/v1/messages", auth, `{"model":"m","max_tokens":"8","messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"max_tokens fractional", "/v1/messages", auth, `{"model":"m","max_tokens":1.5,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"max_tokens zero", "/v1/messages", auth, `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"method", "/v1/messages", auth, "", 405, "invalid_request_error"},
		{"unknown path", "/v1/nothing", auth, "", 404, "not_found_error"},
		{"count without key", "/v1/messages/count_tokens", nil, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 401, "authentication_error"},
	} {
		method := "POST"
		if tc.name == "method" {
			method = "GET"
		}
		resp := doWith(s, method, tc.path, tc.header, []byte(tc.body))
		if resp.StatusCode() != tc.status || !isAnthropicError(resp.Body(), tc.typ) {
			t.Errorf("%s: status %d body %s, want %d %s", tc.name, resp.StatusCode(), resp.Body(), tc.status, tc.typ)
		}
		if id := gjson.GetBytes(resp.Body(), "request_id").Str; tc.path == "/v1/messages" && method == "POST" && !strings.HasPrefix(id, "req_") {
			t.Errorf("%s: request_id %q", tc.name, id)
		}
		// Anthropic's request-id header, as its SDKs read it, names the
		// same request as the body and X-Request-Id.
		if h, x := string(resp.Header.Peek("Request-Id")), string(resp.Header.Peek("X-Request-Id")); h == "" || h != x || h != gjson.GetBytes(resp.Body(), "request_id").Str {
			t.Errorf("%s: request-id %q, X-Request-Id %q, body %s", tc.name, h, x, resp.Body())
		}
	}
	// max_tokens is checked by the gateway for every upstream, in Anthropic's words.
	resp := doWith(s, "POST", "/v1/messages", auth, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if m := gjson.GetBytes(resp.Body(), "error.message").Str; m != "max_tokens: Field required" {
		t.Errorf("no max_tokens: message %q", m)
	}
	// OpenAI endpoints keep OpenAI's shape even with an x-api-key.
	resp = doWith(s, "POST", "/v1/chat/completions", map[string]string{"x-api-key": key}, []byte(`{"model":`))
	if resp.StatusCode() != 400 || !isOpenAIError(resp.Body()) {
		t.Errorf("chat with x-api-key: %d %s", resp.StatusCode(), resp.Body())
	}
	if h := resp.Header.Peek("Request-Id"); len(h) != 0 || len(resp.Header.Peek("X-Request-Id")) == 0 {
		t.Errorf("chat: request-id %q (Anthropic's header, not OpenAI's), X-Request-Id %q", h, resp.Header.Peek("X-Request-Id"))
	}
	waitIdle(t, sys)
}

func TestMessagesNoAccountIsOverloaded(t *testing.T) {
	s, sys, key := testServerOf(t, cannedTransport{500, "application/json", []byte(`{"type":"error","error":{"type":"api_error","message":"boom"}}`)}, storage.ProviderAnthropic)
	resp := doWith(s, "POST", "/v1/messages", map[string]string{"x-api-key": key}, []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`))
	// Every attempt failed with a 500: the gateway's own 502, in Anthropic's shape.
	if resp.StatusCode() != 502 || !isAnthropicError(resp.Body(), "api_error") {
		t.Fatalf("status %d body %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
	for _, v := range sys.Views() {
		sys.PutAccount(storage.Account{ID: v.ID, Name: v.Name, Provider: v.Provider, Models: v.Models, Disabled: true})
	}
	// The scheduler learns of the disabled accounts from their views.
	waitUntil(t, "the disabled pool to answer 503", func() bool {
		resp = doWith(s, "POST", "/v1/messages", map[string]string{"x-api-key": key}, []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`))
		return resp.StatusCode() == 503
	})
	if resp.StatusCode() != 503 || !isAnthropicError(resp.Body(), "overloaded_error") || len(resp.Header.Peek("Retry-After")) == 0 {
		t.Fatalf("disabled pool: status %d body %s", resp.StatusCode(), resp.Body())
	}
}

func TestMessagesRequestErrorPassesThrough(t *testing.T) {
	body := []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"},"request_id":"req_up"}`)
	s, sys, key := testServerOf(t, cannedTransport{400, "application/json", body}, storage.ProviderAnthropic)
	resp := doWith(s, "POST", "/v1/messages", map[string]string{"x-api-key": key}, []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() != 400 || !bytes.Equal(resp.Body(), body) {
		t.Fatalf("status %d body %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
}

// A Messages stream that fails before content (message_start and ping are
// not content) fails over; one that breaks after content ends with an
// Anthropic error event.
func TestMessagesStreamHoldAndBreak(t *testing.T) {
	early := []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n" +
		"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
	good, err := os.ReadFile("testdata/messages-stream-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	tr := &scripted{answers: []upstream.Transport{cannedTransport{200, "text/event-stream", early}, cannedTransport{200, "text/event-stream", good}}}
	s, sys, key := testServerOf(t, tr, storage.ProviderAnthropic, storage.ProviderAnthropic)
	req := []byte(`{"model":"m","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	resp := doWith(s, "POST", "/v1/messages", map[string]string{"x-api-key": key}, req)
	if resp.StatusCode() != 200 || !bytes.Equal(resp.Body(), good) || tr.calls() != 2 {
		t.Fatalf("failover: status %d after %d calls, body:\n%s", resp.StatusCode(), tr.calls(), resp.Body())
	}
	waitIdle(t, sys)

	broken, err := os.ReadFile("testdata/messages-stream-error-overloaded.sse")
	if err != nil {
		t.Fatal(err)
	}
	cut := broken[:bytes.Index(broken, []byte("event: error"))] // content, then the connection drops
	s, sys, key = testServerOf(t, cannedTransport{200, "text/event-stream", cut}, storage.ProviderAnthropic)
	resp = doWith(s, "POST", "/v1/messages", map[string]string{"x-api-key": key}, req)
	b := resp.Body()
	if resp.StatusCode() != 200 || !bytes.HasPrefix(b, cut) {
		t.Fatalf("break: status %d body:\n%s", resp.StatusCode(), b)
	}
	tail := b[len(cut):]
	if !bytes.HasPrefix(tail, []byte("event: error\ndata: ")) || !bytes.HasSuffix(tail, []byte("}\n\n")) ||
		!isAnthropicError(bytes.TrimSpace(tail[len("event: error\ndata: "):]), "api_error") {
		t.Fatalf("break: tail %q is not an Anthropic error event", tail)
	}
	waitIdle(t, sys)

	// An upstream error event after content is relayed as it is.
	s, sys, key = testServerOf(t, cannedTransport{200, "text/event-stream", broken}, storage.ProviderAnthropic)
	resp = doWith(s, "POST", "/v1/messages", map[string]string{"x-api-key": key}, req)
	if resp.StatusCode() != 200 || !bytes.Equal(resp.Body(), broken) {
		t.Fatalf("upstream error event: status %d body:\n%s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
}

func TestMessagesUsageRecorded(t *testing.T) {
	sse, err := os.ReadFile("testdata/messages-stream-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	js, err := os.ReadFile("testdata/messages-nonstream-text.response.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		tr     upstream.Transport
		stream bool
	}{
		{"stream", cannedTransport{200, "text/event-stream", sse}, true},
		{"json", cannedTransport{200, "application/json", js}, false},
	} {
		s, sys, key := testServerOf(t, tc.tr, storage.ProviderAnthropic)
		store := s.store.(*memStore)
		req := `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"stream":` + map[bool]string{true: "true", false: "false"}[tc.stream] + `}`
		resp := doWith(s, "POST", "/v1/messages", map[string]string{"x-api-key": key}, []byte(req))
		if resp.StatusCode() != 200 {
			t.Fatalf("%s: status %d", tc.name, resp.StatusCode())
		}
		waitIdle(t, sys)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		sys.FlushUsage(ctx)
		cancel()
		store.mu.Lock()
		if len(store.usage) != 1 {
			t.Fatalf("%s: %d usage records", tc.name, len(store.usage))
		}
		u := store.usage[0]
		store.mu.Unlock()
		usageObj := gjson.GetBytes(js, "usage")
		if tc.stream {
			usageObj = gjson.Get(firstData(sse), "message.usage")
		}
		wantIn := usageObj.Get("input_tokens").Int() + usageObj.Get("cache_creation_input_tokens").Int() + usageObj.Get("cache_read_input_tokens").Int()
		if u.Route != "messages" || u.InputTokens != wantIn || u.OutputTokens <= 0 {
			t.Errorf("%s: record %+v, want route messages, input %d, output > 0", tc.name, u, wantIn)
		}
	}
}

// firstData is the data of the first event of an SSE body.
func firstData(sse []byte) string {
	_, rest, _ := bytes.Cut(sse, []byte("data: "))
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	return string(line)
}

// An unparsable Messages body is answered in Anthropic's shape without
// OpenAI's message, which names the OpenAI API; Chat keeps OpenAI's text.
func TestMessagesBadJSONSaysNothingOfOpenAI(t *testing.T) {
	s, sys, key := testServerOf(t, cannedTransport{200, "application/json", []byte(`{}`)}, storage.ProviderAnthropic)
	auth := map[string]string{"x-api-key": key, "anthropic-version": "2023-06-01"}
	for _, body := range []string{`{"model":`, `[1]`, "\xff", strings.Repeat("[", 20000) + strings.Repeat("]", 20000)} {
		for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
			resp := doWith(s, "POST", path, auth, []byte(body))
			msg := gjson.GetBytes(resp.Body(), "error.message").Str
			if resp.StatusCode() != 400 || !isAnthropicError(resp.Body(), "invalid_request_error") || msg != msgAnthropicBadJSON {
				t.Errorf("%s %.20q: %d %s", path, body, resp.StatusCode(), resp.Body())
			}
			if id := gjson.GetBytes(resp.Body(), "request_id").Str; !strings.HasPrefix(id, "req_") || string(resp.Header.Peek("X-Request-Id")) != id {
				t.Errorf("%s: request_id %q, header %q", path, id, resp.Header.Peek("X-Request-Id"))
			}
		}
	}
	resp := doWith(s, "POST", "/v1/chat/completions", auth, []byte(`{"model":`))
	if !strings.Contains(gjson.GetBytes(resp.Body(), "error.message").Str, "OpenAI API") {
		t.Errorf("chat: %s", resp.Body())
	}
	waitIdle(t, sys)
}

// count_tokens reads a compressed body as /v1/messages does (it answered
// 400 "error parsing the body" to a gzip body Messages accepts), with the
// same limit on the decompressed size.
func TestCountTokensCompressedBody(t *testing.T) {
	s, sys, key := testServerOf(t, cannedTransport{200, "application/json", []byte(`{}`)}, storage.ProviderOpenAI)
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		w.Write(b)
		w.Close()
		return buf.Bytes()
	}
	auth := map[string]string{"x-api-key": key, "anthropic-version": "2023-06-01", "Content-Encoding": "gzip"}
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hello there"}]}`)
	resp := doWith(s, "POST", "/v1/messages/count_tokens", auth, gz(body))
	if resp.StatusCode() != 200 || gjson.GetBytes(resp.Body(), "input_tokens").Int() <= 0 {
		t.Fatalf("gzip body: %d %s", resp.StatusCode(), resp.Body())
	}
	plain := doWith(s, "POST", "/v1/messages/count_tokens", map[string]string{"x-api-key": key}, body)
	if !bytes.Equal(plain.Body(), resp.Body()) {
		t.Errorf("gzip %s, plain %s", resp.Body(), plain.Body())
	}
	bomb := gz(append(append([]byte(`{"model":"m","messages":[{"role":"user","content":"`), bytes.Repeat([]byte("a"), 17<<20)...), `"}]}`...))
	if resp := doWith(s, "POST", "/v1/messages/count_tokens", auth, bomb); resp.StatusCode() != 413 || !isAnthropicError(resp.Body(), "request_too_large") {
		t.Errorf("bomb: %d %s", resp.StatusCode(), resp.Body())
	}
	if resp := doWith(s, "POST", "/v1/messages/count_tokens", auth, []byte("not gzip")); resp.StatusCode() != 400 || !isAnthropicError(resp.Body(), "invalid_request_error") {
		t.Errorf("corrupt: %d %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
}

// TestMessagesRefusedAsAnthropicRefuses: a Messages request Anthropic's API
// refuses with 400 invalid_request_error is refused so by the gateway
// before any upstream is chosen, whichever provider would serve it (an
// openai or codex account, reached through translation, took these
// before): a custom tool without input_schema, thinking.budget_tokens
// below 1024 or not below max_tokens, a tool_choice naming no tool of the
// request. The interleaved-thinking beta lets the budget pass max_tokens,
// as Anthropic does.
func TestMessagesRefusedAsAnthropicRefuses(t *testing.T) {
	const tool = `{"name":"get_weather","description":"w","input_schema":{"type":"object","properties":{}}}`
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct{ name, body, want string }{
		{"tool without input_schema", `{"model":"m","max_tokens":100,` + msgs + `,"tools":[` + tool + `,{"name":"x","description":"no schema"}]}`,
			"tools.1.custom.input_schema: Field required"},
		{"custom tool without input_schema", `{"model":"m","max_tokens":100,` + msgs + `,"tools":[{"type":"custom","name":"x"}]}`,
			"tools.0.custom.input_schema: Field required"},
		{"budget below 1024", `{"model":"m","max_tokens":4096,` + msgs + `,"thinking":{"type":"enabled","budget_tokens":512}}`,
			"thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"},
		{"budget without a value", `{"model":"m","max_tokens":4096,` + msgs + `,"thinking":{"type":"enabled"}}`,
			"thinking.enabled.budget_tokens: Field required"},
		{"budget not below max_tokens", `{"model":"m","max_tokens":2048,` + msgs + `,"thinking":{"type":"enabled","budget_tokens":2048}}`,
			"`max_tokens` must be greater than `thinking.budget_tokens`"},
		{"tool_choice naming no tool", `{"model":"m","max_tokens":100,` + msgs + `,"tools":[` + tool + `],"tool_choice":{"type":"tool","name":"get_time"}}`,
			"Tool `get_time` was not found in `tools`"},
		{"tool_choice without tools", `{"model":"m","max_tokens":100,` + msgs + `,"tool_choice":{"type":"tool","name":"get_time"}}`,
			"Tool `get_time` was not found in `tools`"},
	}
	for _, p := range []storage.Provider{storage.ProviderOpenAI, storage.ProviderCodex} {
		up := &counting{inner: cannedTransport{500, "application/json", []byte(`{"error":{"message":"boom","type":"server_error"}}`)}}
		s, sys, key := testServerOf(t, up, p)
		for _, tc := range cases {
			for _, stream := range []string{"", `"stream":true,`} {
				resp := doWith(s, "POST", "/v1/messages", map[string]string{"x-api-key": key}, []byte(strings.Replace(tc.body, "{", "{"+stream, 1)))
				if resp.StatusCode() != 400 || !isAnthropicError(resp.Body(), "invalid_request_error") ||
					!strings.Contains(gjson.GetBytes(resp.Body(), "error.message").Str, tc.want) {
					t.Errorf("%s, %s account, stream %v: %d %s; want 400 invalid_request_error %q", tc.name, p, stream != "", resp.StatusCode(), resp.Body(), tc.want)
				}
			}
		}
		if n := up.n.Load(); n != 0 {
			t.Errorf("%s: %d upstream calls for refused requests", p, n)
		}
		// Valid ones go upstream: a budget below max_tokens, a tool_choice
		// naming a tool, thinking disabled, and under the
		// interleaved-thinking beta a budget past max_tokens.
		for _, ok := range []struct {
			body string
			beta string
		}{
			{`{"model":"m","max_tokens":4096,` + msgs + `,"thinking":{"type":"enabled","budget_tokens":1024},"tools":[` + tool + `],"tool_choice":{"type":"tool","name":"get_weather"}}`, ""},
			{`{"model":"m","max_tokens":2048,` + msgs + `,"thinking":{"type":"enabled","budget_tokens":8000}}`, "interleaved-thinking-2025-05-14"},
			{`{"model":"m","max_tokens":100,` + msgs + `,"thinking":{"type":"disabled"}}`, ""},
		} {
			before := up.n.Load()
			h := map[string]string{"x-api-key": key}
			if ok.beta != "" {
				h["anthropic-beta"] = ok.beta
			}
			resp := doWith(s, "POST", "/v1/messages", h, []byte(ok.body))
			if up.n.Load() == before {
				t.Errorf("%s account: a valid request went nowhere: %d %s", p, resp.StatusCode(), resp.Body())
			}
		}
		waitIdle(t, sys)
	}
}
