package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

func TestModelsShapeByClient(t *testing.T) {
	s, _, key := testServerOf(t, cannedTransport{}, storage.ProviderAnthropic, storage.ProviderOpenAI)
	// Anthropic clients: the anthropic-version header (x-api-key alone too).
	for _, h := range []map[string]string{
		{"Authorization": "Bearer " + key, "anthropic-version": "2023-06-01"},
		{"x-api-key": key},
	} {
		resp := doWith(s, "GET", "/v1/models", h, nil)
		var list struct {
			Data []struct {
				Type, ID, DisplayName, CreatedAt string
			}
			HasMore         *bool `json:"has_more"`
			FirstID, LastID *string
		}
		dec := json.NewDecoder(strings.NewReader(string(resp.Body())))
		if err := dec.Decode(&list); err != nil || resp.StatusCode() != 200 {
			t.Fatalf("%v: status %d, %v: %s", h, resp.StatusCode(), err, resp.Body())
		}
		r := gjson.ParseBytes(resp.Body())
		if len(list.Data) != 1 || r.Get("data.0.type").Str != "model" || r.Get("data.0.id").Str != "m" ||
			r.Get("data.0.display_name").Str != "m" || r.Get("data.0.created_at").Str == "" ||
			r.Get("has_more").Type != gjson.False || r.Get("first_id").Str != "m" || r.Get("last_id").Str != "m" || r.Get("object").Exists() {
			t.Errorf("%v: not Anthropic's list shape: %s", h, resp.Body())
		}
	}
	resp := doWith(s, "GET", "/v1/models", map[string]string{"Authorization": "Bearer " + key}, nil)
	if r := gjson.ParseBytes(resp.Body()); r.Get("object").Str != "list" || r.Get("data.0.object").Str != "model" {
		t.Errorf("OpenAI client: %s", resp.Body())
	}
}

// counter is a transport that also counts tokens, as the anthropic one does.
type counter struct {
	cannedTransport
	count cannedTransport
	calls int
}

func (c *counter) CountTokens(ctx context.Context, r *upstream.Request) (*upstream.Response, error) {
	c.calls++
	return c.count.Do(ctx, r)
}

