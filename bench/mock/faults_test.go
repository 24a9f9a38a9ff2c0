package mock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Accounts of the fault tests: one per kind, 6 output tokens each.
var (
	faultOpenAI = Account{Name: "f-openai", Kind: KindOpenAI, Token: "sk-proj-fault-openai-0001", OutputTokens: 6}
	faultCompat = Account{Name: "f-compat", Kind: KindOpenAICompat, Token: "sk-compat-fault-0002", OutputTokens: 6}
	faultCodex  = Account{Name: "f-codex", Kind: KindCodex, Token: "eyJ.fault.codex.0003", ChatGPTAccountID: "00000000-0000-4000-8000-0000000000f3", OutputTokens: 6}
)

// target is one route of one account, streamed or not.
type target struct {
	name   string
	acc    Account
	path   string
	body   string
	stream bool
	hdr    []string
}

const (
	faultChatStream      = `{"model":"gpt-5.4","stream":true,"messages":[{"role":"user","content":"Hello!"}]}`
	faultResponsesStream = `{"model":"gpt-5.4","input":"Hello!","stream":true}`
	faultResponsesJSON   = `{"model":"gpt-5.4","input":"Hello!"}`
)

// faultTargets returns every route the fault accounts serve: streamed
// (chat, responses, compat chat, codex) and, unless streamOnly, non-streamed
// (chat, responses, compat chat).
func faultTargets(streamOnly bool) []target {
	ts := []target{
		{"chat stream", faultOpenAI, "/v1/chat/completions", faultChatStream, true, nil},
		{"responses stream", faultOpenAI, "/v1/responses", faultResponsesStream, true, nil},
		{"compat stream", faultCompat, "/v1/chat/completions", faultChatStream, true, nil},
		{"codex stream", faultCodex, "/backend-api/codex/responses", codexBody, true, codexHeaders(faultCodex)},
	}
	if !streamOnly {
		ts = append(ts,
			target{"chat json", faultOpenAI, "/v1/chat/completions", chatBody, false, nil},
			target{"responses json", faultOpenAI, "/v1/responses", faultResponsesJSON, false, nil},
			target{"compat json", faultCompat, "/v1/chat/completions", chatBody, false, nil},
		)
	}
	return ts
}

func (tg target) isChat() bool  { return tg.path == "/v1/chat/completions" }
func (tg target) isCodex() bool { return tg.acc.Kind == KindCodex }

// startFaultFleet starts a fleet with the three fault accounts.
func startFaultFleet(t *testing.T) (*Fleet, string) {
	return startFleet(t, faultOpenAI, faultCompat, faultCodex)
}

// try sends tg's request and reads the whole body. It returns the response
// (nil if no response head arrived), the body bytes read and the error that
// ended the exchange: nil for a clean end, the Do error, or the body read
// error (io.ErrUnexpectedEOF for a connection cut mid-body).
func try(ctx context.Context, t testing.TB, c *http.Client, base string, tg target) (*http.Response, []byte, error) {
	t.Helper()
	resp, err := c.Do(targetRequest(ctx, t, base, tg))
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// tryHead is try for an answer whose head comes and then nothing: the
// request is cancelled once the head is in, so the body read ends at once
// with what had come (nothing, from a hang) and the error.
func tryHead(t testing.TB, c *http.Client, base string, tg target) (*http.Response, []byte, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp, err := c.Do(targetRequest(ctx, t, base, tg))
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	cancel()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// targetRequest is tg's request to the fleet at base.
func targetRequest(ctx context.Context, t testing.TB, base string, tg target) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", base+tg.path, strings.NewReader(tg.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tg.acc.Token)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(tg.hdr); i += 2 {
		req.Header.Set(tg.hdr[i], tg.hdr[i+1])
	}
	return req
}

// checkStats checks the fault accounting of an account once it is idle:
// the invariant, and the counts that matter here.
func checkStats(t *testing.T, f *Fleet, name string, faults, completed int64) {
	t.Helper()
	waitFor(t, name+" idle", func() bool { return f.Stats(name).InFlight == 0 })
	st := f.Stats(name)
	if st.Requests != st.Rejected+st.Completed+st.Cancelled+st.Faults+st.InFlight {
		t.Errorf("%s: stats %+v break Requests == Rejected+Completed+Cancelled+Faults+InFlight", name, st)
	}
	if st.Faults != faults || st.Completed != completed || st.Rejected != 0 || st.Cancelled != 0 {
		t.Errorf("%s: stats %+v, want Faults %d, Completed %d, nothing Rejected or Cancelled", name, st, faults, completed)
	}
}

// headerNames returns the header names of an .http fixture.
func headerNames(t *testing.T, name string) []string {
	var names []string
	for _, line := range strings.Split(string(fixture(t, name)), "\n")[1:] {
		if line == "" {
			break
		}
		n, _, _ := strings.Cut(line, ":")
		names = append(names, n)
	}
	return names
}

