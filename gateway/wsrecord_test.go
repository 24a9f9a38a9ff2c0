package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/troupe-gw/troupe/storage"
)

// A frame the Responses WebSocket refuses as malformed (invalid JSON, a
// type other than response.create, a duplicate key, no model, a binary
// frame) is recorded as the 400 the same bad body gets over HTTP POST
// /v1/responses: same status, error class, route, key and user. It got its
// error frame and no record, so the key's and the user's request logs lost
// it, while the WebSocket's billing refusals (429, 403) were recorded. The
// record names the model when the frame names one (it had none), and says
// no stream (it said stream: nothing was streamed, and the same HTTP body's
// record says none).
func TestWebSocketRefusedFrameRecorded(t *testing.T) {
	b := billedServer(t)
	u, secret := b.userKey(t, storage.User{Name: "frames", Email: "frames@example.com"}, 1_000_000_000)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	records := func(want int) []storage.UsageRecord {
		t.Helper()
		waitUntil(t, "every request ended", func() bool { return b.s.serving.Load() == 0 })
		b.settled(t)
		recs, err := b.store.ListUsageRecords(ctx, storage.UsageRecordQuery{UserID: u.ID}) // the user's request log
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != want {
			t.Fatalf("%d records, want %d: %+v", len(recs), want, recs)
		}
		return recs
	}

	// The HTTP answer to a malformed body: the record to match.
	if status, out := b.post(t, "/v1/responses", secret, `not json`); status != 400 {
		t.Fatalf("HTTP: %d %s", status, out)
	}
	want := records(1)[0]
	if want.Status != 400 || want.KeyID == "" || want.UserID != u.ID {
		t.Fatalf("HTTP record %+v", want)
	}

	conn, resp, err := (&websocket.Dialer{HandshakeTimeout: 5 * time.Second}).Dial("ws"+strings.TrimPrefix(b.base, "http")+"/v1/responses",
		http.Header{"Authorization": {"Bearer " + secret}})
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	frames := []struct {
		typ   int
		frame string
	}{
		{websocket.TextMessage, `not json`},
		{websocket.TextMessage, `{"type":"response.bogus","model":"m","input":"hi"}`},
		{websocket.TextMessage, `{"type":"response.create","model":"m","model":"free","input":"hi"}`},
		{websocket.TextMessage, `{"type":"response.create","input":"hi"}`},
		{websocket.BinaryMessage, `{"type":"response.create","model":"m","input":"hi"}`},
		// Parsed, then refused by the body's checks (parseBody), as the
		// same HTTP body is: no stream either (it said stream: true).
		{websocket.TextMessage, `{"type":"response.create","model":"m","input":"hi","tool_choice":"zz"}`},
	}
	for _, f := range frames {
		if err := conn.WriteMessage(f.typ, []byte(f.frame)); err != nil {
			t.Fatal(err)
		}
		evs := readUntil(t, conn, "error")
		if last := evs[len(evs)-1]; last.Get("type").Str != "error" || last.Get("status").Int() != 400 {
			t.Fatalf("%s: %s, want a 400 error frame", f.frame, last.Raw)
		}
	}
	leave(conn)
	recs := records(1 + len(frames))
	seen, named := 0, 0
	for _, r := range recs {
		if r.RequestID == want.RequestID {
			continue
		}
		seen++
		// Not a stream: the frame was refused before any response began,
		// as the HTTP body was (the record's stream is what a parsed
		// request asked for). The model is recorded when the frame names
		// one (the unsupported type's frame, the binary frame's payload),
		// as HTTP records a parsed one.
		if r.Status != want.Status || r.ErrorClass != want.ErrorClass || r.Route != want.Route || r.KeyID != want.KeyID ||
			r.UserID != want.UserID || r.Stream || r.Cost != 0 || (r.Model != "" && r.Model != "m") {
			t.Errorf("WebSocket record %+v, want the HTTP 400's %+v (not streamed, no cost, model m or none)", r, want)
		}
		if r.Model == "m" {
			named++
		}
	}
	if seen != len(frames) {
		t.Fatalf("%d WebSocket records, want %d", seen, len(frames))
	}
	if named != 3 {
		t.Errorf("%d records name model m, want 3 (the frame of type response.bogus, the binary one, the bad tool_choice)", named)
	}
}
