package gateway

import (
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/troupe-gw/troupe/storage"
)

// A key deleted, disabled or expired while its WebSocket is open serves
// no further response on it: the key was checked at the upgrade only, so
// a revoked key (a leaked one, a user's key deleted in the console) went
// on being served on an open connection for as long as it sent a frame
// every 15 minutes, while HTTP refused it with 401 (tester's finding). The
// next frame gets the 401 the HTTP API answers, as an error frame, and the
// connection is closed with 1008.
func TestWebSocketRevokedKey(t *testing.T) {
	for _, tc := range []struct {
		name   string
		revoke func(k *storage.APIKey, m map[string]storage.APIKey)
	}{
		{"deleted", func(k *storage.APIKey, m map[string]storage.APIKey) { delete(m, k.Hash) }},
		{"disabled", func(k *storage.APIKey, m map[string]storage.APIKey) { k.Disabled = true; m[k.Hash] = *k }},
		{"expired", func(k *storage.APIKey, m map[string]storage.APIKey) {
			at := time.Now().Add(-time.Minute)
			k.ExpiresAt = &at
			m[k.Hash] = *k
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, key, store := testServerStore(t, 1, cannedTransport{200, "text/event-stream", readFile(t, "responses-stream-text.sse")})
			conn := wsClient(t, s, key)
			frame := []byte(`{"type":"response.create","model":"m","input":"hi"}`)
			if err := conn.WriteMessage(websocket.TextMessage, frame); err != nil {
				t.Fatal(err)
			}
			if evs := readUntil(t, conn, "response.completed"); evs[len(evs)-1].Get("type").Str != "response.completed" {
				t.Fatalf("first response: %s", evs[len(evs)-1].Raw)
			}
			store.mu.Lock()
			k := store.keys[storage.HashKey(key)]
			tc.revoke(&k, store.keys)
			store.mu.Unlock()
			s.InvalidateKeys() // what the admin API's change does on every instance
			if err := conn.WriteMessage(websocket.TextMessage, frame); err != nil {
				t.Fatal(err)
			}
			evs := readUntil(t, conn, "response.completed")
			if last := evs[len(evs)-1]; last.Get("type").Str != "error" || last.Get("status").Int() != 401 {
				t.Fatalf("after the key was %s: %s; want an error frame with status 401", tc.name, last.Raw)
			}
			if _, _, err := conn.ReadMessage(); !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
				t.Fatalf("after the error frame: %v; want close 1008", err)
			}
		})
	}
}
