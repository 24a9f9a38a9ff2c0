package main

import (
	"fmt"
	"testing"
)

// Every client protocol's token limit and sampling settings reach a codex
// account as the Codex backend takes them: the mock fleet refuses what the
// real backend refuses (400 "Unsupported parameter: max_output_tokens"),
// so each of these requests fails if Troupe forwards one (issue #15,
// defect 4). Streamed and not, since the non-stream answer is assembled
// from a stream upstream.
func TestCodexAccountTakesEveryClientsLimits(t *testing.T) {
	d := startTestDemo(t, nil, demoPool(4))
	m := fmt.Sprintf("%q", demoCodexModel)
	for _, tc := range []struct{ name, path, body string }{
		{"chat max_tokens", "/v1/chat/completions", `{"model":` + m + `,"messages":[{"role":"user","content":"hi"}],"max_tokens":64,"temperature":0.2,"top_p":0.9}`},
		{"chat max_completion_tokens", "/v1/chat/completions", `{"model":` + m + `,"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":64,"user":"u1","metadata":{"a":"b"},"store":true}`},
		{"responses max_output_tokens", "/v1/responses", `{"model":` + m + `,"input":"hi","max_output_tokens":64,"temperature":0.2,"top_p":0.9,"metadata":{"a":"b"},"truncation":"auto","user":"u1"}`},
		{"responses service_tier", "/v1/responses", `{"model":` + m + `,"input":"hi","service_tier":"priority"}`},
		{"messages max_tokens", "/v1/messages", `{"model":` + m + `,"max_tokens":64,"temperature":0.2,"messages":[{"role":"user","content":"hi"}],"metadata":{"user_id":"u1"}}`},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", tc.name, stream), func(t *testing.T) {
				body := tc.body[:len(tc.body)-1] + fmt.Sprintf(`,"stream":%v}`, stream)
				resp, b := d.post(t, tc.path, body)
				if resp.StatusCode != 200 {
					t.Fatalf("%d %s", resp.StatusCode, b)
				}
			})
		}
	}
}