func TestFaultStatus(t *testing.T) {
	f, base := startFaultFleet(t)
	c := newClient(t)
	fx := func(name string) map[string]any { return obj(t, string(fixture(t, name))) }
	var n atomic.Int64 // requests per account name
	counts := map[string]int64{}

	for _, kind := range []FaultKind{FaultRateLimitReset, FaultRateLimitRetryAfter, FaultUnauthorized, FaultDeactivated, FaultServerError, FaultBadGateway, FaultUnavailable} {
		for _, tg := range faultTargets(false) {
			t.Run(string(kind)+"/"+tg.name, func(t *testing.T) {
				f.SetFault(tg.acc.Name, &Fault{Kind: kind, ResetsIn: 90 * time.Second, RetryAfter: 2 * time.Second})
				resp, body, err := try(t.Context(), t, c, base, tg)
				if err != nil {
					t.Fatal(err)
				}
				counts[tg.acc.Name]++
				n.Add(1)
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("content-type %q", ct)
				}
				got := obj(t, string(body))
				errCode, _ := get(got, "error", "code").(string)
				switch {
				case kind == FaultRateLimitReset && tg.isCodex():
					wantStatus(t, resp, 429)
					sameShape(t, "usage limit", fx("codex-backend/error-429-usage-limit.json"), got, true)
					if get(got, "error", "type") != "usage_limit_reached" || get(got, "error", "plan_type") != "pro" {
						t.Errorf("body %s", body)
					}
					in, at := num(t, get(got, "error", "resets_in_seconds")), num(t, get(got, "error", "resets_at"))
					if in < 88 || in > 90 {
						t.Errorf("resets_in_seconds %d, want ~90", in)
					}
					if d := at - time.Now().Unix(); d < 88 || d > 91 {
						t.Errorf("resets_at is %d s away, want ~90", d)
					}
					for _, h := range headerNames(t, "codex-backend/error-429-usage-limit.http") {
						if resp.Header.Get(h) == "" && h != "content-type" {
							t.Errorf("missing header %s", h)
						}
					}
					if resp.Header.Get("X-Codex-Primary-Used-Percent") != "100" ||
						resp.Header.Get("X-Codex-Primary-Reset-After-Seconds") != strconv.FormatInt(in, 10) ||
						resp.Header.Get("X-Codex-Primary-Reset-At") != strconv.FormatInt(at, 10) {
						t.Errorf("x-codex headers do not show the used-up window: %v", resp.Header)
					}
				case kind == FaultRateLimitReset && tg.acc.Kind == KindOpenAICompat:
					wantStatus(t, resp, 429)
					msg, _ := get(got, "error", "message").(string)
					if get(got, "error", "type") != "exceeded_current_quota_error" || !strings.Contains(msg, "balance") || !strings.Contains(msg, "quota") {
						t.Errorf("body %s", body)
					}
				case kind == FaultRateLimitReset:
					wantStatus(t, resp, 429)
					want := fx("openai-chat/error-429-insufficient-quota.json")
					sameShape(t, "quota", want, got, true)
					if get(got, "error", "message") != get(want, "error", "message") || errCode != "insufficient_quota" {
						t.Errorf("body %s", body)
					}
					if resp.Header.Get("Retry-After") != "" {
						t.Errorf("quota 429 has Retry-After %q", resp.Header.Get("Retry-After"))
					}
				case kind == FaultRateLimitRetryAfter:
					wantStatus(t, resp, 429)
					sameShape(t, "rate limit", fx("openai-chat/error-429-rate-limit.json"), got, true)
					msg, _ := get(got, "error", "message").(string)
					if errCode != "rate_limit_exceeded" || get(got, "error", "type") != "tokens" || !strings.Contains(msg, "Please try again in 2s.") {
						t.Errorf("body %s", body)
					}
					if ra := resp.Header.Get("Retry-After"); ra != "2" {
						t.Errorf("Retry-After %q, want 2", ra)
					}
					if tg.isCodex() {
						if p, err := strconv.ParseFloat(resp.Header.Get("X-Codex-Primary-Used-Percent"), 64); err != nil || p >= 100 {
							t.Errorf("a plain rate limit shows primary usage %q", resp.Header.Get("X-Codex-Primary-Used-Percent"))
						}
						break
					}
					for _, h := range headerNames(t, "openai-chat/response-headers.429.http") {
						if resp.Header.Get(h) == "" {
							t.Errorf("missing header %s", h)
						}
					}
					if resp.Header.Get("X-Ratelimit-Remaining-Tokens") != "0" || resp.Header.Get("X-Ratelimit-Reset-Tokens") != "2s" {
						t.Errorf("x-ratelimit headers %v", resp.Header)
					}
				case kind == FaultUnauthorized && tg.isCodex():
					wantStatus(t, resp, 401)
					if want := strings.TrimSpace(string(fixture(t, "codex-backend/error-401-token-invalidated.json"))); string(body) != want {
						t.Errorf("body %s, want %s", body, want)
					}
				case kind == FaultUnauthorized:
					wantStatus(t, resp, 401)
					sameShape(t, "401", fx("openai-chat/error-401.json"), got, true)
					msg, _ := get(got, "error", "message").(string)
					if errCode != "invalid_api_key" || strings.Contains(msg, tg.acc.Token) || !strings.Contains(msg, tg.acc.Token[len(tg.acc.Token)-4:]) {
						t.Errorf("body %s", body)
					}
				case kind == FaultDeactivated && tg.isCodex():
					wantStatus(t, resp, 402)
					if string(body) != `{"detail":{"code":"deactivated_workspace"}}` {
						t.Errorf("body %s", body)
					}
				case kind == FaultDeactivated:
					wantStatus(t, resp, 403)
					sameShape(t, "403", fx("openai-chat/error-401.json"), got, true)
					if errCode != "account_deactivated" {
						t.Errorf("body %s", body)
					}
				default:
					wantStatus(t, resp, map[FaultKind]int{FaultServerError: 500, FaultBadGateway: 502, FaultUnavailable: 503}[kind])
					sameShape(t, "5xx", fx("openai-chat/error-500.json"), got, true)
					if get(got, "error", "type") != "server_error" || get(got, "error", "code") != nil {
						t.Errorf("body %s", body)
					}
				}
				if !strings.HasPrefix(resp.Header.Get("X-Request-Id"), "req_") {
					t.Errorf("x-request-id %q", resp.Header.Get("X-Request-Id"))
				}
			})
		}
	}
	for name, want := range counts {
		checkStats(t, f, name, want, 0)
	}
	if tot := f.TotalStats(); tot.Faults != n.Load() || tot.Rejected != 0 {
		t.Errorf("total %+v, want %d faults", tot, n.Load())
	}
}

