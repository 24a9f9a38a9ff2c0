package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
)

// The demo pool has four kinds of account, by number mod 4.
func TestDemoPoolKinds(t *testing.T) {
	fa, pa := demoAccounts(8, "127.0.0.1:9")
	want := map[storage.Provider]struct {
		kind  mock.Kind
		model string
		base  string
	}{
		storage.ProviderCodex:        {mock.KindCodex, demoCodexModel, "http://127.0.0.1:9/backend-api/codex"},
		storage.ProviderOpenAI:       {mock.KindOpenAI, demoOpenAIModel, "http://127.0.0.1:9/v1"},
		storage.ProviderAnthropic:    {mock.KindAnthropic, demoAnthropicModel, "http://127.0.0.1:9"},
		storage.ProviderOpenAICompat: {mock.KindOpenAICompat, demoCompatModel, "http://127.0.0.1:9/v1"},
	}
	count := map[storage.Provider]int{}
	for i := range pa {
		p := pa[i].Provider
		count[p]++
		w, ok := want[p]
		if !ok || fa[i].Kind != w.kind || pa[i].BaseURL != w.base || len(pa[i].Models) != 1 || pa[i].Models[0] != w.model ||
			len(fa[i].Models) != 1 || fa[i].Models[0] != w.model || fa[i].Token == "" {
			t.Errorf("%s: provider %s kind %s base %s models %v/%v", pa[i].Name, p, fa[i].Kind, pa[i].BaseURL, pa[i].Models, fa[i].Models)
		}
		if p == storage.ProviderCodex && pa[i].Credentials.AccessToken != fa[i].Token ||
			p != storage.ProviderCodex && pa[i].Credentials.APIKey != fa[i].Token {
			t.Errorf("%s: credentials do not match the mock's token", pa[i].Name)
		}
	}
	for p := range want {
		if count[p] != 2 {
			t.Errorf("%d %s accounts of 8, want 2", count[p], p)
		}
	}
}

// Every kind of the demo pool loads into the gateway and answers in its own
// protocol: chat for the openai and openai_compat accounts, responses for
// codex, messages (and count_tokens) for anthropic.
func TestDemoPoolServes(t *testing.T) {
	d := startTestDemo(t, nil, func(mockAddr string) ([]mock.Account, []storage.Account) {
		return demoAccounts(4, mockAddr)
	})
	for _, tc := range []struct {
		model, path, body, text string
		account                 string
	}{
		{demoCodexModel, "/v1/responses", `{"model":"gpt-5.5","input":"hi"}`, "output.0.content.0.text", "demo-0001"},
		{demoOpenAIModel, "/v1/chat/completions", `{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`, "choices.0.message.content", "demo-0002"},
		{demoCompatModel, "/v1/chat/completions", `{"model":"qwen3-32b","messages":[{"role":"user","content":"hi"}]}`, "choices.0.message.content", "demo-0004"},
	} {
		resp, b := d.post(t, tc.path, tc.body)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d: %s", tc.model, resp.StatusCode, b)
			continue
		}
		if got := gjson.GetBytes(b, tc.text).String(); got != mock.AnswerText(tc.account, 12) {
			t.Errorf("%s: answer %q, want %s's", tc.model, got, tc.account)
		}
	}
	// The compat account, asked for a stream without usage, streams no usage.
	resp, b := d.post(t, "/v1/chat/completions", `{"model":"qwen3-32b","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "demo-0004") || strings.Contains(string(b), `"usage":{`) {
		t.Errorf("compat stream: %d %s", resp.StatusCode, b)
	}
	// The anthropic account over Messages, as Claude Code calls it
	// (?beta=true, a beta header), streamed and not; and its token count,
	// asked of the account rather than estimated.
	hdr := map[string]string{"X-Api-Key": d.apiKey, "Anthropic-Version": "2023-06-01", "Anthropic-Beta": "claude-code-20250219", "Content-Type": "application/json"}
	for _, stream := range []string{"false", "true"} {
		resp, b := d.do(t, http.MethodPost, "/v1/messages?beta=true", strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":64,"stream":`+stream+`,"messages":[{"role":"user","content":"hi"}]}`), hdr)
		text := gjson.GetBytes(b, "content.0.text").String()
		if stream == "true" {
			var sb strings.Builder
			for _, line := range strings.Split(string(b), "\n") {
				if d, ok := strings.CutPrefix(line, "data: "); ok && gjson.Get(d, "type").Str == "content_block_delta" {
					sb.WriteString(gjson.Get(d, "delta.text").Str)
				}
			}
			text = sb.String()
		}
		if resp.StatusCode != http.StatusOK || text != mock.AnswerText("demo-0003", 12) {
			t.Errorf("messages stream=%s: %d %q (%.300s)", stream, resp.StatusCode, text, b)
		}
	}
	resp, b = d.do(t, http.MethodPost, "/v1/messages/count_tokens", strings.NewReader(`{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`), hdr)
	if resp.StatusCode != http.StatusOK || gjson.GetBytes(b, "input_tokens").Int() <= 0 || resp.Header.Get("X-Troupe-Token-Count") != "" {
		t.Errorf("count_tokens: %d %s %v (want the anthropic account's count, not an estimate)", resp.StatusCode, b, resp.Header)
	}
	if st := d.fleet.Stats("demo-0003"); st.Completed != 2 {
		t.Errorf("demo-0003 stats %+v: want the two Messages answers", st)
	}
	for _, v := range d.app.sys.Views() {
		if v.Name == "demo-0003" && (v.Provider != storage.ProviderAnthropic || v.Status != actors.StatusActive) {
			t.Errorf("anthropic account view %+v", v)
		}
	}
}
