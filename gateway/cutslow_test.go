package gateway

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/upstream"
)

// stalledStream is an upstream SSE answer that sends head, then nothing
// until its call is cancelled: a slow model between two tokens.
type stalledStream struct{ head string }

func (e stalledStream) Do(ctx context.Context, _ *upstream.Request) (*upstream.Response, error) {
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	pr, pw := io.Pipe()
	go func() {
		if _, err := pw.Write([]byte(e.head)); err != nil {
			return
		}
		<-ctx.Done()
		pw.CloseWithError(&upstream.Error{Kind: upstream.KindCanceled, Err: ctx.Err()})
	}()
	return &upstream.Response{Status: 200, Header: h, Body: pr}, nil
}

// TestCutSlowStreamEndsAtOnce: a client that hangs up on a stream while
// the upstream is silent ends the request within the client watch's poll:
// the upstream call is cancelled, the lease goes back, and what was
// streamed is billed (499, estimated). Before, the request ran on until its
// next write to the client (the next token, or a heartbeat): here, with a
// ten-minute heartbeat and an upstream that never sends another token,
// never.
func TestCutSlowStreamEndsAtOnce(t *testing.T) {
	for _, tc := range cutCases {
		t.Run(tc.name, func(t *testing.T) {
			s, _, secret := testServerOf(t, stalledStream{head: tc.head}, tc.provider)
			s.cfg.HeartbeatInterval = 10 * time.Minute
			ln := serveTCP(t, s)
			conn := dialTCP(t, ln)
			sendStream(t, conn, tc.path, secret, tc.body)
			conn.Close()
			waitIdle(t, s.sys)
			waitUntil(t, "the cut stream's usage record", func() bool { return len(logged(t, s)) > 0 })
			r := logged(t, s)[0]
			if r.Status != statusClientClosed || r.ErrorClass != "canceled" || !r.Estimated || r.OutputTokens < 9 {
				t.Fatalf("record: status %d class %q estimated %v output %d; want 499 canceled, estimated, output >= 9",
					r.Status, r.ErrorClass, r.Estimated, r.OutputTokens)
			}
		})
	}
}
