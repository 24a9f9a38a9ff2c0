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

// TestInvalidKeyHint: an unknown key (a made-up one, or the key of an
// earlier demo run, revoked at this run's start) gets one and the same
// 401, whichever key it was, saying that keys belong to a data directory
// and that the demo makes a new one at each start; it never echoes the key.
func TestInvalidKeyHint(t *testing.T) {
	d := startTestDemo(t, nil, tuned(span(1, 2, 1), nil))
	earlier := d.apiKey
	if _, err := revokeDemoKeys(t.Context(), d.app.store); err != nil { // what the next demo start does
		t.Fatal(err)
	}
	var bodies []string
	for _, key := range []string{earlier, "sk-troupe-made-up-0123456789abcdef", "not-even-a-troupe-key"} {
		resp, body := d.do(t, http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`),
			map[string]string{"Authorization": "Bearer " + key, "Content-Type": "application/json"})
		e, err := parseOpenAIError(body)
		if resp.StatusCode != http.StatusUnauthorized || err != nil || e.Code == nil || *e.Code != "invalid_api_key" {
			t.Fatalf("key %.12s…: %d %s (%v), want 401 invalid_api_key", key, resp.StatusCode, body, err)
		}
		if !strings.Contains(e.Message, "belong to the data directory") || !strings.Contains(e.Message, "troupe demo makes a new key at each start") {
			t.Errorf("the invalid-key message gives no hint: %q", e.Message)
		}
		if strings.Contains(string(body), key) {
			t.Errorf("the 401 echoes the key: %s", body)
		}
		bodies = append(bodies, string(body))
	}
	if bodies[0] != bodies[1] || bodies[1] != bodies[2] {
		t.Errorf("unknown keys get different answers, which tells one from another:\n%s", strings.Join(bodies, "\n"))
	}
}
