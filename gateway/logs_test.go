package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/billing"
	"github.com/troupe-gw/troupe/routing"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// syncBuffer is a bytes.Buffer for a logger written from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines returns the JSON log lines written so far whose msg is msg.
func (s *syncBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for l := range strings.Lines(s.b.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// loggedServer is a server over n openai accounts answering with tr whose
// gateway and actors log JSON at level into the returned buffer.
func loggedServer(t *testing.T, n int, tr upstream.Transport, level slog.Level) (*Server, string, *syncBuffer) {
	t.Helper()
	buf := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: level}))
	store := newMemStore()
	sys := startSystem(t, actors.Config{Store: store, Logger: log, Transport: func(storage.Account) (upstream.Transport, error) { return tr, nil }})
	for i := range n {
		sys.PutAccount(storage.Account{ID: "a" + string(rune('0'+i)), Name: "acct-" + string(rune('0'+i)),
			Provider: storage.ProviderOpenAI, Models: []string{"m"}, MaxConcurrency: 1 << 20})
	}
	waitUntil(t, "the accounts started", func() bool { return len(sys.Views()) >= n })
	secret, k, err := NewKey("logged")
	if err != nil {
		t.Fatal(err)
	}
	store.CreateAPIKey(context.Background(), k)
	return New(Config{MaxWait: 10 * time.Millisecond}, sys, store, nil, nil, log), secret, buf
}

// TestFailuresAreLogged: every failed attempt, failed request and
// cooldown leaves a line with the request id, account, class and status,
// at a level an operator filters on, and a flood of them is rate-limited
// (before, thousands of false 502s, failovers and cooldowns left a handful
// of lines; issue 16, finding 9).
func TestFailuresAreLogged(t *testing.T) {
	down := cannedTransport{500, "application/json", []byte(`{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`)}
	s, key, buf := loggedServer(t, 2, down, slog.LevelInfo)
	const requests = 200
	start := time.Now()
	ids := map[string]bool{}
	for range requests {
		resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		if resp.StatusCode() < 500 {
			t.Fatalf("status %d, want a 5xx", resp.StatusCode())
		}
		ids[string(resp.Header.Peek("X-Request-Id"))] = true
	}
	// Each kind lets logBurst lines through per window begun.
	limit := logBurst * (int(time.Since(start)/logWindow) + 1)
	for _, tc := range []struct {
		msg, level string
		fields     []string
	}{
		{"upstream attempt failed", "WARN", []string{"request_id", "account", "class", "status", "attempt", "failover"}},
		{"request failed", "WARN", []string{"request_id", "account", "class", "status", "route", "attempts"}},
		{"account cooling down", "WARN", []string{"request_id", "account", "class", "status", "for", "until"}},
	} {
		lines := buf.lines(t, tc.msg)
		if len(lines) == 0 || len(lines) > limit {
			t.Errorf("%q: %d lines for %d failing requests, want 1..%d (rate-limited)", tc.msg, len(lines), requests, limit)
			continue
		}
		for _, l := range lines {
			if l["level"] != tc.level {
				t.Errorf("%q at %v, want %s", tc.msg, l["level"], tc.level)
			}
			for _, f := range tc.fields {
				if _, ok := l[f]; !ok {
					t.Errorf("%q without %s: %v", tc.msg, f, l)
				}
			}
			if id, _ := l["request_id"].(string); !ids[id] {
				t.Errorf("%q names request %q, not one of those sent", tc.msg, id)
			}
			switch {
			case tc.msg != "request failed" && (l["class"] != "transient" || l["status"] != float64(500)):
				t.Errorf("%q: class %v status %v, want transient 500", tc.msg, l["class"], l["status"])
			case tc.msg == "request failed" && l["attempts"] != float64(0) && (l["class"] != "transient" || l["status"] != float64(502)):
				// (a request no account could take, all cooling, is a 503 without attempts)
				t.Errorf("%q: class %v status %v after %v attempts, want transient 502", tc.msg, l["class"], l["status"], l["attempts"])
			}
		}
	}
}

