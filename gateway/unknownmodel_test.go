package gateway

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

// staticCatalog is a ModelCatalog of fixed, sorted ids.
type staticCatalog []string

func (c staticCatalog) Models() []string { return c }

// unknownModelAnswers posts model to /v1/chat/completions and /v1/messages
// and returns both responses.
func unknownModelAnswers(s *Server, key, model string) (chat, msgs *fasthttp.Response) {
	chat = doWith(s, "POST", "/v1/chat/completions", map[string]string{"Authorization": "Bearer " + key},
		[]byte(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
	msgs = doWith(s, "POST", "/v1/messages", map[string]string{"x-api-key": key},
		[]byte(`{"model":"`+model+`","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
	return chat, msgs
}

// wantNotFound fails t unless chat and msgs are the 404 of an unknown model
// in each protocol's shape: OpenAI's model_not_found, Anthropic's
// not_found_error.
func wantNotFound(t *testing.T, what string, chat, msgs *fasthttp.Response) {
	t.Helper()
	if chat.StatusCode() != 404 || gjson.GetBytes(chat.Body(), "error.code").Str != "model_not_found" {
		t.Errorf("%s, chat: %d %s; want 404 model_not_found", what, chat.StatusCode(), chat.Body())
	}
	if msgs.StatusCode() != 404 || !isAnthropicError(msgs.Body(), "not_found_error") {
		t.Errorf("%s, messages: %d %s; want 404 not_found_error", what, msgs.StatusCode(), msgs.Body())
	}
}

// TestUnknownModelBesideUnavailableAnyModelAccount: a codex account with
// no models list (any model) that cannot serve — disabled, unauthorized,
// or resting while the Codex catalog does not list the model — keeps no
// unknown model alive: the request gets 404 model_not_found (Anthropic:
// not_found_error), not the 503 "retry shortly" (overloaded_error, which
// Anthropic clients retry for ever) it got before. A model the catalog
// lists, on a resting account, is still 503 with Retry-After.
func TestUnknownModelBesideUnavailableAnyModelAccount(t *testing.T) {
	t.Run("disabled", func(t *testing.T) {
		s, sys, key := testServer(t, 0, cannedTransport{500, "application/json", []byte(`{}`)})
		sys.PutAccount(storage.Account{ID: "cx", Name: "cx", Provider: storage.ProviderCodex, Disabled: true, MaxConcurrency: 4})
		waitUntil(t, "the account's view", func() bool { v := sys.Views(); return len(v) == 1 && v[0].Status == actors.StatusDisabled })
		chat, msgs := unknownModelAnswers(s, key, "nope")
		wantNotFound(t, "a disabled any-model account", chat, msgs)
	})
	t.Run("unauthorized", func(t *testing.T) {
		s, sys, key := testServer(t, 0, cannedTransport{401, "application/json", []byte(`{"error":{"message":"token expired","type":"invalid_request_error"}}`)})
		sys.PutAccount(storage.Account{ID: "cx", Name: "cx", Provider: storage.ProviderCodex, MaxConcurrency: 4})
		waitUntil(t, "the account's view", func() bool { return len(sys.Views()) == 1 })
		unknownModelAnswers(s, key, "gpt-5.4") // the 401 makes the account unauthorized (it cannot refresh)
		waitUntil(t, "the account unauthorized", func() bool { return sys.Views()[0].Status == actors.StatusUnauthorized })
		chat, msgs := unknownModelAnswers(s, key, "nope")
		wantNotFound(t, "an unauthorized any-model account", chat, msgs)
	})
	t.Run("resting, with a catalog", func(t *testing.T) {
		s, sys, key := testServer(t, 0, cannedTransport{429, "application/json",
			[]byte(`{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","resets_in_seconds":3600}}`)})
		s.SetModelCatalog(staticCatalog{"gpt-5.4", "gpt-5.4-mini"})
		sys.PutAccount(storage.Account{ID: "cx", Name: "cx", Provider: storage.ProviderCodex, MaxConcurrency: 4})
		waitUntil(t, "the account's view", func() bool { return len(sys.Views()) == 1 })
		unknownModelAnswers(s, key, "gpt-5.4") // the quota rests the account for an hour
		waitUntil(t, "the account resting", func() bool { return sys.Views()[0].Status == actors.StatusCooling })
		chat, msgs := unknownModelAnswers(s, key, "nope")
		wantNotFound(t, "a resting codex any-model account", chat, msgs)
		chat, msgs = unknownModelAnswers(s, key, "gpt-5.4")
		if chat.StatusCode() != 503 || len(chat.Header.Peek("Retry-After")) == 0 {
			t.Errorf("a catalog model on the resting account, chat: %d %s; want 503 with Retry-After", chat.StatusCode(), chat.Body())
		}
		if msgs.StatusCode() != 503 || !isAnthropicError(msgs.Body(), "overloaded_error") || len(msgs.Header.Peek("Retry-After")) == 0 {
			t.Errorf("a catalog model on the resting account, messages: %d %s; want 503 overloaded_error with Retry-After", msgs.StatusCode(), msgs.Body())
		}
	})
}

// TestUnknownModelAnsweredAtOnce: a model no account could ever serve is
// 404 model_not_found (Anthropic: not_found_error) at once, not after
// gateway.max_wait, when the only candidate is a merely cooling any-model
// codex account (the Codex catalog does not list the model): the request
// was parked for the account's return and answered 404 only when its wait
// ran out. MaxWait is an hour here; the answers must come well before.
// (Checked to fail before the fix: the answers did not come in 30 s.)
func TestUnknownModelAnsweredAtOnce(t *testing.T) {
	s, sys, key := testServerCfg(t, 0, cannedTransport{429, "application/json",
		[]byte(`{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","resets_in_seconds":3600}}`)},
		Config{MaxWait: 100 * time.Millisecond})
	s.SetModelCatalog(staticCatalog{"gpt-5.4", "gpt-5.4-mini"})
	sys.PutAccount(storage.Account{ID: "cx", Name: "cx", Provider: storage.ProviderCodex, MaxConcurrency: 4})
	waitUntil(t, "the account's view", func() bool { return len(sys.Views()) == 1 })
	unknownModelAnswers(s, key, "gpt-5.4") // the quota rests the account for an hour
	waitUntil(t, "the account resting", func() bool { return sys.Views()[0].Status == actors.StatusCooling })
	s.cfg.MaxWait = time.Hour // no request in flight: the setup's have ended
	type answers struct{ chat, msgs *fasthttp.Response }
	done := make(chan answers, 1)
	go func() {
		chat, msgs := unknownModelAnswers(s, key, "nope")
		done <- answers{chat, msgs}
	}()
	select {
	case a := <-done:
		wantNotFound(t, "an unknown model beside a cooling any-model codex account", a.chat, a.msgs)
	case <-time.After(30 * time.Second): // a bound, not a measure: the answer takes microseconds
		t.Fatal("no answer for an unknown model within 30 s: it waits for the cooling account (max_wait 1 h)")
	}
}

// TestFleetUnknownModelUsesRemoteStatus: under fleet ownership, another
// instance's any-model account counts for an unknown model's 503 only as
// couldServe counts a local one, by the status its owner published: an
// unauthorized any-model account elsewhere leaves an unknown model 404
// model_not_found (it counted whatever its status: a 503 that Anthropic
// clients retry for ever), while an active one elsewhere keeps it 503.
func TestFleetUnknownModelUsesRemoteStatus(t *testing.T) {
	store := newMemStore()
	sys := startSystem(t, actors.Config{Store: store, Fenced: true, Transport: func(storage.Account) (upstream.Transport, error) {
		return cannedTransport{500, "application/json", []byte(`{}`)}, nil
	}})
	sys.SetRemote(refusingRemote{})
	sys.PutAccount(storage.Account{ID: "theirs", Name: "theirs", Provider: storage.ProviderOpenAI, MaxConcurrency: 4})
	waitUntil(t, "the account known", func() bool { ids, _ := sys.Accounts(t.Context()); return len(ids) == 1 })
	secret, k, err := NewKey("fleet")
	if err != nil {
		t.Fatal(err)
	}
	store.CreateAPIKey(context.Background(), k)
	s := New(Config{MaxWait: 10 * time.Millisecond}, sys, store, nil, nil, nil)
	remote := func(st actors.Status) {
		sys.RemoteViews("other", []actors.View{{ID: "theirs", Name: "theirs", Provider: storage.ProviderOpenAI, Status: st, MaxInFlight: 4, Version: uint64(st) + 1}})
		waitUntil(t, "the owner's view", func() bool { v, ok := sys.View("theirs"); return ok && v.Status == st })
	}
	remote(actors.StatusUnauthorized)
	chat, msgs := unknownModelAnswers(s, secret, "nope")
	wantNotFound(t, "an unauthorized any-model account elsewhere", chat, msgs)
	remote(actors.StatusActive)
	if chat, _ := unknownModelAnswers(s, secret, "nope"); chat.StatusCode() != 503 {
		t.Errorf("an active any-model account elsewhere: %d %s, want 503", chat.StatusCode(), chat.Body())
	}
}

// refusingRemote is an actors.Remote whose owners refuse every grant.
type refusingRemote struct{}

func (refusingRemote) Grant(context.Context, string, actors.RemoteRequest) (actors.RemoteGrant, error) {
	return actors.RemoteGrant{}, errors.New("refused")
}
func (refusingRemote) Release(string, string, actors.Outcome, *upstream.RateLimits) {}
