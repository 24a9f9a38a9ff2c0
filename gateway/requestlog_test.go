package gateway

import (
	"bufio"
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
