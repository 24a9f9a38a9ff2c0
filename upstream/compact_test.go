package upstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// TestCompact checks where Compact sends the body and how: openai and codex
// POST it unchanged to {base}/responses/compact asking for JSON with their
// own auth; openai_compat has no Compactor-able Responses endpoint.
func TestCompact(t *testing.T) {
	var got struct {
		path, auth, accept, account string
		body                        []byte
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.path, got.auth, got.accept, got.account = r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Accept"), r.Header.Get("ChatGPT-Account-ID")
		got.body, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"cmp_1","object":"response.compaction","output":[],"usage":{"input_tokens":3,"output_tokens":1}}`)
	}))
	defer srv.Close()
	in := []byte(`{"model":"gpt-5.5","input":[{"role":"user","content":"hi"}]}`)
	for _, tc := range []struct {
		p          storage.Provider
		base, path string
		auth       string
	}{
		{storage.ProviderOpenAI, srv.URL + "/v1", "/v1/responses/compact", "Bearer " + secretKey},
		{storage.ProviderCodex, srv.URL + "/backend-api/codex", "/backend-api/codex/responses/compact", "Bearer " + secretAccess},
	} {
		tr := mustNew(t, account(tc.p, tc.base), Options{})
		c, ok := tr.(Compactor)
		if !ok || !SupportsCompact(tc.p) {
			t.Fatalf("%s: no Compactor", tc.p)
		}
		resp, err := c.Compact(context.Background(), &Request{Endpoint: translate.Responses, Stream: true, Body: in})
		if err != nil {
			t.Fatalf("%s: %v", tc.p, err)
		}
		resp.Body.Close()
		if resp.Status != 200 || got.path != tc.path || got.auth != tc.auth || got.accept != "application/json" || string(got.body) != string(in) {
			t.Errorf("%s: status %d, saw path %q auth %q accept %q body %s", tc.p, resp.Status, got.path, got.auth, got.accept, got.body)
		}
		if tc.p == storage.ProviderCodex && got.account != "acct-0001" {
			t.Errorf("codex: ChatGPT-Account-ID %q", got.account)
		}
	}
	tr := mustNew(t, account(storage.ProviderOpenAICompat, srv.URL+"/v1"), Options{})
	if SupportsCompact(storage.ProviderOpenAICompat) {
		t.Error("openai_compat claims compaction")
	}
	if c, ok := tr.(Compactor); ok {
		if _, err := c.Compact(context.Background(), &Request{Body: in}); !errors.Is(err, ErrUnsupportedEndpoint) {
			t.Errorf("openai_compat compact: %v, want ErrUnsupportedEndpoint", err)
		}
	}
}
