package gateway

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

var (
	chatOK = []byte("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: [DONE]\n\n")
	chatErrFirst = []byte("data: {\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n")
	respErrFirst = []byte("event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\"}}\n\n" +
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"insufficient_quota\",\"code\":\"insufficient_quota\",\"message\":\"quota\"}}\n\n")
	chatRequestErr = []byte("data: {\"error\":{\"message\":\"This model's maximum context length is 10 tokens\",\"type\":\"invalid_request_error\",\"param\":\"messages\",\"code\":\"context_length_exceeded\"}}\n\n")
)

func sse(b []byte) cannedTransport        { return cannedTransport{200, "text/event-stream", b} }
func jsonAnswer(b string) cannedTransport { return cannedTransport{200, "application/json", []byte(b)} }

// Each pre-content failure fails over invisibly: the client sees only the
// second account's stream, byte for byte.
func TestHoldFailsOverBeforeContent(t *testing.T) {
	cases := map[string]cannedTransport{
		"error event first":   sse(chatErrFirst),
		"empty stream":        sse(nil),
		"json when streaming": jsonAnswer(`{"id":"x"}`),
		"500":                 {500, "application/json", []byte(`{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`)},
		"429 quota":           {429, "application/json", []byte(`{"error":{"type":"usage_limit_reached","resets_in_seconds":60}}`)},
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			tr := &scripted{answers: []upstream.Transport{bad, sse(chatOK)}}
			s, sys, key := testServer(t, 3, tr)
			resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			if resp.StatusCode() != 200 || !bytes.Equal(resp.Body(), chatOK) {
				t.Fatalf("status %d body %q", resp.StatusCode(), resp.Body())
			}
			if tr.calls() != 2 {
				t.Fatalf("%d upstream calls, want 2", tr.calls())
			}
			waitIdle(t, sys)
		})
	}
}

func TestHoldRequestErrorReturnedWithStatus(t *testing.T) {
	tr := &scripted{answers: []upstream.Transport{sse(chatRequestErr), sse(chatOK)}}
	s, sys, key := testServer(t, 3, tr)
	resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() != 400 || !isOpenAIError(resp.Body()) || tr.calls() != 1 {
		t.Fatalf("status %d calls %d body %s", resp.StatusCode(), tr.calls(), resp.Body())
	}
	waitIdle(t, sys)
}