func wantStatus(t *testing.T, resp *http.Response, status int) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d", resp.StatusCode, status)
	}
}

func TestFaultStatusOptions(t *testing.T) {
	f, base := startFaultFleet(t)
	c := newClient(t)
	chat := faultTargets(false)[4]
	codex := faultTargets(true)[3]

	// A quota longer than the 5-hour window is the weekly one.
	f.SetFault(faultCodex.Name, &Fault{Kind: FaultRateLimitReset, ResetsIn: 50 * time.Hour})
	resp, body, err := try(t.Context(), t, c, base, codex)
	if err != nil {
		t.Fatal(err)
	}
	at := strconv.FormatInt(num(t, get(obj(t, string(body)), "error", "resets_at")), 10)
	if resp.StatusCode != 429 || resp.Header.Get("X-Codex-Secondary-Used-Percent") != "100" || resp.Header.Get("X-Codex-Secondary-Reset-At") != at ||
		resp.Header.Get("X-Codex-Primary-Used-Percent") == "100" {
		t.Errorf("weekly quota: %d %v", resp.StatusCode, resp.Header)
	}

	// A negative RetryAfter is a 429 without Retry-After.
	f.SetFault(faultOpenAI.Name, &Fault{Kind: FaultRateLimitRetryAfter, RetryAfter: -1})
	resp, body, _ = try(t.Context(), t, c, base, chat)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "" || !strings.Contains(string(body), "Please try again in 12s.") {
		t.Errorf("no Retry-After: %d %v %s", resp.StatusCode, resp.Header, body)
	}

	// Delay holds the error back.
	f.SetFault(faultOpenAI.Name, &Fault{Kind: FaultUnavailable, Delay: 100 * time.Millisecond})
	start := time.Now()
	resp, _, _ = try(t.Context(), t, c, base, chat)
	if d := time.Since(start); resp.StatusCode != 503 || d < 100*time.Millisecond {
		t.Errorf("delayed 503: status %d after %v", resp.StatusCode, d)
	}

	// An unknown kind is a visible 500.
	f.SetFault(faultOpenAI.Name, &Fault{Kind: "nonsense"})
	resp, body, _ = try(t.Context(), t, c, base, chat)
	if resp.StatusCode != 500 || !strings.Contains(string(body), `unknown fault kind \"nonsense\"`) {
		t.Errorf("unknown kind: %d %s", resp.StatusCode, body)
	}

	// A request the account refuses itself is Rejected, not a fault.
	f.SetFault(faultOpenAI.Name, &Fault{Kind: FaultServerError})
	bad := chat
	bad.body = `{"model":`
	if resp, _, _ := try(t.Context(), t, c, base, bad); resp.StatusCode != 400 {
		t.Errorf("malformed body with a fault: status %d, want 400", resp.StatusCode)
	}
	if st := f.Stats(faultOpenAI.Name); st.Rejected != 1 || st.Faults != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestFaultResetBeforeHeaders(t *testing.T) {
	f, base := startFaultFleet(t)
	c := newClient(t)
	for _, a := range []Account{faultOpenAI, faultCompat, faultCodex} {
		f.SetFault(a.Name, &Fault{Kind: FaultResetBeforeHeaders})
	}
	for _, tg := range faultTargets(false) {
		resp, _, err := try(t.Context(), t, c, base, tg)
		if resp != nil || err == nil {
			t.Errorf("%s: got a response (%v), want a failed request", tg.name, resp)
		}
	}
	// On the wire: not one byte, then a TCP reset.
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: mock\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", faultOpenAI.Token, len(chatBody), chatBody)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(conn)
	if len(b) != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("raw read: %q, %v; want nothing and ECONNRESET", b, err)
	}
	checkStats(t, f, faultOpenAI.Name, 5, 0) // 4 targets and the raw request
	checkStats(t, f, faultCodex.Name, 1, 0)
}

func TestFaultDisconnectBeforeContent(t *testing.T) {
	f, base := startFaultFleet(t)
	c := newClient(t)
	for _, a := range []Account{faultOpenAI, faultCompat, faultCodex} {
		f.SetFault(a.Name, &Fault{Kind: FaultDisconnectBeforeContent, Delay: 20 * time.Millisecond})
	}
	for _, tg := range faultTargets(false) {
		t.Run(tg.name, func(t *testing.T) {
			resp, body, err := try(t.Context(), t, c, base, tg)
			if resp == nil {
				t.Fatalf("no response: %v", err)
			}
			wantStatus(t, resp, 200)
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("body ended with %v, want io.ErrUnexpectedEOF", err)
			}
			if !tg.stream {
				if len(body) != 0 || resp.ContentLength <= 0 || resp.Header.Get("Content-Type") != "application/json" {
					t.Errorf("JSON: content-length %d, %q, body %q; want headers and no body", resp.ContentLength, resp.Header.Get("Content-Type"), body)
				}
				return
			}
			if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || resp.ContentLength != -1 {
				t.Errorf("content-type %q, content-length %d", resp.Header.Get("Content-Type"), resp.ContentLength)
			}
			evs := parseSSE(t, body)
			if tg.isChat() {
				if len(evs) != 1 || get(obj(t, evs[0].data), "choices", 0, "delta", "role") != "assistant" {
					t.Errorf("events %+v, want the role chunk only", evs)
				}
				return
			}
			if len(evs) != 2 || evs[0].event != "response.created" || evs[1].event != "response.in_progress" {
				t.Errorf("events %+v, want response.created and response.in_progress only", evs)
			}
			if tg.isCodex() && resp.Header.Get("X-Codex-Primary-Used-Percent") == "" {
				t.Errorf("codex headers missing: %v", resp.Header)
			}
		})
	}
	checkStats(t, f, faultOpenAI.Name, 4, 0)
}

