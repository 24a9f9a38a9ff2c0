package gateway

import (
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
)

// GET /v1/models/{id} answers the one model object in the client's shape
// (the OpenAI SDK's and Anthropic SDK's models.retrieve), and 404
// model_not_found in the client's error shape for an id the pool does not
// serve.
func TestModelRetrieve(t *testing.T) {
	s, _, key := testServerOf(t, cannedTransport{}, storage.ProviderAnthropic, storage.ProviderOpenAI)
	openai := map[string]string{"Authorization": "Bearer " + key}
	anthropic := map[string]string{"x-api-key": key, "anthropic-version": "2023-06-01"}

	for _, path := range []string{"/v1/models/m", "/models/m"} {
		resp := doWith(s, "GET", path, openai, nil)
		r := gjson.ParseBytes(resp.Body())
		if resp.StatusCode() != 200 || r.Get("id").Str != "m" || r.Get("object").Str != "model" ||
			r.Get("created").Type != gjson.Number || r.Get("owned_by").Str == "" {
			t.Errorf("OpenAI GET %s: status %d %s", path, resp.StatusCode(), resp.Body())
		}
	}
	resp := doWith(s, "GET", "/v1/models/m", anthropic, nil)
	r := gjson.ParseBytes(resp.Body())
	if resp.StatusCode() != 200 || r.Get("type").Str != "model" || r.Get("id").Str != "m" ||
		r.Get("display_name").Str != "m" || r.Get("created_at").Str == "" || r.Get("object").Exists() {
		t.Errorf("Anthropic GET /v1/models/m: status %d %s", resp.StatusCode(), resp.Body())
	}

	resp = doWith(s, "GET", "/v1/models/nope", openai, nil)
	r = gjson.ParseBytes(resp.Body())
	if resp.StatusCode() != 404 || r.Get("error.code").Str != "model_not_found" || r.Get("error.type").Str != "invalid_request_error" {
		t.Errorf("OpenAI unknown model: status %d %s", resp.StatusCode(), resp.Body())
	}
	resp = doWith(s, "GET", "/v1/models/nope", anthropic, nil)
	r = gjson.ParseBytes(resp.Body())
	if resp.StatusCode() != 404 || r.Get("type").Str != "error" || r.Get("error.type").Str != "not_found_error" ||
		!strings.HasPrefix(r.Get("request_id").Str, "req_") || r.Get("request_id").Str != string(resp.Header.Peek("X-Request-Id")) {
		t.Errorf("Anthropic unknown model (a request_id, the same as the X-Request-Id header): status %d %s", resp.StatusCode(), resp.Body())
	}

	if resp := doWith(s, "POST", "/v1/models/m", openai, nil); resp.StatusCode() != 405 {
		t.Errorf("POST /v1/models/m: status %d, want 405", resp.StatusCode())
	}
	if resp := doWith(s, "GET", "/v1/models/m", nil, nil); resp.StatusCode() != 401 {
		t.Errorf("GET /v1/models/m without a key: status %d, want 401", resp.StatusCode())
	}
}

// modelPath takes everything after /v1/models/ as the id, slashes included.
func TestModelPath(t *testing.T) {
	if id, ok := modelPath([]byte("/v1/models/qwen/qwen3-32b")); !ok || id != "qwen/qwen3-32b" {
		t.Errorf("modelPath with a slash: %q %v", id, ok)
	}
	for _, p := range []string{"/v1/models/", "/models/", "/v1/modelsx"} {
		if _, ok := modelPath([]byte(p)); ok {
			t.Errorf("modelPath(%q) matched", p)
		}
	}
}

