package gateway

import (
	"testing"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
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