func TestFaultDisconnectAfterContent(t *testing.T) {
	f, base := startFaultFleet(t)
	c := newClient(t)
	for _, a := range []Account{faultOpenAI, faultCompat, faultCodex} {
		f.SetFault(a.Name, &Fault{Kind: FaultDisconnectAfterContent})
	}
	for _, tg := range faultTargets(false) {
		t.Run(tg.name, func(t *testing.T) {
			resp, body, err := try(t.Context(), t, c, base, tg)
			if resp == nil {
				t.Fatalf("no response: %v", err)
			}
			wantStatus(t, resp, 200)
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("body ended with %v, want io.ErrUnexpectedEOF", err)
			}
			if !tg.stream {
				if int64(len(body)) != resp.ContentLength/2 || !strings.HasPrefix(string(body), `{"id":"`) {
					t.Errorf("JSON: %d of %d bytes: %q; want the first half", len(body), resp.ContentLength, body)
				}
				return
			}
			evs := parseSSE(t, body)
			var text strings.Builder
			var types []string
			for i, ev := range evs {
				d := obj(t, ev.data)
				if tg.isChat() {
					if s, ok := get(d, "choices", 0, "delta", "content").(string); ok {
						text.WriteString(s)
					}
					if get(d, "choices", 0, "finish_reason") != nil {
						t.Errorf("chunk %d has a finish_reason", i)
					}
					continue
				}
				types = append(types, ev.event)
				if num(t, d["sequence_number"]) != int64(i) {
					t.Errorf("event %d: sequence_number %v", i, d["sequence_number"])
				}
				if s, ok := d["delta"].(string); ok {
					text.WriteString(s)
				}
			}
			// 6 tokens: the first 3 deltas, "Hello " "from " "f-xxx. ".
			if want := AnswerText(tg.acc.Name, 6)[:len("Hello from "+tg.acc.Name+". ")]; text.String() != want {
				t.Errorf("text %q, want %q", text.String(), want)
			}
			if !tg.isChat() {
				want := "response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta response.output_text.delta response.output_text.delta"
				if got := strings.Join(types, " "); got != want {
					t.Errorf("events %s, want %s", got, want)
				}
			} else if len(evs) != 4 {
				t.Errorf("%d chunks, want the role chunk and 3 deltas", len(evs))
			}
		})
	}
	checkStats(t, f, faultOpenAI.Name, 4, 0)
	if PreContentMix()[0] == FaultDisconnectAfterContent || FaultDisconnectAfterContent.PreContent() {
		t.Error("disconnect_after_content counted as pre-content")
	}
}

func TestFaultEmptyStream(t *testing.T) {
	f, base := startFaultFleet(t)
	c := newClient(t)
	for _, a := range []Account{faultOpenAI, faultCompat, faultCodex} {
		f.SetFault(a.Name, &Fault{Kind: FaultEmptyStream})
	}
	for _, tg := range faultTargets(false) {
		resp, body, err := try(t.Context(), t, c, base, tg)
		if err != nil {
			t.Fatalf("%s: %v (want a clean end)", tg.name, err)
		}
		ct := resp.Header.Get("Content-Type")
		if resp.StatusCode != 200 || len(body) != 0 ||
			(tg.stream && !strings.HasPrefix(ct, "text/event-stream")) || (!tg.stream && (ct != "application/json" || resp.ContentLength != 0)) {
			t.Errorf("%s: %d %q content-length %d body %q", tg.name, resp.StatusCode, ct, resp.ContentLength, body)
		}
	}
	checkStats(t, f, faultOpenAI.Name, 4, 0)
}

func TestFaultErrorEventFirst(t *testing.T) {
	f, base := startFaultFleet(t)
	c := newClient(t)
	for _, a := range []Account{faultOpenAI, faultCompat, faultCodex} {
		f.SetFault(a.Name, &Fault{Kind: FaultErrorEventFirst})
	}
	midstream := parseSSE(t, fixture(t, "openai-chat/stream-midstream-error.sse"))
	errFx := parseSSE(t, fixture(t, "openai-responses/stream-error-event.sse"))
	failedFx := obj(t, parseSSE(t, fixture(t, "openai-responses/stream-response-failed.sse"))[0].data)
	for _, tg := range faultTargets(false) {
		t.Run(tg.name, func(t *testing.T) {
			resp, body, err := try(t.Context(), t, c, base, tg)
			if err != nil {
				t.Fatalf("%v (want a clean end)", err)
			}
			wantStatus(t, resp, 200)
			switch {
			case tg.stream && tg.isChat():
				// Byte for byte the fixture's error line.
				if want := "data: " + midstream[len(midstream)-1].data + "\n\n"; string(body) != want {
					t.Errorf("body %q, want %q", body, want)
				}
			case tg.stream:
				evs := parseSSE(t, body)
				if len(evs) != 2 || evs[0].event != "error" || evs[1].event != "response.failed" {
					t.Fatalf("events %+v, want error then response.failed", evs)
				}
				e, failed := obj(t, evs[0].data), obj(t, evs[1].data)
				sameShape(t, "error event", obj(t, errFx[2].data), e, true)
				sameShape(t, "response.failed", obj(t, errFx[3].data), failed, false)
				sameShape(t, "response.failed", failedFx, failed, false)
				if num(t, e["sequence_number"]) != 0 || num(t, failed["sequence_number"]) != 1 ||
					get(e, "error", "code") != "server_error" || get(failed, "response", "status") != "failed" ||
					get(failed, "response", "error", "code") != "server_error" {
					t.Errorf("events %s", body)
				}
			case tg.isChat():
				got := obj(t, string(body))
				sameShape(t, "200 error", obj(t, string(fixture(t, "openai-chat/error-500.json"))), got, true)
				if get(got, "error", "type") != "server_error" {
					t.Errorf("body %s", body)
				}
			default:
				got := obj(t, string(body))
				sameShape(t, "failed response", failedFx["response"], got, false)
				if got["status"] != "failed" || get(got, "error", "code") != "server_error" || len(got["output"].([]any)) != 0 {
					t.Errorf("body %s", body)
				}
			}
		})
	}
	checkStats(t, f, faultOpenAI.Name, 4, 0)
}

