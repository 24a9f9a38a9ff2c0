package translate

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestStripAccountState(t *testing.T) {
	for _, tc := range []struct {
		name     string
		p        Protocol
		in, want string
		stripped bool
	}{
		{"responses: reasoning items and encrypted items out, the rest in order", Responses,
			`{"model":"m","reasoning":{"effort":"low"},"include":["reasoning.encrypted_content"],"input":[` +
				`{"type":"message","role":"user","content":"a"},` +
				`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"},` +
				`{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},` +
				`{"type":"compaction","encrypted_content":"gBBB"},` +
				`{"type":"function_call_output","call_id":"c1","output":"ok"},` +
				`{"type":"reasoning","id":"rs_2","summary":[{"type":"summary_text","text":"s"}]}]}`,
			`{"model":"m","reasoning":{"effort":"low"},"include":["reasoning.encrypted_content"],"input":[` +
				`{"type":"message","role":"user","content":"a"},` +
				`{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},` +
				`{"type":"function_call_output","call_id":"c1","output":"ok"}]}`, true},
		{"responses: nothing bound", Responses, `{"model":"m","reasoning":{"effort":"low"},"input":[{"type":"message","role":"user","content":"a"}]}`,
			`{"model":"m","reasoning":{"effort":"low"},"input":[{"type":"message","role":"user","content":"a"}]}`, false},
		{"responses: string input", Responses, `{"model":"m","input":"say \"reasoning\""}`, `{"model":"m","input":"say \"reasoning\""}`, false},
		{"messages: thinking out, thinking off when the last assistant turn lost it", Messages,
			`{"model":"m","max_tokens":64,"thinking":{"type":"enabled","budget_tokens":1024},` +
				`"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"messages":[` +
				`{"role":"user","content":"a"},` +
				`{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"troupe.openai.v2:eyJ9"},{"type":"tool_use","id":"t1","name":"f","input":{}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}]}`,
			`{"model":"m","max_tokens":64,"messages":[` +
				`{"role":"user","content":"a"},` +
				`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}]}`, true},
		{"messages: an earlier turn's thinking out, thinking stays on", Messages,
			`{"model":"m","max_tokens":64,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[` +
				`{"role":"user","content":"a"},` +
				`{"role":"assistant","content":[{"type":"redacted_thinking","data":"xx"}]},` +
				`{"role":"user","content":"b"},` +
				`{"role":"assistant","content":[{"type":"text","text":"c"}]},` +
				`{"role":"user","content":"d"}]}`,
			`{"model":"m","max_tokens":64,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[` +
				`{"role":"user","content":"a"},` +
				`{"role":"user","content":"b"},` +
				`{"role":"assistant","content":[{"type":"text","text":"c"}]},` +
				`{"role":"user","content":"d"}]}`, true},
		{"chat: nothing to strip", Chat, `{"model":"m","messages":[{"role":"assistant","content":"x","reasoning_content":"r"}]}`,
			`{"model":"m","messages":[{"role":"assistant","content":"x","reasoning_content":"r"}]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stripped, err := StripAccountState(tc.p, []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tc.want || stripped != tc.stripped {
				t.Errorf("got (stripped %v)\n%s\nwant (stripped %v)\n%s", stripped, out, tc.stripped, tc.want)
			}
			if !json.Valid(out) {
				t.Error("invalid JSON")
			}
		})
	}
	if _, _, err := StripAccountState(Responses, []byte(`{"input":[{"type":"reasoning"`)); err == nil {
		t.Error("broken JSON accepted")
	}
}

// Every captured client request loses exactly its account-bound state: no
// reasoning item, encrypted_content or thinking block is left, and every
// other item or message stays, in order (checked on the requests that carry
// such state, translated into each protocol that can hold it).
func TestStripAccountStateOnCapturedRequests(t *testing.T) {
	files, err := os.ReadDir("testdata/requests")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		body, err := os.ReadFile("testdata/requests/" + f.Name())
		if err != nil {
			t.Fatal(err)
		}
		from := Responses
		switch {
		case strings.HasPrefix(f.Name(), "chat-"):
			from = Chat
		case strings.HasPrefix(f.Name(), "messages-"):
			from = Messages
		}
		for _, to := range []Protocol{Responses, Messages} {
			in := body
			if to != from {
				if in, err = TranslateRequest(from, to, body, RequestOptions{Model: "m"}); err != nil {
					continue
				}
			}
			out, stripped, err := StripAccountState(to, in)
			if err != nil {
				t.Fatalf("%s → %s: %v", f.Name(), to, err)
			}
			list := "input"
			if to == Messages {
				list = "messages"
			}
			before, after := gjson.GetBytes(in, list), gjson.GetBytes(out, list)
			var kept []string
			before.ForEach(func(_, v gjson.Result) bool {
				if to == Responses && accountBoundItem(v) {
					return true
				}
				if to == Messages && v.Get("role").Str == "assistant" && v.Get("content").IsArray() {
					k, _ := filterArray(v.Get("content"), thinkingBlock)
					if string(k) == "[]" {
						return true
					}
					kept = append(kept, v.Get("role").Str+":"+compactJSON(string(k)))
					return true
				}
				kept = append(kept, v.Get("role").Str+":"+compactJSON(v.Get("content").Raw)+v.Get("call_id").Str)
				return true
			})
			var got []string
			after.ForEach(func(_, v gjson.Result) bool {
				if to == Responses && accountBoundItem(v) || strings.Contains(v.Raw, `"encrypted_content"`) || strings.Contains(v.Raw, `"type":"thinking"`) {
					t.Errorf("%s → %s: state left: %.200s", f.Name(), to, v.Raw)
				}
				got = append(got, v.Get("role").Str+":"+compactJSON(v.Get("content").Raw)+v.Get("call_id").Str)
				return true
			})
			if strings.Join(got, "\n") != strings.Join(kept, "\n") {
				t.Errorf("%s → %s: items changed beyond the state\n got %.400q\nwant %.400q", f.Name(), to, got, kept)
			}
			if stripped {
				n++
			}
		}
	}
	if n < 1 {
		t.Fatal("no captured request carried account-bound state: the test checks too little")
	}
}

func compactJSON(raw string) string {
	var buf bytes.Buffer
	if raw == "" || json.Compact(&buf, []byte(raw)) != nil {
		return raw
	}
	return buf.String()
}