// TestFailureLogsAllocateNothingWhenOff: with WARN lines filtered out, the
// failure lines cost a level check and no allocation.
func TestFailureLogsAllocateNothingWhenOff(t *testing.T) {
	s, _, buf := loggedServer(t, 1, cannedTransport{}, slog.LevelError)
	c := &call{key: &noKey, id: "req_1", authed: true, attempts: 1, errors: []storage.ErrorEvent{{AccountID: "a0", Class: "transient", Status: 500}}}
	lease := &actors.Lease{AccountID: "a0", Name: "acct-0", Provider: storage.ProviderOpenAI}
	f := &failure{verdict: upstream.Verdict{Class: upstream.ClassTransient}, status: 500, err: errors.New("boom")}
	if n := testing.AllocsPerRun(200, func() {
		s.logAttempt(c, lease, f, true)
		s.logEnd(c, 502)
	}); n != 0 {
		t.Errorf("failure lines allocate %v times with WARN off", n)
	}
	if l := buf.lines(t, "request failed"); len(l) != 0 {
		t.Errorf("WARN line written at level ERROR: %v", l)
	}
}

// An upstream failure without a message logs no empty error="" field.
func TestAttemptLogOmitsEmptyError(t *testing.T) {
	s, key, buf := loggedServer(t, 1, cannedTransport{500, "text/plain", nil}, slog.LevelInfo)
	if resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)); resp.StatusCode() < 500 {
		t.Fatalf("status %d, want a 5xx", resp.StatusCode())
	}
	lines := buf.lines(t, "upstream attempt failed")
	if len(lines) == 0 {
		t.Fatal("no attempt line")
	}
	for _, l := range lines {
		if e, ok := l["error"]; ok && e == "" {
			t.Errorf("empty error field: %v", l)
		}
	}
}

