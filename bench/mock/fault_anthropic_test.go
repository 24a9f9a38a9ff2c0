package mock

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

var faultAnthropic = Account{Name: "f-claude", Kind: KindAnthropic, Token: "sk-ant-fault-0005", OutputTokens: 6}

// anthropicTargets are the Messages routes of the anthropic fault account:
// streamed and not.
func anthropicTargets() []target {
	return []target{
		{"messages stream", faultAnthropic, "/v1/messages", messagesStreamBody, true, anthropicHeaders(faultAnthropic)},
		{"messages json", faultAnthropic, "/v1/messages", messagesBody, false, anthropicHeaders(faultAnthropic)},
	}
}

// Every status fault in Anthropic's shapes, and what the gateway's own
// classifier (upstream.Classify, the one place classes are decided) makes
// of it.
func TestAnthropicFaultStatus(t *testing.T) {
	f, base := startFleet(t, faultAnthropic)
	c := newClient(t)
	errShape := obj(t, string(fixture(t, "anthropic-messages/error-429.json")))
	cases := []struct {
		kind   FaultKind
		status int
		typ    string
		msg    string
		class  upstream.Class
	}{
		{FaultRateLimitReset, 400, "invalid_request_error", "You have reached your specified API usage limits. You will regain access on ", upstream.ClassQuota},
		{FaultRateLimitRetryAfter, 429, "rate_limit_error", "This request would exceed the rate limit", upstream.ClassRate},
		{FaultUnauthorized, 401, "authentication_error", "invalid x-api-key", upstream.ClassAuth},
		{FaultDeactivated, 400, "invalid_request_error", "This organization has been disabled.", upstream.ClassBanned},
		{FaultServerError, 500, "api_error", "Internal server error", upstream.ClassTransient},
		{FaultBadGateway, 502, "api_error", "Bad gateway", upstream.ClassTransient},
		{FaultUnavailable, 529, "overloaded_error", "Overloaded", upstream.ClassTransient},
	}
	n := int64(0)
	for _, tc := range cases {
		for _, tg := range anthropicTargets() {
			t.Run(string(tc.kind)+"/"+tg.name, func(t *testing.T) {
				f.SetFault(faultAnthropic.Name, &Fault{Kind: tc.kind, ResetsIn: 2 * time.Hour, RetryAfter: 2 * time.Second})
				resp, body, err := try(t.Context(), t, c, base, tg)
				if err != nil {
					t.Fatal(err)
				}
				n++
				wantStatus(t, resp, tc.status)
				got := obj(t, string(body))
				sameShape(t, "error", errShape, got, true)
				msg, _ := get(got, "error", "message").(string)
				if got["type"] != "error" || get(got, "error", "type") != tc.typ || !strings.HasPrefix(msg, tc.msg) {
					t.Errorf("body %s", body)
				}
				if id := resp.Header.Get("Request-Id"); !strings.HasPrefix(id, "req_") || got["request_id"] != id {
					t.Errorf("request-id %q, body request_id %v", id, got["request_id"])
				}
				for _, h := range headerNames(t, "anthropic-messages/response-headers.429.http") {
					if h != "Retry-After" && resp.Header.Get(h) == "" {
						t.Errorf("missing header %s", h)
					}
				}
				v := upstream.Classify(resp.StatusCode, resp.Header, body)
				if v.Class != tc.class {
					t.Errorf("upstream.Classify: %v, want %v", v.Class, tc.class)
				}
				switch tc.kind {
				case FaultRateLimitReset: // the stated reset, at minute granularity
					if v.RetryAfter < 2*time.Hour-5*time.Second || v.RetryAfter > 2*time.Hour+time.Minute {
						t.Errorf("quota reset in %v, want ~2h", v.RetryAfter)
					}
				case FaultRateLimitRetryAfter:
					if resp.Header.Get("Retry-After") != "2" || v.RetryAfter != 2*time.Second ||
						resp.Header.Get("Anthropic-Ratelimit-Output-Tokens-Remaining") != "0" {
						t.Errorf("retry-after %q, verdict %v, headers %v", resp.Header.Get("Retry-After"), v.RetryAfter, resp.Header)
					}
				}
			})
		}
	}
	checkStats(t, f, faultAnthropic.Name, n, 0)
}

