package gateway

import (
	"bytes"
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
)

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// eventNames lists the event names of an SSE body ("data" for unnamed
// events, "[DONE]" for Chat's end marker).
func eventNames(t testing.TB, body []byte) []string {
	t.Helper()
	sc := translate.NewScanner(bytes.NewReader(body), 1<<20)
	var out []string
	for {
		ev, err := sc.Next()
		if err != nil {
			return out
		}
		switch {
		case len(ev.Name) > 0:
			out = append(out, string(ev.Name))
		case bytes.Equal(ev.Data, []byte("[DONE]")):
			out = append(out, "[DONE]")
		default:
			out = append(out, "data")
		}
	}
}

func TestProtocolPerProvider(t *testing.T) {
	for _, tc := range []struct {
		p          storage.Provider
		client, up translate.Protocol
	}{
		{storage.ProviderOpenAI, translate.Chat, translate.Chat},
		{storage.ProviderOpenAI, translate.Responses, translate.Responses},
		{storage.ProviderOpenAI, translate.Messages, translate.Responses},
		{storage.ProviderCodex, translate.Chat, translate.Responses},
		{storage.ProviderCodex, translate.Messages, translate.Responses},
		{storage.ProviderAnthropic, translate.Chat, translate.Messages},
		{storage.ProviderAnthropic, translate.Responses, translate.Messages},
		{storage.ProviderAnthropic, translate.Messages, translate.Messages},
		{storage.ProviderOpenAICompat, translate.Responses, translate.Chat},
		{storage.ProviderOpenAICompat, translate.Messages, translate.Chat},
	} {
		if got := upstreamEndpoint(tc.p, tc.client); got != tc.up {
			t.Errorf("%s for a %s client: %s, want %s", tc.p, tc.client, got, tc.up)
		}
	}
	// One type names a protocol for the translators and the endpoint's route
	// for metrics, usage records and policies.
	for e, names := range map[translate.Protocol][2]string{
		translate.Chat: {"chat", "chat.completions"}, translate.Responses: {"responses", "responses"}, translate.Messages: {"messages", "messages"},
	} {
		if e.String() != names[0] || e.Route() != names[1] {
			t.Errorf("protocol %d: %s, route %s; want %v", e, e, e.Route(), names)
		}
	}
}

func TestChatClientOnAnthropicAccount(t *testing.T) {
	rec := &recorder{inner: cannedTransport{200, "application/json", readFile(t, "messages-nonstream-tooluse.response.json")}, reqs: make(chan upstream.Request, 1)}
	s, sys, key := testServerOf(t, rec, storage.ProviderAnthropic)
	resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"weather in SF?"}],`+
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"location":{"type":"string"}}}}}]}`))
	r := gjson.ParseBytes(resp.Body())
	if resp.StatusCode() != 200 || r.Get("object").Str != "chat.completion" || r.Get("model").Str != "m" ||
		r.Get("choices.0.finish_reason").Str != "tool_calls" || r.Get("choices.0.message.tool_calls.0.function.name").Str == "" ||
		r.Get("usage.prompt_tokens").Int() <= 0 {
		t.Fatalf("status %d body %s", resp.StatusCode(), resp.Body())
	}
	req := <-rec.reqs
	if req.Endpoint != translate.Messages || !gjson.GetBytes(req.Body, "max_tokens").Exists() || gjson.GetBytes(req.Body, "tools.0.input_schema").Type != gjson.JSON {
		t.Errorf("upstream got %s %s", req.Endpoint, req.Body)
	}
	waitIdle(t, sys)
}

