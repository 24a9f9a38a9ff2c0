package upstream

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/translate"
)

// Anthropic failure shapes without a recorded fixture: the statuses and
// error types of https://docs.anthropic.com/en/api/errors and the API's
// balance and spend-limit wordings.
func TestClassifyAnthropic(t *testing.T) {
	reset := time.Now().UTC().Add(3 * time.Hour).Truncate(time.Minute).Add(time.Minute)
	regain := `{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on ` +
		reset.Format("2006-01-02 at 15:04") + ` UTC."},"request_id":"req_1"}`
	future := time.Now().Add(40 * time.Second).UTC().Format(time.RFC3339)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	cases := []struct {
		name     string
		status   int
		header   http.Header
		body     string
		class    Class
		min, max time.Duration
	}{
		{"credit balance", 400, nil, `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."},"request_id":"req_1"}`, ClassQuota, 0, 0},
		{"spend limit with its reset", 400, nil, regain, ClassQuota, 3*time.Hour - time.Minute, 3*time.Hour + 2*time.Minute},
		{"spend limit already past", 400, nil, strings.Replace(regain, reset.Format("2006-01-02"), "2020-01-01", 1), ClassQuota, 0, 0},
		{"organization disabled", 400, nil, `{"type":"error","error":{"type":"invalid_request_error","message":"This organization has been disabled."},"request_id":"req_011CXF1SZ3S3oXChsdxhoUwV"}`, ClassBanned, 0, 0},
		{"plain invalid request", 400, nil, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`, ClassRequest, 0, 0},
		{"402 billing_error", 402, nil, `{"type":"error","error":{"type":"billing_error","message":"Your account has a billing issue."}}`, ClassQuota, 0, 0},
		{"403 permission_error", 403, nil, `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}`, ClassBanned, 0, 0},
		{"413 request_too_large", 413, nil, `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`, ClassRequest, 0, 0},
		{"504 timeout_error", 504, nil, `{"type":"error","error":{"type":"timeout_error","message":"Request timed out"}}`, ClassTransient, 0, 0},
		{"429 reset from the used-up limit", 429, http.Header{
			"Anthropic-Ratelimit-Output-Tokens-Remaining": {"0"},
			"Anthropic-Ratelimit-Output-Tokens-Reset":     {future},
			"Anthropic-Ratelimit-Requests-Remaining":      {"3999"},
			"Anthropic-Ratelimit-Requests-Reset":          {time.Now().Add(time.Hour).UTC().Format(time.RFC3339)},
		}, `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit"}}`, ClassRate, 35 * time.Second, 41 * time.Second},
		{"429 reset in the past", 429, http.Header{
			"Anthropic-Ratelimit-Tokens-Remaining": {"0"},
			"Anthropic-Ratelimit-Tokens-Reset":     {past},
		}, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, ClassRate, 0, 0},
		{"429 Retry-After wins", 429, http.Header{
			"Retry-After":                          {"5"},
			"Anthropic-Ratelimit-Tokens-Remaining": {"0"},
			"Anthropic-Ratelimit-Tokens-Reset":     {future},
		}, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, ClassRate, 5 * time.Second, 5 * time.Second},
		{"openai billing_hard_limit_reached", 400, nil, `{"error":{"message":"Billing hard limit has been reached","type":"invalid_request_error","param":null,"code":"billing_hard_limit_reached"}}`, ClassQuota, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Classify(c.status, c.header, []byte(c.body))
			if v.Class != c.class || v.RetryAfter < c.min || v.RetryAfter > c.max {
				t.Errorf("got %v/%v, want %v/[%v,%v]", v.Class, v.RetryAfter, c.class, c.min, c.max)
			}
		})
	}
}

