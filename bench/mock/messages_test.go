package mock

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

var acctAnthropic = Account{Name: "claude-0004", Kind: KindAnthropic, Token: "sk-ant-api03-mock-0004", Models: []string{"claude-sonnet-4-5"}, OutputTokens: 7}

const (
	messagesBody       = `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"Hello, world"}]}`
	messagesStreamBody = `{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"Hello, world"}]}`
)

// anthropicHeaders are the request headers an Anthropic client sends.
func anthropicHeaders(acc Account) []string {
	return []string{"X-Api-Key", acc.Token, "Anthropic-Version", "2023-06-01"}
}

func TestMessagesNonStream(t *testing.T) {
	_, base := startFleet(t, acctAnthropic)
	c := newClient(t)
	resp, body := do(t, c, "POST", base+"/v1/messages", "", messagesBody, anthropicHeaders(acctAnthropic)...)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content-type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	got := obj(t, string(body))
	sameShape(t, "message", obj(t, string(fixture(t, "anthropic-messages/nonstream-text.response.json"))), got, true)
	id, _ := got["id"].(string)
	if !strings.HasPrefix(id, "msg_") || got["type"] != "message" || got["role"] != "assistant" || got["model"] != "claude-sonnet-4-5" {
		t.Errorf("id/type/role/model: %v %v %v %v", got["id"], got["type"], got["role"], got["model"])
	}
	if txt := get(got, "content", 0, "text"); txt != AnswerText(acctAnthropic.Name, 7) || get(got, "content", 0, "type") != "text" {
		t.Errorf("content %v", got["content"])
	}
	if got["stop_reason"] != "end_turn" || got["stop_sequence"] != nil {
		t.Errorf("stop %v %v", got["stop_reason"], got["stop_sequence"])
	}
	if in, out := num(t, get(got, "usage", "input_tokens")), num(t, get(got, "usage", "output_tokens")); in != int64(len(messagesBody)/4) || out != 7 {
		t.Errorf("usage %v", got["usage"])
	}
	if !strings.HasPrefix(resp.Header.Get("Request-Id"), "req_") {
		t.Errorf("request-id %q", resp.Header.Get("Request-Id"))
	}
	for _, h := range headerNames(t, "anthropic-messages/response-headers.stream.http") {
		if strings.HasPrefix(h, "Anthropic-Ratelimit-") && resp.Header.Get(h) == "" {
			t.Errorf("missing header %s", h)
		}
	}
	if _, err := time.Parse(time.RFC3339, resp.Header.Get("Anthropic-Ratelimit-Tokens-Reset")); err != nil {
		t.Errorf("reset header: %v", err)
	}
}

// checkMessagesStream validates a Messages SSE body against the recorded
// order and shapes and returns the events' data objects and the text.
func checkMessagesStream(t *testing.T, body []byte) ([]map[string]any, string) {
	t.Helper()
	fx := map[string]map[string]any{}
	for _, ev := range parseSSE(t, fixture(t, "anthropic-messages/stream-text.sse")) {
		if _, ok := fx[ev.event]; !ok {
			fx[ev.event] = obj(t, ev.data)
		}
	}
	evs := parseSSE(t, body)
	var names []string
	var datas []map[string]any
	var text strings.Builder
	for _, ev := range evs {
		d := obj(t, ev.data)
		if d["type"] != ev.event {
			t.Errorf("event %q carries type %v", ev.event, d["type"])
		}
		if want, ok := fx[ev.event]; ok {
			sameShape(t, ev.event, want, d, false)
		}
		if ev.event == "content_block_delta" {
			if s, ok := get(d, "delta", "text").(string); ok {
				text.WriteString(s)
			}
		}
		names = append(names, ev.event)
		datas = append(datas, d)
	}
	if len(names) < 6 || names[0] != "message_start" || names[1] != "content_block_start" || names[2] != "ping" ||
		names[len(names)-3] != "content_block_stop" || names[len(names)-2] != "message_delta" || names[len(names)-1] != "message_stop" {
		t.Fatalf("event order %v", names)
	}
	for _, n := range names[3 : len(names)-3] {
		if n != "content_block_delta" {
			t.Fatalf("event order %v", names)
		}
	}
	return datas, text.String()
}

