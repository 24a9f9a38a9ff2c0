package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/storage"
)

// TestDisabledUserSideRoutes: a disabled user's key, refused on
// /v1/messages, is refused on the routes beside it too: count_tokens (which
// may ask an upstream account to count) and /v1/models, with the same 401;
// and count_tokens keeps to the user's model allowlist, as /v1/messages
// does. Before, both answered 200 to a disabled user's key.
func TestDisabledUserSideRoutes(t *testing.T) {
	b := billedServer(t)
	count := `{"model":"m","messages":[{"role":"user","content":"hello there"}]}`
	u, secret := b.userKey(t, storage.User{Name: "gone"}, 10_000_000)
	if status, body := b.post(t, "/v1/messages/count_tokens", secret, count); status != 200 {
		t.Fatalf("count_tokens of an enabled user: %d %s", status, body)
	}
	u.Disabled = true
	if _, err := b.store.UpdateUser(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	if err := b.gate.Reload(context.Background()); err != nil { // as the billing broadcast does
		t.Fatal(err)
	}
	status, body := b.post(t, "/v1/messages", secret, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 401 || gjson.GetBytes(body, "type").Str != "error" || !strings.Contains(string(body), "disabled user") {
		t.Fatalf("/v1/messages of a disabled user: %d %s", status, body)
	}
	status, body = b.post(t, "/v1/messages/count_tokens", secret, count)
	if status != 401 || gjson.GetBytes(body, "error.type").Str != "authentication_error" || !strings.Contains(string(body), "disabled user") {
		t.Fatalf("count_tokens of a disabled user: %d %s", status, body)
	}
	for _, path := range []string{"/v1/models", "/backend-api/wham/usage", "/wham/usage", "/api/codex/usage"} {
		req, _ := http.NewRequest("GET", b.base+path, nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		list, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.Contains(string(list), "disabled user") {
			t.Fatalf("%s of a disabled user: %d %s", path, resp.StatusCode, list)
		}
	}
	// The allowlist: "free" is served but not the user's.
	_, only := b.userKey(t, storage.User{Name: "only-m", Models: []string{"m"}}, 10_000_000)
	status, body = b.post(t, "/v1/messages/count_tokens", only, `{"model":"free","messages":[{"role":"user","content":"hi"}]}`)
	if status != 403 || !strings.Contains(string(body), "not allowed") {
		t.Fatalf("count_tokens of a model outside the user's allowlist: %d %s", status, body)
	}
}

// TestCountTokensUnpriced: a user's key may count tokens only for a model
// it could send: a model without a price, refused on /v1/messages with 403
// model_not_priced, is refused on count_tokens the same way (Anthropic's
// error shape, the same code and message). Before, count_tokens answered
// 200 for it.
func TestCountTokensUnpriced(t *testing.T) {
	b := billedServer(t)
	_, secret := b.userKey(t, storage.User{Name: "open"}, 10_000_000)
	status, real := b.post(t, "/v1/messages", secret, `{"model":"free","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 403 || gjson.GetBytes(real, "error.type").Str != "permission_error" {
		t.Fatalf("/v1/messages of an unpriced model: %d %s", status, real)
	}
	status, body := b.post(t, "/v1/messages/count_tokens", secret, `{"model":"free","messages":[{"role":"user","content":"hi"}]}`)
	if status != 403 || gjson.GetBytes(body, "type").Str != "error" || gjson.GetBytes(body, "error.type").Str != "permission_error" ||
		gjson.GetBytes(body, "error.message").Str != gjson.GetBytes(real, "error.message").Str {
		t.Fatalf("count_tokens of an unpriced model: %d %s (the request: %s)", status, body, real)
	}
	if status, body := b.post(t, "/v1/messages/count_tokens", secret, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`); status != 200 {
		t.Fatalf("count_tokens of a priced model: %d %s", status, body)
	}
}