func TestClassifyMessagesEventAndBody(t *testing.T) {
	cases := []struct {
		data  string
		class Class
		msg   string
	}{
		{`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, ClassTransient, "Overloaded"},
		{`{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`, ClassTransient, "Internal server error"},
		{`{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`, ClassRate, "Number of"},
		{`{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}`, ClassQuota, "Your credit"},
		{`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`, ClassRequest, "prompt is too long"},
		{`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, ClassAuth, "invalid x-api-key"},
		{`{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}`, ClassBanned, "Your API key"},
		{`{"type":"error","error":{"type":"invalid_request_error","message":"This organization has been disabled."}}`, ClassBanned, "This organization"},
		{`{"type":"error","error":{"type":"some_new_error","message":"?"}}`, ClassTransient, "?"},
	}
	for _, c := range cases {
		for _, name := range []string{"error", ""} { // named, and unnamed with the type in the data
			v, msg, isErr := ClassifyEvent(translate.Messages, []byte(name), []byte(c.data))
			if !isErr || v.Class != c.class || !strings.HasPrefix(msg, c.msg) {
				t.Errorf("event %q %s: got %v %v %q", name, c.data, isErr, v.Class, msg)
			}
		}
		v, msg, isErr := ClassifyBody(translate.Messages, []byte(c.data))
		if !isErr || v.Class != c.class || !strings.HasPrefix(msg, c.msg) {
			t.Errorf("body %s: got %v %v %q", c.data, isErr, v.Class, msg)
		}
	}
	// Not errors: normal events and a message whose text says "error".
	for _, ev := range [][2]string{
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"an \"error\" word"}}`},
		{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}`},
		{"ping", `{"type": "ping"}`},
	} {
		if _, _, isErr := ClassifyEvent(translate.Messages, []byte(ev[0]), []byte(ev[1])); isErr {
			t.Errorf("%s classified as an error", ev[0])
		}
	}
	if _, _, isErr := ClassifyBody(translate.Messages, testdata(t, "messages-nonstream-text.response.json")); isErr {
		t.Error("a message body classified as an error")
	}
}

// Every event of the recorded Messages streams, by role.
func TestMessagesEventKindFixtures(t *testing.T) {
	const (
		o = MessagesOther
		s = MessagesStart
		c = MessagesContent
		d = MessagesDelta
		p = MessagesStop
		e = MessagesError
	)
	cases := []struct {
		file string
		want []MessagesEvent
	}{
		// start, block start (empty text), 2 deltas, ping, 3 deltas, block stop, message_delta, stop
		{"messages-stream-text.sse", []MessagesEvent{s, o, c, c, o, c, c, c, o, d, p}},
		// start, empty thinking block, ping, thinking×2, signature, stop, empty text block, delta, stop, delta, stop
		{"messages-stream-thinking.sse", []MessagesEvent{s, o, o, c, c, c, o, o, c, o, d, p}},
		// start, text block + 2 deltas, ping, 11 deltas, stop; tool_use start (content), 4 json deltas, stop; delta, stop
		{"messages-stream-tooluse.sse", []MessagesEvent{s, o, c, c, o, c, c, c, c, c, c, c, c, c, c, c, o, c, c, c, c, c, o, d, p}},
		// start, empty text block, "Hello", error
		{"errors/anthropic-messages/stream-error-overloaded.sse", []MessagesEvent{s, o, c, e}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			evs := sseEvents(t, testdata(t, tc.file))
			if len(evs) != len(tc.want) {
				t.Fatalf("%d events, want %d", len(evs), len(tc.want))
			}
			for i, ev := range evs {
				if got := MessagesEventKind(ev.Name, ev.Data); got != tc.want[i] {
					t.Errorf("event %d (%s): kind %d, want %d", i, ev.Name, got, tc.want[i])
				}
				if got := MessagesEventKind(nil, ev.Data); got != tc.want[i] {
					t.Errorf("event %d (%s) without its name: kind %d, want %d", i, ev.Name, got, tc.want[i])
				}
			}
		})
	}
	for _, tc := range []struct {
		data string
		want MessagesEvent
	}{
		{`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"Hi"}}`, c},
		{`{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"x"}}`, c},
		{`{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}`, c},
		{`{"type":"content_block_start","index":0}`, o},
		{`{"type":"some_future_event"}`, o},
	} {
		if got := MessagesEventKind(nil, []byte(tc.data)); got != tc.want {
			t.Errorf("%s: kind %d, want %d", tc.data, got, tc.want)
		}
	}
}

// The overloaded stream error arrives after content: before commit it is a
// transient failure another account can serve.
func TestClassifyMessagesStreamFixture(t *testing.T) {
	evs := sseEvents(t, testdata(t, "errors/anthropic-messages/stream-error-overloaded.sse"))
	for i, ev := range evs {
		v, msg, isErr := ClassifyEvent(translate.Messages, ev.Name, ev.Data)
		last := i == len(evs)-1
		if isErr != last {
			t.Errorf("event %d (%s): isErr %v", i, ev.Name, isErr)
		}
		if last && (v.Class != ClassTransient || msg != "Overloaded" || !v.Class.AccountFault()) {
			t.Errorf("error event: %v %q", v.Class, msg)
		}
	}
}