func TestMessagesClientOnChatAccountStream(t *testing.T) {
	s, sys, key := testServerOf(t, cannedTransport{200, "text/event-stream", readFile(t, "chat-stream-text.sse")}, storage.ProviderOpenAICompat)
	body := []byte(`{"model":"m","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"what is the weather in San Francisco today?"}]}`)
	resp := doWith(s, "POST", "/v1/messages", map[string]string{"x-api-key": key, "anthropic-version": "2023-06-01"}, body)
	names := eventNames(t, resp.Body())
	// message_start says the prompt's estimated size, as Anthropic's says
	// its count; the chat upstream reports its own only at the end.
	start := gjson.GetBytes(bytes.SplitN(bytes.SplitN(resp.Body(), []byte("data: "), 2)[1], []byte("\n"), 2)[0], "message.usage.input_tokens")
	if want := estimateInputTokens(body); want <= 0 || start.Int() != want {
		t.Errorf("message_start input_tokens %s, want the estimate %d", start.Raw, want)
	}
	if resp.StatusCode() != 200 || len(names) < 5 || names[0] != "message_start" || names[len(names)-1] != "message_stop" ||
		!strings.Contains(strings.Join(names, " "), "content_block_delta") {
		t.Fatalf("status %d events %v body:\n%s", resp.StatusCode(), names, resp.Body())
	}
	if bytes.Contains(resp.Body(), []byte("[DONE]")) || bytes.Contains(resp.Body(), []byte("chat.completion.chunk")) {
		t.Errorf("chat bytes leaked into the Messages stream:\n%s", resp.Body())
	}
	waitIdle(t, sys)
}

func TestResponsesClientOnAnthropicStream(t *testing.T) {
	s, sys, key := testServerOf(t, cannedTransport{200, "text/event-stream", readFile(t, "messages-stream-tooluse.sse")}, storage.ProviderAnthropic)
	store := s.store.(*memStore)
	resp := do(s, "POST", "/v1/responses", key, []byte(`{"model":"m","stream":true,"input":"weather?",`+
		`"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"location":{"type":"string"}}}}]}`))
	names := eventNames(t, resp.Body())
	joined := strings.Join(names, " ")
	if resp.StatusCode() != 200 || names[0] != "response.created" || names[len(names)-1] != "response.completed" ||
		!strings.Contains(joined, "response.function_call_arguments.delta") {
		t.Fatalf("status %d events %v", resp.StatusCode(), names)
	}
	waitIdle(t, sys)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sys.FlushUsage(ctx)
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.usage) != 1 || store.usage[0].Route != "responses" || store.usage[0].InputTokens <= 0 || store.usage[0].OutputTokens <= 0 {
		t.Errorf("usage records %+v", store.usage)
	}
}

// A request the target protocol cannot express is a 400 in the client's
// protocol; the lease goes back and the account is not penalized.
func TestUntranslatableRequest(t *testing.T) {
	c := &counting{inner: cannedTransport{200, "application/json", []byte(`{}`)}}
	s, sys, key := testServerOf(t, c, storage.ProviderAnthropic)
	resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","messages":"not a list"}`))
	if resp.StatusCode() != 400 || !isOpenAIError(resp.Body()) || c.n.Load() != 0 {
		t.Fatalf("status %d body %s, %d upstream calls", resp.StatusCode(), resp.Body(), c.n.Load())
	}
	waitIdle(t, sys)
	for _, v := range sys.Views() {
		if v.Failures != 0 || v.Status != actors.StatusActive {
			t.Errorf("account %s penalized: %+v", v.Name, v)
		}
	}
}

