package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

// do runs one request through the handler in memory and returns the response,
// with a streamed body written out in full.
func do(s *Server, method, path, key string, body []byte) *fasthttp.Response {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(path)
	if key != "" {
		ctx.Request.Header.Set("Authorization", "Bearer "+key)
	}
	ctx.Request.SetBody(body)
	s.handle(&ctx)
	return writeOut(&ctx)
}

// writeOut writes the handler's response out as the server would (driving a
// stream's WriteTo and Close) and reads it back.
func writeOut(ctx *fasthttp.RequestCtx) *fasthttp.Response {
	resp := &fasthttp.Response{}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	ctx.Response.Write(w) // drives a stream's WriteTo and Close, as the server would
	w.Flush()
	resp.Read(bufio.NewReader(&buf))
	return resp
}

func isOpenAIError(b []byte) bool {
	r := gjson.ParseBytes(b)
	return r.Get("error.message").Type == gjson.String && r.Get("error.type").Type == gjson.String &&
		r.Get("error.param").Exists() && r.Get("error.code").Exists()
}

func TestPassthroughStream(t *testing.T) {
	sse, err := os.ReadFile("testdata/chat-stream-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	s, sys, key := testServer(t, 2, cannedTransport{200, "text/event-stream", sse})
	resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() != 200 || !bytes.Equal(resp.Body(), sse) {
		t.Fatalf("status %d, body differs from upstream bytes:\n%s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
}

func TestFailoverToNextAccount(t *testing.T) {
	// One transport for all accounts that fails the first call: the second account answers.
	tr := &flaky{fail: 1, ok: cannedTransport{200, "application/json", []byte(`{"id":"x","choices":[]}`)}}
	s, sys, key := testServer(t, 3, tr)
	resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
}

func TestRequestErrorPassesThrough(t *testing.T) {
	body := []byte(`{"error":{"message":"Unsupported parameter: 'max_tokens'","type":"invalid_request_error","param":"max_tokens","code":"unsupported_parameter"}}`)
	tr := &counting{inner: cannedTransport{400, "application/json", body}}
	s, sys, key := testServer(t, 3, tr)
	resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() != 400 || !bytes.Equal(resp.Body(), body) {
		t.Fatalf("status %d body %s", resp.StatusCode(), resp.Body())
	}
	if tr.n.Load() != 1 {
		t.Fatalf("a request-class error was retried %d times", tr.n.Load())
	}
	waitIdle(t, sys)
}

func TestTruncatedStreamEndsWithError(t *testing.T) {
	sse := []byte("data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n")
	s, sys, key := testServer(t, 1, cannedTransport{200, "text/event-stream", sse})
	resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if !bytes.HasPrefix(resp.Body(), sse) || !bytes.Contains(resp.Body(), []byte(`"error":{`)) {
		t.Fatalf("truncated stream not closed with an error event:\n%s", resp.Body())
	}
	waitIdle(t, sys)
}

func TestErrorsAreOpenAIShaped(t *testing.T) {
	s, sys, key := testServer(t, 1, cannedTransport{200, "application/json", []byte(`{}`)})
	cases := []struct {
		method, path, key, body string
		status                  int
	}{
		{"POST", "/v1/chat/completions", "", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 401},
		{"POST", "/v1/chat/completions", "sk-troupe-nope", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 401},
		{"POST", "/v1/chat/completions", key, `{"model":`, 400},
		{"POST", "/v1/chat/completions", key, `{}`, 400},
		{"POST", "/v1/chat/completions", key, `{"model":1,"messages":[{"role":"user","content":"hi"}]}`, 400},
		{"POST", "/v1/chat/completions", key, `{"model":"m","stream":"yes","messages":[{"role":"user","content":"hi"}]}`, 400},
		{"POST", "/v1/chat/completions", key, `{"model":"unknown","messages":[{"role":"user","content":"hi"}]}`, 404},
		{"GET", "/v1/chat/completions", key, ``, 405},
		{"POST", "/v1/nope", key, `{}`, 404},
	}
	for _, c := range cases {
		resp := do(s, c.method, c.path, c.key, []byte(c.body))
		if resp.StatusCode() != c.status || !isOpenAIError(resp.Body()) {
			t.Errorf("%s %s %q: status %d body %s", c.method, c.path, c.body, resp.StatusCode(), resp.Body())
		}
		if id := string(resp.Header.Peek("X-Request-Id")); !strings.HasPrefix(id, "req_") {
			t.Errorf("%s %s %q: X-Request-Id %q: every error names a request", c.method, c.path, c.body, id)
		}
	}
	// /v1/responses takes POST and, with a WebSocket upgrade, GET: a plain
	// GET is told to upgrade (426), another method is 405 naming both.
	resp := do(s, "GET", "/v1/responses", key, nil)
	if resp.StatusCode() != 426 || string(resp.Header.Peek("Upgrade")) != "websocket" || !isOpenAIError(resp.Body()) || len(resp.Header.Peek("X-Request-Id")) == 0 {
		t.Errorf("GET /v1/responses without an upgrade: %d, Upgrade %q, %s", resp.StatusCode(), resp.Header.Peek("Upgrade"), resp.Body())
	}
	resp = do(s, "DELETE", "/v1/responses", key, nil)
	if resp.StatusCode() != 405 || string(resp.Header.Peek("Allow")) != "GET, POST" || !isOpenAIError(resp.Body()) {
		t.Errorf("DELETE /v1/responses: %d, Allow %q, %s", resp.StatusCode(), resp.Header.Peek("Allow"), resp.Body())
	}
	// The two mistakes a newcomer makes most are told what to do: a base
	// URL with /v1 twice, and a model name the key cannot use.
	resp = do(s, "POST", "/v1/v1/messages", key, []byte(`{}`))
	if m := gjson.GetBytes(resp.Body(), "error.message").Str; resp.StatusCode() != 404 || !strings.Contains(m, "already ends in /v1") {
		t.Errorf("POST /v1/v1/messages: %d %q", resp.StatusCode(), m)
	}
	resp = do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"unknown","messages":[{"role":"user","content":"hi"}]}`))
	if m := gjson.GetBytes(resp.Body(), "error.message").Str; resp.StatusCode() != 404 || !strings.Contains(m, "GET /v1/models lists") {
		t.Errorf("unknown model: %d %q", resp.StatusCode(), m)
	}
	waitIdle(t, sys)
}

// FuzzParseRequest sends arbitrary bodies through the whole handler: no input
// may panic, every answer is valid JSON, errors are OpenAI-shaped, and no lease leaks.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{`{"model":"m"}`, `{"model":"m","stream":true}`, `{"model":null}`, `[]`, `null`, ``, `{"model":"m","stream":1}`, "{\"model\":\"\xff\"}", `{"model":"m","model":"x"}`} {
		f.Add([]byte(s))
	}
	s, sys, key := testServer(f, 1, cannedTransport{200, "application/json", []byte(`{"id":"x","choices":[]}`)})
	f.Fuzz(func(t *testing.T, body []byte) {
		resp := do(s, "POST", "/v1/chat/completions", key, body)
		if !json.Valid(resp.Body()) {
			t.Fatalf("invalid JSON answer %q for %q", resp.Body(), body)
		}
		if resp.StatusCode() != 200 && !isOpenAIError(resp.Body()) {
			t.Fatalf("status %d with non-OpenAI error body %s", resp.StatusCode(), resp.Body())
		}
		waitIdle(t, sys)
	})
}

// BenchmarkPassthroughStreamEvent measures relaying one SSE event of a Chat
// stream through the gateway's stream body (scan, observe, write), per event.
func BenchmarkPassthroughStreamEvent(b *testing.B) {
	sse, err := os.ReadFile("testdata/chat-stream-text.sse")
	if err != nil {
		b.Fatal(err)
	}
	// Drop the [DONE] marker so the body can repeat, then count events.
	body := bytes.TrimSuffix(sse, []byte("data: [DONE]\n\n"))
	events := bytes.Count(body, []byte("\n\n"))
	rep := bytes.Repeat(body, 64)
	s, _, _ := testServer(b, 1, cannedTransport{})
	c := &call{key: &noKey, endpoint: translate.Chat}
	st := &stream{s: s, c: c, up: translate.Chat}
	b.SetBytes(int64(len(body) / events))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 64 * events {
		st.sc = scanners.Get().(*translate.Scanner)
		st.sc.Reset(bytes.NewReader(rep))
		st.src, st.rdy = st.sc, st.sc
		st.ttft = 1
		st.WriteTo(io.Discard)
		scanners.Put(st.sc)
	}
}

func TestCompressedRequestBody(t *testing.T) {
	s, sys, key := testServer(t, 1, cannedTransport{200, "application/json", []byte(`{"id":"x","choices":[]}`)})
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/v1/chat/completions")
	ctx.Request.Header.Set("Authorization", "Bearer "+key)
	ctx.Request.Header.Set("Content-Encoding", "gzip")
	ctx.Request.SetBody(fasthttp.AppendGzipBytes(nil, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)))
	s.handle(&ctx)
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("gzip body: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	// A gzip bomb larger than the limit is refused with 413, not inflated.
	bomb := fasthttp.AppendGzipBytes(nil, bytes.Repeat([]byte(" "), 20<<20))
	ctx.Request.SetBody(bomb)
	ctx.Response.Reset()
	s.handle(&ctx)
	if ctx.Response.StatusCode() != 413 || !isOpenAIError(ctx.Response.Body()) {
		t.Fatalf("bomb: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	waitIdle(t, sys)
}

func TestDeeplyNestedBodyRefused(t *testing.T) {
	s, sys, key := testServer(t, 1, cannedTransport{200, "application/json", []byte(`{}`)})
	body := append([]byte(`{"model":"m","x":`), bytes.Repeat([]byte("["), 4<<20)...)
	resp := do(s, "POST", "/v1/chat/completions", key, body)
	if resp.StatusCode() != 400 || !isOpenAIError(resp.Body()) {
		t.Fatalf("status %d body %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
}

// BenchmarkTranslatedStreamEvent measures relaying one SSE event of a Chat
// upstream stream to a Messages client (scan, observe, translate, write),
// per upstream event, a translator's setup per stream included.
func BenchmarkTranslatedStreamEvent(b *testing.B) {
	sse, err := os.ReadFile("testdata/chat-stream-text.sse")
	if err != nil {
		b.Fatal(err)
	}
	events := bytes.Count(sse, []byte("\n\n"))
	s, _, _ := testServer(b, 1, cannedTransport{})
	c := &call{key: &noKey, endpoint: translate.Messages, model: "m"}
	st := &stream{s: s, c: c, up: translate.Chat}
	r := bytes.NewReader(sse)
	b.SetBytes(int64(len(sse) / events))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += events {
		r.Reset(sse)
		st.sc = scanners.Get().(*translate.Scanner)
		st.sc.Reset(r)
		st.src, st.rdy = st.sc, st.sc
		st.tr = newStreamTranslator(c, translate.Chat)
		st.clean = false
		st.ttft = 1
		st.WriteTo(io.Discard)
		scanners.Put(st.sc)
	}
}

// passHeaders copies the pass-through headers whatever case the client sent
// them in, the first of a repeated one, and none that is empty.
func TestPassHeaders(t *testing.T) {
	var ctx fasthttp.RequestCtx
	raw := "POST /v1/responses HTTP/1.1\r\nHost: gw\r\nsession_id: s1\r\nSession_id: s2\r\nx-codex-turn-state: ts\r\n" +
		"Idempotency-Key: \r\nX-Other: x\r\nANTHROPIC-BETA: b1\r\nContent-Length: 0\r\n\r\n"
	if err := ctx.Request.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	h := passHeaders(&ctx)
	want := http.Header{"Session_id": {"s1"}, "X-Codex-Turn-State": {"ts"}, "Anthropic-Beta": {"b1"}}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("passHeaders = %v, want %v", h, want)
	}
	var none fasthttp.RequestCtx
	none.Request.Header.Set("X-Other", "x")
	if h := passHeaders(&none); h != nil {
		t.Fatalf("passHeaders without any = %v, want nil", h)
	}
}

// refusingTransport fails the test if the gateway sends it anything.
type refusingTransport struct{ t *testing.T }

func (r refusingTransport) Do(context.Context, *upstream.Request) (*upstream.Response, error) {
	r.t.Error("the upstream was called for a request the gateway should refuse")
	return nil, errors.New("refused")
}

// TestMessagesRequired: a Chat Completions or Messages request whose
// messages are missing, not an array or empty is answered 400 in the
// client's protocol, naming messages, and no upstream is called.
func TestMessagesRequired(t *testing.T) {
	s, sys, key := testServer(t, 1, refusingTransport{t})
	for _, tc := range []struct{ body, chatCode, anthropicMsg string }{
		{`{"model":"m"}`, "missing_required_parameter", "messages: Field required"},
		{`{"model":"m","messages":null}`, "missing_required_parameter", "messages: Field required"},
		{`{"model":"m","messages":"hi"}`, "invalid_type", "messages: Input should be a valid list"},
		{`{"model":"m","messages":{"role":"user"}}`, "invalid_type", "messages: Input should be a valid list"},
		{`{"model":"m","messages":[]}`, "empty_array", "messages: at least one message is required"},
		{`{"model":"m","messages":[ ]}`, "empty_array", "messages: at least one message is required"},
		{`{"model":"m","messages":[],"messages":[{"role":"user","content":"hi"}]}`, "invalid_type", "Duplicate key 'messages' in the request body."},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"messages":[]}`, "invalid_type", "Duplicate key 'messages' in the request body."},
	} {
		resp := do(s, "POST", "/v1/chat/completions", key, []byte(tc.body))
		e := gjson.GetBytes(resp.Body(), "error")
		if resp.StatusCode() != 400 || !isOpenAIError(resp.Body()) || e.Get("param").Str != "messages" || e.Get("code").Str != tc.chatCode {
			t.Errorf("chat %s: %d %s, want 400 code %s param messages", tc.body, resp.StatusCode(), resp.Body(), tc.chatCode)
		}
		body := strings.Replace(tc.body, `{"model":"m"`, `{"model":"m","max_tokens":8`, 1)
		for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
			resp = doWith(s, "POST", path, map[string]string{"x-api-key": key}, []byte(body))
			if resp.StatusCode() != 400 || !isAnthropicError(resp.Body(), "invalid_request_error") ||
				gjson.GetBytes(resp.Body(), "error.message").Str != tc.anthropicMsg {
				t.Errorf("%s %s: %d %s, want 400 %q", path, body, resp.StatusCode(), resp.Body(), tc.anthropicMsg)
			}
		}
	}
	waitIdle(t, sys)
}