// A committed stream the upstream cut before its terminal event logs
// "request failed" as transient with why it broke (before, class was empty
// and nothing said what the upstream did).
func TestBrokenStreamLogsWhy(t *testing.T) {
	cut := cannedTransport{200, "text/event-stream", []byte(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"partial"},"finish_reason":null}]}` + "\n\n")}
	s, key, buf := loggedServer(t, 1, cut, slog.LevelInfo)
	resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if !bytes.Contains(resp.Body(), []byte("partial")) || !bytes.Contains(resp.Body(), []byte(msgStreamBroke)) {
		t.Fatalf("body %q: want the content, then the broken-stream error", resp.Body())
	}
	var lines []map[string]any
	waitUntil(t, "the request's failure logged", func() bool { lines = buf.lines(t, "request failed"); return len(lines) > 0 })
	l := lines[0]
	if l["class"] != "transient" || l["status"] != float64(502) || l["error"] != errNoTerminal.Error() {
		t.Fatalf("request failed line %v: want class transient, status 502, error %q", l, errNoTerminal)
	}
}

// TestUnknownURLsAreLogged: a path no route serves and a method a route
// does not take leave an INFO line with the method, the path, the status
// and the request id the client got; never the query string, a header or
// a key-shaped path segment (newcomer's findings: /v1/v1/chat/completions
// left no trace).
func TestUnknownURLsAreLogged(t *testing.T) {
	s, key, buf := loggedServer(t, 1, cannedTransport{200, "application/json", []byte(`{}`)}, slog.LevelInfo)
	for _, tc := range []struct {
		method, uri, path string
		status            int
	}{
		{"POST", "/v1/v1/chat/completions?api_key=sk-query-secret", "/v1/v1/chat/completions", 404},
		{"GET", "/nope", "/nope", 404},
		{"GET", "/v1/sk-path-secret/x", "/v1/sk-…/x", 404},
		{"GET", "/v1/chat/completions", "/v1/chat/completions", 405},
	} {
		resp := do(s, tc.method, tc.uri, key, nil)
		if resp.StatusCode() != tc.status {
			t.Fatalf("%s %s: %d, want %d", tc.method, tc.uri, resp.StatusCode(), tc.status)
		}
		id := string(resp.Header.Peek("X-Request-Id"))
		var found bool
		msg := map[int]string{404: "unknown url", 405: "method not allowed"}[tc.status]
		for _, l := range buf.lines(t, msg) {
			if l["request_id"] == id {
				found = true
				if l["level"] != "INFO" || l["method"] != tc.method || l["path"] != tc.path || l["status"] != float64(tc.status) {
					t.Errorf("%s %s logged as %v", tc.method, tc.uri, l)
				}
			}
		}
		if !found || id == "" {
			t.Errorf("%s %s (request id %q): no line", tc.method, tc.uri, id)
		}
	}
	buf.mu.Lock()
	all := buf.b.String()
	buf.mu.Unlock()
	for _, secret := range []string{"sk-query-secret", "sk-path-secret", key, "Bearer"} {
		if strings.Contains(all, secret) {
			t.Errorf("the log holds %q:\n%s", secret, all)
		}
	}
}

// TestBillingUnavailableLogRateLimited: a user request refused because
// storage cannot tell its balance leaves a WARN line with the storage
// error, rate-limited like the other failure lines, the next one saying how
// many were suppressed. Before, every refusal wrote its line: with
// PostgreSQL stopped for 8 s under two curl loops, each of three instances
// logged about 276.
func TestBillingUnavailableLogRateLimited(t *testing.T) {
	buf := &syncBuffer{}
	s := &Server{log: slog.New(slog.NewJSONHandler(buf, nil)), logs: newLogEvents()}
	c := &call{key: &noKey, id: "req_1", endpoint: translate.Chat}
	const refusals = 200
	start := time.Now()
	for range refusals {
		aerr := s.billingRefusal(c, &billing.Refusal{Kind: billing.RefusedUnavailable, Err: errors.New("postgres: connection refused")})
		if aerr.Status != 503 || aerr.Code != "billing_unavailable" {
			t.Fatalf("refusal %+v, want 503 billing_unavailable", aerr)
		}
	}
	limit := logBurst * (int(time.Since(start)/logWindow) + 1)
	lines := buf.lines(t, "billing: balance unavailable; user request refused")
	if len(lines) == 0 || len(lines) > limit {
		t.Fatalf("%d lines for %d refusals, want 1..%d (rate-limited)", len(lines), refusals, limit)
	}
	for _, l := range lines {
		if l["level"] != "WARN" || l["err"] != "postgres: connection refused" {
			t.Errorf("line %v, want WARN with the storage error", l)
		}
		if _, ok := l["suppressed"]; !ok {
			t.Errorf("line without suppressed: %v", l)
		}
	}
}

// TestRouteErrorLogRateLimited: a policy whose route() fails on live
// requests (its self-test passed) leaves a WARN line naming the policy and
// the error, rate-limited like the other failure lines. Before, every
// request wrote one: a route() that fails at 1,000 requests a second was
// 1,000 lines a second.
func TestRouteErrorLogRateLimited(t *testing.T) {
	ok := cannedTransport{200, "application/json", []byte(`{"id":"x","object":"chat.completion","choices":[]}`)}
	s, key, buf := loggedServer(t, 1, ok, slog.LevelInfo)
	rt := routing.New(s.sys, routing.Options{})
	if err := rt.Activate("route-fails", `
function score() return 1 end
function route(r)
  if r.api_key.name == "logged" then error("boom") end
  return nil
end`, 0); err != nil {
		t.Fatal(err)
	}
	s.SetRouting(rt)
	const requests = 100
	start := time.Now()
	for range requests {
		if resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)); resp.StatusCode() != 200 {
			t.Fatalf("status %d, want 200 (a route error routes without constraints): %s", resp.StatusCode(), resp.Body())
		}
	}
	limit := logBurst * (int(time.Since(start)/logWindow) + 1)
	lines := buf.lines(t, "route() failed; routing without constraints")
	if len(lines) == 0 || len(lines) > limit {
		t.Fatalf("%d lines for %d failing route() calls, want 1..%d (rate-limited)", len(lines), requests, limit)
	}
	for _, l := range lines {
		if l["level"] != "WARN" || l["policy"] != "route-fails" || !strings.Contains(l["err"].(string), "boom") {
			t.Errorf("line %v, want WARN naming the policy and the error", l)
		}
		if _, ok := l["suppressed"]; !ok {
			t.Errorf("line without suppressed: %v", l)
		}
	}
}