func TestFaultJSONWhenStream(t *testing.T) {
	f, base := startFaultFleet(t)
	c := newClient(t)
	for _, a := range []Account{faultOpenAI, faultCompat, faultCodex} {
		f.SetFault(a.Name, &Fault{Kind: FaultJSONWhenStream})
	}
	for _, tg := range faultTargets(false) {
		t.Run(tg.name, func(t *testing.T) {
			resp, body, err := try(t.Context(), t, c, base, tg)
			if err != nil {
				t.Fatal(err)
			}
			wantStatus(t, resp, 200)
			want := AnswerText(tg.acc.Name, 6)
			ct := resp.Header.Get("Content-Type")
			switch {
			case tg.stream && tg.isChat():
				got := obj(t, string(body))
				if ct != "application/json" || got["object"] != "chat.completion" || get(got, "choices", 0, "message", "content") != want {
					t.Errorf("%q %s", ct, body)
				}
			case tg.stream:
				got := obj(t, string(body))
				if ct != "application/json" || got["status"] != "completed" || get(got, "output", 0, "content", 0, "text") != want {
					t.Errorf("%q %s", ct, body)
				}
			case tg.isChat():
				if !strings.HasPrefix(ct, "text/event-stream") {
					t.Errorf("content-type %q", ct)
				}
				if _, text := checkChatStream(t, body, false); text != want {
					t.Errorf("text %q, want %q", text, want)
				}
			default:
				if !strings.HasPrefix(ct, "text/event-stream") {
					t.Errorf("content-type %q", ct)
				}
				checkResponsesStream(t, body, want, 6, true)
			}
		})
	}
	checkStats(t, f, faultOpenAI.Name, 4, 0)
}

func TestFaultSlowFirstToken(t *testing.T) {
	f, base := startFaultFleet(t)
	c := newClient(t)
	const delay = 150 * time.Millisecond
	for _, a := range []Account{faultOpenAI, faultCompat, faultCodex} {
		f.SetFault(a.Name, &Fault{Kind: FaultSlowFirstToken, Delay: delay})
	}
	if got := f.Fault(faultOpenAI.Name); got == nil || got.Kind != FaultSlowFirstToken || got.Delay != delay || got.Rate != 1 {
		t.Errorf("Fault() = %+v", got)
	}
	for _, tg := range faultTargets(false) {
		t.Run(tg.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", base+tg.path, strings.NewReader(tg.body))
			req.Header.Set("Authorization", "Bearer "+tg.acc.Token)
			for i := 0; i+1 < len(tg.hdr); i += 2 {
				req.Header.Set(tg.hdr[i], tg.hdr[i+1])
			}
			start := time.Now()
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			head := time.Since(start)
			want := AnswerText(tg.acc.Name, 6)
			// A client holding the whole answer never finds it in flight:
			// a gateway frees the account's slot on it (TestFleetKillHeldLeases).
			ended := func() {
				if st := f.Stats(tg.acc.Name); st.InFlight != 0 {
					t.Errorf("answer read in full, still %d in flight", st.InFlight)
				}
			}
			if !tg.stream {
				body := readAll(t, resp)
				if head < delay || !strings.Contains(string(body), want) {
					t.Errorf("JSON after %v: %s", head, body)
				}
				ended()
				return
			}
			if !resp.Close {
				t.Error("no Connection: close on an answer served from a hijacked connection")
			}
			var body []byte
			var first time.Duration
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadString('\n')
				body = append(body, line...)
				if first == 0 && (strings.Contains(line, `"content":"Hello `) || strings.Contains(line, `"delta":"Hello `)) {
					first = time.Since(start)
				}
				if err != nil {
					break
				}
			}
			ended()
			if first < delay {
				t.Errorf("first content after %v, want >= %v", first, delay)
			}
			if tg.isChat() {
				if _, text := checkChatStream(t, body, false); text != want {
					t.Errorf("text %q", text)
				}
			} else {
				checkResponsesStream(t, body, want, 6, !tg.isCodex())
			}
		})
	}
	// Delivered in full: Completed, not a fault.
	checkStats(t, f, faultOpenAI.Name, 0, 4)

	// A client that gives up during the wait: a fault.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := try(ctx, t, c, base, faultTargets(false)[0]); err == nil {
		t.Fatal("request survived its timeout")
	}
	checkStats(t, f, faultOpenAI.Name, 1, 4)
}

// A stream's headers come before the first-token delay: with a delay of an
// hour, they can only have come first (the client gives up after 30 s).
func TestFaultSlowFirstTokenHeadersFirst(t *testing.T) {
	f, base := startFaultFleet(t)
	c := newClient(t)
	for _, a := range []Account{faultOpenAI, faultCompat, faultCodex} {
		f.SetFault(a.Name, &Fault{Kind: FaultSlowFirstToken, Delay: time.Hour})
	}
	for _, tg := range faultTargets(false) {
		if !tg.stream {
			continue
		}
		req, _ := http.NewRequest("POST", base+tg.path, strings.NewReader(tg.body))
		req.Header.Set("Authorization", "Bearer "+tg.acc.Token)
		for i := 0; i+1 < len(tg.hdr); i += 2 {
			req.Header.Set(tg.hdr[i], tg.hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: headers did not come before the delay: %v", tg.name, err)
		}
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Errorf("%s: %d %v", tg.name, resp.StatusCode, resp.Header)
		}
		resp.Body.Close()
	}
}