func TestCountTokens(t *testing.T) {
	req := []byte(`{"model":"m","system":"You are terse.","messages":[{"role":"user","content":"Hello there, how are you today?"}],` +
		`"tools":[{"name":"get_weather","description":"Weather for a city","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]}`)
	t.Run("upstream", func(t *testing.T) {
		c := &counter{count: cannedTransport{200, "application/json", []byte(`{"input_tokens":42}`)}}
		s, sys, key := testServerOf(t, c, storage.ProviderAnthropic, storage.ProviderOpenAI)
		for range 3 {
			resp := doWith(s, "POST", "/v1/messages/count_tokens", map[string]string{"x-api-key": key}, req)
			if resp.StatusCode() != 200 || string(resp.Body()) != `{"input_tokens":42}` || len(resp.Header.Peek("X-Troupe-Token-Count")) != 0 {
				t.Fatalf("status %d body %s", resp.StatusCode(), resp.Body())
			}
		}
		if c.calls != 3 {
			t.Errorf("upstream counted %d times, want 3 (only the anthropic account counts)", c.calls)
		}
		waitIdle(t, sys)
	})
	t.Run("upstream refuses", func(t *testing.T) {
		bad := []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"messages: field required"}}`)
		c := &counter{count: cannedTransport{400, "application/json", bad}}
		s, sys, key := testServerOf(t, c, storage.ProviderAnthropic)
		resp := doWith(s, "POST", "/v1/messages/count_tokens", map[string]string{"x-api-key": key}, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		if resp.StatusCode() != 400 || string(resp.Body()) != string(bad) {
			t.Fatalf("status %d body %s", resp.StatusCode(), resp.Body())
		}
		waitIdle(t, sys)
	})
	t.Run("estimate", func(t *testing.T) {
		s, sys, key := testServerOf(t, cannedTransport{}, storage.ProviderOpenAI)
		resp := doWith(s, "POST", "/v1/messages/count_tokens", map[string]string{"x-api-key": key}, req)
		n := gjson.GetBytes(resp.Body(), "input_tokens").Int()
		if resp.StatusCode() != 200 || string(resp.Header.Peek("X-Troupe-Token-Count")) != "estimate" || n < 20 || n > 80 {
			t.Fatalf("status %d body %s header %q", resp.StatusCode(), resp.Body(), resp.Header.Peek("X-Troupe-Token-Count"))
		}
		resp = doWith(s, "POST", "/v1/messages/count_tokens", map[string]string{"x-api-key": key}, []byte(`{"model":"nope","messages":[{"role":"user","content":"hi"}]}`))
		if resp.StatusCode() != 404 || !isAnthropicError(resp.Body(), "not_found_error") {
			t.Fatalf("unknown model: status %d body %s", resp.StatusCode(), resp.Body())
		}
		waitIdle(t, sys)
	})
}

func TestEstimateInputTokens(t *testing.T) {
	for _, tc := range []struct {
		body string
		want int64
	}{
		{`{"messages":[{"role":"user","content":"abcdefgh"}]}`, tokensPerMessage + 2},
		{`{"system":[{"type":"text","text":"abcd"}],"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","data":"QUFB"}}]}]}`, 1 + tokensPerMessage + tokensPerImage},
		{`{"messages":[{"role":"user","content":"你好"}]}`, tokensPerMessage + 2},
		{`{}`, 1},
	} {
		if got := estimateInputTokens([]byte(tc.body)); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.body, got, tc.want)
		}
	}
}

// compactor is a transport that also compacts, as openai and codex do.
type compactor struct {
	cannedTransport
	body []byte
}

func (c *compactor) Compact(_ context.Context, r *upstream.Request) (*upstream.Response, error) {
	c.body = r.Body
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return &upstream.Response{Status: 200, Header: h, Body: io.NopCloser(strings.NewReader(
		`{"id":"cmp_1","object":"response.compaction","output":[{"type":"compaction","encrypted_content":"x"}],"usage":{"input_tokens":7,"output_tokens":2}}`))}, nil
}

func TestCompact(t *testing.T) {
	c := &compactor{}
	s, sys, key := testServerOf(t, c, storage.ProviderCodex)
	req := []byte(`{"model":"m","input":[{"role":"user","content":"hi"}]}`)
	resp := do(s, "POST", "/v1/responses/compact", key, req)
	if resp.StatusCode() != 200 || gjson.GetBytes(resp.Body(), "object").Str != "response.compaction" || string(c.body) != string(req) {
		t.Fatalf("status %d body %s, upstream got %s", resp.StatusCode(), resp.Body(), c.body)
	}
	waitIdle(t, sys)
	resp = do(s, "POST", "/v1/responses/compact", key, []byte(`{"model":"m","stream":true,"input":[]}`))
	if resp.StatusCode() != 400 || !isOpenAIError(resp.Body()) {
		t.Errorf("stream: status %d body %s", resp.StatusCode(), resp.Body())
	}

	s, sys, key = testServerOf(t, c, storage.ProviderAnthropic, storage.ProviderOpenAICompat)
	resp = do(s, "POST", "/v1/responses/compact", key, req)
	if resp.StatusCode() != 400 || gjson.GetBytes(resp.Body(), "error.code").Str != "compaction_unsupported" {
		t.Errorf("no compacting account: status %d body %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
}

// The gateway's own errors reach Messages clients in Anthropic's shape with
// the status's Anthropic type, Retry-After kept.
func TestAnthropicErrorShapes(t *testing.T) {
	for _, tc := range []struct {
		e   *APIError
		typ string
	}{
		{errTooLarge(16), "request_too_large"},
		{&APIError{Status: 429, Type: "requests", Code: "rate_limit_exceeded", Message: "slow down", RetryAfter: 2 * time.Second}, "rate_limit_error"},
		{errNoAccount(time.Second), "overloaded_error"},
		{errModelNotAllowed("m"), "permission_error"},
		{errModelNotFound("m"), "not_found_error"},
		{errInvalidKey(), "authentication_error"},
		{errUpstream("boom"), "api_error"},
		{errBadJSON(), "invalid_request_error"},
		{&APIError{Status: 529, Message: "busy"}, "overloaded_error"},
		{&APIError{Status: 504, Message: "slow"}, "timeout_error"},
		{&APIError{Status: 402, Message: "pay"}, "billing_error"},
	} {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI("/v1/messages?beta=true")
		ctx.Response.Header.Set("X-Request-Id", "req_x")
		writeError(&ctx, tc.e)
		b := ctx.Response.Body()
		if ctx.Response.StatusCode() != tc.e.Status || !isAnthropicError(b, tc.typ) || gjson.GetBytes(b, "request_id").Str != "req_x" ||
			gjson.GetBytes(b, "error.message").Str != anthropicMessage(tc.e) {
			t.Errorf("%d %s: status %d body %s, want type %s", tc.e.Status, tc.e.Code, ctx.Response.StatusCode(), b, tc.typ)
		}
		if (tc.e.RetryAfter > 0) != (len(ctx.Response.Header.Peek("Retry-After")) > 0) {
			t.Errorf("%d: Retry-After %q", tc.e.Status, ctx.Response.Header.Peek("Retry-After"))
		}
	}
}

// anthropicMessage is the message writeError gives e in Anthropic's shape.
func anthropicMessage(e *APIError) string {
	if e.Code == "invalid_json" {
		return msgAnthropicBadJSON
	}
	return e.Message
}

// FuzzEstimateInputTokens feeds arbitrary bodies to the count_tokens
// estimate: it must not panic and always answers at least one token.
func FuzzEstimateInputTokens(f *testing.F) {
	f.Add([]byte(`{"model":"m","system":"s","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"image"},{"type":"tool_result","content":[{"type":"text","text":"ok"}]}]}],"tools":[{"name":"t","input_schema":{}}]}`))
	f.Add([]byte(`{"messages":"x","tools":7,"system":[1,2]}`))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, body []byte) {
		if n := estimateInputTokens(body); n < 1 {
			t.Fatalf("estimate %d for %q", n, body)
		}
	})
}
