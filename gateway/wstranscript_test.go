package gateway

import (
	"strings"
	"testing"

	"github.com/fasthttp/websocket"
)

// The transcripts of every client connection share one budget
// (WSConfig.MaxTranscriptBytes): a warm-up is answered by the gateway
// itself, unbilled and outside the key's limits, and its input joined the
// connection's transcript, so six connections of one key that sent five
// 15 MiB warm-ups each held 370 MB of the gateway's memory for as long as
// they stayed open (tester's finding; 64 connections a key, 64 MiB each,
// is 4 GiB a key). A turn that does not fit is not kept (its continuation
// then goes upstream as the client wrote it), and a connection's turns go
// back to the budget when it closes.
func TestWebSocketTranscriptBudget(t *testing.T) {
	s, _, key := testServerCfg(t, 1, cannedTransport{200, "text/event-stream", readFile(t, "responses-stream-text.sse")}, Config{WebSocket: WSConfig{MaxTranscriptBytes: 3000}})
	warm := `{"type":"response.create","model":"m","generate":false,"input":"` + strings.Repeat("a", 1800) + `"}`
	a, b := wsClient(t, s, key), wsClient(t, s, key)
	for i, conn := range []*websocket.Conn{a, b, a} {
		if err := conn.WriteMessage(websocket.TextMessage, []byte(warm)); err != nil {
			t.Fatal(err)
		}
		evs := readUntil(t, conn, "response.completed")
		if last := evs[len(evs)-1]; last.Get("type").Str != "response.completed" {
			t.Fatalf("warm-up %d: %s", i, last.Raw)
		}
		if used := s.ws.transcripts.Load(); used > 3000 {
			t.Fatalf("after warm-up %d the transcripts hold %d bytes, past the budget of 3000", i, used)
		}
	}
	if used := s.ws.transcripts.Load(); used < 1800 {
		t.Fatalf("the transcripts hold %d bytes; want the first warm-up's kept", used)
	}
	leave(a)
	leave(b)
	waitUntil(t, "the closed connections' transcripts given back", func() bool { return s.ws.transcripts.Load() == 0 })
}

// A connection past its budget share drops its own oldest turns to keep
// the newest one.
func TestTranscriptBudgetEvictsOwnOldest(t *testing.T) {
	var budget transcriptBudget
	budget.max.Store(2500)
	tr := transcript{budget: &budget}
	item := []byte("[" + strings.Repeat(" ", 998) + "]")
	for _, id := range []string{"r1", "r2", "r3"} {
		tr.add(id, item, "")
	}
	if tr.get("r1") != nil || tr.get("r2") == nil || tr.get("r3") == nil {
		t.Fatalf("turns kept: %d; want r2 and r3", len(tr.turns))
	}
	if budget.Load() != 2000 || tr.bytes != 2000 {
		t.Fatalf("budget used %d, transcript %d bytes; want 2000", budget.Load(), tr.bytes)
	}
	tr.reset()
	if budget.Load() != 0 || len(tr.turns) != 0 {
		t.Fatalf("after reset: budget used %d, %d turns", budget.Load(), len(tr.turns))
	}
}
