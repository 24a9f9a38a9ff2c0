package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

// logged flushes the usage recorder and returns the request-log records.
func logged(t *testing.T, s *Server) []storage.UsageRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.sys.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := s.store.(*memStore).UsageRecords(ctx, storage.RequestLogQuery{})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// An upstream's 400 (here a canned invalid_request_error) is logged with
// its status, the account that answered it, no tokens and the decision;
// a request refused before authentication is not logged.
func TestRequestLogRecordsFailures(t *testing.T) {
	bad := cannedTransport{400, "application/json", []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`)}
	s, sys, key := testServerOf(t, bad, storage.ProviderAnthropic)
	resp := doWith(s, "POST", "/v1/messages", map[string]string{"x-api-key": key}, []byte(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() != 400 {
		t.Fatalf("status %d body %s", resp.StatusCode(), resp.Body())
	}
	reqID := string(resp.Header.Peek("X-Request-Id"))
	if r := doWith(s, "POST", "/v1/messages", map[string]string{"x-api-key": "sk-wrong"}, []byte(`{"model":"m"}`)); r.StatusCode() != 401 {
		t.Fatalf("bad key: status %d", r.StatusCode())
	}
	waitIdle(t, sys)
	recs := logged(t, s)
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1 (the 401 is not logged): %+v", len(recs), recs)
	}
	r := recs[0]
	if r.RequestID != reqID || r.Status != 400 || r.AccountID == "" || r.ErrorClass != "request" || r.Attempts != 1 ||
		r.InputTokens+r.OutputTokens != 0 || r.Decision == "" || r.Route != "messages" {
		t.Errorf("record %+v, want request %s, status 400, an account, class request, 1 attempt, no tokens, a decision", r, reqID)
	}
}

// failAfter is a client connection that takes n bytes, then fails: a client
// that hung up mid-stream (curl … | head -c N).
type failAfter struct{ n int }

func (w *failAfter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		k := w.n
		w.n = 0
		return k, errors.New("broken pipe")
	}
	w.n -= len(p)
	return len(p), nil
}

// A stream the client cut short is logged once, with status 499, the
// account that served it and the tokens it used (here the input tokens of
// message_start), which are billed.
func TestRequestLogRecordsClientClosedStream(t *testing.T) {
	body, err := os.ReadFile("testdata/messages-stream-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	s, sys, key := testServerOf(t, cannedTransport{200, "text/event-stream", body}, storage.ProviderAnthropic)
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/v1/messages")
	ctx.Request.Header.Set("x-api-key", key)
	ctx.Request.SetBody([]byte(`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"stream":true}`))
	s.handle(&ctx)
	reqID := string(ctx.Response.Header.Peek("X-Request-Id"))
	w := bufio.NewWriterSize(&failAfter{n: 400}, 64)
	_ = ctx.Response.Write(w) // drives the stream's WriteTo and Close, as the server would
	waitIdle(t, sys)
	recs := logged(t, s)
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1: %+v", len(recs), recs)
	}
	r := recs[0]
	if r.RequestID != reqID || r.Status != statusClientClosed || r.ErrorClass != upstream.ClassCanceled.String() ||
		r.AccountID == "" || r.InputTokens <= 0 || !r.Stream {
		t.Errorf("record %+v, want request %s, status 499, class canceled, an account, input tokens > 0", r, reqID)
	}
}

// A committed stream that fails after its content reached the client (the
// upstream cut it before its terminal event, or sent an error event) is a
// 502 whose record names the failure's class. Before, error_class was empty
// for it: the serving attempt is not among the request's failed attempts
// (found against troupe mock with the disconnect_after_content fault:
// status 502, error_class "").
func TestRequestLogBrokenStreamClass(t *testing.T) {
	chunk := `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"partial"},"finish_reason":null}]}` + "\n\n"
	for _, tc := range []struct {
		name, body string
	}{
		{"cut", chunk},
		{"error event", chunk + `data: {"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}` + "\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := cannedTransport{200, "text/event-stream", []byte(tc.body)}
			s, sys, key := testServerOf(t, tr, storage.ProviderOpenAI)
			resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			if !bytes.Contains(resp.Body(), []byte("partial")) {
				t.Fatalf("body %q: want the content", resp.Body())
			}
			waitIdle(t, sys)
			recs := logged(t, s)
			if len(recs) != 1 {
				t.Fatalf("%d records, want 1: %+v", len(recs), recs)
			}
			r := recs[0]
			if r.Status != 502 || r.ErrorClass == "" || r.ErrorClass == upstream.ClassCanceled.String() || r.OutputTokens == 0 {
				t.Errorf("record %+v: want status 502, the failure's class, the tokens served", r)
			}
			if tc.name == "cut" && r.ErrorClass != upstream.ClassTransient.String() {
				t.Errorf("error_class %q, want transient", r.ErrorClass)
			}
		})
	}
}
