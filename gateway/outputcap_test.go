package gateway

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// parsed runs parseBody on body as a request to endpoint ep.
func parsed(t *testing.T, ep translate.Protocol, body string) (*call, *APIError) {
	t.Helper()
	c := &call{endpoint: ep}
	return c, (&Server{}).parseBody(c, []byte(body))
}

// TestOutputCapRead: the estimate's output cap is the one the upstream is
// held to: Chat's larger of max_tokens and max_completion_tokens (both go
// to an openai_compat upstream as sent), Responses' max_output_tokens,
// Messages' max_tokens; another protocol's cap key is no cap.
func TestOutputCapRead(t *testing.T) {
	const chat, resp = `"messages":[{"role":"user","content":"hi"}]`, `"input":"hi"`
	for _, tc := range []struct {
		ep   translate.Protocol
		body string
		want int64
	}{
		{translate.Chat, `{"model":"m",` + chat + `}`, 0},
		{translate.Chat, `{"model":"m","max_tokens":7,` + chat + `}`, 7},
		{translate.Chat, `{"model":"m","max_completion_tokens":9,` + chat + `}`, 9},
		{translate.Chat, `{"model":"m","max_completion_tokens":100000,"max_tokens":1,` + chat + `}`, 100000},
		{translate.Chat, `{"model":"m","max_tokens":100000,"max_completion_tokens":1,` + chat + `}`, 100000},
		{translate.Chat, `{"model":"m","max_output_tokens":5,` + chat + `}`, 0},
		{translate.Responses, `{"model":"m","max_output_tokens":5,` + resp + `}`, 5},
		{translate.Responses, `{"model":"m","max_tokens":5,` + resp + `}`, 0},
		{translate.Messages, `{"model":"m","max_tokens":3,"max_output_tokens":99,` + chat + `}`, 3},
		{translate.Chat, `{"model":"m","metadata":{"max_tokens":1,"max_tokens":2},` + chat + `}`, 0}, // nested: not the body's
	} {
		c, aerr := parsed(t, tc.ep, tc.body)
		if aerr != nil || c.maxOutput != tc.want {
			t.Errorf("%v %s: cap %d (%v), want %d", tc.ep, tc.body, c.maxOutput, aerr, tc.want)
		}
	}
}

// TestOutputCapRepeated: a body repeating an output cap key is refused 400
// in the client's protocol, naming the key, before any upstream is called,
// as one repeating model, stream or messages is.
func TestOutputCapRepeated(t *testing.T) {
	s, sys, key := testServer(t, 1, refusingTransport{t})
	for _, k := range capKeys {
		for _, tc := range []struct{ path, body string }{
			{"/v1/chat/completions", `{"model":"m","K":1,"messages":[{"role":"user","content":"hi"}],"K":100000}`},
			{"/v1/responses", `{"model":"m","K":100000,"input":"hi","K":1}`},
			{"/v1/messages", `{"model":"m","max_tokens":1,"K":1,"messages":[{"role":"user","content":"hi"}],"K":2}`},
		} {
			body := strings.ReplaceAll(tc.body, "K", k)
			resp := doWith(s, "POST", tc.path, map[string]string{"Authorization": "Bearer " + key, "x-api-key": key}, []byte(body))
			e := gjson.GetBytes(resp.Body(), "error")
			want := "Duplicate key '" + k + "' in the request body."
			ok := resp.StatusCode() == 400 && e.Get("message").Str == want
			if tc.path == "/v1/messages" {
				ok = ok && isAnthropicError(resp.Body(), "invalid_request_error")
			} else {
				ok = ok && isOpenAIError(resp.Body()) && e.Get("param").Str == k
			}
			if !ok {
				t.Errorf("%s %s: %d %s, want 400 %q", tc.path, body, resp.StatusCode(), resp.Body(), want)
			}
		}
	}
	waitIdle(t, sys)
}

// TestBillingEstimateReadsLargerCap: a Chat request with both caps is held
// on the larger, which an openai_compat upstream may honour: with a balance
// covering 500 output tokens, max_completion_tokens 100000 beside
// max_tokens 1 is refused, and max_completion_tokens 100 is served.
func TestBillingEstimateReadsLargerCap(t *testing.T) {
	b := billedServer(t)
	_, secret := b.userKey(t, storage.User{Name: "caps"}, 1_000_000)
	status, body := b.post(t, "/v1/chat/completions", secret, `{"model":"m","max_completion_tokens":100000,"max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 429 || gjson.GetBytes(body, "error.code").Str != "insufficient_quota" {
		t.Errorf("both caps: %d %s, want 429 insufficient_quota", status, body)
	}
	status, body = b.post(t, "/v1/chat/completions", secret, `{"model":"m","max_completion_tokens":100,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 {
		t.Errorf("max_completion_tokens 100: %d %s, want 200", status, body)
	}
	b.settled(t)
}
