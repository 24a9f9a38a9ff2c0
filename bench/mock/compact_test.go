package mock

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// The compaction routes: openai accounts on /v1/responses/compact, codex
// accounts on /backend-api/codex/responses/compact, each with its own
// errors; other kinds and models are refused.
func TestCompact(t *testing.T) {
	_, base := startFleet(t,
		Account{Name: "oa", Kind: KindOpenAI, Token: "tok-oa", Models: []string{"gpt-4.1-mini"}},
		Account{Name: "cx", Kind: KindCodex, Token: "tok-cx", ChatGPTAccountID: "acct-1", Models: []string{"gpt-5.5"}},
		Account{Name: "compat", Kind: KindOpenAICompat, Token: "tok-compat"},
	)
	c := newClient(t)
	body := `{"model":"gpt-4.1-mini","input":[{"role":"user","content":"hello there"}]}`
	resp, b := do(t, c, "POST", base+"/v1/responses/compact", "tok-oa", body)
	r := gjson.ParseBytes(b)
	if resp.StatusCode != 200 || r.Get("object").Str != "response.compaction" || !strings.HasPrefix(r.Get("id").Str, "cmp_") ||
		r.Get("output.#").Int() != 1 || r.Get("output.0.type").Str != "compaction" || r.Get("usage.total_tokens").Int() <= 0 ||
		resp.Header.Get("X-Request-Id") == "" || resp.Header.Get("X-Ratelimit-Limit-Requests") == "" {
		t.Errorf("openai compact: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	resp, b = do(t, c, "POST", base+"/backend-api/codex/responses/compact", "tok-cx", strings.Replace(body, "gpt-4.1-mini", "gpt-5.5", 1), "ChatGPT-Account-ID", "acct-1")
	if resp.StatusCode != 200 || gjson.GetBytes(b, "object").Str != "response.compaction" || resp.Header.Get("X-Codex-Primary-Used-Percent") == "" {
		t.Errorf("codex compact: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	for _, tc := range []struct {
		name, path, token, body string
		hdr                     []string
		status                  int
	}{
		{"unknown model", "/v1/responses/compact", "tok-oa", `{"model":"nope","input":"hi"}`, nil, 404},
		{"no model", "/v1/responses/compact", "tok-oa", `{"input":"hi"}`, nil, 400},
		{"not json", "/v1/responses/compact", "tok-oa", `[1]`, nil, 400},
		{"compat key", "/v1/responses/compact", "tok-compat", body, nil, 401},
		{"codex without account id", "/backend-api/codex/responses/compact", "tok-cx", `{"model":"gpt-5.5","input":"hi"}`, nil, 401},
		{"codex key on openai route", "/v1/responses/compact", "tok-cx", body, nil, 401},
	} {
		resp, b := do(t, c, "POST", base+tc.path, tc.token, tc.body, tc.hdr...)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.name, resp.StatusCode, tc.status, b)
		}
	}
	if resp, _ := do(t, c, "GET", base+"/v1/responses/compact", "tok-oa", ""); resp.StatusCode != 405 {
		t.Errorf("GET compact: status %d, want 405", resp.StatusCode)
	}
}
