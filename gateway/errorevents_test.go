package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// Every failed attempt becomes an error event (account, class, status,
// latency) through the usage recorder, whether another account then served
// the request or every attempt failed; the served attempt alone is billed.
func TestFailedAttemptsRecordedAsErrorEvents(t *testing.T) {
	boom := cannedTransport{500, "application/json", []byte(`{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`)}
	quota := cannedTransport{429, "application/json", []byte(`{"error":{"type":"usage_limit_reached","resets_in_seconds":60}}`)}
	tr := &scripted{answers: []upstream.Transport{boom, quota, sse(chatOK)}}
	s, sys, key, store := testServerStore(t, 3, tr)
	resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() != 200 {
		t.Fatalf("status %d body %s", resp.StatusCode(), resp.Body())
	}
	reqID := string(resp.Header.Peek("X-Request-Id"))
	waitIdle(t, sys)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sys.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	evs, _ := store.ErrorEvents(ctx, storage.RequestLogQuery{})
	if len(evs) != 2 {
		t.Fatalf("%d error events, want 2: %+v", len(evs), evs)
	}
	want := []struct {
		class  string
		status int
	}{{"transient", 500}, {"quota", 429}}
	seen := map[string]bool{}
	for i, e := range evs {
		if e.RequestID != reqID || e.Attempt != i+1 || e.Class != want[i].class || e.Status != want[i].status ||
			e.AccountID == "" || e.Latency < 0 || e.At.IsZero() {
			t.Errorf("event %d = %+v, want request %s attempt %d class %s status %d", i, e, reqID, i+1, want[i].class, want[i].status)
		}
		seen[e.AccountID] = true
	}
	if len(seen) != 2 {
		t.Errorf("events name accounts %v, want two different ones", seen)
	}
	recs, _ := store.UsageRecords(ctx, storage.RequestLogQuery{})
	if len(recs) != 1 || recs[0].Attempts != 3 || seen[recs[0].AccountID] {
		t.Errorf("usage records %+v: want one, billed to the third account after 3 attempts", recs)
	}

	// Every attempt fails: the events are still recorded, nothing is billed,
	// and the request has one record with the client's status, the account
	// that failed last and the decision trace.
	tr2 := &scripted{answers: []upstream.Transport{boom}}
	s2, sys2, key2, store2 := testServerStore(t, 2, tr2)
	resp = do(s2, "POST", "/v1/chat/completions", key2, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() < 500 {
		t.Fatalf("all failing: status %d", resp.StatusCode())
	}
	waitIdle(t, sys2)
	if err := sys2.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	evs, _ = store2.ErrorEvents(ctx, storage.RequestLogQuery{})
	recs, _ = store2.UsageRecords(ctx, storage.RequestLogQuery{})
	if len(evs) != 2 || len(recs) != 1 {
		t.Fatalf("all failing: %d events (want 2), %d usage records (want 1)", len(evs), len(recs))
	}
	r := recs[0]
	if r.Status != resp.StatusCode() || r.AccountID != evs[1].AccountID || r.ErrorClass != "transient" || r.Attempts != 2 ||
		r.InputTokens+r.OutputTokens+r.CachedTokens+r.ReasoningTokens != 0 || r.Decision == "" {
		t.Errorf("all failing: record %+v, want status %d, account %s, class transient, 2 attempts, no tokens, a decision",
			r, resp.StatusCode(), evs[1].AccountID)
	}
}