func TestFaultHang(t *testing.T) {
	f, base := startFaultFleet(t)
	c := newClient(t)
	for _, a := range []Account{faultOpenAI, faultCompat, faultCodex} {
		f.SetFault(a.Name, &Fault{Kind: FaultHang})
	}
	for _, tg := range faultTargets(false) {
		start := time.Now()
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel)
		resp, body, err := try(ctx, t, c, base, tg)
		cancel()
		if d := time.Since(start); err == nil || d < 100*time.Millisecond || len(body) != 0 {
			t.Errorf("%s: ended after %v with %v, body %q; want silence until the client gives up", tg.name, d, err, body)
		}
		if tg.stream && (resp == nil || resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")) {
			t.Errorf("%s: want the 200 SSE headers, got %v", tg.name, resp)
		}
		if !tg.stream && resp != nil {
			t.Errorf("%s: want no headers, got %d", tg.name, resp.StatusCode)
		}
	}
	// The mock notices each client leaving at once.
	checkStats(t, f, faultOpenAI.Name, 4, 0)
	checkStats(t, f, faultCodex.Name, 1, 0)
}

func TestFaultHangStopsOnClose(t *testing.T) {
	f := New(Config{Accounts: []Account{{Name: "h-1", Kind: KindOpenAI, Token: "sk-hang-000001", Fault: &Fault{Kind: FaultHang}}}})
	addr, err := f.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t)
	done := make(chan error, 2)
	for _, body := range []string{faultChatStream, chatBody} {
		go func() {
			_, _, err := try(t.Context(), t, c, "http://"+addr, target{acc: Account{Token: "sk-hang-000001"}, path: "/v1/chat/completions", body: body})
			done <- err
		}()
	}
	waitFor(t, "two hanging requests", func() bool { return f.Stats("h-1").InFlight == 2 })
	// The hanging requests end only when their clients give up (30 s):
	// a Close that waited for them would not return within 20 s.
	closed := make(chan error, 1)
	go func() { closed <- f.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close waited for the hanging requests")
	}
	for range 2 {
		if err := <-done; err == nil {
			t.Error("a hanging request ended cleanly on Close")
		}
	}
	if st := f.Stats("h-1"); st != (AccountStats{MaxInFlight: 2, Requests: 2, Faults: 2}) {
		t.Errorf("stats %+v", st)
	}
}