func TestMessagesStream(t *testing.T) {
	_, base := startFleet(t, acctAnthropic)
	c := newClient(t)
	resp, body := do(t, c, "POST", base+"/v1/messages", "", messagesStreamBody, anthropicHeaders(acctAnthropic)...)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	datas, text := checkMessagesStream(t, body)
	if text != AnswerText(acctAnthropic.Name, 7) {
		t.Errorf("text %q", text)
	}
	if n := len(datas) - 6; n != 7 {
		t.Errorf("%d deltas, want 7", n)
	}
	start, delta := datas[0], datas[len(datas)-2]
	if get(start, "message", "model") != "claude-sonnet-4-5" || num(t, get(start, "message", "usage", "input_tokens")) != int64(len(messagesStreamBody)/4) {
		t.Errorf("message_start %v", start)
	}
	if get(delta, "delta", "stop_reason") != "end_turn" || num(t, get(delta, "usage", "output_tokens")) != 7 {
		t.Errorf("message_delta %v", delta)
	}
	if resp.Header.Get("Request-Id") == "" || resp.Header.Get("Anthropic-Ratelimit-Requests-Remaining") == "" {
		t.Errorf("headers %v", resp.Header)
	}
}

func TestMessagesRefusals(t *testing.T) {
	other := Account{Name: "oa", Kind: KindOpenAI, Token: "sk-proj-other-0009"}
	_, base := startFleet(t, acctAnthropic, other)
	c := newClient(t)
	ver := []string{"Anthropic-Version", "2023-06-01"}
	key := []string{"X-Api-Key", acctAnthropic.Token}
	for _, tc := range []struct {
		name, path, token, body string
		hdr                     []string
		status                  int
		typ, msg                string
	}{
		{"no key", "/v1/messages", "", messagesBody, ver, 401, "authentication_error", "x-api-key header is required"},
		{"bearer instead of x-api-key", "/v1/messages", acctAnthropic.Token, messagesBody, ver, 401, "authentication_error", "x-api-key header is required"},
		{"unknown key", "/v1/messages", "", messagesBody, append([]string{"X-Api-Key", "sk-ant-nope"}, ver...), 401, "authentication_error", "invalid x-api-key"},
		{"an openai key", "/v1/messages", "", messagesBody, append([]string{"X-Api-Key", other.Token}, ver...), 401, "authentication_error", "invalid x-api-key"},
		{"no version", "/v1/messages", "", messagesBody, key, 400, "invalid_request_error", "anthropic-version: header is required"},
		{"no max_tokens", "/v1/messages", "", `{"model":"claude-sonnet-4-5","messages":[]}`, append(key, ver...), 400, "invalid_request_error", "max_tokens: Field required"},
		{"no messages", "/v1/messages", "", `{"model":"claude-sonnet-4-5","max_tokens":5}`, append(key, ver...), 400, "invalid_request_error", "messages: Field required"},
		{"no model", "/v1/messages", "", `{"max_tokens":5,"messages":[]}`, append(key, ver...), 400, "invalid_request_error", "model: Field required"},
		{"bad JSON", "/v1/messages", "", `{"model":`, append(key, ver...), 400, "invalid_request_error", "There was an issue"},
		{"unknown model", "/v1/messages", "", `{"model":"claude-nonexistent","max_tokens":5,"messages":[]}`, append(key, ver...), 404, "not_found_error", "model: claude-nonexistent"},
		{"unknown route", "/v1/messages/batches", "", `{}`, append(key, ver...), 404, "not_found_error", "Not Found"},
		{"wrong method", "/v1/messages", "", "", append(key, ver...), 405, "invalid_request_error", "Method Not Allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := "POST"
			if tc.status == 405 {
				method = "GET"
			}
			resp, body := do(t, c, method, base+tc.path, tc.token, tc.body, tc.hdr...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			got := obj(t, string(body))
			sameShape(t, "error", obj(t, string(fixture(t, "anthropic-messages/error-401.json"))), got, false)
			msg, _ := get(got, "error", "message").(string)
			if got["type"] != "error" || get(got, "error", "type") != tc.typ || !strings.HasPrefix(msg, tc.msg) {
				t.Errorf("body %s", body)
			}
		})
	}
	// An anthropic key is no OpenAI key.
	resp, _ := do(t, c, "POST", base+"/v1/chat/completions", acctAnthropic.Token, chatBody)
	wantStatus(t, resp, 401)
}

