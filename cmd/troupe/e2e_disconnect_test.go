package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
)

// TestClientDisconnect reads the first content event of a slow stream, hangs
// up, and checks that the gateway cancels the upstream answer and frees the
// lease: the mock counts one cancelled answer, and both sides show the
// account idle.
func TestClientDisconnect(t *testing.T) {
	// demo-0001 (codex, gpt-5.5) and demo-0002 (openai, gpt-4.1-mini), each
	// the only account of its model, streaming 200 tokens at 20 a second.
	d := startTestDemo(t, nil, tuned([]int{1, 2}, func(ma *mock.Account, _ *storage.Account) {
		ma.Latency, ma.TokensPerSecond, ma.OutputTokens = 10*time.Millisecond, 20, 200
	}))
	cases := []struct {
		name, account, path, body, firstContent string
	}{
		{"chat", "demo-0002", "/v1/chat/completions",
			`{"model":"gpt-4.1-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
			`"content":"Hello `},
		{"responses_codex", "demo-0001", "/v1/responses",
			`{"model":"gpt-5.5","stream":true,"input":"hi"}`,
			`"delta":"Hello `},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, br := dialGateway(t, d)
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: %d\r\n\r\n%s",
				tc.path, d.app.addr(), d.apiKey, len(tc.body), tc.body)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("read response head: %v", err)
			}
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
				t.Fatalf("status %d, Content-Type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
			// Read (through the chunked decoding) until the first content event.
			var seen strings.Builder
			buf := make([]byte, 4096)
			for !strings.Contains(seen.String(), tc.firstContent) {
				n, err := resp.Body.Read(buf)
				seen.Write(buf[:n])
				if err != nil {
					t.Fatalf("stream ended before the first content event: %v; got %q", err, seen.String())
				}
			}
			if st := d.fleet.Stats(tc.account); st.InFlight != 1 {
				t.Fatalf("%s mid-stream: mock stats %+v, want 1 in flight", tc.account, st)
			}
			conn.Close()

			eventually(t, 10*time.Second, "the upstream answer cancelled", func() (bool, string) {
				st := d.fleet.Stats(tc.account)
				return st.Cancelled == 1 && st.InFlight == 0, fmt.Sprintf("mock stats %+v", st)
			})
			eventually(t, 10*time.Second, "the gateway lease released", func() (bool, string) {
				n, ok := d.viewInFlight(tc.account)
				return ok && n == 0, fmt.Sprintf("gateway view in-flight %d (found %v)", n, ok)
			})
			if st := d.fleet.Stats(tc.account); st.Completed != 0 || st.Requests != 1 {
				t.Errorf("mock stats %+v: want 1 request, none completed", st)
			}
		})
	}
	d.assertNoLeases(t)
}