func TestHoldAllFailGivesStatus(t *testing.T) {
	tr := &scripted{answers: []upstream.Transport{sse(respErrFirst)}}
	s, sys, key := testServer(t, 2, tr)
	resp := do(s, "POST", "/v1/responses", key, []byte(`{"model":"m","stream":true}`))
	if resp.StatusCode() != 429 || !isOpenAIError(resp.Body()) {
		t.Fatalf("status %d body %s", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
}

func TestSlowFirstTokenFailsOver(t *testing.T) {
	tr := &scripted{answers: []upstream.Transport{slowSSE{delay: time.Hour, body: chatOK}, sse(chatOK)}}
	s, sys, key := testServerCfg(t, 2, tr, Config{MaxWait: 100 * time.Millisecond, FirstTokenTimeout: 50 * time.Millisecond})
	resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() != 200 || !bytes.Equal(resp.Body(), chatOK) {
		t.Fatalf("status %d body %q", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
}

// A hold longer than the heartbeat interval commits the head and keeps the
// connection alive with comments; the content follows.
func TestHeartbeatWhileHolding(t *testing.T) {
	tr := &scripted{answers: []upstream.Transport{slowSSE{delay: 300 * time.Millisecond, body: chatOK}}}
	s, sys, key := testServerCfg(t, 1, tr, Config{MaxWait: 100 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond})
	resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() != 200 || !bytes.HasPrefix(resp.Body(), heartbeat) || !bytes.HasSuffix(resp.Body(), chatOK) {
		t.Fatalf("status %d body %q", resp.StatusCode(), resp.Body())
	}
	waitIdle(t, sys)
}

// When every attempt fails after the head was committed, the client gets a
// well-formed error event in its protocol.
func TestFailureAfterHeartbeatIsErrorEvent(t *testing.T) {
	tr := &scripted{answers: []upstream.Transport{slowSSE{delay: 200 * time.Millisecond, body: respErrFirst}}}
	s, sys, key := testServerCfg(t, 1, tr, Config{MaxWait: 100 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond})
	resp := do(s, "POST", "/v1/responses", key, []byte(`{"model":"m","stream":true}`))
	body := resp.Body()
	i := bytes.Index(body, []byte("event: response.failed\ndata: "))
	if resp.StatusCode() != 200 || !bytes.Contains(body, []byte("event: error\n")) || i < 0 {
		t.Fatalf("status %d body %q", resp.StatusCode(), body)
	}
	data := body[i+len("event: response.failed\ndata: "):]
	data = data[:bytes.IndexByte(data, '\n')]
	if gjson.GetBytes(data, "response.status").String() != "failed" || gjson.GetBytes(data, "response.error.message").String() == "" {
		t.Fatalf("bad response.failed %s", data)
	}
	waitIdle(t, sys)
}

// A Responses stream that breaks after content ends with error + response.failed
// carrying the id the client already saw.
func TestBreakAfterCommitKeepsResponseID(t *testing.T) {
	broken := []byte("event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_abc\"}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n")
	s, sys, key := testServer(t, 1, sse(broken))
	resp := do(s, "POST", "/v1/responses", key, []byte(`{"model":"m","stream":true}`))
	if !bytes.HasPrefix(resp.Body(), broken) || !bytes.Contains(resp.Body(), []byte(`"id":"resp_abc"`+`,"object":"response","status":"failed"`)) {
		t.Fatalf("body %q", resp.Body())
	}
	waitIdle(t, sys)
}

// The events the gateway adds to a Responses stream carry sequence_number,
// going on from the last the client saw: after a stream broken after
// commit (the upstream's own numbers, here from 7), and after heartbeats
// alone (from 0) (issue #15, defect 6). The client's stream stays one
// sequence without gaps, as every Responses stream is.
func TestInjectedEventsContinueTheSequence(t *testing.T) {
	broken := []byte("event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":5,\"response\":{\"id\":\"resp_abc\"}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":6,\"delta\":\"Hi\"}\n\n")
	s, sys, key := testServer(t, 1, sse(broken))
	resp := do(s, "POST", "/v1/responses", key, []byte(`{"model":"m","stream":true}`))
	checkSequence(t, resp.Body(), 5, []string{"response.created", "response.output_text.delta", "error", "response.failed"})
	waitIdle(t, sys)

	tr := &scripted{answers: []upstream.Transport{slowSSE{delay: 200 * time.Millisecond, body: respErrFirst}}}
	s, sys, key = testServerCfg(t, 1, tr, Config{MaxWait: 100 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond})
	resp = do(s, "POST", "/v1/responses", key, []byte(`{"model":"m","stream":true}`))
	checkSequence(t, resp.Body(), 0, []string{"error", "response.failed"})
	waitIdle(t, sys)
}

// checkSequence checks that the events of an SSE body are named names and
// number from first on without gaps.
func checkSequence(t *testing.T, body []byte, first int64, names []string) {
	t.Helper()
	sc := translate.NewScanner(bytes.NewReader(body), 1<<20)
	var got []string
	for want := first; ; want++ {
		ev, err := sc.Next()
		if err != nil {
			break
		}
		got = append(got, string(ev.Name))
		if n := gjson.GetBytes(ev.Data, "sequence_number"); n.Type != gjson.Number || n.Int() != want {
			t.Errorf("event %s: sequence_number %s, want %d", ev.Name, n.Raw, want)
		}
	}
	if strings.Join(got, " ") != strings.Join(names, " ") {
		t.Errorf("events %v, want %v", got, names)
	}
}
