package gateway

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// parsed runs parseBody on body as a request to endpoint ep.
func parsed(t *testing.T, ep translate.Protocol, body string) (*call, *APIError) {
	t.Helper()
	c := &call{key: &noKey, endpoint: ep}
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
		{translate.Chat, `{"model":"m","metadata":{"max_tokens":1},` + chat + `}`, 0}, // nested: not the body's (a repeat of it is refused: TestOperatorKeyRefusesNestedDuplicateKeys)
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

// TestOutputCapBelowOne: an output cap that is 0, negative or not an
// integer is refused 400 in the client's protocol before any upstream is
// called (OpenAI and Anthropic require at least 1; translated, 0 meant no
// cap, and an anthropic account got max_tokens 16384 while the estimate
// counted 1,024 output tokens). null is no cap, as OpenAI takes it.
func TestOutputCapBelowOne(t *testing.T) {
	s, sys, key := testServer(t, 1, refusingTransport{t})
	for _, tc := range []struct{ path, k, v, code, msg string }{
		{"/v1/chat/completions", "max_tokens", "0", "integer_below_min_value", "Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got 0 instead."},
		{"/v1/chat/completions", "max_tokens", "-5", "integer_below_min_value", "Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got -5 instead."},
		{"/v1/chat/completions", "max_completion_tokens", "0", "integer_below_min_value", "Invalid 'max_completion_tokens': integer below minimum value. Expected a value >= 1, but got 0 instead."},
		{"/v1/chat/completions", "max_completion_tokens", "1.5", "invalid_type", "Invalid type for 'max_completion_tokens': expected an integer."},
		{"/v1/chat/completions", "max_tokens", `"8"`, "invalid_type", "Invalid type for 'max_tokens': expected an integer."},
		{"/v1/responses", "max_output_tokens", "0", "integer_below_min_value", "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 1, but got 0 instead."},
		{"/v1/responses", "max_output_tokens", "-1e3", "integer_below_min_value", "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 1, but got -1000 instead."},
		{"/v1/responses", "max_output_tokens", "true", "invalid_type", "Invalid type for 'max_output_tokens': expected an integer."},
		// Past OpenAI's 32-bit integers: refused as OpenAI refuses it, not
		// passed on (an operator key's request is not estimated).
		{"/v1/chat/completions", "max_tokens", "99999999999999999999999", "integer_above_max_value", "Invalid 'max_tokens': integer above maximum value. Expected a value <= 2147483647, but got 99999999999999999999999 instead."},
		{"/v1/chat/completions", "n", "2147483648", "integer_above_max_value", "Invalid 'n': integer above maximum value. Expected a value <= 2147483647, but got 2147483648 instead."},
		{"/v1/responses", "max_output_tokens", "1e30", "integer_above_max_value", "Invalid 'max_output_tokens': integer above maximum value. Expected a value <= 2147483647, but got 1e30 instead."},
		{"/v1/messages", "max_tokens", "99999999999999999999999", "", "max_tokens: Input should be a valid integer"},
		{"/v1/messages", "max_tokens", "0", "", "max_tokens: Input should be greater than or equal to 1"},
		{"/v1/messages", "max_tokens", "-3", "", "max_tokens: Input should be greater than or equal to 1"},
	} {
		body := `{"model":"m","` + tc.k + `":` + tc.v + `,"messages":[{"role":"user","content":"hi"}],"input":"hi"}`
		if tc.path == "/v1/responses" {
			body = `{"model":"m","` + tc.k + `":` + tc.v + `,"input":"hi"}`
		}
		resp := doWith(s, "POST", tc.path, map[string]string{"Authorization": "Bearer " + key, "x-api-key": key}, []byte(body))
		e := gjson.GetBytes(resp.Body(), "error")
		ok := resp.StatusCode() == 400 && e.Get("message").Str == tc.msg
		if tc.path == "/v1/messages" {
			ok = ok && isAnthropicError(resp.Body(), "invalid_request_error")
		} else {
			ok = ok && isOpenAIError(resp.Body()) && e.Get("param").Str == tc.k && e.Get("code").Str == tc.code
		}
		if !ok {
			t.Errorf("%s %s: %d %s, want 400 %s %q", tc.path, body, resp.StatusCode(), resp.Body(), tc.code, tc.msg)
		}
	}
	waitIdle(t, sys)
	for _, tc := range []struct {
		ep   translate.Protocol
		body string
		want int64
	}{
		{translate.Chat, `{"model":"m","max_tokens":null,"max_completion_tokens":null,"messages":[{"role":"user","content":"hi"}]}`, 0},
		{translate.Responses, `{"model":"m","max_output_tokens":null,"input":"hi"}`, 0},
		{translate.Responses, `{"model":"m","max_output_tokens":2.0,"input":"hi"}`, 2},
		{translate.Responses, `{"model":"m","max_output_tokens":2147483647,"input":"hi"}`, math.MaxInt32},
		{translate.Chat, `{"model":"m","max_output_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, 0}, // not Chat's: the upstream's to judge
	} {
		c, aerr := parsed(t, tc.ep, tc.body)
		if aerr != nil || c.maxOutput != tc.want {
			t.Errorf("%v %s: cap %d (%v), want %d", tc.ep, tc.body, c.maxOutput, aerr, tc.want)
		}
	}
}

// TestBillingEstimateCountsChoices: Chat's n asks for n answers, each up to
// the cap, and the estimate holds n × the cap: with a balance covering 500
// output tokens, max_tokens 10 with n 100 is refused where max_tokens 10
// is served. n below 1, not an integer, or repeated is refused 400.
func TestBillingEstimateCountsChoices(t *testing.T) {
	b := billedServer(t)
	_, secret := b.userKey(t, storage.User{Name: "choices"}, 1_000_000)
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		body, code string
		status     int
	}{
		{`{"model":"m","max_tokens":10,"n":100,` + msgs + `}`, "insufficient_quota", 429},
		{`{"model":"m","n":100,` + msgs + `}`, "insufficient_quota", 429}, // 100 × the output estimate
		{`{"model":"m","max_tokens":10,"n":0,` + msgs + `}`, "integer_below_min_value", 400},
		{`{"model":"m","max_tokens":10,"n":1.5,` + msgs + `}`, "invalid_type", 400},
		{`{"model":"m","max_tokens":10,"n":1,"n":100,` + msgs + `}`, "invalid_type", 400},
		{`{"model":"m","max_tokens":10,"n":null,` + msgs + `}`, "", 200},
		{`{"model":"m","max_tokens":10,"n":1,` + msgs + `}`, "", 200},
	} {
		status, body := b.post(t, "/v1/chat/completions", secret, tc.body)
		if status != tc.status || gjson.GetBytes(body, "error.code").Str != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.body, status, body, tc.status, tc.code)
		}
	}
	b.settled(t)
	for _, tc := range []struct {
		ep   translate.Protocol
		body string
		want int64
	}{
		{translate.Chat, `{"model":"m","n":7,` + msgs + `}`, 7},
		{translate.Chat, `{"model":"m",` + msgs + `}`, 1},
		{translate.Responses, `{"model":"m","n":7,"input":"hi"}`, 1}, // no n in Responses
	} {
		c, aerr := parsed(t, tc.ep, tc.body)
		if aerr != nil || c.choices != tc.want {
			t.Errorf("%v %s: choices %d (%v), want %d", tc.ep, tc.body, c.choices, aerr, tc.want)
		}
	}
}

// TestBillingEstimateIgnoresSmallCap: a cap below the output estimate does
// not lower the estimate, since a codex account drops it (the ChatGPT
// backend refuses max_output_tokens): the QA's user with 100 micro-units
// had 12 of 20 concurrent Responses requests with max_output_tokens 1
// admitted at 74 each on a codex account and ended at -788. Here a balance
// below the price of the output estimate (64 tokens, 128,000) refuses such
// a request on every protocol, and one that covers it serves it.
func TestBillingEstimateIgnoresSmallCap(t *testing.T) {
	b := billedServer(t)
	_, poor := b.userKey(t, storage.User{Name: "poor"}, 100_000) // 50 output tokens
	for _, tc := range []struct{ path, body string }{
		{"/v1/responses", `{"model":"m","max_output_tokens":1,"input":"hi","stream":true}`},
		{"/v1/chat/completions", `{"model":"m","max_completion_tokens":1,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		status, body := b.post(t, tc.path, poor, tc.body)
		if status != 429 && status != 402 {
			t.Errorf("%s %s: %d %s, want refused for the balance", tc.path, tc.body, status, body)
		}
	}
	_, rich := b.userKey(t, storage.User{Name: "rich"}, 200_000)
	if status, body := b.post(t, "/v1/responses", rich, `{"model":"m","max_output_tokens":1,"input":"hi"}`); status != 200 {
		t.Errorf("a balance covering the output estimate: %d %s", status, body)
	}
	b.settled(t)
}

// FuzzOutputCaps: whatever the body, parseBody does not panic, refuses
// with a 4xx or reads a cap of at least 0 and at least one choice, and the
// cap and choices the estimate reads are at least what an upstream
// decoder (encoding/json: the last occurrence of a key) would read of the
// protocol's cap keys and n — a body the estimate reads as a smaller cap
// than its upstream honours is never admitted.
func FuzzOutputCaps(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_completion_tokens":100000,"max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":1,"max_tokens":100000,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":10,"n":100,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":0,"n":-1,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_output_tokens":1e400,"input":"hi"}`,
		`{"model":"m","max_output_tokens":-0.0,"input":"hi"}`,
		`{"model":"m","max_output_tokens":9223372036854775808,"input":"hi"}`,
		`{"model":"m","max_tokens":"12","input":"hi"}`,
	} {
		for ep := range 3 {
			f.Add(byte(ep), []byte(s))
		}
	}
	eps := [...]translate.Protocol{translate.Chat, translate.Responses, translate.Messages}
	f.Fuzz(func(t *testing.T, e byte, body []byte) {
		ep := eps[int(e)%len(eps)]
		c := &call{key: &noKey, endpoint: ep}
		aerr := (&Server{}).parseBody(c, body)
		if aerr != nil {
			if aerr.Status < 400 || aerr.Status > 499 {
				t.Fatalf("%v %q: status %d", ep, body, aerr.Status)
			}
			return
		}
		if c.maxOutput < 0 || c.choices < 1 {
			t.Fatalf("%v %q: cap %d, choices %d", ep, body, c.maxOutput, c.choices)
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil {
			return
		}
		keys := map[translate.Protocol][]string{translate.Chat: {"max_tokens", "max_completion_tokens"},
			translate.Responses: {"max_output_tokens"}, translate.Messages: {"max_tokens"}}[ep]
		for _, k := range keys {
			if v, ok := number(m[k]); ok && float64(c.maxOutput) < min(v, math.MaxInt64) {
				t.Fatalf("%v %q: cap %d, an upstream reads %s %v", ep, body, c.maxOutput, k, v)
			}
		}
		if v, ok := number(m["n"]); ok && ep == translate.Chat && float64(c.choices) < min(v, math.MaxInt64) {
			t.Fatalf("%q: choices %d, an upstream reads n %v", body, c.choices, v)
		}
	})
}

// number is raw as a JSON number of at least 1, as a decoder reads it.
func number(raw json.RawMessage) (float64, bool) {
	var v float64
	if json.Unmarshal(raw, &v) != nil || v < 1 {
		return 0, false
	}
	return v, true
}
