package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
)

// TestPathsWithoutV1: every /v1 endpoint is also served without its /v1
// prefix (README, "Endpoints and protocols"), by the same handler: a
// client whose base URL is the gateway's address alone gets the same
// answers, and the same refusal for a bad key.
func TestPathsWithoutV1(t *testing.T) {
	// The demo's four kinds, so that the Messages routes have an anthropic
	// account (tuned's pools have two kinds).
	d := startTestDemo(t, nil, func(addr string) ([]mock.Account, []storage.Account) { return demoAccounts(4, addr) })
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodPost, "/chat/completions", `{"model":"` + demoOpenAIModel + `","messages":[{"role":"user","content":"hi"}]}`},
		{http.MethodPost, "/responses", `{"model":"` + demoOpenAIModel + `","input":"hi"}`},
		{http.MethodPost, "/messages", `{"model":"` + demoAnthropicModel + `","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`},
		{http.MethodPost, "/messages/count_tokens", `{"model":"` + demoAnthropicModel + `","messages":[{"role":"user","content":"hi"}]}`},
		{http.MethodGet, "/models", ""},
		{http.MethodGet, "/models/" + demoOpenAIModel, ""},
	} {
		header := map[string]string{"Authorization": "Bearer " + d.apiKey, "Content-Type": "application/json"}
		if strings.HasPrefix(tc.path, "/messages") {
			header["anthropic-version"] = "2023-06-01"
		}
		for _, prefix := range []string{"/v1", ""} {
			resp, body := d.do(t, tc.method, prefix+tc.path, strings.NewReader(tc.body), header)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s %s: %d %s, want 200", tc.method, prefix+tc.path, resp.StatusCode, body)
			}
		}
		header["Authorization"] = "Bearer sk-troupe-not-a-key"
		resp, _ := d.do(t, tc.method, tc.path, strings.NewReader(tc.body), header)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with a bad key: %d, want 401", tc.method, tc.path, resp.StatusCode)
		}
	}
}
