package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// endlessStream is an upstream SSE answer that sends head, then delta over
// and over until its call is cancelled: a long answer whose usage would
// come only at its end, which it never reaches.
type endlessStream struct {
	head, delta string
}

func (e endlessStream) Do(ctx context.Context, _ *upstream.Request) (*upstream.Response, error) {
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	pr, pw := io.Pipe()
	go func() {
		if _, err := pw.Write([]byte(e.head)); err != nil {
			return
		}
		for range 1_000_000 { // bounded: the gateway cancels long before
			if ctx.Err() != nil {
				break
			}
			if _, err := pw.Write([]byte(e.delta)); err != nil {
				return
			}
		}
		pw.CloseWithError(&upstream.Error{Kind: upstream.KindCanceled, Err: context.Cause(ctx)})
	}()
	go func() { <-ctx.Done(); pw.CloseWithError(&upstream.Error{Kind: upstream.KindCanceled, Err: ctx.Err()}) }()
	return &upstream.Response{Status: 200, Header: h, Body: pr}, nil
}

// cutCase is a streaming endpoint with an upstream of its own protocol.
type cutCase struct {
	name     string
	path     string
	provider storage.Provider
	body     string
	head     string
	delta    string
	input    int64 // the input tokens the record must carry; 0: the request's estimate
}

// cutCases are the three streaming endpoints with an upstream of their own
// protocol: the head carries three content deltas of "hello world " (12
// ASCII bytes each); Messages' message_start reports 25 input tokens.
var cutCases = []cutCase{
	{"chat", "/v1/chat/completions", storage.ProviderOpenAI,
		`{"model":"m","stream":true,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello world many times, please."}]}`,
		strings.Repeat(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hello world "},"finish_reason":null}]}`+"\n\n", 3),
		`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hello world "},"finish_reason":null}]}` + "\n\n", 0},
	{"responses", "/v1/responses", storage.ProviderOpenAI,
		`{"model":"m","stream":true,"instructions":"You are terse.","input":"Say hello world many times, please."}`,
		"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[],\"usage\":null}}\n\n" +
			"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n\n" +
			strings.Repeat("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"hello world \"}\n\n", 3),
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"hello world \"}\n\n", 0},
	{"messages", "/v1/messages", storage.ProviderAnthropic,
		`{"model":"m","stream":true,"max_tokens":1000,"system":"You are terse.","messages":[{"role":"user","content":"Say hello world many times, please."}]}`,
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
			strings.Repeat("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hello world \"}}\n\n", 3),
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hello world \"}}\n\n", 25},
}

// cutServer serves one endless-stream account of provider p, with per-key
// limits counted in a memory cache, and returns a key with a daily token
// budget.
func cutServer(t *testing.T, p storage.Provider, up endlessStream) (*Server, string, *storage.APIKey) {
	t.Helper()
	s, _, _ := testServerOf(t, up, p)
	c := memcache.New(memcache.Options{SweepInterval: -1})
	t.Cleanup(func() { c.Close() })
	s.cache = c
	secret, k := limitedKey(t, s.store.(*memStore), storage.KeyLimits{TokensPerDay: 100_000})
	return s, secret, k
}

// sendStream sends a streamed request on conn and reads until the third
// "hello world" of the answer has arrived.
func sendStream(t *testing.T, conn net.Conn, path, secret, body string) {
	t.Helper()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nx-api-key: %s\r\nanthropic-version: 2023-06-01\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, secret, secret, len(body), body)
	br := bufio.NewReader(conn)
	var got []byte
	for bytes.Count(got, []byte("hello world")) < 3 {
		b, err := br.ReadByte()
		if err != nil {
			t.Fatalf("reading the stream: %v after %q", err, got)
		}
		got = append(got, b)
	}
}

// TestCutStreamIsBilled: a stream the client hangs up on before the
// upstream reported usage is recorded (499) with input tokens from the
// upstream (Messages) or estimated from the request, output tokens
// estimated from the content relayed, marked estimated, and charged to the
// key's daily token budget. Before, such a record had 0 tokens on all three
// endpoints and the budget never moved (issue 16, finding 4).
//
// With 200 deltas a read (30 KB at once) the gateway gathers them before it
// writes (relay): a client that hangs up in the middle of that is billed
// the same way.
func TestCutStreamIsBilled(t *testing.T) {
	for _, per := range []int{1, 200} {
		for _, tc := range cutCases {
			t.Run(fmt.Sprintf("%s/deltas_per_read=%d", tc.name, per), func(t *testing.T) { testCutStreamIsBilled(t, tc, per) })
		}
	}
}