// TestDuplicateEstimatedKeys: a body that repeats a key the balance
// estimate reads (Responses' input and instructions, Messages' system,
// every protocol's tools) is refused 400 naming it, in the client's
// protocol, before any upstream: the estimate read the first occurrence
// and the upstream the last, so a user with 0.02 of balance sent
// {"input":"hi","input":"<100k tokens>"} and was admitted on the estimate
// of "hi" and charged 0.100132, ending at -0.080132 (tester's finding).
func TestDuplicateEstimatedKeys(t *testing.T) {
	s, sys, key := testServer(t, 1, refusingTransport{t})
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct{ path, body, param string }{
		{"/v1/responses", `{"model":"m","input":"hi","input":"a much longer text"}`, "input"},
		{"/v1/responses", `{"model":"m","input":"hi","instructions":"x","instructions":"y"}`, "instructions"},
		{"/v1/responses", `{"model":"m","input":"hi","tools":[],"tools":[{"type":"function","name":"f"}]}`, "tools"},
		{"/v1/chat/completions", `{"model":"m",` + msgs + `,"tools":[],"tools":[{"type":"function","function":{"name":"f"}}]}`, "tools"},
		{"/v1/messages", `{"model":"m","max_tokens":8,` + msgs + `,"system":"a","system":"b"}`, "system"},
		{"/v1/messages", `{"model":"m","max_tokens":8,` + msgs + `,"tools":[],"tools":[{"name":"f","input_schema":{}}]}`, "tools"},
		{"/v1/messages/count_tokens", `{"model":"m",` + msgs + `,"system":"a","system":"b"}`, "system"},
	} {
		want := "Duplicate key '" + tc.param + "' in the request body."
		if strings.HasPrefix(tc.path, "/v1/messages") {
			resp := doWith(s, "POST", tc.path, map[string]string{"x-api-key": key}, []byte(tc.body))
			if resp.StatusCode() != 400 || !isAnthropicError(resp.Body(), "invalid_request_error") ||
				gjson.GetBytes(resp.Body(), "error.message").Str != want {
				t.Errorf("%s %s: %d %s, want 400 %q", tc.path, tc.body, resp.StatusCode(), resp.Body(), want)
			}
			continue
		}
		resp := do(s, "POST", tc.path, key, []byte(tc.body))
		e := gjson.GetBytes(resp.Body(), "error")
		if resp.StatusCode() != 400 || !isOpenAIError(resp.Body()) || e.Get("param").Str != tc.param || e.Get("message").Str != want {
			t.Errorf("%s %s: %d %s, want 400 param %s", tc.path, tc.body, resp.StatusCode(), resp.Body(), tc.param)
		}
	}
	waitIdle(t, sys)
}

