package main

import (
	"net/http"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
)

// POST /v1/responses/compact through the gateway reaches the demo fleet's
// openai and codex accounts, which answer with a compacted response object
// (object "response.compaction", a compaction item, usage); a model only an
// account without compaction serves gets the gateway's 400.
func TestDemoCompact(t *testing.T) {
	d := startTestDemo(t, nil, func(mockAddr string) ([]mock.Account, []storage.Account) {
		return demoAccounts(4, mockAddr)
	})
	for _, model := range []string{demoOpenAIModel, demoCodexModel} {
		resp, b := d.post(t, "/v1/responses/compact", `{"model":"`+model+`","input":[{"role":"user","content":"hi there"}],"instructions":"be brief"}`)
		r := gjson.ParseBytes(b)
		if resp.StatusCode != http.StatusOK || r.Get("object").Str != "response.compaction" || r.Get("id").Str == "" ||
			r.Get("created_at").Int() <= 0 || r.Get("output.0.type").Str != "compaction" || r.Get("output.0.encrypted_content").Str == "" ||
			r.Get("usage.input_tokens").Int() <= 0 || r.Get("usage.total_tokens").Int() <= r.Get("usage.input_tokens").Int() {
			t.Errorf("%s: status %d %s", model, resp.StatusCode, b)
		}
	}
	resp, b := d.post(t, "/v1/responses/compact", `{"model":"`+demoCompatModel+`","input":"hi"}`)
	if resp.StatusCode != http.StatusBadRequest || gjson.GetBytes(b, "error.code").Str != "compaction_unsupported" {
		t.Errorf("compat model: status %d %s", resp.StatusCode, b)
	}
}