func TestMessagesModelsAndCountTokens(t *testing.T) {
	f, base := startFleet(t, acctAnthropic)
	c := newClient(t)
	resp, body := do(t, c, "GET", base+"/v1/models", "", "", anthropicHeaders(acctAnthropic)...)
	wantStatus(t, resp, 200)
	got := obj(t, string(body))
	if get(got, "data", 0, "id") != "claude-sonnet-4-5" || get(got, "data", 0, "type") != "model" || got["has_more"] != false ||
		got["first_id"] != "claude-sonnet-4-5" || got["last_id"] != "claude-sonnet-4-5" {
		t.Errorf("models %s", body)
	}
	if _, err := time.Parse(time.RFC3339, get(got, "data", 0, "created_at").(string)); err != nil {
		t.Errorf("created_at: %v", err)
	}

	const countBody = `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"Hello, world"}]}`
	resp, body = do(t, c, "POST", base+"/v1/messages/count_tokens", "", countBody, anthropicHeaders(acctAnthropic)...)
	wantStatus(t, resp, 200)
	if got := obj(t, string(body)); num(t, got["input_tokens"]) != int64(len(countBody)/4) || len(got) != 1 {
		t.Errorf("count %s", body)
	}
	resp, _ = do(t, c, "POST", base+"/v1/messages/count_tokens", "", `{"model":"claude-sonnet-4-5"}`, anthropicHeaders(acctAnthropic)...)
	wantStatus(t, resp, 400)
	resp, _ = do(t, c, "POST", base+"/v1/messages/count_tokens", "", countBody, "X-Api-Key", acctAnthropic.Token)
	wantStatus(t, resp, 400)

	// Status faults refuse counting; counting is not an answer.
	f.SetFault(acctAnthropic.Name, &Fault{Kind: FaultRateLimitRetryAfter, RetryAfter: 3 * time.Second})
	resp, body = do(t, c, "POST", base+"/v1/messages/count_tokens", "", countBody, anthropicHeaders(acctAnthropic)...)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3" || get(obj(t, string(body)), "error", "type") != "rate_limit_error" {
		t.Errorf("faulted count: %d %s", resp.StatusCode, body)
	}
	f.SetFault(acctAnthropic.Name, &Fault{Kind: FaultUnauthorized})
	resp, _ = do(t, c, "GET", base+"/v1/models", "", "", anthropicHeaders(acctAnthropic)...)
	wantStatus(t, resp, 401)
	f.SetFault(acctAnthropic.Name, &Fault{Kind: FaultHang})
	resp, _ = do(t, c, "POST", base+"/v1/messages/count_tokens", "", countBody, anthropicHeaders(acctAnthropic)...)
	wantStatus(t, resp, http.StatusOK)
	if st := f.Stats(acctAnthropic.Name); st.Requests != 0 {
		t.Errorf("stats %+v: counting and listings are not answers", st)
	}
}

// A request with cache_control breakpoints finds three quarters of its
// prompt in the cache; the total input is unchanged.
func TestMessagesPromptCache(t *testing.T) {
	_, base := startFleet(t, acctAnthropic)
	c := newClient(t)
	body := `{"model":"claude-sonnet-4-5","max_tokens":64,"system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"Hello, world"}]}`
	total := int64(len(body) / 4)
	_, b := do(t, c, "POST", base+"/v1/messages", "", body, anthropicHeaders(acctAnthropic)...)
	got := obj(t, string(b))
	in, read, created := num(t, get(got, "usage", "input_tokens")), num(t, get(got, "usage", "cache_read_input_tokens")), num(t, get(got, "usage", "cache_creation_input_tokens"))
	if read != total*3/4 || in+read+created != total || created != 0 {
		t.Errorf("usage %v, want %d of %d read from the cache", got["usage"], total*3/4, total)
	}
	stream := strings.Replace(body, `"max_tokens":64,`, `"max_tokens":64,"stream":true,`, 1)
	_, b = do(t, c, "POST", base+"/v1/messages", "", stream, anthropicHeaders(acctAnthropic)...)
	datas, _ := checkMessagesStream(t, b)
	total = int64(len(stream) / 4)
	for _, u := range []any{get(datas[0], "message", "usage"), get(datas[len(datas)-2], "usage")} {
		m := u.(map[string]any)
		if num(t, m["cache_read_input_tokens"]) != total*3/4 || num(t, m["input_tokens"]) != total-total*3/4 {
			t.Errorf("stream usage %v", m)
		}
	}
}
