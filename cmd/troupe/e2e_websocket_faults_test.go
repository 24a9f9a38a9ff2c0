package main

// End-to-end tests of the Responses WebSocket under faults: a client that
// leaves mid-stream, and an upstream that breaks before its first content.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
)

// wsUsage returns the stored usage records, after flushing the usage batcher.
func wsUsage(t *testing.T, d *testDemo) []storage.UsageRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.app.sys.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := d.app.store.UsageRecords(ctx, storage.RequestLogQuery{Limit: storage.MaxRequestLogLimit})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestWebSocketClientLeavesMidStream: a WebSocket client that closes its
// socket after the first delta of a slow codex answer (relayed from an
// upstream WebSocket) cancels the upstream answer, frees the lease on both
// sides, and leaves exactly one usage record, a 499 with tokens.
func TestWebSocketClientLeavesMidStream(t *testing.T) {
	d := startTestDemo(t, nil, tuned([]int{1}, func(ma *mock.Account, _ *storage.Account) {
		ma.Latency, ma.TokensPerSecond, ma.OutputTokens = 10*time.Millisecond, 20, 200
	}))
	conn := dialWS(t, d, d.apiKey, nil)
	if err := conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"gpt-5.5","store":false,"input":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		_, b, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if strings.Contains(string(b), `"type":"response.output_text.delta"`) {
			break
		}
	}
	if st := d.fleet.Stats("demo-0001"); st.InFlight != 1 {
		t.Fatalf("mid-stream: mock stats %+v, want 1 in flight", st)
	}
	conn.Close()
	eventually(t, 10*time.Second, "the upstream answer cancelled", func() (bool, string) {
		st := d.fleet.Stats("demo-0001")
		return st.Cancelled == 1 && st.InFlight == 0, fmt.Sprintf("mock stats %+v", st)
	})
	d.assertNoLeases(t)
	var recs []storage.UsageRecord
	eventually(t, 10*time.Second, "one usage record", func() (bool, string) {
		recs = wsUsage(t, d)
		return len(recs) >= 1, fmt.Sprint(len(recs))
	})
	if len(recs) != 1 {
		t.Fatalf("usage records %d, want 1: %+v", len(recs), recs)
	}
	if r := recs[0]; r.Status != 499 || r.OutputTokens == 0 || r.InputTokens == 0 {
		t.Fatalf("record status %d, input %d, output %d: want 499 with tokens", r.Status, r.InputTokens, r.OutputTokens)
	}
}

// TestWebSocketUpstreamBreaksBeforeContent: the first codex account's
// upstream WebSocket breaks before content; the turn fails over to the other
// account without the client seeing it, and the client's next turn, a
// continuation of that one, is served on the same connection.
func TestWebSocketUpstreamBreaksBeforeContent(t *testing.T) {
	d := startTestDemo(t, nil, tuned([]int{1, 5}, func(ma *mock.Account, _ *storage.Account) {
		if ma.Name == "demo-0001" {
			ma.Fault = &mock.Fault{Kind: mock.FaultDisconnectBeforeContent}
		}
	}))
	conn := dialWS(t, d, d.apiKey, nil)
	ev := lastOf(t, wsTurn(t, conn, `{"type":"response.create","model":"gpt-5.5","store":false,"input":"hi"}`), "response.completed")
	if got := servedBy.FindString(answerText(ev)); got != "demo-0005" {
		t.Fatalf("served by %q: %s", got, ev.Raw)
	}
	id := ev.Get("response.id").Str
	ev = lastOf(t, wsTurn(t, conn, `{"type":"response.create","model":"gpt-5.5","store":false,"previous_response_id":"`+id+`","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"more"}]}]}`), "response.completed")
	if got := servedBy.FindString(answerText(ev)); got != "demo-0005" {
		t.Fatalf("continuation served by %q: %s", got, ev.Raw)
	}
	d.assertNoLeases(t)
	recs := wsUsage(t, d)
	ok := 0
	for _, r := range recs {
		if r.Status == 200 {
			ok++
		}
	}
	if ok != 2 {
		t.Fatalf("usage records: %d with status 200 of %d, want 2", ok, len(recs))
	}
}
