package gateway

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// Under fleet ownership an instance runs only the accounts it owns, yet
// the deployment serves every account's models: /v1/models lists them all,
// and a request for a model whose accounts another instance owns is a
// retryable 503 no_account_available, never 404 model_not_found (a
// newcomer behind a load balancer got "model does not exist" for models
// the deployment serves). A model no account serves is still 404.
func TestFleetCatalogCoversUnownedAccounts(t *testing.T) {
	ok := cannedTransport{200, "application/json", []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"mine","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)}
	store := newMemStore()
	sys := startSystem(t, actors.Config{Store: store, Fenced: true, Transport: func(storage.Account) (upstream.Transport, error) { return ok, nil }})
	sys.PutAccount(storage.Account{ID: "own", Name: "own", Provider: storage.ProviderOpenAI, Models: []string{"mine"}, MaxConcurrency: 4})
	sys.PutAccount(storage.Account{ID: "other", Name: "other", Provider: storage.ProviderAnthropic, Models: []string{"theirs"}, MaxConcurrency: 4})
	fence := new(actors.Fence)
	fence.Extend(time.Now().Add(time.Hour), 1)
	sys.Own("own", fence)
	waitUntil(t, "the owned account running", func() bool { v, ok := sys.View("own"); return ok && v.Available(time.Now()) })
	waitUntil(t, "both accounts known", func() bool { ids, _ := sys.Accounts(t.Context()); return len(ids) == 2 })
	secret, k, err := NewKey("fleet")
	if err != nil {
		t.Fatal(err)
	}
	store.CreateAPIKey(context.Background(), k)
	s := New(Config{MaxWait: 10 * time.Millisecond}, sys, store, nil, nil, nil)

	list := do(s, "GET", "/v1/models", secret, nil)
	if !bytes.Contains(list.Body(), []byte(`"mine"`)) || !bytes.Contains(list.Body(), []byte(`"theirs"`)) {
		t.Fatalf("/v1/models %s: want both the owned and the unowned account's models", list.Body())
	}
	if r := do(s, "POST", "/v1/chat/completions", secret, []byte(`{"model":"mine","messages":[{"role":"user","content":"hi"}]}`)); r.StatusCode() != 200 {
		t.Fatalf("owned model: %d %s", r.StatusCode(), r.Body())
	}
	r := do(s, "POST", "/v1/chat/completions", secret, []byte(`{"model":"theirs","messages":[{"role":"user","content":"hi"}]}`))
	if r.StatusCode() != 503 || !bytes.Contains(r.Body(), []byte("no_account_available")) || len(r.Header.Peek("Retry-After")) == 0 {
		t.Fatalf("model of an unowned account: %d %s, want a retryable 503 no_account_available", r.StatusCode(), r.Body())
	}
	if r := do(s, "POST", "/v1/chat/completions", secret, []byte(`{"model":"nobody","messages":[{"role":"user","content":"hi"}]}`)); r.StatusCode() != 404 {
		t.Fatalf("a model no account serves: %d %s, want 404", r.StatusCode(), r.Body())
	}
}
