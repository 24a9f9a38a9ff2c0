package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// compatStream answers a Chat stream as an OpenAI-compatible server does:
// the usage chunk only when the body asks for stream_options.include_usage.
type compatStream struct{ asked chan bool }

func (c compatStream) Do(_ context.Context, r *upstream.Request) (*upstream.Response, error) {
	asked := gjson.GetBytes(r.Body, "stream_options.include_usage").Bool()
	c.asked <- asked
	body := `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"c","choices":[{"index":0,"delta":{"role":"assistant","content":"hello there, this is a long answer"},"finish_reason":null}]}` + "\n\n" +
		`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	if asked {
		body += `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"c","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":3,"total_tokens":43}}` + "\n\n"
	}
	body += "data: [DONE]\n\n"
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	return &upstream.Response{Status: 200, Header: h, Body: io.NopCloser(bytes.NewReader([]byte(body)))}, nil
}

// TestCompatChatStreamAsksForUsage: a Chat stream whose client did not ask
// for usage, served by an openai_compat account, asks the upstream for it
// (as a translated stream to the same account always did) and is recorded,
// so charged, with the upstream's exact counts, the usage chunk hidden from
// the client. Before, such a stream was billed on the gateway's estimate
// (5 input and 17 output tokens for a served 16 and 12 on the mock fleet),
// so a user paid for tokens it was not served (tester's finding).
func TestCompatChatStreamAsksForUsage(t *testing.T) {
	tr := compatStream{asked: make(chan bool, 1)}
	s, sys, key, store := testServerStore(t, 0, tr)
	sys.PutAccount(storage.Account{ID: "c0", Name: "compat-0", Provider: storage.ProviderOpenAICompat, Models: []string{"c"}, MaxConcurrency: 8})
	waitUntil(t, "the account to start", func() bool { return len(sys.Views()) >= 1 })
	resp := do(s, "POST", "/v1/chat/completions", key, []byte(`{"model":"c","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode() != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
	}
	if !<-tr.asked {
		t.Error("the openai_compat upstream was not asked for stream_options.include_usage")
	}
	if bytes.Contains(resp.Body(), []byte(`"usage"`)) {
		t.Errorf("the client, which did not ask for usage, got it: %s", resp.Body())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sys.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	recs := append([]storage.UsageRecord(nil), store.usage...)
	store.mu.Unlock()
	if len(recs) != 1 {
		t.Fatalf("%d usage records, want 1", len(recs))
	}
	if r := recs[0]; r.Estimated || r.InputTokens != 40 || r.OutputTokens != 3 {
		t.Errorf("record: estimated %v, %d input and %d output tokens; want the upstream's 40 and 3", r.Estimated, r.InputTokens, r.OutputTokens)
	}
	waitIdle(t, sys)
}