func testCutStreamIsBilled(t *testing.T, tc cutCase, per int) {
	up := endlessStream{head: tc.head, delta: strings.Repeat(tc.delta, per)}
	s, secret, k := cutServer(t, tc.provider, up)
	ln := serveTCP(t, s)
	conn := dialTCP(t, ln)
	sendStream(t, conn, tc.path, secret, tc.body)
	conn.Close()
	// The lease may be back (a release to an idle account is handled on
	// the request's goroutine) before the request records its usage.
	waitUntil(t, "the cut stream's usage record", func() bool { return len(logged(t, s)) > 0 })
	recs := logged(t, s)
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	r := recs[0]
	wantIn := tc.input
	if wantIn == 0 {
		wantIn = estimateRequestTokens(endpointOf(tc.path), []byte(tc.body))
	}
	// At least the three deltas the client read: 36 bytes, 9 tokens.
	if r.Status != statusClientClosed || !r.Estimated || r.InputTokens != wantIn || r.OutputTokens < 9 {
		t.Fatalf("record: status %d estimated %v input %d output %d; want 499, estimated, input %d, output >= 9",
			r.Status, r.Estimated, r.InputTokens, r.OutputTokens, wantIn)
	}
	used, err := s.cache.Count(context.Background(), "rl:tpd:"+k.ID, day)
	if err != nil || used != r.InputTokens+r.OutputTokens {
		t.Fatalf("daily tokens charged: %d (%v), want %d", used, err, r.InputTokens+r.OutputTokens)
	}
	t.Logf("billed %d input + %d output tokens (estimated)", r.InputTokens, r.OutputTokens)
}

// TestCutStreamsExhaustTokenBudget: a key whose streams are all cut runs
// out of its daily token budget like any other (before, none counted).
func TestCutStreamsExhaustTokenBudget(t *testing.T) {
	tc := cutCases[0]
	up := endlessStream{head: tc.head, delta: tc.delta}
	s, _, _ := cutServer(t, tc.provider, up)
	secret, k := limitedKey(t, s.store.(*memStore), storage.KeyLimits{TokensPerDay: 40})
	ln := serveTCP(t, s)
	for i := 0; ; i++ {
		if i == 10 {
			t.Fatal("10 cut streams did not use up a 40-token budget")
		}
		if _, e := s.admit(context.Background(), k, ""); e != nil {
			if e.Status != 429 || e.Type != "tokens" {
				t.Fatalf("refused with %d %s, want 429 tokens", e.Status, e.Type)
			}
			t.Logf("budget used up after %d cut streams", i)
			return
		}
		conn := dialTCP(t, ln)
		sendStream(t, conn, tc.path, secret, tc.body)
		conn.Close()
		waitIdle(t, s.sys)
		// The charge is made after the lease is back, before the record is
		// queued: wait for this stream's record.
		waitUntil(t, "the cut stream's record", func() bool { return len(logged(t, s)) > i })
	}
}

// TestShutdownCutStreamIsBilled: a stream still running when the shutdown
// grace ends is cancelled and recorded with estimated tokens (before: 0).
func TestShutdownCutStreamIsBilled(t *testing.T) {
	tc := cutCases[0]
	up := endlessStream{head: tc.head, delta: tc.delta}
	s, secret, _ := cutServer(t, tc.provider, up)
	ln := serveTCP(t, s)
	conn := dialTCP(t, ln)
	sendStream(t, conn, tc.path, secret, tc.body)
	go io.Copy(io.Discard, conn) // a client that reads on
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace at all
	s.Shutdown(ctx)
	// The lease may be back before the request records its usage.
	waitUntil(t, "the cut stream's usage record", func() bool { return len(logged(t, s)) > 0 })
	recs := logged(t, s)
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	if r := recs[0]; !r.Estimated || r.InputTokens == 0 || r.OutputTokens < 9 {
		t.Fatalf("record after shutdown: status %d estimated %v input %d output %d; want estimated tokens",
			r.Status, r.Estimated, r.InputTokens, r.OutputTokens)
	}
}