func TestFaultRate(t *testing.T) {
	f, base := startFaultFleet(t)
	c := newClient(t)
	f.SetFault(faultOpenAI.Name, &Fault{Kind: FaultServerError, Rate: 0.5})
	tg := faultTargets(false)[4]
	const n = 200
	failed := 0
	for range n {
		resp, body, err := try(t.Context(), t, c, base, tg)
		if err != nil {
			t.Fatal(err)
		}
		switch resp.StatusCode {
		case 500:
			failed++
		case 200:
			if got := get(obj(t, string(body)), "choices", 0, "message", "content"); got != AnswerText(faultOpenAI.Name, 6) {
				t.Fatalf("normal answer %q", got)
			}
		default:
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if failed < 60 || failed > 140 {
		t.Errorf("%d of %d failed at Rate 0.5", failed, n)
	}
	checkStats(t, f, faultOpenAI.Name, int64(failed), int64(n-failed))
}

// A quota fault stops firing ResetsIn after it was armed. The refusals are
// judged only when they were asked for before that (a machine busy enough
// to take longer runs again, with twice the time), and the answers after it
// once it has surely passed.
func TestFaultQuotaComesBack(t *testing.T) {
	f, base := startFaultFleet(t)
	c := newClient(t)
	codex, chat := faultTargets(true)[3], faultTargets(false)[4]
	for resetsIn := 300 * time.Millisecond; ; resetsIn *= 2 {
		if resetsIn > 10*time.Second {
			t.Fatal("the refusals never came back before the quota's reset")
		}
		waitFor(t, "codex idle", func() bool { return f.Stats(faultCodex.Name).InFlight == 0 })
		prior := f.Stats(faultCodex.Name)
		before := time.Now() // the faults are armed after this
		f.SetFault(faultCodex.Name, &Fault{Kind: FaultRateLimitReset, ResetsIn: resetsIn})
		f.SetFault(faultOpenAI.Name, &Fault{Kind: FaultRateLimitReset, ResetsIn: resetsIn})
		armed := time.Now() // and before this
		resp, body, _ := try(t.Context(), t, c, base, codex)
		resp2, _, _ := try(t.Context(), t, c, base, chat)
		if time.Since(before) >= resetsIn {
			continue // the quota may have reset meanwhile: not judged
		}
		if resp.StatusCode != 429 {
			t.Fatalf("codex: %d %s", resp.StatusCode, body)
		}
		if n := num(t, get(obj(t, string(body)), "error", "resets_in_seconds")); n < 1 || float64(n) > math.Ceil(resetsIn.Seconds()) {
			t.Fatalf("codex: resets_in_seconds %v with the reset %v away at most", n, resetsIn)
		}
		if resp2.StatusCode != 429 {
			t.Fatalf("openai: %d", resp2.StatusCode)
		}
		time.Sleep(time.Until(armed.Add(resetsIn))) // the quota's reset is what is tested
		if resp, body, err := try(t.Context(), t, c, base, codex); err != nil || resp.StatusCode != 200 || !strings.Contains(string(body), "response.completed") {
			t.Errorf("codex after the reset: %v %s", err, body)
		}
		if resp, _, _ := try(t.Context(), t, c, base, chat); resp.StatusCode != 200 {
			t.Errorf("openai after the reset: %d", resp.StatusCode)
		}
		checkStats(t, f, faultCodex.Name, prior.Faults+1, prior.Completed+1)
		return
	}
}

func TestSetFaultLive(t *testing.T) {
	acc := faultOpenAI
	acc.Fault = &Fault{Kind: FaultUnauthorized}
	f, base := startFleet(t, acc)
	acc.Fault.Kind = FaultHang // the fleet keeps its own copy
	c := newClient(t)
	tg := target{acc: acc, path: "/v1/chat/completions", body: chatBody}
	if resp, _, _ := try(t.Context(), t, c, base, tg); resp.StatusCode != 401 {
		t.Fatalf("fault from Account.Fault: status %d, want 401", resp.StatusCode)
	}
	if f.SetFault("no-such-account", &Fault{Kind: FaultHang}) || f.Fault("no-such-account") != nil {
		t.Error("SetFault/Fault on an unknown account")
	}

	faults := []*Fault{nil, {Kind: FaultServerError}, {Kind: FaultUnauthorized}, {Kind: FaultEmptyStream}, {Kind: FaultErrorEventFirst}, {Kind: FaultResetBeforeHeaders}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok, bad atomic.Int64
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, body, err := try(t.Context(), t, c, base, tg)
				switch {
				case err != nil && resp == nil: // reset_before_headers
					bad.Add(1)
				case err != nil:
					t.Errorf("read: %v", err)
				case resp.StatusCode == 200 && len(body) > 0 && get(obj(t, string(body)), "choices", 0, "message", "content") == AnswerText(acc.Name, 6):
					ok.Add(1)
				case resp.StatusCode == 200 || resp.StatusCode == 500 || resp.StatusCode == 401:
					bad.Add(1)
				default:
					t.Errorf("status %d: %s", resp.StatusCode, body)
				}
			}
		})
	}
	for i := range 60 {
		if !f.SetFault(acc.Name, faults[i%len(faults)]) {
			t.Fatal("SetFault: account not found")
		}
		// A few answers under each fault, however fast the machine is.
		from := ok.Load() + bad.Load()
		waitFor(t, "answers under a fault", func() bool { return ok.Load()+bad.Load()-from >= 3 })
	}
	f.SetFault(acc.Name, nil)
	close(stop)
	wg.Wait()
	if f.Fault(acc.Name) != nil {
		t.Error("Fault() after SetFault(nil)")
	}
	if resp, body, _ := try(t.Context(), t, c, base, tg); resp.StatusCode != 200 || get(obj(t, string(body)), "choices", 0, "message", "content") != AnswerText(acc.Name, 6) {
		t.Errorf("after SetFault(nil): %d %s", resp.StatusCode, body)
	}
	if ok.Load() == 0 || bad.Load() == 0 {
		t.Errorf("%d normal and %d faulted answers; want both", ok.Load(), bad.Load())
	}
	checkStats(t, f, acc.Name, bad.Load()+1, ok.Load()+1)
}

func TestAssignFaults(t *testing.T) {
	pool := func() []Account {
		accs := make([]Account, 1000)
		for i := range accs {
			accs[i] = Account{Name: fmt.Sprintf("p-%04d", i), Token: fmt.Sprintf("sk-p-%04d", i)}
		}
		return accs
	}
	assigned := func(accs []Account) map[string]FaultKind {
		m := map[string]FaultKind{}
		for _, a := range accs {
			if a.Fault != nil {
				m[a.Name] = a.Fault.Kind
			}
		}
		return m
	}

	a := pool()
	AssignFaults(a, 0.3, nil, 42)
	got := assigned(a)
	if len(got) != 300 {
		t.Fatalf("%d accounts faulted, want 300", len(got))
	}
	perKind := map[FaultKind]int{}
	seen := map[*Fault]bool{}
	for _, acc := range a {
		if acc.Fault == nil {
			continue
		}
		if acc.Fault.Rate != 1 || seen[acc.Fault] {
			t.Errorf("%s: %+v (want Rate 1, a Fault of its own)", acc.Name, acc.Fault)
		}
		seen[acc.Fault] = true
		perKind[acc.Fault.Kind]++
	}
	mix := PreContentMix()
	if len(perKind) != len(mix) {
		t.Errorf("kinds %v, want all of %v", perKind, mix)
	}
	for _, k := range mix {
		if c := perKind[k]; c < 300/len(mix) || c > 300/len(mix)+1 {
			t.Errorf("%s: %d accounts, want an equal share", k, c)
		}
	}

	b := pool()
	AssignFaults(b, 0.3, nil, 42)
	if again := assigned(b); fmt.Sprint(again) != fmt.Sprint(got) {
		t.Error("the same seed chose differently")
	}
	c := pool()
	AssignFaults(c, 0.3, nil, 43)
	if other := assigned(c); fmt.Sprint(other) == fmt.Sprint(got) {
		t.Error("another seed chose the same")
	}

	for _, tc := range []struct {
		fraction float64
		want     int
	}{{0, 0}, {-1, 0}, {math.NaN(), 0}, {0.0004, 0}, {0.0005, 1}, {0.5, 500}, {1, 1000}, {1.5, 1000}} {
		p := pool()
		AssignFaults(p, tc.fraction, []FaultKind{FaultServerError}, 1)
		if n := len(assigned(p)); n != tc.want {
			t.Errorf("fraction %v: %d faulted, want %d", tc.fraction, n, tc.want)
		}
		for name, k := range assigned(p) {
			if k != FaultServerError {
				t.Errorf("%s: %s, want the only kind of the mix", name, k)
			}
		}
	}

	// Accounts not chosen keep their fault.
	p := pool()
	for i := range p {
		p[i].Fault = &Fault{Kind: FaultHang}
	}
	AssignFaults(p, 0.1, []FaultKind{FaultUnavailable}, 7)
	if n := len(assigned(p)); n != 1000 || func() int {
		k := 0
		for _, acc := range p {
			if acc.Fault.Kind == FaultUnavailable {
				k++
			}
		}
		return k
	}() != 100 {
		t.Errorf("existing faults not kept: %d", n)
	}
	AssignFaults(nil, 0.5, nil, 1) // no accounts: nothing to do
}