// An upstream's own request error reaches the client in the client's
// error shape with its status.
func TestUpstreamRequestErrorTranslated(t *testing.T) {
	body := []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}`)
	s, sys, key := testServerOf(t, cannedTransport{400, "application/json", body}, storage.ProviderAnthropic)
	resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() != 400 || !isOpenAIError(resp.Body()) || gjson.GetBytes(resp.Body(), "error.message").Str != "max_tokens: too large" {
		t.Fatalf("status %d body %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
}

// A Messages error event before content, seen by a Chat client, fails over;
// a break after content ends the Chat stream with an error chunk.
func TestTranslatedStreamHoldAndBreak(t *testing.T) {
	early := []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n" +
		"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
	good := readFile(t, "messages-stream-text.sse")
	tr := &scripted{answers: []upstream.Transport{cannedTransport{200, "text/event-stream", early}, cannedTransport{200, "text/event-stream", good}}}
	s, sys, key := testServerOf(t, tr, storage.ProviderAnthropic, storage.ProviderAnthropic)
	req := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	resp := do(s, "POST", "/v1/chat/completions", key, req)
	names := eventNames(t, resp.Body())
	if resp.StatusCode() != 200 || tr.calls() != 2 || len(names) < 3 || names[len(names)-1] != "[DONE]" || bytes.Contains(resp.Body(), []byte(`"error"`)) {
		t.Fatalf("failover: status %d after %d calls, body:\n%s", resp.StatusCode(), tr.calls(), resp.Body())
	}
	waitIdle(t, sys)

	broken := readFile(t, "messages-stream-error-overloaded.sse")
	cut := broken[:bytes.Index(broken, []byte("event: error"))]
	s, sys, key = testServerOf(t, cannedTransport{200, "text/event-stream", cut}, storage.ProviderAnthropic)
	resp = do(s, "POST", "/v1/chat/completions", key, req)
	b := resp.Body()
	if resp.StatusCode() != 200 || !bytes.Contains(b, []byte(`"Hello"`)) || !bytes.Contains(b, []byte(`{"error":{`)) {
		t.Fatalf("break: status %d body:\n%s", resp.StatusCode(), b)
	}
	waitIdle(t, sys)
}

// previous_response_id keeps a request on accounts speaking Responses.
func TestPreviousResponseStaysNative(t *testing.T) {
	rec := &recorder{inner: cannedTransport{200, "application/json", []byte(`{"id":"resp_2","object":"response","status":"completed","output":[],"usage":{"input_tokens":1,"output_tokens":1}}`)}, reqs: make(chan upstream.Request, 8)}
	s, sys, key := testServerOf(t, rec, storage.ProviderAnthropic, storage.ProviderOpenAI, storage.ProviderAnthropic)
	for range 4 {
		resp := do(s, "POST", "/v1/responses", key, []byte(`{"model":"m","input":"more","previous_response_id":"resp_1"}`))
		if resp.StatusCode() != 200 {
			t.Fatalf("status %d body %s", resp.StatusCode(), resp.Body())
		}
		if r := <-rec.reqs; r.Endpoint != translate.Responses {
			t.Fatalf("previous_response_id went to a %s upstream", r.Endpoint)
		}
	}
	waitIdle(t, sys)
	s, sys, key = testServerOf(t, rec, storage.ProviderAnthropic)
	resp := do(s, "POST", "/v1/responses", key, []byte(`{"model":"m","input":"more","previous_response_id":"resp_1"}`))
	if resp.StatusCode() != 400 || gjson.GetBytes(resp.Body(), "error.param").Str != "previous_response_id" {
		t.Fatalf("only anthropic accounts: status %d body %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
}

// A malformed upstream event on a translated stream is a broken stream:
// before content it fails over, after content the client's stream ends with
// its protocol's error.
func TestTranslatedStreamMalformedEvent(t *testing.T) {
	bad := []byte("event: message_start\ndata: {not json\n\n")
	good := readFile(t, "messages-stream-text.sse")
	tr := &scripted{answers: []upstream.Transport{cannedTransport{200, "text/event-stream", bad}, cannedTransport{200, "text/event-stream", good}}}
	s, sys, key := testServerOf(t, tr, storage.ProviderAnthropic, storage.ProviderAnthropic)
	req := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	resp := do(s, "POST", "/v1/chat/completions", key, req)
	if resp.StatusCode() != 200 || tr.calls() != 2 || bytes.Contains(resp.Body(), []byte(`"error"`)) {
		t.Fatalf("status %d after %d calls, body:\n%s", resp.StatusCode(), tr.calls(), resp.Body())
	}
	waitIdle(t, sys)

	head := good[:bytes.Index(good, []byte("event: content_block_stop"))]
	late := append(append([]byte(nil), head...), "event: content_block_delta\ndata: {oops\n\n"...)
	s, sys, key = testServerOf(t, cannedTransport{200, "text/event-stream", late}, storage.ProviderAnthropic)
	resp = do(s, "POST", "/v1/chat/completions", key, req)
	if resp.StatusCode() != 200 || !bytes.Contains(resp.Body(), []byte(`{"error":{`)) || !bytes.HasSuffix(resp.Body(), []byte("data: [DONE]\n\n")) {
		t.Fatalf("after content: status %d body:\n%s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
	for _, v := range sys.Views() {
		if v.Failures != 1 {
			t.Errorf("account %s: %d failures, want the broken stream counted", v.Name, v.Failures)
		}
	}
}