// A stream that ends properly with the upstream's usage is billed what the
// upstream said, not estimated.
func TestWholeStreamNotEstimated(t *testing.T) {
	body := `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hello world "},"finish_reason":null}]}` + "\n\n" +
		`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
		`data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}` + "\n\n" +
		"data: [DONE]\n\n"
	s, _, key := testServer(t, 1, cannedTransport{200, "text/event-stream", []byte(body)})
	resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() != 200 {
		t.Fatalf("status %d", resp.StatusCode())
	}
	recs := logged(t, s)
	if len(recs) != 1 || recs[0].Estimated || recs[0].InputTokens != 7 || recs[0].OutputTokens != 3 {
		t.Fatalf("records %+v, want one with 7+3 tokens, not estimated", recs)
	}
}

func endpointOf(path string) translate.Protocol {
	switch path {
	case "/v1/responses":
		return translate.Responses
	case "/v1/messages":
		return translate.Messages
	}
	return translate.Chat
}

func TestEstimateRequestTokens(t *testing.T) {
	for _, tc := range []struct {
		p    translate.Protocol
		body string
		want int64
	}{
		// 4 per message + ceil(ASCII bytes / 4) per text.
		{translate.Chat, `{"messages":[{"role":"user","content":"abcdefgh"}]}`, 4 + 2},
		{translate.Chat, `{"messages":[{"role":"user","content":[{"type":"text","text":"abcd"},{"type":"image_url","image_url":{"url":"data:"}}]}]}`, 4 + 1 + tokensPerImage},
		{translate.Chat, `{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{\"a\":1}"}}]}],"tools":[{"type":"function","function":{"name":"f","description":"abcd","parameters":{}}}]}`, 4 + 1 + 2 + tokensPerTool + 1 + 1 + 1},
		{translate.Responses, `{"instructions":"abcd","input":"abcdefgh"}`, 1 + 4 + 2},
		{translate.Responses, `{"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"abcd"}]},{"type":"function_call_output","call_id":"c","output":"abcdefgh"}]}`, 4 + 1 + 4 + 2},
		{translate.Messages, `{"messages":[{"role":"user","content":"abcdefgh"}]}`, 4 + 2},
		{translate.Chat, `{}`, 1},
	} {
		if got := estimateRequestTokens(tc.p, []byte(tc.body)); got != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.p.Route(), tc.body, got, tc.want)
		}
	}
}

func TestContentCount(t *testing.T) {
	var n contentCount
	for _, ev := range []struct {
		p          translate.Protocol
		name, data string
	}{
		{translate.Chat, "", `{"choices":[{"delta":{"role":"assistant","content":"abcd"}}]}`},
		{translate.Chat, "", `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]}}]}`},
		{translate.Responses, "response.output_text.delta", `{"type":"response.output_text.delta","delta":"abcd"}`},
		{translate.Responses, "response.created", `{"type":"response.created","response":{"id":"r"}}`},
		{translate.Messages, "content_block_delta", `{"type":"content_block_delta","delta":{"type":"text_delta","text":"日本"}}`},
		{translate.Messages, "message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"}}`},
	} {
		n.countEvent(ev.p, translate.Event{Name: []byte(ev.name), Data: []byte(ev.data)})
	}
	// ASCII: abcd + {\"a\" (6) + abcd = 14 -> 4 tokens; 2 other characters.
	if n.ascii != 14 || n.other != 2 || n.tokens() != 6 {
		t.Fatalf("counted %+v (%d tokens), want 14 ASCII, 2 other, 6 tokens", n, n.tokens())
	}
	data := []byte(`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hello world "},"finish_reason":null}]}`)
	if a := testing.AllocsPerRun(100, func() { n.countEvent(translate.Chat, translate.Event{Data: data}) }); a != 0 {
		t.Errorf("countEvent allocates %v times per Chat chunk", a)
	}
}