func TestFaultKinds(t *testing.T) {
	all, pre := FaultKinds(), PreContentMix()
	if len(all) != 15 || len(pre) != 14 {
		t.Fatalf("%d kinds, %d pre-content", len(all), len(pre))
	}
	for _, k := range all {
		if !k.Valid() {
			t.Errorf("%s not valid", k)
		}
		if got, err := ParseFaultKind(string(k)); err != nil || got != k {
			t.Errorf("ParseFaultKind(%s) = %s, %v", k, got, err)
		}
		if k.PreContent() != (k != FaultDisconnectAfterContent) {
			t.Errorf("%s.PreContent() = %v", k, k.PreContent())
		}
	}
	for _, k := range pre {
		if !k.PreContent() {
			t.Errorf("%s in PreContentMix", k)
		}
	}
	if _, err := ParseFaultKind("teapot"); err == nil || FaultKind("teapot").Valid() || FaultKind("teapot").PreContent() {
		t.Error("unknown kind accepted")
	}
	pre[0] = "changed"
	if PreContentMix()[0] == "changed" {
		t.Error("PreContentMix returns shared storage")
	}
}

func TestFaultModelListings(t *testing.T) {
	f, base := startFaultFleet(t)
	c := newClient(t)
	list := func(a Account) int {
		path, hdr := "/v1/models", []string(nil)
		if a.Kind == KindCodex {
			path, hdr = "/backend-api/codex/models", codexHeaders(a)
		}
		resp, _ := do(t, c, "GET", base+path, a.Token, "", hdr...)
		return resp.StatusCode
	}
	for _, tc := range []struct {
		kind       FaultKind
		openai, cx int
	}{
		{FaultUnauthorized, 401, 401}, {FaultDeactivated, 403, 402},
		{FaultRateLimitReset, 200, 200}, {FaultServerError, 200, 200}, {FaultHang, 200, 200},
	} {
		f.SetFault(faultOpenAI.Name, &Fault{Kind: tc.kind})
		f.SetFault(faultCodex.Name, &Fault{Kind: tc.kind})
		if got := list(faultOpenAI); got != tc.openai {
			t.Errorf("%s: openai listing %d, want %d", tc.kind, got, tc.openai)
		}
		if got := list(faultCodex); got != tc.cx {
			t.Errorf("%s: codex listing %d, want %d", tc.kind, got, tc.cx)
		}
	}
	if st := f.TotalStats(); st.Requests != 0 {
		t.Errorf("listings counted: %+v", st)
	}
}

func TestFaultPoolUnderLoad(t *testing.T) {
	accs := make([]Account, 120)
	for i := range accs {
		accs[i] = Account{Name: fmt.Sprintf("pool-%03d", i), Kind: KindOpenAI, Token: fmt.Sprintf("sk-pool-%06d", i), OutputTokens: 4}
		if i%3 == 0 {
			accs[i].Kind, accs[i].ChatGPTAccountID = KindCodex, fmt.Sprintf("acct-%d", i)
		}
	}
	AssignFaults(accs, 0.5, FaultKinds(), 7)
	for i := range accs {
		if fl := accs[i].Fault; fl != nil && fl.Kind == FaultSlowFirstToken {
			fl.Delay = 20 * time.Millisecond
		}
	}
	f, base := startFleet(t, accs...)
	c := newClient(t)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 60 {
				a := accs[(w*61+i*7)%len(accs)]
				tg := target{acc: a, path: "/v1/chat/completions", body: chatBody}
				switch {
				case a.Kind == KindCodex:
					tg.path, tg.body, tg.hdr = "/backend-api/codex/responses", codexBody, codexHeaders(a)
				case i%2 == 0:
					tg.body = faultChatStream
				}
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				resp, body, err := try(ctx, t, c, base, tg)
				cancel()
				if a.Fault == nil || a.Fault.Kind == FaultSlowFirstToken {
					if err != nil || resp.StatusCode != 200 || !strings.Contains(string(body), AnswerText(a.Name, 4)[:5]) {
						t.Errorf("%s (%v): %v %v", a.Name, a.Fault, err, resp)
					}
				}
			}
		})
	}
	wg.Wait()
	var faults int64
	for _, a := range accs {
		waitFor(t, a.Name+" idle", func() bool { return f.Stats(a.Name).InFlight == 0 })
		st := f.Stats(a.Name)
		if st.Requests != st.Completed+st.Faults+st.Cancelled+st.Rejected {
			t.Errorf("%s: %+v", a.Name, st)
		}
		switch {
		case a.Fault == nil || a.Fault.Kind == FaultSlowFirstToken:
			if st.Faults != 0 || st.Completed != st.Requests {
				t.Errorf("%s (%v): %+v", a.Name, a.Fault, st)
			}
		default:
			if st.Completed != 0 || st.Faults != st.Requests {
				t.Errorf("%s (%s): %+v", a.Name, a.Fault.Kind, st)
			}
		}
		faults += st.Faults
	}
	if tot := f.TotalStats(); tot.Faults != faults || tot.Requests != 480 {
		t.Errorf("total %+v, want 480 requests, %d faults", tot, faults)
	}
}
