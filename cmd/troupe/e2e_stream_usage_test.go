package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// A chat stream that did not ask for include_usage is still billed: the
// gateway asks OpenAI accounts for usage and drops the extra chunk, so the
// client sees the stream it asked for and the usage row has its tokens.
func TestChatStreamBilledWithoutIncludeUsage(t *testing.T) {
	d := startTestDemo(t, nil, tuned(span(2, 2, 2), nil))
	resp, body := d.post(t, "/v1/chat/completions", `{"model":"gpt-4.1-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte("data: [DONE]")) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if bytes.Contains(body, []byte(`"choices":[]`)) {
		t.Fatalf("the usage chunk the client did not ask for was relayed:\n%s", body)
	}
	usageSettled(t, d.app) // the stream ended: its record is written
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := d.app.store.Rollups(ctx, storage.UsageQuery{From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("%d rollup rows, want 1", len(rows))
	}
	if rows[0].OutputTokens == 0 || rows[0].InputTokens == 0 {
		t.Fatalf("stream billed with no tokens: %+v", rows[0])
	}
}