// TestModelsListsOnlyEnabledAccounts: /v1/models lists only the models some
// enabled account can serve. A disabled account's models list, and the
// Codex catalog behind a disabled any-model codex account (its only
// empty-list one), are not listed; nor a banned account's.
func TestModelsListsOnlyEnabledAccounts(t *testing.T) {
	s, sys, key := testServer(t, 0, cannedTransport{500, "application/json", []byte(`{}`)})
	s.SetModelCatalog(staticCatalog{"gpt-5.4", "gpt-5.4-mini"})
	sys.PutAccount(storage.Account{ID: "cx", Name: "cx", Provider: storage.ProviderCodex, Disabled: true, MaxConcurrency: 4})
	sys.PutAccount(storage.Account{ID: "off", Name: "off", Provider: storage.ProviderOpenAI, Models: []string{"off-model"}, Disabled: true, MaxConcurrency: 4})
	sys.PutAccount(storage.Account{ID: "on", Name: "on", Provider: storage.ProviderOpenAI, Models: []string{"on-model"}, MaxConcurrency: 4})
	waitUntil(t, "the accounts' views", func() bool {
		n := 0
		for _, v := range sys.Views() {
			if v.Status == actors.StatusDisabled {
				n++
			}
		}
		return len(sys.Views()) == 3 && n == 2
	})
	for _, h := range []map[string]string{{"Authorization": "Bearer " + key}, {"x-api-key": key, "anthropic-version": "2023-06-01"}} {
		resp := doWith(s, "GET", "/v1/models", h, nil)
		var ids []string
		gjson.GetBytes(resp.Body(), "data.#.id").ForEach(func(_, v gjson.Result) bool { ids = append(ids, v.Str); return true })
		if resp.StatusCode() != 200 || !slices.Equal(ids, []string{"on-model"}) {
			t.Errorf("/v1/models (%v): %d %s, want only on-model", h, resp.StatusCode(), resp.Body())
		}
	}
	if r := doWith(s, "GET", "/v1/models/gpt-5.4", map[string]string{"Authorization": "Bearer " + key}, nil); r.StatusCode() != 404 {
		t.Errorf("/v1/models/gpt-5.4 behind a disabled codex account: %d %s, want 404", r.StatusCode(), r.Body())
	}
	// Enabled again, the codex account brings the catalog back.
	sys.PutAccount(storage.Account{ID: "cx", Name: "cx", Provider: storage.ProviderCodex, MaxConcurrency: 4})
	waitUntil(t, "the codex account enabled", func() bool { v, ok := sys.View("cx"); return ok && v.Status == actors.StatusActive })
	resp := doWith(s, "GET", "/v1/models", map[string]string{"Authorization": "Bearer " + key}, nil)
	if ids := gjson.GetBytes(resp.Body(), "data.#.id").String(); ids != `["gpt-5.4","gpt-5.4-mini","on-model"]` {
		t.Errorf("/v1/models with the codex account enabled: %s", resp.Body())
	}
}

// TestModelsListsNoUnauthorizedAccount: an account whose credentials the
// upstream refused (401, no refresh that helps: StatusUnauthorized) serves
// nothing until the operator gives it new ones, so /v1/models lists neither
// its models nor, for an any-model codex account, the Codex catalog, and
// GET /v1/models/{id} answers 404 for them; an active account's models are
// listed. (Checked to fail before the fix: both were listed.)
func TestModelsListsNoUnauthorizedAccount(t *testing.T) {
	s, sys, key := testServer(t, 0, cannedTransport{401, "application/json", []byte(`{"error":{"message":"bad key","type":"invalid_request_error"}}`)})
	s.SetModelCatalog(staticCatalog{"gpt-5.4"})
	sys.PutAccount(storage.Account{ID: "bad", Name: "bad", Provider: storage.ProviderOpenAI, Models: []string{"bad-model"}, MaxConcurrency: 4})
	sys.PutAccount(storage.Account{ID: "cx", Name: "cx", Provider: storage.ProviderCodex, Models: []string{}, MaxConcurrency: 4})
	waitUntil(t, "the accounts' views", func() bool { return len(sys.Views()) == 2 })
	unknownModelAnswers(s, key, "bad-model") // the 401 makes the account unauthorized
	unknownModelAnswers(s, key, "gpt-5.4")   // and the codex one
	waitUntil(t, "both accounts unauthorized", func() bool {
		for _, v := range sys.Views() {
			if v.Status != actors.StatusUnauthorized {
				return false
			}
		}
		return true
	})
	sys.PutAccount(storage.Account{ID: "on", Name: "on", Provider: storage.ProviderOpenAI, Models: []string{"on-model"}, MaxConcurrency: 4})
	waitUntil(t, "the active account's view", func() bool { v, ok := sys.View("on"); return ok && v.Status == actors.StatusActive })
	for _, h := range []map[string]string{{"Authorization": "Bearer " + key}, {"x-api-key": key, "anthropic-version": "2023-06-01"}} {
		resp := doWith(s, "GET", "/v1/models", h, nil)
		if ids := gjson.GetBytes(resp.Body(), "data.#.id").String(); resp.StatusCode() != 200 || ids != `["on-model"]` {
			t.Errorf("/v1/models (%v): %d %s, want only on-model", h, resp.StatusCode(), resp.Body())
		}
	}
	for _, m := range []string{"bad-model", "gpt-5.4"} {
		if r := doWith(s, "GET", "/v1/models/"+m, map[string]string{"Authorization": "Bearer " + key}, nil); r.StatusCode() != 404 {
			t.Errorf("/v1/models/%s behind an unauthorized account: %d %s, want 404", m, r.StatusCode(), r.Body())
		}
	}
}