// TestResponsesInputType: a Responses input that is neither a string nor
// an array is refused 400 invalid_type naming input over HTTP, as the
// Responses WebSocket refuses it, whatever account would serve it: an
// openai account got it as sent, an anthropic one refused it in other
// words (tester's finding).
func TestResponsesInputType(t *testing.T) {
	s, sys, key := testServer(t, 1, refusingTransport{t})
	for _, in := range []string{`5`, `true`, `{"role":"user"}`} {
		resp := do(s, "POST", "/v1/responses", key, []byte(`{"model":"m","input":`+in+`}`))
		e := gjson.GetBytes(resp.Body(), "error")
		if resp.StatusCode() != 400 || e.Get("param").Str != "input" || e.Get("code").Str != "invalid_type" {
			t.Errorf("input %s: %d %s, want 400 invalid_type param input", in, resp.StatusCode(), resp.Body())
		}
	}
	waitIdle(t, sys)
}

// TestEmptyArray: emptyArray says of a JSON array what gjson's "0" path
// said (checkMessages).
func TestEmptyArray(t *testing.T) {
	for _, s := range []string{`[]`, `[ ]`, "[\n\t\r ]", `[0]`, `[ null ]`, `[[]]`, `[{}]`, ` [""]`, `[false]`} {
		raw := gjson.Parse(s).Raw
		if got, want := emptyArray(raw), !gjson.Get(raw, "0").Exists(); got != want {
			t.Errorf("emptyArray(%q) = %v, want %v", raw, got, want)
		}
	}
}

// TestCallSizeClass: a call (one a request, the largest object a request
// allocates) fits the runtime's 1,280-byte size class with its 8-byte
// allocation header. A field that takes it past 1,272 bytes costs every
// request 256 bytes (the 1,536-byte class), and the collector runs that
// much more often (docs/benchmarks.md, issue 21): hold the key by pointer,
// put a bool beside another, or move a rarely used field behind one.
func TestCallSizeClass(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the size classes counted here are a 64-bit platform's")
	}
	if n := unsafe.Sizeof(call{}); n > 1280-8 {
		t.Errorf("call is %d bytes: with its allocation header past the 1,280-byte size class", n)
	}
}