func TestAnthropicFaultStreams(t *testing.T) {
	f, base := startFleet(t, faultAnthropic)
	c := newClient(t)
	stream, jsonTg := anthropicTargets()[0], anthropicTargets()[1]
	set := func(k FaultKind, d time.Duration) { f.SetFault(faultAnthropic.Name, &Fault{Kind: k, Delay: d}) }
	names := func(body []byte) string {
		var ns []string
		for _, ev := range parseSSE(t, body) {
			ns = append(ns, ev.event)
		}
		return strings.Join(ns, " ")
	}
	faults := int64(0)

	t.Run("reset before headers", func(t *testing.T) {
		set(FaultResetBeforeHeaders, 0)
		for _, tg := range anthropicTargets() {
			if resp, _, err := try(t.Context(), t, c, base, tg); resp != nil || err == nil {
				t.Errorf("%s: got a response", tg.name)
			}
			faults++
		}
	})
	t.Run("disconnect before content", func(t *testing.T) {
		set(FaultDisconnectBeforeContent, 10*time.Millisecond)
		resp, body, err := try(t.Context(), t, c, base, stream)
		faults++
		if resp == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%v %v", resp, err)
		}
		if got := names(body); got != "message_start" {
			t.Errorf("events %s, want message_start only", got)
		}
	})
	t.Run("disconnect after content", func(t *testing.T) {
		set(FaultDisconnectAfterContent, 0)
		resp, body, err := try(t.Context(), t, c, base, stream)
		faults++
		if resp == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%v %v", resp, err)
		}
		if got := names(body); got != "message_start content_block_start ping content_block_delta content_block_delta content_block_delta" {
			t.Errorf("events %s", got)
		}
	})
	t.Run("empty stream", func(t *testing.T) {
		set(FaultEmptyStream, 0)
		resp, body, err := try(t.Context(), t, c, base, stream)
		faults++
		if err != nil || resp.StatusCode != 200 || len(body) != 0 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Errorf("%v %v %q", err, resp, body)
		}
	})
	t.Run("error event first", func(t *testing.T) {
		set(FaultErrorEventFirst, 0)
		resp, body, err := try(t.Context(), t, c, base, stream)
		faults++
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", err, resp)
		}
		evs := parseSSE(t, body)
		fx := parseSSE(t, fixture(t, "anthropic-messages/stream-error-overloaded.sse"))
		if len(evs) != 1 || evs[0] != fx[len(fx)-1] {
			t.Errorf("events %+v, want the recorded overloaded error event", evs)
		}
		v, _, isErr := upstream.ClassifyEvent(translate.Messages, []byte(evs[0].event), []byte(evs[0].data))
		if !isErr || v.Class != upstream.ClassTransient {
			t.Errorf("classified %v %v", isErr, v.Class)
		}
		resp, body, err = try(t.Context(), t, c, base, jsonTg)
		faults++
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", err, resp)
		}
		if v, _, isErr := upstream.ClassifyBody(translate.Messages, body); !isErr || v.Class != upstream.ClassTransient {
			t.Errorf("JSON %s classified %v %v", body, isErr, v.Class)
		}
	})
	t.Run("json when stream", func(t *testing.T) {
		set(FaultJSONWhenStream, 0)
		resp, body, err := try(t.Context(), t, c, base, stream)
		faults++
		if err != nil || resp.Header.Get("Content-Type") != "application/json" || get(obj(t, string(body)), "type") != "message" {
			t.Errorf("%v %v %s", err, resp.Header, body)
		}
		resp, body, err = try(t.Context(), t, c, base, jsonTg)
		faults++
		if err != nil || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("%v %v", err, resp.Header)
		}
		if _, text := checkMessagesStream(t, body); text != AnswerText(faultAnthropic.Name, 6) {
			t.Errorf("text %q", text)
		}
	})
	t.Run("slow first token", func(t *testing.T) {
		const delay = 150 * time.Millisecond
		set(FaultSlowFirstToken, delay)
		req, _ := http.NewRequest("POST", base+stream.path, strings.NewReader(stream.body))
		for i := 0; i+1 < len(stream.hdr); i += 2 {
			req.Header.Set(stream.hdr[i], stream.hdr[i+1])
		}
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		line, _ := br.ReadString('\n') // event: message_start, at once (TestFaultSlowFirstTokenMessageStartFirst)
		if line != "event: message_start\n" {
			t.Errorf("first line %q", line)
		}
		rest, _ := io.ReadAll(br)
		if time.Since(start) < delay {
			t.Errorf("answer done after %v, before the delay", time.Since(start))
		}
		if _, text := checkMessagesStream(t, append([]byte(line), rest...)); text != AnswerText(faultAnthropic.Name, 6) {
			t.Errorf("text %q", text)
		}
	})
	t.Run("hang", func(t *testing.T) {
		set(FaultHang, 0)
		for _, tg := range anthropicTargets() {
			// A stream's head comes at once and then nothing: it is read
			// whole before the request is cancelled (a deadline could pass
			// before the head on a busy machine). A JSON answer never comes:
			// its request ends at the deadline.
			var resp *http.Response
			var body []byte
			var err error
			if tg.stream {
				resp, body, err = tryHead(t, c, base, tg)
			} else {
				ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
				resp, body, err = try(ctx, t, c, base, tg)
				cancel()
			}
			faults++
			if err == nil || len(body) != 0 || (tg.stream && (resp == nil || resp.StatusCode != 200)) || (!tg.stream && resp != nil) {
				t.Errorf("%s: %v %v %q", tg.name, resp, err, body)
			}
		}
	})
	f.SetFault(faultAnthropic.Name, nil)
	checkStats(t, f, faultAnthropic.Name, faults, 1) // the slow answer was delivered in full
}

// A Messages stream whose first token is slow sends its headers and
// message_start at once: with a delay of an hour, they can only have come
// first (the client gives up after 30 s).
func TestFaultSlowFirstTokenMessageStartFirst(t *testing.T) {
	f, base := startFleet(t, faultAnthropic)
	f.SetFault(faultAnthropic.Name, &Fault{Kind: FaultSlowFirstToken, Delay: time.Hour})
	c := newClient(t)
	req, _ := http.NewRequest("POST", base+"/v1/messages", strings.NewReader(messagesStreamBody))
	for _, h := range [][2]string{{"x-api-key", faultAnthropic.Token}, {"anthropic-version", "2023-06-01"}, {"Content-Type", "application/json"}} {
		req.Header.Set(h[0], h[1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("headers did not come before the delay: %v", err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if resp.StatusCode != 200 || line != "event: message_start\n" {
		t.Errorf("status %d, first line %q (%v)", resp.StatusCode, line, err)
	}
}