// BenchmarkContentCount is the relay's added cost per streamed event for
// an estimate of a cut stream (docs/benchmarks.md).
func BenchmarkContentCount(b *testing.B) {
	for _, tc := range []struct {
		name string
		p    translate.Protocol
		ev   translate.Event
	}{
		{"chat", translate.Chat, translate.Event{Data: []byte(`{"id":"chatcmpl-CKP5Ej0ssahGMBlaxOcA8KMyNMu7s","object":"chat.completion.chunk","created":1759057400,"model":"gpt-4.1-mini-2025-04-14","service_tier":"default","system_fingerprint":"fp_4c2851f3fb","choices":[{"index":0,"delta":{"content":" hello"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"oYAY"}`)}},
		{"responses", translate.Responses, translate.Event{Name: []byte("response.output_text.delta"), Data: []byte(`{"type":"response.output_text.delta","sequence_number":5,"item_id":"msg_68d7eff9","output_index":1,"content_index":0,"delta":" hello","logprobs":[],"obfuscation":"x1"}`)}},
		{"messages", translate.Messages, translate.Event{Name: []byte("content_block_delta"), Data: []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" hello"}}`)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var n contentCount
			b.ReportAllocs()
			for b.Loop() {
				n.countEvent(tc.p, tc.ev)
			}
		})
	}
}

// TestCutStreamEstimateHeldToCap: a cut stream's output is estimated from
// the bytes relayed, which can exceed the tokens the model produced; on an
// account whose API holds the request's output cap (openai, anthropic) the
// estimate is held to the cap, since the upstream cannot have counted
// more. Before, a Chat stream with max_tokens 5 cut after 200 deltas of
// "hello world " was billed 186 to 5,865 output tokens: a user held on its cap was
// charged past its estimate through output, beyond the overdraft bound of
// docs/billing.md. On openai_compat, which may not honour the cap, the
// estimate stands.
func TestCutStreamEstimateHeldToCap(t *testing.T) {
	for _, tc := range []struct {
		cutCase
		capped bool
		want   int64 // the output held to; 0: the body's cap times its n
	}{
		{cutCase{"chat", "/v1/chat/completions", storage.ProviderOpenAI,
			`{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"Say hello world many times, please."}]}`,
			cutCases[0].head, cutCases[0].delta, 0}, true, 0},
		{cutCase{"chat n=2", "/v1/chat/completions", storage.ProviderOpenAI,
			`{"model":"m","stream":true,"n":2,"max_completion_tokens":4,"messages":[{"role":"user","content":"Say hello world many times, please."}]}`,
			cutCases[0].head, cutCases[0].delta, 0}, true, 0},
		{cutCase{"responses", "/v1/responses", storage.ProviderOpenAI,
			`{"model":"m","stream":true,"max_output_tokens":5,"input":"Say hello world many times, please."}`,
			cutCases[1].head, cutCases[1].delta, 0}, true, 0},
		{cutCase{"messages", "/v1/messages", storage.ProviderAnthropic,
			`{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"Say hello world many times, please."}]}`,
			cutCases[2].head, cutCases[2].delta, 25}, true, 0},
		// Translated to Responses, whose least max_output_tokens is 16:
		// the upstream was sent 16 and may have produced that many.
		{cutCase{"messages on openai", "/v1/messages", storage.ProviderOpenAI,
			`{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"Say hello world many times, please."}]}`,
			cutCases[1].head, cutCases[1].delta, 0}, true, translate.MinResponsesOutputTokens},
		{cutCase{"chat compat", "/v1/chat/completions", storage.ProviderOpenAICompat,
			`{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"Say hello world many times, please."}]}`,
			cutCases[0].head, cutCases[0].delta, 0}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := endlessStream{head: tc.head, delta: strings.Repeat(tc.delta, 200)}
			s, secret, _ := cutServer(t, tc.provider, up)
			ln := serveTCP(t, s)
			conn := dialTCP(t, ln)
			sendStream(t, conn, tc.path, secret, tc.body)
			conn.Close()
			waitUntil(t, "the cut stream's usage record", func() bool { return len(logged(t, s)) > 0 })
			recs := logged(t, s)
			if len(recs) != 1 || !recs[0].Estimated {
				t.Fatalf("records %+v, want one estimated", recs)
			}
			want := int64(5)
			if strings.Contains(tc.body, `"n":2`) {
				want = 8
			}
			if tc.want != 0 {
				want = tc.want
			}
			if got := recs[0].OutputTokens; tc.capped && got != want || !tc.capped && got < 9 {
				t.Fatalf("output tokens %d; want %d (capped %v)", got, want, tc.capped)
			}
		})
	}
}
